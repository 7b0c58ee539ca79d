"""The bundle folders that a list of files (as pre-commit passes them) belongs to."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..bundle.kinds import FILES, RELEASE_EXTRAS

_NAMES = frozenset(FILES) | frozenset(RELEASE_EXTRAS)


@dataclass(frozen=True)
class Discovered:
    bundles: tuple[Path, ...]  # each folder once, as first named, in the order given
    skipped: tuple[str, ...]  # files that belong to no bundle folder


def bundle_folders(paths: Iterable[Path]) -> Discovered:
    """A file belongs to the folder it is in when that folder holds any of the ten bundle files; a folder named
    itself counts the same way. A folder that cannot be listed (gone since the commit, unreadable) still counts
    when the file's name is a bundle file's, so that validate reports it instead of passing in silence. Aliases
    (`a/../b`, links) are one."""
    bundles: dict[str, Path] = {}
    skipped: list[str] = []
    for path in paths:
        folder = path if _is_dir(path) else path.parent
        holds = _holds_bundle_files(folder)
        if holds or (holds is None and path.name in _NAMES):
            bundles.setdefault(_identity(folder), Path(os.path.normpath(folder)))
        else:
            skipped.append(str(path))
    return Discovered(tuple(bundles.values()), tuple(skipped))


def _holds_bundle_files(folder: Path) -> bool | None:
    """None: the folder cannot be listed (gone, unreadable, not a folder); validate says which."""
    try:
        with os.scandir(folder) as entries:
            return any(entry.name in FILES for entry in entries)
    except (OSError, ValueError):
        return None


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:
        return False


def _identity(folder: Path) -> str:
    try:
        return os.path.realpath(folder)
    except (OSError, ValueError):
        return os.path.normpath(folder)
