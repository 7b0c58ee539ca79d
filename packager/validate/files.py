"""Completeness: exactly the ten files, as regular files inside the folder (plus the card, the manifest and
the signature)."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from ..bundle.kinds import ALL_NAMES, CARD, DRAFT, MANIFEST, OPTIONAL, RELEASE_EXTRAS, SIGNATURE, BundleKind
from ..errors import BundleError, from_os_error, shorten
from ..report.findings import Collector

FOLDER = "."  # the file name of findings about the folder as a whole
SHOWN_EXTRAS = 20


def open_folder(bundle: Path) -> dict[str, os.DirEntry[str]]:
    """The folder's entries by name; a path that is no readable folder is one error line."""
    shown = shorten(str(bundle), 120)
    try:
        mode = os.stat(bundle).st_mode
        if not stat.S_ISDIR(mode):
            kind = "a file" if stat.S_ISREG(mode) else "a device, pipe or socket"
            raise BundleError(
                f"{shown} is {kind}, not a bundle folder",
                "pass the folder that holds the ten bundle files (config.json, llm.mnn, ...)",
            )
        with os.scandir(bundle) as entries:
            return {entry.name: entry for entry in entries}
    except FileNotFoundError:
        raise BundleError(f"bundle folder {shown} does not exist", "pass the folder packager convert wrote") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # the bundle's own fault, as checksum says it: no space or permission helps
            raise BundleError(
                f"bundle folder {shown} is a loop of symbolic links", "pass the folder packager convert wrote"
            ) from None
        raise from_os_error(exc, "cannot read the bundle folder") from None


def check_files(
    bundle: Path, present: dict[str, os.DirEntry[str]], out: Collector, kind: BundleKind = DRAFT, app: bool = False
) -> list[str]:
    """Report missing, extra, linked and non-regular entries of the kind's files (with `app`, of the files an app
    runs: the reference files may be absent); return those safe to read."""
    if not ALL_NAMES & set(present):
        others = (
            f"it holds {len(present)} other entries (e.g. {', '.join(sorted(present)[:3])})"
            if present
            else "it is empty"
        )
        out.error(
            FOLDER,
            "",
            f"none of the ten bundle files is here ({', '.join(DRAFT.files)}); {others}. "
            "Pass the folder packager convert wrote",
        )
        return []
    usable = []
    wanted = kind.all_files()
    for name, purpose in wanted.items():
        entry = present.get(name)
        if entry is None:
            if name not in OPTIONAL and not (app and name not in kind.app_files):
                held = "" if kind is DRAFT else f"; a {kind.name} bundle holds it"
                out.error(name, "", f"missing ({purpose.lower()}{held})")
        elif entry.is_symlink():
            _symlink(bundle, name, entry, out)
        elif not entry.is_file(follow_symlinks=False):
            out.error(name, "", "is not a regular file")
        else:
            usable.append(name)
    _extras(present, out, kind)
    return usable


def _symlink(bundle: Path, name: str, entry: os.DirEntry[str], out: Collector) -> None:
    target = os.readlink(entry.path)
    try:
        where = "" if Path(bundle, target).resolve().is_relative_to(bundle.resolve()) else ", outside the bundle"
    except (OSError, RuntimeError):  # a loop (RuntimeError in Python 3.11's pathlib)
        where = ", a loop of links that leads to no file"
    out.error(
        name,
        "",
        f"is a symbolic link to {shorten(target, 120)!r}{where}; the Hub and apps need a regular file",
    )


def _extras(present: dict[str, os.DirEntry[str]], out: Collector, kind: BundleKind = DRAFT) -> None:
    belong = f"only the {kind.name} bundle's files" if kind is not DRAFT else "only the ten files"
    extras = [
        name
        for name in sorted(set(present) - set(kind.all_files()))
        if not (name in RELEASE_EXTRAS and present[name].is_file(follow_symlinks=False))
    ]
    for name in extras[:SHOWN_EXTRAS]:
        entry = present[name]
        what = "folder" if entry.is_dir(follow_symlinks=False) else "link" if entry.is_symlink() else "file"
        out.error(
            shorten(name, 120),
            "",
            f"unexpected {what} in the bundle ({belong}, {CARD}, {MANIFEST} and {SIGNATURE} belong)",
        )
    if len(extras) > SHOWN_EXTRAS:
        out.error(
            FOLDER,
            "",
            f"{len(extras) - SHOWN_EXTRAS} more unexpected entries ({belong}, {CARD}, "
            f"{MANIFEST} and {SIGNATURE} belong)",
        )
