"""A forked copy of the converter worker doing one job beside the main one, sharing the worker's imports.

The fence refuses every fork but this one (packager's own). The copy dies with the worker (Linux
parent-death signal); its result comes back as JSON through a pipe, and any failure as None, so the
worker can do the job itself instead.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from typing import Any, Callable

from .sandbox import Fence


class Forked:
    def __init__(self, fence: Fence, job: Callable[[], dict[str, Any]], nice: int = 0) -> None:
        parent = os.getpid()
        read, write = os.pipe()
        self.pid = fence.fork()
        if self.pid == 0:
            os.close(read)
            _child(job, write, parent, nice)
        os.close(write)
        self._read = read

    def result(self) -> dict[str, Any] | None:
        """Wait for the copy; its result, or None when it failed (its traceback is in the worker's log)."""
        with os.fdopen(self._read, "rb") as pipe:
            data = pipe.read()
        _, status = os.waitpid(self.pid, 0)
        return json.loads(data) if status == 0 and data else None


def _child(job: Callable[[], dict[str, Any]], fd: int, parent: int, nice: int) -> None:
    code = 1
    try:
        _die_with(parent)
        os.nice(nice)
        data = json.dumps(job()).encode("utf-8")
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        code = 0
    except BaseException:  # noqa: BLE001 - the worker does the job itself instead
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # never the worker's own exit path (atexit, the result event)


def _die_with(parent: int) -> None:
    import ctypes
    import signal

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(1)
