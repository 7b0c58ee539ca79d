"""Linux: a helper process asks the kernel to kill it when the process that started it dies, even by SIGKILL, so
no orphan keeps converting or writing (the converter worker, its forked copy, the weight writers)."""

from __future__ import annotations

import os
import sys


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


def exit_now(code: int) -> None:
    """End a helper without the interpreter's teardown (atexit handlers, and 0.9 s of tearing down torch and
    transformers the parent would wait for); what Python and the C++ converter printed is flushed first."""
    import ctypes

    sys.stdout.flush()
    sys.stderr.flush()
    try:
        ctypes.CDLL(None).fflush(None)  # C's own buffers
    except (OSError, AttributeError):
        pass
    os._exit(code)
