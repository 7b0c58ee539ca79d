"""The hidden staging folder a pull downloads into beside DIR, written only through file descriptors (see
packager.hub.fetch): made, locked, checked to be one packager made, and turned into DIR by one rename."""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import stat
from pathlib import Path
from typing import NoReturn

from ..errors import (
    FileSystemError,
    HubConflict,
    OutputExists,
    PackagerError,
    from_os_error,
    shorten,
)

STAGING_NAMES = {"lock", "files", "out"}  # all a staging folder ever holds
_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def staging_for(dest: Path) -> Path:
    return dest.parent / f".{dest.name}.pull"


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a device"),
        (stat.S_ISBLK, "a device"),
    ):
        if test(mode):
            return name
    return "a regular file"


class Staging:
    """The staging folder, locked against a second pull into the same DIR while this one runs."""

    def __init__(self, dest: Path) -> None:
        self.dest = dest
        self.root = staging_for(dest)
        self.files = self.root / "files"  # read by path (checks); written only through `_files`
        self.resumed = False
        self._parent: int | None = None
        self._root: int | None = None
        self._files: int | None = None
        self._lock: int | None = None
        self._made: list[Path] = []
        self._made_root = False

    def __enter__(self) -> Staging:
        check_dest(self.dest)
        # Folders above DIR that this pull creates, removed again if it is refused.
        self._made = [p for p in [self.dest.parent, *self.dest.parent.parents] if not p.exists()]
        try:
            self._open()
        except BaseException:
            if self._made_root and self._parent is not None:  # made just now: nothing of anyone's in it
                shutil.rmtree(self.root.name, dir_fd=self._parent, ignore_errors=True)
            self._close()
            self._remove_made()
            raise
        return self

    def _open(self) -> None:
        try:
            self.dest.parent.mkdir(parents=True, exist_ok=True)
            self._parent = os.open(self.dest.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                os.mkdir(self.root.name, 0o700, dir_fd=self._parent)
                self._made_root = True
            except FileExistsError:
                pass
        except OSError as exc:
            raise from_os_error(exc, f"making {shorten(str(self.root), 120)}") from None
        self._root = self._open_folder(self._parent, self.root.name, "it")
        # Everything is checked before anything in it changes: a refused folder is left exactly as it is.
        entries = {entry.name: entry.stat(follow_symlinks=False) for entry in os.scandir(self._root)}
        if foreign := sorted(set(entries) - STAGING_NAMES):
            # Not a staging folder a pull made: never resumed from, never removed.
            self._refuse(f"it holds {shorten(', '.join(foreign), 80)}")
        for name, folder in (("lock", False), ("files", True), ("out", True)):
            if name in entries:
                self._check_entry(name, entries[name], folder)
        if "files" in entries:
            self._files = self._open_folder(self._root, "files", "files")
            self._check_files()
        self._lock = os.open(
            "lock", os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600, dir_fd=self._root
        )
        self._check_entry("lock", os.fstat(self._lock), folder=False)
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            # The other run's staging is its own: left alone.
            raise HubConflict(
                f"another packager pull into {shorten(str(self.dest), 120)} is running",
                "wait for it to finish, or pull into another folder",
            ) from None
        if "out" in entries:  # a run killed while publishing: never trusted
            shutil.rmtree("out", dir_fd=self._root)
        if self._files is None:
            os.mkdir("files", 0o700, dir_fd=self._root)
            self._files = self._open_folder(self._root, "files", "files")
        for fd in (self._root, self._files):
            os.fchmod(fd, 0o700)  # from now on nobody else can put anything into them
        # What an earlier, interrupted run left: finished files and partial ones; none of it is trusted.
        self.resumed = self._check_files()

    def _check_files(self) -> bool:
        """Every entry of files/ is a regular file with one link (else refused); whether there is any."""
        assert self._files is not None
        found = False
        for entry in os.scandir(self._files):
            self._check_entry(f"files/{entry.name}", entry.stat(follow_symlinks=False), folder=False)
            found = True
        return found

    def _open_folder(self, parent: int, name: str, shown: str) -> int:
        """`name` in `parent` as a folder of this user's (never through a link); refused if anything else."""
        try:
            fd = os.open(name, _FOLDER, dir_fd=parent)
        except OSError as exc:
            found = os.stat(name, dir_fd=parent, follow_symlinks=False)
            if stat.S_ISDIR(found.st_mode):  # a folder it may not open: the OS's reason
                raise from_os_error(OSError(exc.errno, exc.strerror, str(self.root)), "opening") from None
            self._refuse(f"{shown} is {_kind(found.st_mode)}")
        owner = os.fstat(fd).st_uid
        if owner != os.geteuid():
            os.close(fd)
            self._refuse(f"{shown} belongs to another user (uid {owner})")
        return fd

    def _check_entry(self, shown: str, info: os.stat_result, folder: bool) -> None:
        if folder != stat.S_ISDIR(info.st_mode) or not (folder or stat.S_ISREG(info.st_mode)):
            self._refuse(f"{shown} is {_kind(info.st_mode)}")
        if info.st_uid != os.geteuid():  # its owner can change it between the check and the publishing rename
            self._refuse(f"{shown} belongs to another user (uid {info.st_uid})")
        if not folder and info.st_nlink != 1:
            self._refuse(f"{shown} has {info.st_nlink} hard links (it shares its data with another file)")

    def _refuse(self, what: str) -> NoReturn:
        raise OutputExists(
            f"{shorten(str(self.root), 120)} exists and is not packager's staging folder: {what}; "
            "nothing was written to it",
            "move it aside, or pull into another folder",
        )

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        # Kept only for what a rerun can resume: Ctrl-C, SIGTERM and transient Hub failures (exit 40).
        interrupted = exc_type is not None and issubclass(exc_type, KeyboardInterrupt)
        resumable = interrupted or getattr(exc, "exit_code", None) == 40
        if interrupted and exc is not None:  # the CLI's last line says what is left, not "nothing"
            kept = (
                f"nothing was written to {shorten(str(self.dest), 120)}; the download so far is kept in "
                f"{shorten(str(self.root), 120)} and the same pull resumes it"
            )
            exc.kept = kept  # type: ignore[attr-defined]
        elif resumable and isinstance(exc, PackagerError):
            exc.hint = f"rerun the same pull: it resumes from {shorten(str(self.root), 120)}"
        if not resumable and self._parent is not None:
            shutil.rmtree(self.root.name, dir_fd=self._parent, ignore_errors=True)
            if exc_type is not None:
                self._remove_made()
        self._close()

    def _remove_made(self) -> None:
        for folder in self._made:  # deepest first; one someone else filled meanwhile stays
            try:
                folder.rmdir()
            except OSError:
                break

    def _close(self) -> None:
        for name in ("_files", "_root", "_lock", "_parent"):
            fd = getattr(self, name)
            if fd is not None:
                os.close(fd)
                setattr(self, name, None)

    # -- the files, through the folder's descriptor ----------------------------------------------------------
    def path(self, name: str) -> Path:
        return self.files / name

    def stat(self, name: str) -> os.stat_result | None:
        """`name` in files/ (a regular file with one link), or None when there is none."""
        assert self._files is not None
        try:
            info = os.stat(name, dir_fd=self._files, follow_symlinks=False)
        except FileNotFoundError:
            return None
        self._check_entry(f"files/{name}", info, folder=False)
        return info

    def unlink(self, name: str) -> None:
        assert self._files is not None
        try:
            os.unlink(name, dir_fd=self._files)
        except FileNotFoundError:
            pass

    def rename(self, name: str, new: str) -> None:
        assert self._files is not None
        os.replace(name, new, src_dir_fd=self._files, dst_dir_fd=self._files)

    def open_part(self, name: str, append: bool, have: int) -> int:
        """A descriptor to write `name` with: the partial file of `have` bytes continued, or a new one."""
        assert self._files is not None
        if not append:
            self.unlink(name)
        flags = os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_APPEND if append else os.O_CREAT | os.O_EXCL)
        try:
            fd = os.open(name, flags, 0o666, dir_fd=self._files)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                self._refuse(f"files/{name} is a symbolic link")
            raise from_os_error(OSError(exc.errno, exc.strerror, str(self.files / name)), "opening") from None
        info = os.fstat(fd)
        try:
            self._check_entry(f"files/{name}", info, folder=False)
            if append and info.st_size != have:
                raise ConnectionError(f"{name} changed while it was resumed")  # transient: the retry starts anew
        except BaseException:
            os.close(fd)
            raise
        return fd

    def write(self, name: str, data: bytes) -> None:
        """`name` in files/ replaced whole by `data` (written beside it, then renamed over it)."""
        part = f"{name}.part"
        sink = self.open_part(part, append=False, have=0)
        try:
            write_all(sink, data, self, name)
        finally:
            os.close(sink)
        self.rename(part, name)

    def publish(self, names: list[str]) -> None:
        """Move `names` into a fresh folder and rename it to DIR: DIR appears whole or not at all."""
        assert self._root is not None and self._files is not None and self._parent is not None
        os.mkdir("out", 0o777, dir_fd=self._root)  # DIR's own mode: the user's umask decides
        out = os.open("out", _FOLDER, dir_fd=self._root)
        try:
            for name in names:
                os.replace(name, name, src_dir_fd=self._files, dst_dir_fd=out)
        finally:
            os.close(out)
        check_dest(self.dest)
        if self.dest.is_dir():
            os.rmdir(self.dest.name, dir_fd=self._parent)  # empty (checked): rename cannot replace a folder everywhere
        os.replace("out", self.dest.name, src_dir_fd=self._root, dst_dir_fd=self._parent)


def check_dest(dest: Path) -> None:
    if dest.resolve() == Path.cwd().resolve():
        raise OutputExists("DIR is the current folder", "pull into a new folder, e.g. ./draft")
    if dest.is_symlink() or (dest.exists() and not dest.is_dir()):
        raise OutputExists(f"{shorten(str(dest), 120)} exists and is not a folder", "pull into a new or empty folder")
    if dest.is_dir() and any(dest.iterdir()):
        raise OutputExists(
            f"{shorten(str(dest), 120)} is not empty; nothing was downloaded",
            "pull into a new or empty folder (a pull never mixes its files with others)",
        )


def write_all(fd: int, data: bytes, stage: Staging, name: str) -> None:
    """All of `data`; a full disk (or any refusal of the file system) is the pull's one line, exit 25."""
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view) :]
    except OSError as exc:
        raise FileSystemError(
            f"downloading {name}: {exc.strerror or type(exc).__name__} in {shorten(str(stage.root), 120)}; nothing "
            f"was written to {shorten(str(stage.dest), 120)}",
            "free space where DIR is (the partial download is removed), or pull into another folder; then pull again",
        ) from None
