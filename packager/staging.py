"""Build an output folder beside its target and move it into place only when it is complete."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from types import TracebackType

from .errors import OutputExists

PARTIAL_MARK = ".packager-partial-"


class StagedDir:
    """A temporary folder next to `target`; `commit()` renames it onto `target`, any exit without it removes it.

    The folder is a sibling of the target so the final rename stays on one file system and is atomic.
    """

    def __init__(self, target: Path, force: bool) -> None:
        self.target = target
        self.force = force
        self.path: Path | None = None
        self._committed = False

    def __enter__(self) -> StagedDir:
        check_target(self.target, self.force)
        self.target.parent.mkdir(parents=True, exist_ok=True)
        self.path = Path(tempfile.mkdtemp(prefix=f".{self.target.name}{PARTIAL_MARK}", dir=self.target.parent))
        return self

    def subdir(self, name: str) -> Path:
        assert self.path is not None
        folder = self.path / name
        folder.mkdir(exist_ok=True)
        return folder

    def commit(self, built: Path) -> None:
        """Move `built` (a folder inside the stage) onto the target, replacing it when forced."""
        assert self.path is not None
        check_target(self.target, self.force)
        old = None
        if self.target.exists():
            old = self.path / "replaced"
            os.rename(self.target, old)
        try:
            os.rename(built, self.target)
        except BaseException:
            if old is not None:
                os.rename(old, self.target)
            raise
        self._committed = True

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.path is not None:
            shutil.rmtree(self.path, ignore_errors=True)


def check_target(target: Path, force: bool) -> None:
    if target.is_symlink() or (target.exists() and not target.is_dir()):
        raise OutputExists(f"--out {target} exists and is not a folder", "choose another --out")
    if target.exists() and not force:
        raise OutputExists(f"--out {target} already exists")


def write_atomic(path: Path, data: bytes) -> None:
    """Write a file through a temporary sibling and os.replace, so readers never see half of it."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
