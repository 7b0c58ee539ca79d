"""The measurement runs in a child process: a crash of the engine (3.6.1's EagleGeneration::load has no null
checks) becomes one RuntimeCrashed line, and nothing MNN prints reaches packager's stdout.

The parent writes the job as JSON to the child's stdin; the child answers with JSON lines on its stdout (its
fd 1 moved to its stderr, a temporary file kept for --debug, before MNN is imported): {"stage": ...} as it
goes and one {"result": ...} or {"error": ...} at the end.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from typing import Any

from ...errors import RuntimeCrashed, shorten
from ...resources import package_root
from ...runtime.child import describe_exit

_BOOT = f"import sys; sys.path.insert(0, sys.argv[1]); from {__name__} import serve; serve()"
_LOG_TAIL = 4000


def run(job: dict[str, Any], stage: Callable[[str], None]) -> dict[str, Any]:
    """Run `job` (see packager.measure.speculate.protocol.measure) in a child; its result, or RuntimeCrashed."""
    root = str(package_root())
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            [sys.executable, "-c", _BOOT, root], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True
        )
        assert process.stdin is not None and process.stdout is not None
        try:
            process.stdin.write(json.dumps(job))
            process.stdin.close()
            answer = _read_answer(process.stdout, stage)
        except BaseException:  # Ctrl-C, SIGTERM, a broken pipe: the engine stops with us, not minutes later
            process.kill()
            raise
        finally:
            process.stdout.close()
            code = process.wait()
        if answer is None or "error" in answer:
            log.seek(0)
            tail = log.read().decode("utf-8", "replace")[-_LOG_TAIL:]
            what = answer["error"] if answer else f"the engine {describe_exit(code)}"
            raise RuntimeCrashed(
                f"MNN's generation failed on {shorten(job['bundle'], 120)}: {shorten(what, 200)}", details=tail
            )
        result: dict[str, Any] = answer["result"]
        return result


def _read_answer(stream: Any, stage: Callable[[str], None]) -> dict[str, Any] | None:
    for line in stream:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if "stage" in message:
            stage(str(message["stage"]))
        elif "result" in message or "error" in message:
            return dict(message)
    return None


def _die_with_parent() -> None:
    """SIGKILL this child when packager dies, however it dies (Linux prctl PR_SET_PDEATHSIG)."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the parent was already gone before prctl took effect
        os._exit(1)


def serve() -> None:
    _die_with_parent()
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # MNN's C++ prints go to the log, never into the protocol

    def say(message: dict[str, Any]) -> None:
        protocol.write(json.dumps(message) + "\n")

    job = json.loads(sys.stdin.read())
    try:
        from .protocol import measure

        say({"result": measure(job, lambda text: say({"stage": text}))})
    except Exception as exc:  # anything the engine raises is reported, not a traceback on packager's stderr
        say({"error": f"{type(exc).__name__}: {exc}"})
