"""A process that forks a copy of itself for each request on a Unix socket (the warm converter; the tests' warm
CLI): the request and its descriptors read, each copy tied to the connection of the client that asked for it (the
copy is killed when the client goes before it ends; its exit status is sent to the client when it ends), watched
through pidfds, with no polling."""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

REQUEST_LIMIT = 4 << 20


def listening(path: Path, backlog: int) -> socket.socket:
    """A Unix socket bound at `path` and listening, reachable by this user alone (whoever reaches it can have work
    run as this user); made before the server starts, so a client that comes while it imports waits for it."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    os.chmod(path, 0o600)
    listener.listen(backlog)
    return listener


def receive(conn: socket.socket, most_fds: int) -> tuple[dict[str, Any], list[int]]:
    """The client's request (one JSON line; {} when it is none) and the descriptors sent with it."""
    data, fds = b"", []
    while not data.endswith(b"\n"):
        chunk, got, _flags, _addr = socket.recv_fds(conn, 1 << 16, most_fds)
        fds.extend(got)
        if not chunk or len(data) + len(chunk) > REQUEST_LIMIT:
            break
        data += chunk
    try:
        request = json.loads(data)
    except ValueError:
        request = {}
    return request if isinstance(request, dict) else {}, fds


def answer(conn: socket.socket, reply: dict[str, Any]) -> bool:
    """One JSON line to the client; False when it is gone."""
    try:
        conn.sendall(json.dumps(reply).encode("utf-8") + b"\n")
    except OSError:
        return False
    return True


def refuse(conn: socket.socket, fds: list[int], own: dict[str, str], theirs: dict[str, str] | None) -> None:
    """Turn a client away, saying why: the variables its environment fixes otherwise than this process's (`theirs`
    None: what it sent is no request). Logged on stdout before the answer (a client may read the log next)."""
    for fd in fds:
        os.close(fd)
    differ = sorted(k for k in {*own, *(theirs or {})} if own.get(k) != (theirs or {}).get(k))
    reason = f"other values of {', '.join(differ)}" if theirs is not None and differ else "not a request"
    print(f"refused: {reason}", flush=True)
    answer(conn, {"refused": reason})
    conn.close()


class Copies:
    """The copies forked for the clients of `listener` (a listening socket)."""

    def __init__(self, listener: socket.socket) -> None:
        self._listener = listener
        self._selector = selectors.EpollSelector()
        self._selector.register(listener, selectors.EVENT_READ, None)
        self._jobs: dict[int, tuple[socket.socket, int]] = {}  # copy's pid -> (its client's connection, its pidfd)

    def clients(self) -> Iterator[socket.socket]:
        """Each new client's connection, forever; ended copies are answered and gone clients' copies killed in
        between."""
        while True:
            for key, _ in self._selector.select():
                if key.data is None:
                    yield self._listener.accept()[0]
                else:
                    kind, pid = key.data
                    if pid in self._jobs:  # a client sends nothing more: readable means it went before its copy ended
                        self._finish(pid, kill=kind == "client")

    def inherited(self, conn: socket.socket) -> list[int]:
        """What a copy must close first: the listener, the selector, every client's connection and pidfd (their
        end must not wait for this copy)."""
        fds = [self._selector.fileno(), self._listener.fileno(), conn.fileno()]
        return fds + [c.fileno() for c, _ in self._jobs.values()] + [p for _, p in self._jobs.values()]

    def fork(self, conn: socket.socket, fds: list[int], fork: Callable[[], int] = os.fork) -> tuple[int, list[int]]:
        """Fork a copy for the client of `conn` (`fork`: os.fork or a fenced one): (0, the descriptors the copy must
        close first) in the copy; (its pid, []) here, where the descriptors the client sent are closed."""
        sys.stdout.flush()
        sys.stderr.flush()
        inherited = self.inherited(conn)
        pid = fork()
        if pid == 0:
            return 0, inherited
        for fd in fds:
            os.close(fd)
        return pid, []

    def started(self, pid: int, conn: socket.socket) -> None:
        """The copy `pid` runs for the client of `conn`: it is told the pid (killed if the client is gone already)."""
        pidfd = os.pidfd_open(pid)
        self._jobs[pid] = (conn, pidfd)
        self._selector.register(conn, selectors.EVENT_READ, ("client", pid))
        self._selector.register(pidfd, selectors.EVENT_READ, ("ended", pid))
        if not answer(conn, {"pid": pid}):
            self._finish(pid, kill=True)

    def _finish(self, pid: int, kill: bool) -> None:
        conn, pidfd = self._jobs.pop(pid)
        if kill:
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        self._selector.unregister(conn)
        self._selector.unregister(pidfd)
        os.close(pidfd)
        if not kill:
            answer(conn, {"code": os.waitstatus_to_exitcode(status)})
        conn.close()
