"""Completeness: exactly the ten files, as regular files inside the folder (plus the card and the manifest)."""

from __future__ import annotations

import os
from pathlib import Path

from ..bundle import FILES
from ..checksum import MANIFEST
from .findings import Collector

CARD = "README.md"
RELEASE_EXTRAS = (CARD, MANIFEST)


def check_files(bundle: Path, out: Collector) -> list[str]:
    """Report missing, extra, linked and non-regular entries; return the bundle files safe to read."""
    present = {entry.name: entry for entry in os.scandir(bundle)}
    usable = []
    for name in FILES:
        entry = present.get(name)
        if entry is None:
            out.error(name, "", "missing: a bundle has exactly these ten files: " + ", ".join(FILES))
        elif entry.is_symlink():
            target = os.readlink(entry.path)
            leaves = not Path(bundle, target).resolve().is_relative_to(bundle.resolve())
            out.error(name, "", f"is a symbolic link to {target!r}" + (", outside the bundle" if leaves else "")
                      + "; the Hub and apps need a regular file")
        elif not entry.is_file(follow_symlinks=False):
            out.error(name, "", "is not a regular file")
        else:
            usable.append(name)
    for name in sorted(set(present) - set(FILES)):
        entry = present[name]
        if name in RELEASE_EXTRAS and entry.is_file(follow_symlinks=False):
            continue
        kind = "folder" if entry.is_dir(follow_symlinks=False) else "link" if entry.is_symlink() else "file"
        out.error(name, "", f"unexpected {kind} in the bundle (only the ten files, {CARD} and {MANIFEST} belong)")
    return usable
