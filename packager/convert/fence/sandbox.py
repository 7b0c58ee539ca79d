"""An audit-hook fence for third-party code: no network, no child processes, writes only inside one folder.

It runs in the converter's own worker process (a hook cannot be removed once added), so the packager process
itself is never fenced. It stops Python-level actions; the MNN converter's C++ code writes only the paths we
hand it and has no network code.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path
from typing import Any

_PROCESS_EVENTS = {
    "os.system",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    "subprocess.Popen",
    "os.fork",
    "os.forkpty",
    "pty.spawn",
}
_NETWORK_EVENTS = {
    "socket.connect",
    "socket.getaddrinfo",
    "socket.gethostbyname",
    "socket.gethostbyaddr",
    "socket.sendto",
    "socket.sendmsg",
    "socket.bind",
}
_PATH_EVENTS = {
    "os.mkdir": (0,),
    "os.remove": (0,),
    "os.rmdir": (0,),
    "os.rename": (0, 1),
    "os.symlink": (1,),
    "os.link": (1,),
    "shutil.rmtree": (0,),
    "os.truncate": (0,),
    "os.chmod": (0,),
    "os.utime": (0,),
}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_DEVICES = ("/dev/null", "/dev/tty", "/dev/stdout", "/dev/stderr")


class Fence:
    """Records and refuses every action outside the allowed set."""

    def __init__(self, write_root: Path) -> None:
        self.write_root = os.path.realpath(write_root)
        self.blocked: list[str] = []
        self._own_fork = False

    def fork(self) -> int:
        """os.fork for packager's own code; every other fork (third-party code's) stays refused."""
        self._own_fork = True
        try:
            return os.fork()
        finally:
            self._own_fork = False

    def install(self) -> None:
        sys.addaudithook(self._hook)

    def _refuse(self, what: str) -> None:
        self.blocked.append(what)
        raise PermissionError(f"packager sandbox refused: {what}")

    def _hook(self, event: str, args: tuple[Any, ...]) -> None:
        if event in _PROCESS_EVENTS:
            if event == "os.fork" and self._own_fork:
                return
            self._refuse(f"{event} {_short(args)}")
        elif event in _NETWORK_EVENTS:
            if event == "socket.connect" or event == "socket.bind" or event.startswith("socket.send"):
                sock = args[0]
                if getattr(sock, "family", None) == socket.AF_UNIX:
                    return
            self._refuse(f"{event} {_short(args[1:])}")
        elif event == "open":
            self._check_open(args)
        elif event in _PATH_EVENTS:
            for index in _PATH_EVENTS[event]:
                if index < len(args):
                    self._check_path(event, args[index])

    def _check_open(self, args: tuple[Any, ...]) -> None:
        path, mode, flags = (list(args) + [None, None, None])[:3]
        writing = bool(mode and any(c in str(mode) for c in "wax+")) or bool(
            isinstance(flags, int) and flags & _WRITE_FLAGS
        )
        if writing:
            self._check_path("open for writing", path)

    def _check_path(self, what: str, path: Any) -> None:
        if path is None or isinstance(path, int):
            return
        text = os.fsdecode(path)
        if text in _DEVICES:
            return
        real = os.path.realpath(text)
        if real != self.write_root and not real.startswith(self.write_root + os.sep):
            self._refuse(f"{what} {text}")


def _short(args: tuple[Any, ...]) -> str:
    return repr(args)[:160]
