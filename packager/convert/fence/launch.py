"""The one seam through which packager starts the converter: a fenced worker process with a clean environment."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from ...errors import ConversionFailed, FileSystemError, SandboxViolation
from ...infra.forks import listening
from ...infra.progress import Progress
from ...resources import package_root
from .job import WorkerJob, WorkerResult

# The worker module, named from this package (it is never imported here: it imports torch and llmexport).
WORKER = f"{__package__}.worker"
# Offline switches for every library the worker loads; tokens are not passed on (the worker needs none).
_ENV_SET = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "DO_NOT_TRACK": "1",
    "PIP_NO_INDEX": "1",
    "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "PYTHONNOUSERSITE": "1",
}
CACHE_DIRS = (
    "TMPDIR",
    "TORCHINDUCTOR_CACHE_DIR",
    "TRITON_CACHE_DIR",
    "XDG_CACHE_HOME",
    "HF_HOME",
    "HF_HUB_CACHE",
    "TORCH_HOME",
)
_ENV_DROP = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_API_TOKEN", "PYTHONSTARTUP", "PYTHONINSPECT")


class Runner(Protocol):
    def __call__(self, job: WorkerJob, progress: Progress) -> WorkerResult: ...


def worker_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The worker's environment, made from `base` (default: this process's)."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if k not in _ENV_DROP}
    env.update(_ENV_SET)
    root = str(package_root())
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env


def run_worker(job: WorkerJob, progress: Progress) -> WorkerResult:
    """Run the conversion worker and return what it produced; its output goes to `workdir/worker.log`."""
    job_file = job.workdir / "job.json"
    job_file.write_text(job.to_json(), encoding="utf-8")
    log = job.workdir / "worker.log"
    read_fd, write_fd = os.pipe()
    env = worker_env()
    env["PACKAGER_EVENTS_FD"] = str(write_fd)
    env["PACKAGER_PARENT_PID"] = str(os.getpid())
    # Temporary files and caches of the libraries stay inside the fenced work folder.
    tmp = job.workdir / "tmp"
    tmp.mkdir(exist_ok=True)
    for key in CACHE_DIRS:
        env[key] = str(tmp)
    # one event for every job, however it is run (a test session counts its graph builds by it)
    sys.audit("packager.convert.worker", str(job_file))
    with open(log, "wb") as log_file:
        served = _warm(job_file, job.workdir, env, log_file.fileno(), read_fd, write_fd, progress)
        if served is not None:
            final, code = served
            return _result(final, code, log, job.workdir)
        process = subprocess.Popen(
            [sys.executable, "-m", WORKER, str(job_file)],
            cwd=job.workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            pass_fds=(write_fd,),
        )
        os.close(write_fd)
        progress("starting the converter (loading torch, transformers, llmexport)")
        try:
            final = _follow(read_fd, progress)
            code = process.wait()
        except BaseException:
            process.kill()
            process.wait()
            raise
    return _result(final, code, log, job.workdir)


# A warm converter's socket (packager.convert.fence.warm): jobs it takes skip the worker's imports.
WARM_VARIABLE = "PACKAGER_WARM_CONVERTER"
WARM_MODULE = f"{__package__}.warm"


def start_warm(folder: Path, pythonpath: str | None = None) -> tuple[subprocess.Popen[bytes], Path]:
    """A warm converter listening in `folder` (its socket and its temporary files there), and the socket's path; it
    dies with this process. Jobs reach it when $PACKAGER_WARM_CONVERTER names that socket; stop it with kill().
    `pythonpath`: the PYTHONPATH of the clients it is for, if not this process's (it serves only clients whose
    import-time environment is its own)."""
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / "tmp"
    tmp.mkdir(exist_ok=True)
    env = worker_env(None if pythonpath is None else {**os.environ, "PYTHONPATH": pythonpath})
    env["PACKAGER_PARENT_PID"] = str(os.getpid())
    for key in CACHE_DIRS:
        env[key] = str(tmp)
    path = folder / "converter.sock"
    with listening(path, 16) as listener, open(folder / "warm.log", "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", WARM_MODULE, str(listener.fileno())],
            cwd=folder,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            pass_fds=(listener.fileno(),),
        )
    return process, path


def _warm(
    job_file: Path, workdir: Path, env: dict[str, str], log_fd: int, read_fd: int, write_fd: int, progress: Progress
) -> tuple[dict[str, Any] | None, int] | None:
    """The job run by the warm converter $PACKAGER_WARM_CONVERTER names: (its final event, its exit code), or None
    when there is none or it does not take this job (then the caller starts a fresh worker; nothing was sent)."""
    where = os.environ.get(WARM_VARIABLE)
    if not where:
        return None
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(where)
        request = {"job": str(job_file), "workdir": str(workdir), "env": env}
        socket.send_fds(conn, [json.dumps(request).encode("utf-8") + b"\n"], [log_fd, write_fd])
        replies = conn.makefile("rb")
        first = json.loads(replies.readline() or b"{}")
    except (OSError, ValueError):
        conn.close()
        return None
    if "pid" not in first:  # refused (another import-time environment): nothing of the job was started
        conn.close()
        return None
    os.close(write_fd)
    progress("starting the converter (a warm one: torch, transformers and llmexport already loaded)")
    try:
        final = _follow(read_fd, progress)
        last = json.loads(replies.readline() or b"{}")
    except BaseException:
        # the warm converter kills the copy when this side stops sending; its answer (EOF) comes once it is dead
        conn.shutdown(socket.SHUT_WR)
        replies.read()
        raise
    finally:
        conn.close()
    return final, int(last.get("code", -9))  # no code: the converter went (killed) before the copy's end


def _follow(read_fd: int, progress: Progress) -> dict[str, Any] | None:
    final = None
    with os.fdopen(read_fd, "r", encoding="utf-8") as events:
        for line in events:
            event = json.loads(line)
            if event["event"] == "stage":
                progress(event["name"])
            else:
                final = event
    return final


# Below this much free space a failed conversion is reported as a full disk, whatever the library said.
LOW_SPACE = 64 * 1024 * 1024


def _result(final: dict[str, Any] | None, code: int, log: Path, workdir: Path) -> WorkerResult:
    if final is None or final["event"] != "done" or code != 0:
        blocked = final.get("blocked", []) if final else []
        if blocked:
            raise SandboxViolation(f"conversion stopped: the converter tried {blocked[0]}")
        _raise_os_reason(final or {}, workdir, log)
        # A worker can report "done" and still end badly (killed while exiting, say): then the exit is the reason.
        reason = (final or {}).get("message") or _ended(code)
        raise ConversionFailed(f"conversion failed: {reason}", details=_tail(log))
    made = WorkerResult.from_plain(final["result"])
    return replace(made, blocked=tuple(final.get("blocked", [])), log=log)


def _ended(code: int) -> str:
    if code < 0:
        import signal

        return f"the converter process was killed by {signal.Signals(-code).name}"
    return f"the converter process ended with code {code}"


def _raise_os_reason(final: dict[str, Any], workdir: Path, log: Path) -> None:
    """An OS error (full disk, read-only, ...) behind a failed conversion becomes its own one-line error."""
    if final.get("errno"):
        where = f" ({final['filename']})" if final.get("filename") else ""
        raise FileSystemError(f"conversion failed: {final['strerror']}{where}", details=_tail(log))
    try:
        free = os.statvfs(workdir).f_bavail * os.statvfs(workdir).f_frsize
    except OSError:
        return
    if free < LOW_SPACE:
        raise FileSystemError(
            f"conversion failed: No space left on device (only {free >> 20} MiB free in {workdir.parent.parent})",
            "free space there or choose another --out",
            details=_tail(log),
        )


def _tail(log: Path, count: int = 40) -> str:
    lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    return "\n".join(lines[-count:])
