"""The `packager` command of a test forked from a warm interpreter instead of started fresh.

A test session runs about 1,300 `packager` commands; each fresh one spends 0.3-1.5 s of CPU importing (click,
numpy, jsonschema, model_signing and sigstore, ...) before its work, most of the suite's CPU that is not
converting. A warm CLI is one process per PYTHONPATH the tests use (the session's, and the network guard's of the
local Hub tests), started by the session, that has imported packager's modules and their libraries once and forks a
copy for each command asked of it on a Unix socket. The copy is the command in a process of its own, as a fresh one:
the caller's arguments, working folder, environment and standard descriptors (passed over the socket), its exit
status (a signal's too) returned to the caller, killed when the caller goes away first, dying with the warm CLI.

What a copy cannot have fresh is what libraries fix when imported. huggingface_hub keeps what the Hugging Face
variables say (HF_ENDPOINT, HF_HOME, HF_HUB_OFFLINE, ...) in its `constants` module, read at import: a copy makes that
module again under its command's environment (and rebinds the copies other huggingface_hub modules took of its
values). Libraries that read them elsewhere (transformers, ...: NOT_WARMED) are refused while the warm CLI warms up,
and imported by each copy that needs them. The warm CLI serves only callers whose other import-time variables
(IMPORT_TIME: Python's own, locale, OpenMP and BLAS threads, torch) equal its own; any other caller, or a session
without a warm CLI ($PACKAGER_TEST_WARM_CLI empty), gets a fresh process. Commands a test signals (`start_cli`)
always start fresh.

`python -m tests.warmcli FD` serves the listening socket FD its starter made (start() binds it first: a command
asked for while the warm CLI still imports waits for it rather than finding no socket).
"""

from __future__ import annotations

import importlib
import importlib.abc
import io
import json
import os
import pkgutil
import select
import selectors
import signal
import socket
import subprocess
import sys
import zlib
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, BinaryIO

from packager.infra.forks import Copies, listening, receive, refuse

VARIABLE = "PACKAGER_TEST_WARM_CLI"  # a folder: one socket per PYTHONPATH, and the warm CLIs' logs
MODULE = "tests.warmcli"
ROOT = Path(__file__).resolve().parent.parent

# What Python and the preloaded libraries read once, at start or import: a caller whose values differ starts fresh.
IMPORT_TIME = ("PYTHON", "LC_", "OMP_", "GOMP_", "KMP_", "MKL_", "OPENBLAS_", "TORCH", "PYTORCH", "NUMPY_")
IMPORT_TIME_EXACT = ("LANG", "LANGUAGE", "LD_PRELOAD", "LD_LIBRARY_PATH", "TOKENIZERS_PARALLELISM")
# Libraries that read the Hugging Face variables at import outside huggingface_hub.constants (and MNN, whose tools
# run pip): a copy imports them itself, under its command's environment.
NOT_WARMED = ("transformers", "datasets", "accelerate", "peft", "diffusers", "llmexport", "MNN")
# Third-party modules the commands import (measured over the hub, release, verify and card tests' processes).
WARMED = (
    "click",
    "cloup",
    "numpy",
    "jsonschema",
    "jinja2",
    "yaml",
    "xxhash",
    "tqdm",
    "requests",
    "cryptography",
    "pydantic",
    "ssl",
    "sqlite3",
    "model_signing",
    "sigstore",
    "safetensors",
    "tokenizers",
    "torch",
    "huggingface_hub",
    "huggingface_hub.hf_api",
    "huggingface_hub.file_download",
)


def import_time_env(env: Mapping[str, str]) -> dict[str, str]:
    """The part of an environment the warm CLI fixed when it started (cache folders are read when used)."""
    return {
        k: v
        for k, v in env.items()
        if (k.startswith(IMPORT_TIME) or k in IMPORT_TIME_EXACT) and not k.endswith(("_CACHE_DIR", "_CACHE"))
    }


def socket_name(pythonpath: str) -> str:
    return f"cli-{zlib.crc32(pythonpath.encode('utf-8')):08x}.sock"


# ---- the session's side ----


