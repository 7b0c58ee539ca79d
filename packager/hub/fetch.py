"""Downloads for `pull` into a hidden staging folder beside DIR, which only a complete, checked pull turns
into DIR (one rename). An interrupted download stays there for the next run to resume; the partial file is
never trusted: every file is checked whole, and a resumed file that fails is fetched again from its start.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from pathlib import Path
from typing import Callable

from ..errors import OutputExists, shorten
from .client import Hub, HubConflict, HubVerificationFailed, with_retries


STAGING_NAMES = {"lock", "files", "out"}  # all a staging folder ever holds


def staging_for(dest: Path) -> Path:
    return dest.parent / f".{dest.name}.pull"


class Staging:
    """The staging folder, locked against a second pull into the same DIR while this one runs."""

    def __init__(self, dest: Path) -> None:
        self.dest = dest
        self.root = staging_for(dest)
        self.files = self.root / "files"
        self._lock: int | None = None
        self.resumed = False
        self._made: list[Path] = []

    def __enter__(self) -> Staging:
        check_dest(self.dest)
        foreign = sorted(p.name for p in self.root.iterdir() if p.name not in STAGING_NAMES) if (
            self.root.is_dir() and not self.root.is_symlink()) else []
        if foreign or self.root.is_symlink() or (self.root.exists() and not self.root.is_dir()):
            # Not a staging folder a pull made: never resumed from, never removed.
            raise OutputExists(f"{shorten(str(self.root), 120)} exists and is not packager's staging folder "
                               f"(it holds {shorten(', '.join(foreign) or 'no folder', 80)})",
                               "move it aside, or pull into another folder")
        # Folders above DIR that this pull creates, removed again if it is refused.
        self._made = [p for p in [self.dest.parent, *self.dest.parent.parents] if not p.exists()]
        self.root.mkdir(parents=True, exist_ok=True)
        lock = os.open(self.root / "lock", os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(lock)  # the other run's staging is its own: left alone
            raise HubConflict(f"another packager pull into {shorten(str(self.dest), 120)} is running",
                              "wait for it to finish, or pull into another folder") from None
        self._lock = lock
        shutil.rmtree(self.root / "out", ignore_errors=True)  # a run killed while publishing: never trusted
        self.files.mkdir(exist_ok=True)
        # What an earlier, interrupted run left: finished files and partial ones; none of it is trusted.
        self.resumed = any(self.files.iterdir())
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        # Kept only for what a rerun can resume: Ctrl-C, SIGTERM and transient Hub failures (exit 40).
        resumable = exc_type is not None and (issubclass(exc_type, KeyboardInterrupt)
                                              or getattr(exc, "exit_code", None) == 40)
        if not resumable:
            shutil.rmtree(self.root, ignore_errors=True)
            if exc_type is not None:
                for folder in self._made:  # deepest first; one someone else filled meanwhile stays
                    try:
                        folder.rmdir()
                    except OSError:
                        break
        if self._lock is not None:
            os.close(self._lock)

    def path(self, name: str) -> Path:
        return self.files / name

    def publish(self, names: list[str]) -> None:
        """Move `names` into a fresh folder and rename it to DIR: DIR appears whole or not at all."""
        out = self.root / "out"
        out.mkdir()
        for name in names:
            os.replace(self.files / name, out / name)
        check_dest(self.dest)
        if self.dest.is_dir():
            self.dest.rmdir()  # empty (checked): os.replace cannot replace a folder on every system
        os.replace(out, self.dest)


def check_dest(dest: Path) -> None:
    if dest.resolve() == Path.cwd().resolve():
        raise OutputExists("DIR is the current folder", "pull into a new folder, e.g. ./draft")
    if dest.is_symlink() or (dest.exists() and not dest.is_dir()):
        raise OutputExists(f"{shorten(str(dest), 120)} exists and is not a folder", "pull into a new or empty folder")
    if dest.is_dir() and any(dest.iterdir()):
        raise OutputExists(f"{shorten(str(dest), 120)} is not empty; nothing was downloaded",
                           "pull into a new or empty folder (a pull never mixes its files with others)")


def download(hub: Hub, stage: Staging, repo_id: str, commit: str, name: str, size: int, fresh: bool = False,
             timeout: float = 30.0, progress: Callable[[str], None] = lambda _: None) -> Path:
    """`name` at `commit` into the staging folder through huggingface_hub's HTTP session, resuming what an
    interrupted run (or a dropped connection) left in NAME.part unless `fresh`. The caller checks it whole."""
    final, part = stage.path(name), stage.files / f"{name}.part"
    if fresh:
        final.unlink(missing_ok=True)
        part.unlink(missing_ok=True)
    elif final.is_file() and final.stat().st_size != size:
        final.unlink()  # finished against another commit: not even the right size
    if final.is_file():
        return final  # finished by an interrupted earlier run: checked whole like any other
    progress(f"downloading {name}" + (f" (resuming after {part.stat().st_size:,} bytes)" if part.is_file() else ""))
    with_retries(hub, f"downloading {name} of {repo_id}@{commit[:12]}",
                 lambda: _get(hub, repo_id, commit, name, size, part, timeout))
    os.replace(part, final)
    return final


class _Short(ConnectionError):
    """The connection ended before the whole file came: a transient failure, retried from where it stopped."""


def _get(hub: Hub, repo_id: str, commit: str, name: str, size: int, part: Path, timeout: float) -> None:
    from huggingface_hub import hf_hub_url
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    have = part.stat().st_size if part.is_file() else 0
    if have > size:
        part.unlink()
        have = 0
    if have == size:
        return
    headers = build_hf_headers(token=hub.token)
    if have:
        headers["Range"] = f"bytes={have}-"
    url = hf_hub_url(repo_id, name, revision=commit, endpoint=hub.endpoint)
    with get_session().stream("GET", url, headers=headers, timeout=timeout, follow_redirects=True) as response:
        if response.status_code >= 400:
            response.read()
            hf_raise_for_status(response)
        resumed = response.status_code == 206
        with part.open("ab" if resumed else "wb") as sink:  # a 200 is the whole file: start over
            written = have if resumed else 0
            for chunk in response.iter_bytes():
                written += len(chunk)
                if written > size:
                    raise HubVerificationFailed(f"{name}: the Hub sends more than the {size:,} bytes it lists")
                sink.write(chunk)
    if written < size:
        raise _Short(f"{name}: {written:,} of {size:,} bytes")
