"""Linux: a helper process asks the kernel to kill it when the process that started it dies, even by SIGKILL, so
no orphan keeps converting or writing (the converter worker, its forked copy, the weight writers)."""

from __future__ import annotations

import os


def die_with(parent: int) -> None:
    """Called first thing in the helper; `parent` is the pid of the process that started it."""
    import ctypes
    import signal

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:
        os._exit(1)  # the parent was already gone before the request took effect