def start(folder: Path, pythonpaths: Iterable[str]) -> list[subprocess.Popen[bytes]]:
    """One warm CLI per PYTHONPATH, listening in `folder` (0700: whoever reaches a socket can run commands as this
    user). Each dies with this process; stop them with kill()."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    started = []
    for pythonpath in dict.fromkeys(pythonpaths):
        path = folder / socket_name(pythonpath)
        env = {**os.environ, "PYTHONPATH": pythonpath, "PACKAGER_PARENT_PID": str(os.getpid())}
        with listening(path, 64) as listener, open(folder / f"{path.stem}.log", "wb") as log:
            started.append(
                subprocess.Popen(
                    [sys.executable, "-m", MODULE, str(listener.fileno())],
                    cwd=ROOT,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    pass_fds=(listener.fileno(),),
                )
            )
    return started


def _logged(folder: Path) -> list[str]:
    return [line for log in sorted(folder.glob("*.log")) for line in log.read_text(errors="replace").splitlines()]


def said(folder: Path) -> tuple[int, list[str]]:
    """What the warm CLIs of `folder` logged: how many commands they served, and their distinct refusals."""
    lines = _logged(folder)
    return sum(1 for line in lines if line.startswith("served: ")), sorted(
        {line for line in lines if line.startswith("refused: ")}
    )


def still_running(processes: Iterable[subprocess.Popen[bytes]], folder: Path) -> list[str]:
    """The commands the warm CLIs forked that have not ended (at a session's end: left running by a test), as
    `pid command` lines; they die with their warm CLI."""
    served = {}
    for line in _logged(folder):
        if line.startswith("served: "):
            pid, _, command = line.removeprefix("served: ").partition(": ")
            served[pid] = command
    found = []
    for process in processes:
        try:
            children = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()
        except OSError:
            continue
        for pid in children:
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
            except (OSError, IndexError):
                continue
            if state != "Z":  # a zombie has ended; the warm CLI reaps it
                found.append(f"pid {pid}: packager {served.get(pid, '(a command of the warm CLI)')}")
    return found


def packager(
    argv: list[str], cwd: Path | str | None = None, env: Mapping[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """The real `packager ARGV...` in a process of its own: forked by the warm CLI where one serves this environment,
    else started fresh; answered as subprocess.run(capture_output=True, text=True) answers."""
    warm = run(argv, cwd, env, timeout)
    if warm is not None:
        return warm
    return subprocess.run(
        [sys.executable, "-m", "packager.cli", *argv],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=None if env is None else dict(env),
        timeout=timeout,
    )


class _Asked:
    """A command the warm CLI started: its connection (the answers), pid and the read ends of its stdout and
    stderr."""

    def __init__(self, conn: socket.socket, replies: BinaryIO, pid: int, out_r: int, err_r: int) -> None:
        self.conn, self.replies, self.pid, self.out_r, self.err_r = conn, replies, pid, out_r, err_r

    def code(self) -> int:
        """The command's exit status, once it has ended (no answer: the warm CLI went, killed, before the copy)."""
        return int(json.loads(self.replies.readline() or b"{}").get("code", -signal.SIGKILL))


def _ask(argv: list[str], cwd: Path | str | None, env: Mapping[str, str] | None, stdin: int | None) -> _Asked | None:
    """`packager ARGV...` started by the warm CLI for this environment's PYTHONPATH, its stdout and stderr piped back
    and its stdin the caller's `stdin` (None: /dev/null); None when there is none or it does not serve this caller
    (nothing was run)."""
    folder = os.environ.get(VARIABLE)
    if not folder:
        return None
    env = dict(os.environ if env is None else env)
    where = Path(folder) / socket_name(env.get("PYTHONPATH", ""))
    folder_in = os.path.abspath(cwd if cwd is not None else os.getcwd())
    if not os.path.isdir(folder_in):  # subprocess's own error, from the fresh start
        return None
    request = {"argv": argv, "cwd": folder_in, "env": env}
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    first: dict[str, Any] = {}
    try:
        conn.connect(str(where))
        given = stdin if stdin is not None and _usable(stdin) else os.open(os.devnull, os.O_RDONLY)
        try:
            socket.send_fds(conn, [json.dumps(request).encode("utf-8") + b"\n"], [given, out_w, err_w])
        finally:
            if given != stdin:
                os.close(given)
        replies = conn.makefile("rb")
        first = json.loads(replies.readline() or b"{}")
    except (OSError, ValueError):
        pass
    finally:
        os.close(out_w)
        os.close(err_w)
    if "pid" not in first:
        conn.close()
        os.close(out_r)
        os.close(err_r)
        return None
    return _Asked(conn, replies, int(first["pid"]), out_r, err_r)


def run(
    argv: list[str],
    cwd: Path | str | None,
    env: Mapping[str, str] | None,
    timeout: float,
    started: Callable[[int], object] | None = None,
) -> subprocess.CompletedProcess[str] | None:
    """`packager ARGV...` forked by the warm CLI, run to its end, answered as subprocess.run(capture_output=True,
    text=True) answers (its stdin the caller's); None when no warm CLI serves this caller (nothing was run).
    `started` is told the command's pid once it runs."""
    asked = _ask(argv, cwd, env, 0)
    if asked is None:
        return None
    try:
        if started is not None:
            started(asked.pid)
        try:
            out, err = _drain(asked.out_r, asked.err_r, timeout)
        except subprocess.TimeoutExpired:
            asked.conn.shutdown(socket.SHUT_WR)  # the warm CLI kills the copy when its caller stops, then says EOF
            asked.replies.read()
            raise subprocess.TimeoutExpired(["packager", *argv], timeout) from None
        code = asked.code()
    finally:
        asked.conn.close()
        os.close(asked.out_r)
        os.close(asked.err_r)
    return subprocess.CompletedProcess([sys.executable, "-m", "packager.cli", *argv], code, _text(out), _text(err))


class WarmProcess:
    """A long-running `packager` command forked by the warm CLI, with what tests use of subprocess.Popen: pid,
    stdout and stderr (text pipes), poll, wait, terminate, kill, returncode."""

    def __init__(self, asked: _Asked, argv: list[str]) -> None:
        self._asked = asked
        self.pid, self.args = asked.pid, [sys.executable, "-m", "packager.cli", *argv]
        self.stdout = open(asked.out_r)
        self.stderr = open(asked.err_r)
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and select.select([self._asked.conn], [], [], 0)[0]:
            self._read_code()  # the answer is one line, written at once (or the end of the connection)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self._asked.conn.settimeout(timeout)
            try:
                self._read_code()
            except TimeoutError:
                raise subprocess.TimeoutExpired(self.args, timeout or 0) from None
        assert self.returncode is not None
        return self.returncode

    def _read_code(self) -> None:
        self.returncode = self._asked.code()
        self._asked.replies.close()
        self._asked.conn.close()

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def spawn(argv: list[str], env: Mapping[str, str] | None) -> WarmProcess | None:
    """`packager ARGV...` started by the warm CLI and left running, stdin /dev/null, stdout and stderr piped (as
    subprocess.Popen(stdout=PIPE, stderr=PIPE, text=True)); None when no warm CLI serves it."""
    asked = _ask(argv, None, env, None)
    return None if asked is None else WarmProcess(asked, argv)


def _usable(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def _drain(out_r: int, err_r: int, timeout: float) -> tuple[bytes, bytes]:
    """Both pipes read to their end (as subprocess.communicate reads them: neither side can block the other)."""
    chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
    with selectors.DefaultSelector() as selector:
        for fd in chunks:
            selector.register(fd, selectors.EVENT_READ)
        while selector.get_map():
            ready = selector.select(timeout)
            if not ready:
                raise subprocess.TimeoutExpired("packager", timeout)
            for key, _ in ready:
                data = os.read(key.fd, 1 << 16)
                if data:
                    chunks[key.fd].append(data)
                else:
                    selector.unregister(key.fd)
    return b"".join(chunks[out_r]), b"".join(chunks[err_r])


def _text(data: bytes) -> str:
    """Decoded as subprocess.run(text=True) decodes: the locale's encoding, universal newlines."""
    return io.TextIOWrapper(io.BytesIO(data)).read()


# ---- the warm CLI's side ----


class _Refuse(importlib.abc.MetaPathFinder):
    """While warming up: the libraries of NOT_WARMED cannot be imported (a module that needs them stays cold)."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name.split(".")[0] in NOT_WARMED:
            raise ImportError(f"{name} is imported by each command itself (tests/warmcli.py)")
        return None


def _warm_up() -> list[str]:
    """Import packager's modules and the libraries the commands use, except what reads Hugging Face variables at
    import; returns the modules that stayed cold."""
    import packager
    import packager.cli

    packager.cli.library_defaults()  # as each command has it (then the copy's environment decides)
    refuse = _Refuse()
    sys.meta_path.insert(0, refuse)
    cold = []
    try:
        packager.cli.load_all()
        for name in WARMED:
            try:
                importlib.import_module(name)
            except ImportError:
                cold.append(name)
        for module in pkgutil.walk_packages(packager.__path__, "packager."):
            if module.name.endswith("__main__"):
                continue
            try:
                importlib.import_module(module.name)
            except ImportError:
                cold.append(module.name)
    finally:
        sys.meta_path.remove(refuse)
    leaked = sorted(name for name in sys.modules if name.split(".")[0] in NOT_WARMED)
    assert not leaked, f"warmed up with {leaked}"
    return cold


def _child(request: dict[str, Any], fds: list[int], server: int, inherited: list[int]) -> None:
    """The forked copy: the caller's descriptors, folder, environment and arguments, then `python -m packager.cli`'s
    own ending (non-daemon threads joined, atexit handlers run, the streams flushed)."""
    code = 1
    try:
        from packager.infra.lifeline import die_with

        die_with(server)
        for fd in inherited:
            os.close(fd)
        moved = [os.dup(fd) for fd in fds]  # out of 0-2 first, whatever numbers they arrived as
        for fd in fds:
            os.close(fd)
        for target, fd in enumerate(moved):
            os.dup2(fd, target)
            os.close(fd)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.environ.clear()
        os.environ.update({str(k): str(v) for k, v in request["env"].items()})
        from packager.cli import library_defaults

        library_defaults()  # what main() sets first, before huggingface_hub is made again below
        _remake_hub_constants()
        os.chdir(request["cwd"])
        import tempfile

        tempfile.tempdir = None  # made again from the command's TMPDIR
        sys.argv = [str(ROOT / "packager" / "cli" / "__main__.py"), *map(str, request["argv"])]
        sys.path[0] = os.getcwd()  # `python -m` puts the folder it starts in first
        _become_main("packager.cli.__main__")
        code = _main()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _remake_hub_constants() -> None:
    """huggingface_hub.constants made again from this environment, and each value another huggingface_hub module
    took of it (`from ..constants import X`) replaced by the new one; the module's default HfApi given the new
    endpoint."""
    constants = sys.modules.get("huggingface_hub.constants")
    if constants is None:
        return
    before = dict(vars(constants))
    importlib.reload(constants)
    after = vars(constants)
    changed = {k for k, v in before.items() if not k.startswith("__") and k in after and after[k] is not v}
    for name, module in list(sys.modules.items()):
        if module is None or module is constants or not name.startswith("huggingface_hub"):
            continue
        for key in changed:
            if vars(module).get(key, constants) is before[key]:
                setattr(module, key, after[key])
    hf_api = sys.modules.get("huggingface_hub.hf_api")
    if hf_api is not None:
        hf_api.api.endpoint = after["ENDPOINT"]


def _become_main(name: str) -> None:
    """`__main__` as `python -m packager.cli` has it (not this module): what multiprocessing's spawn start method
    reads to prepare its children (a `.__main__` module is not run again there)."""
    import importlib.util
    import types

    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.origin is not None
    module = types.ModuleType("__main__")
    module.__spec__, module.__file__, module.__loader__ = spec, spec.origin, spec.loader
    module.__package__ = spec.parent
    sys.modules["__main__"] = module


def _main() -> int:
    import atexit
    import threading
    import traceback

    from packager.cli import main

    try:
        main()
        code = 0
    except SystemExit as ended:
        if ended.code is None or isinstance(ended.code, int):
            code = ended.code or 0
        else:
            print(ended.code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt:
        traceback.print_exc()
        code = 128 + signal.SIGINT
    except BaseException:
        traceback.print_exc()
        code = 1
    threading._shutdown()  # type: ignore[attr-defined]  # as the interpreter ends: its threads first
    atexit._run_exitfuncs()
    return code


def serve(listening: int) -> None:
    from packager.infra.lifeline import die_with

    die_with(int(os.environ.get("PACKAGER_PARENT_PID", os.getppid())))
    own = import_time_env(os.environ)
    listener = socket.socket(fileno=listening)
    cold = _warm_up()
    print(f"warm; left cold: {', '.join(cold) or 'nothing'}", flush=True)
    import gc

    gc.freeze()  # what was imported is never collected: a copy's collections do not write to (copy) its pages
    server = os.getpid()
    copies = Copies(listener)
    for conn in copies.clients():
        request, fds = receive(conn, 4)
        theirs = import_time_env(request["env"]) if isinstance(request.get("env"), dict) else None
        if len(fds) != 3 or theirs != own or not isinstance(request.get("argv"), list):
            refuse(conn, fds, own, theirs)
            continue
        pid, inherited = copies.fork(conn, fds)
        if pid == 0:
            _child(request, fds, server, inherited)
        print(f"served: {pid}: {' '.join(map(str, request['argv']))[:160]}", flush=True)
        copies.started(pid, conn)


if __name__ == "__main__":
    serve(int(sys.argv[1]))
