"""Completeness: exactly the ten files, as regular files inside the folder (plus the card, the manifest and
the signature)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ..bundle import FILES
from ..checksum import MANIFEST, SIGNATURE
from ..errors import BundleError, from_os_error, shorten
from .findings import Collector

CARD = "README.md"
RELEASE_EXTRAS = (CARD, MANIFEST, SIGNATURE)
FOLDER = "."  # the file name of findings about the folder as a whole
SHOWN_EXTRAS = 20


def open_folder(bundle: Path) -> dict[str, os.DirEntry[str]]:
    """The folder's entries by name; a path that is no readable folder is one error line."""
    shown = shorten(str(bundle), 120)
    try:
        mode = os.stat(bundle).st_mode
        if not stat.S_ISDIR(mode):
            kind = "a file" if stat.S_ISREG(mode) else "a device, pipe or socket"
            raise BundleError(f"{shown} is {kind}, not a bundle folder",
                              "pass the folder that holds the ten bundle files (config.json, llm.mnn, ...)")
        with os.scandir(bundle) as entries:
            return {entry.name: entry for entry in entries}
    except FileNotFoundError:
        raise BundleError(f"bundle folder {shown} does not exist", "pass the folder packager convert wrote") from None
    except OSError as exc:
        raise from_os_error(exc, "cannot read the bundle folder") from None


def check_files(bundle: Path, present: dict[str, os.DirEntry[str]], out: Collector) -> list[str]:
    """Report missing, extra, linked and non-regular entries; return the bundle files safe to read."""
    if not set(FILES) & set(present):
        others = f"it holds {len(present)} other entries (e.g. {', '.join(sorted(present)[:3])})" if present else \
            "it is empty"
        out.error(FOLDER, "", f"none of the ten bundle files is here ({', '.join(FILES)}); {others}. "
                              "Pass the folder packager convert wrote")
        return []
    usable = []
    for name in FILES:
        entry = present.get(name)
        if entry is None:
            out.error(name, "", f"missing ({FILES[name].lower()})")
        elif entry.is_symlink():
            _symlink(bundle, name, entry, out)
        elif not entry.is_file(follow_symlinks=False):
            out.error(name, "", "is not a regular file")
        else:
            usable.append(name)
    _extras(present, out)
    return usable


def _symlink(bundle: Path, name: str, entry: os.DirEntry[str], out: Collector) -> None:
    target = os.readlink(entry.path)
    leaves = not Path(bundle, target).resolve().is_relative_to(bundle.resolve())
    out.error(name, "", f"is a symbolic link to {shorten(target, 120)!r}" + (", outside the bundle" if leaves else "")
              + "; the Hub and apps need a regular file")


def _extras(present: dict[str, os.DirEntry[str]], out: Collector) -> None:
    extras = [name for name in sorted(set(present) - set(FILES))
              if not (name in RELEASE_EXTRAS and present[name].is_file(follow_symlinks=False))]
    for name in extras[:SHOWN_EXTRAS]:
        entry = present[name]
        kind = "folder" if entry.is_dir(follow_symlinks=False) else "link" if entry.is_symlink() else "file"
        out.error(shorten(name, 120), "", f"unexpected {kind} in the bundle (only the ten files, {CARD}, "
                                          f"{MANIFEST} and {SIGNATURE} belong)")
    if len(extras) > SHOWN_EXTRAS:
        out.error(FOLDER, "", f"{len(extras) - SHOWN_EXTRAS} more unexpected entries (only the ten files, {CARD}, "
                              f"{MANIFEST} and {SIGNATURE} belong)")
