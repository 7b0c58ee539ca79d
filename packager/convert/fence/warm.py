"""A warm converter: one fenced process that has imported what the worker needs (torch, transformers, MNN,
llmexport) and forks a copy of itself for each job, so a conversion does not pay those imports again (about 3 s
of CPU each; a test session builds dozens of graphs).

`python -m packager.convert.fence.warm FD` serves a listening Unix socket its starter made and passed to it
(launch.start_warm: a job asked for while this process imports waits for it instead of finding no socket). A
client (launch.run_worker, when $PACKAGER_WARM_CONVERTER names the socket) sends one JSON line with the job file,
its environment and two descriptors (the log, the events pipe); the copy runs the job exactly as a fresh worker
would, inside the same fence (the fence's folder becomes the job's work folder), and the server answers the
copy's exit status. The copy dies with the server (the kernel's parent-death signal), and is killed when its
client goes away (the connection closes) before it ends: no job outlives the process that asked for it. The
server serves only clients whose import-time environment (IMPORT_TIME) equals its own: those libraries read those
variables once, at import, and a copy would otherwise run with the server's.
"""

from __future__ import annotations

import os
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any

from ...infra.forks import Copies, receive, refuse
from ...infra.lifeline import die_with, exit_now
from .launch import CACHE_DIRS
from .sandbox import Fence

# Variables the worker's libraries read when imported (OpenMP and BLAS thread pools, torch, the Hugging Face
# libraries' offline switches and cache roots, Python's own): a client whose values differ gets a fresh worker.
IMPORT_TIME = ("OMP_", "GOMP_", "KMP_", "MKL_", "OPENBLAS_", "TORCH", "PYTORCH", "HF_HUB_OFFLINE", "TRANSFORMERS_")
IMPORT_TIME_EXACT = ("PYTHONPATH", "PYTHONHASHSEED", "LD_PRELOAD", "LD_LIBRARY_PATH", "TOKENIZERS_PARALLELISM")


def import_time_env(env: dict[str, str]) -> dict[str, str]:
    """The part of an environment the worker's libraries fix at import (not the job's own cache folders)."""
    return {
        k: v for k, v in env.items() if (k.startswith(IMPORT_TIME) or k in IMPORT_TIME_EXACT) and k not in CACHE_DIRS
    }


def _warm_up() -> None:
    """Everything a worker imports, in its order (worker._prepare_imports first: MNN's telemetry stubbed)."""
    from . import worker

    worker._prepare_imports()
    import llmexport  # noqa: F401 - the module llmexport/llmexport.py, first on sys.path now
    import MNN.llm  # noqa: F401
    import transformers  # noqa: F401
    import utils.torch_utils  # noqa: F401
    from utils.mnn_converter import MNNConverter  # noqa: F401
    from utils.tokenizer import LlmTokenizer  # noqa: F401

    from . import headbeside, skeleton  # noqa: F401


def _child(request: dict[str, Any], fds: list[int], fence: Fence, server_pid: int, inherited: list[int]) -> None:
    """The forked copy: the job's descriptors, folder and environment, then the worker's own code."""
    code = 1
    try:
        die_with(server_pid)
        for fd in inherited:  # the listener and other clients' connections: their EOF must not wait for this copy
            os.close(fd)
        log, events = fds
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(null)
        os.close(log)
        env = {str(k): str(v) for k, v in request["env"].items()}
        env["PACKAGER_EVENTS_FD"] = str(events)
        os.environ.clear()
        os.environ.update(env)
        tempfile.tempdir = None  # made again from the job's TMPDIR
        os.chdir(request["workdir"])
        fence.write_root = os.path.realpath(request["workdir"])
        fence.blocked.clear()
        sys.argv = [sys.argv[0], request["job"]]
        from . import worker

        code = worker.serve(Path(request["job"]), events, fence)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        exit_now(code)


def serve(listening: int) -> None:
    """Import, then fork a copy for each request on the socket `listening` (a descriptor: bound and listening
    before this process started) until the process that started this one dies."""
    die_with(int(os.environ.get("PACKAGER_PARENT_PID", os.getppid())))
    own = import_time_env(dict(os.environ))
    listener = socket.socket(fileno=listening)
    work = Path(os.environ.get("TMPDIR", tempfile.gettempdir()))
    fence = Fence(work)
    fence.install()
    _warm_up()
    server_pid = os.getpid()
    copies = Copies(listener)
    for conn in copies.clients():
        request, fds = receive(conn, 4)
        theirs = import_time_env(request["env"]) if isinstance(request.get("env"), dict) else None
        if len(fds) != 2 or theirs != own:
            refuse(conn, fds, own, theirs)
            continue
        pid, inherited = copies.fork(conn, fds, fence.fork)
        if pid == 0:
            _child(request, fds, fence, server_pid, inherited)
        print(f"served: {request.get('job')}", flush=True)
        copies.started(pid, conn)


if __name__ == "__main__":
    serve(int(sys.argv[1]))
