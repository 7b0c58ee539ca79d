"""Build an output folder beside its target and move it into place only when it is complete.

Replacing an existing folder (`--force`) is the one place packager deletes something, so it is fenced:
only a folder that is recognisably a packager bundle is replaced, and never one that is, contains or lies
inside an input of the run, nor one that is or contains the current or the home directory.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from ..errors import OutputExists, from_os_error, shorten
from ..infra.progress import Progress as Report
from .kinds import ALL_NAMES, RELEASE_EXTRAS

PARTIAL_MARK = ".packager-partial-"
# Written first into every stage folder: who made it, so a later run can tell a dead run's leftovers.
STAGE_MARKER = ".packager-stage.json"
# What a published bundle folder may hold besides the ten files.


@dataclass(frozen=True)
class Protected:
    """Folders a forced replacement must never remove: the run's inputs, and the user's own places."""

    inputs: tuple[Path, ...] = ()

    def refusal(self, target: Path) -> str | None:
        real = _real(target)
        for name, folder in self._named():
            if real == folder or folder.is_relative_to(real):
                return f"it {'is' if real == folder else 'contains'} {name} {folder}"
        for folder in self.inputs:
            if _real(folder).is_relative_to(real) or real.is_relative_to(_real(folder)):
                return f"it is, contains or lies inside the input {_real(folder)}"
        return None

    @staticmethod
    def _named() -> Iterable[tuple[str, Path]]:
        yield "the current directory", _real(Path.cwd())
        yield "the home directory", _real(Path.home())
        yield "the file system root", Path("/")


def _shown(path: Path) -> str:
    return shorten(str(path), 120)


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path))


def is_bundle_folder(folder: Path) -> bool:
    """True for a folder holding only bundle files (regular files, no links or subfolders), llm.mnn among them."""
    entries = list(os.scandir(folder))
    allowed = {*ALL_NAMES, *RELEASE_EXTRAS}
    names = {entry.name for entry in entries}
    regular = all(entry.is_file(follow_symlinks=False) for entry in entries)
    return regular and names <= allowed and "llm.mnn" in names


def check_target(target: Path, force: bool, protected: Protected = Protected()) -> None:
    """Refuse an --out that exists (unless forced) or that a forced run may not replace."""
    try:
        exists = target.exists() or target.is_symlink()
        if not exists:
            return
        if target.is_symlink() or not target.is_dir():
            raise OutputExists(f"--out {_shown(target)} exists and is not a folder", "choose another --out")
        if not force:
            raise OutputExists(f"--out {_shown(target)} already exists")
        reason = protected.refusal(target)
        if reason:
            raise OutputExists(f"--force will not replace --out {_shown(target)}: {reason}", "choose another --out")
        if any(True for _ in os.scandir(target)) and not is_bundle_folder(target):
            raise OutputExists(
                f"--force will not replace --out {_shown(target)}: it is not a packager bundle (it holds "
                "files other than the bundle's)",
                "choose another --out, or empty it yourself",
            )
    except OSError as exc:
        raise from_os_error(OSError(exc.errno, exc.strerror), f"checking --out {_shown(target)}") from None


class StagedDir:
    """A temporary folder next to `target`; `commit()` renames it onto `target`, any exit without it removes it.

    The folder is a sibling of the target so the final rename stays on one file system and is atomic.
    """

    def __init__(
        self, target: Path, force: bool, protected: Protected = Protected(), report: Report = lambda _: None
    ) -> None:
        self.target = target
        self.force = force
        self.protected = protected
        self.report = report
        self.path: Path | None = None

    def __enter__(self) -> StagedDir:
        check_target(self.target, self.force, self.protected)
        try:
            self.target.parent.mkdir(parents=True, exist_ok=True)
            for stale in remove_stale_stages(self.target):
                self.report(f"removed {stale.name}, left by a conversion that was killed")
            self.path = Path(tempfile.mkdtemp(prefix=f".{self.target.name}{PARTIAL_MARK}", dir=self.target.parent))
            (self.path / STAGE_MARKER).write_text(json.dumps(_owner()), encoding="utf-8")
        except OSError as exc:
            self._remove()
            # Name the folder the user gave, not the hidden stage inside it.
            raise from_os_error(
                OSError(exc.errno, exc.strerror, str(self.target.parent)), f"creating --out {_shown(self.target)}"
            ) from None
        return self

    def subdir(self, name: str) -> Path:
        assert self.path is not None
        folder = self.path / name
        folder.mkdir(exist_ok=True)
        return folder

    def commit(self, built: Path) -> None:
        """Move `built` (a folder inside the stage) onto the target, replacing it when forced."""
        assert self.path is not None
        check_target(self.target, self.force, self.protected)
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

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._remove()

    def _remove(self) -> None:
        if self.path is not None:
            shutil.rmtree(self.path, ignore_errors=True)


def _owner() -> dict[str, object]:
    return {"pid": os.getpid(), "host": socket.gethostname(), "started": _start_time(os.getpid())}


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (telling a reused pid from the original)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _is_dead(owner: dict[str, object]) -> bool:
    if owner.get("host") != socket.gethostname():
        return False  # another machine's run (a shared folder): not ours to judge
    pid = owner.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return owner.get("started") is not None and _start_time(pid) != owner.get("started")


def remove_stale_stages(target: Path) -> list[Path]:
    """Remove the stage folders of `target` that a killed run left: ours (marker) and their process gone."""
    removed = []
    for folder in target.parent.glob(f".{target.name}{PARTIAL_MARK}*"):
        try:
            owner = json.loads((folder / STAGE_MARKER).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # not ours, or not readable: leave it
        if isinstance(owner, dict) and not folder.is_symlink() and _is_dead(owner):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def write_atomic(path: Path, data: bytes) -> None:
    """Write a file through a temporary sibling and os.replace, so readers never see half of it."""
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except OSError as exc:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise from_os_error(OSError(exc.errno, exc.strerror, str(path)), "writing") from None
    except BaseException:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise
