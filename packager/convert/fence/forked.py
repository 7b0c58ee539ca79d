"""A forked copy of the converter worker doing one job beside the main one, sharing the worker's imports.

The fence refuses every fork but this one (packager's own). The copy dies with the worker (Linux
parent-death signal). It can send one early message while it works (`send`), and its result comes last; both
travel as JSON lines through a pipe, and a failure reads as None, so the worker can do the job itself instead.
"""

from __future__ import annotations

import json
import os
import traceback
from collections.abc import Callable
from typing import IO, Any

from ...infra.lifeline import die_with, exit_now
from .sandbox import Fence

Send = Callable[[dict[str, Any]], None]


class Forked:
    """`job` runs in the copy at the worker's priority until it sends its early message, then `nice` lower."""

    def __init__(self, fence: Fence, job: Callable[[Send], dict[str, Any]], nice: int = 0) -> None:
        parent = os.getpid()
        read, write = os.pipe()
        self.pid = fence.fork()
        if self.pid == 0:
            os.close(read)
            _child(job, write, parent, nice)
        os.close(write)
        self._pipe: IO[bytes] = os.fdopen(read, "rb")
        self._early: dict[str, Any] | None = None
        self._final: dict[str, Any] | None = None
        self._early_read = False

    def _next(self) -> dict[str, Any]:
        line = self._pipe.readline()
        return json.loads(line) if line.endswith(b"\n") else {}  # {}: the copy ended without a whole line

    def early(self) -> dict[str, Any] | None:
        """The copy's early message, waiting for it; None when the copy ended or failed without sending one."""
        if not self._early_read:
            self._early_read = True
            message = self._next()
            if "early" in message:
                self._early = message["early"]
            else:  # no early message: this was the result (or the end), kept for result()
                self._final = message
        return self._early

    def result(self) -> dict[str, Any] | None:
        """Wait for the copy; its result, or None when it failed (its traceback is in the worker's log)."""
        self.early()
        final = self._final if self._final is not None else self._next()
        self._pipe.close()
        _, status = os.waitpid(self.pid, 0)
        return final.get("result") if status == 0 else None


def _child(job: Callable[[Send], dict[str, Any]], fd: int, parent: int, nice: int) -> None:
    code = 1
    try:
        die_with(parent)
        with os.fdopen(fd, "wb", buffering=0) as out:
            sent = False

            def send(data: dict[str, Any]) -> None:
                nonlocal sent
                if not sent:
                    sent = True
                    out.write(json.dumps({"early": data}).encode("utf-8") + b"\n")
                    os.nice(nice)  # the worker waits for this message at its own priority, not for the rest

            result = job(send)
            out.write(json.dumps({"result": result}).encode("utf-8") + b"\n")
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        exit_now(code)  # never the worker's own exit path (atexit, the result event)
