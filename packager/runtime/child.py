"""The MNN runtime in a child process: a crash (SIGSEGV on damaged weights, SIGABRT, SIGKILL from the
out-of-memory killer) becomes one RuntimeCrashed line instead of taking packager down with it.

Protocol: the parent writes pickled (method, args) to the child's stdin and reads one pickled
("ok", value) or ("error", PackagerError) per request from its stdout. The child moves its own fd 1 onto
its stderr (a temporary file the parent keeps for --debug) before MNN is imported, so nothing MNN prints
can reach the protocol pipe or packager's stdout.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from ..errors import BundleError, PackagerError, RuntimeCrashed, shorten
from ..resources import package_root
from . import shared

METHODS = ("encode", "logits_all", "greedy", "start", "step", "timed_step", "keep", "decode", "texts")
_BOOT = f"import sys; sys.path.insert(0, sys.argv[1]); from {__name__} import serve; serve(sys.argv[2])"
_NO_FILES = "-"  # serve()'s argument when there are no shared files
_LOG_TAIL = 4000


class MNNModel:
    """A bundle in the MNN runtime, run in a child process; the same methods as MNNRuntime."""

    def __init__(self, bundle: Path, threads: int | None = None) -> None:
        self.path = bundle
        self._pending: str | None = None  # the method of a request sent whose reply is not read yet
        self._log = tempfile.TemporaryFile()
        self._shared = shared.create()  # large arrays (logits) come back through these files, not the pipe
        root = str(package_root())
        handed = self._shared or ()
        self._process = subprocess.Popen(
            [sys.executable, "-c", _BOOT, root, ",".join(map(str, handed)) or _NO_FILES],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            pass_fds=handed,
        )
        self.vocab = int(self._call("load", str(bundle), threads or 2))

    def encode(self, text: str) -> list[int]:
        return list(self._call("encode", text))

    def texts(self, n: int) -> list[str | None]:
        return list(self._call("texts", n))

    def logits_all(self, ids: list[int]) -> np.ndarray:
        return np.asarray(self._call("logits_all", list(ids)), dtype=np.float64)

    def logits_each(self, sequences: Iterable[list[int]], borrowed: bool = False) -> Iterator[np.ndarray]:
        """float32 logits_all of each sequence, in order, with the next sequence's forward already running in the
        child while the caller works on the rows it was given (verify compares one prompt while MNN computes the
        next). The next request is sent only after a reply has been read whole, so neither side can block the
        other on a full pipe, whatever the sizes.

        `borrowed`: each array is the child's bytes in place (packager.runtime.shared.borrow), not a copy; it is
        valid only until the caller asks for the next one, and read-only by contract."""
        ahead = iter(sequences)
        first = next(ahead, None)
        if first is None:
            return
        self.submit("logits_all", list(first))
        for ids in ahead:
            rows = np.asarray(self.collect(borrowed), dtype=np.float32)
            self.submit("logits_all", list(ids))
            yield rows
        yield np.asarray(self.collect(borrowed), dtype=np.float32)

    def greedy(self, ids: list[int], n: int, stop: tuple[int, ...] = ()) -> list[int]:
        return list(self._call("greedy", list(ids), n, tuple(stop)))

    def start(self, ids: list[int]) -> int:
        return int(self._call("start", list(ids)))

    def step(self, tokens: list[int], every: bool) -> list[int]:
        return list(self._call("step", list(tokens), every))

    def timed_step(self, tokens: list[int], every: bool) -> float:
        """Measured inside the child, so the pipe's cost is not part of the figure."""
        return float(self._call("timed_step", list(tokens), every))

    def keep(self, length: int) -> None:
        self._call("keep", length)

    def decode(
        self, draft: Path | None, ids: list[int], n: int, d: int, stop: tuple[int, ...] = ()
    ) -> tuple[list[int], list[int], float]:
        """The whole loop inside the child (see MNNRuntime.decode)."""
        tokens, accepted, seconds = self._call("decode", str(draft) if draft else None, list(ids), n, d, tuple(stop))
        return list(tokens), list(accepted), float(seconds)

    def close(self) -> None:
        for fd in getattr(self, "_shared", None) or ():
            os.close(fd)  # the child's handles (and any borrowed array's mapping) keep the file until they end
        self._shared = None
        process = getattr(self, "_process", None)
        if process is None or process.poll() is not None:
            return
        try:
            assert process.stdin is not None and process.stdout is not None
            if self._pending is not None:  # a reply nobody will read (the caller stopped early): the child's
                process.stdout.close()  # write fails at once instead of waiting on a full pipe
            process.stdin.close()  # EOF: the child returns from serve()
            process.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            process.kill()
            process.wait()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass  # ends on its own when the pipe closes

    def submit(self, method: str, *args: Any) -> None:
        """Send one request without waiting for its reply: the child works on it while this process goes on.
        collect() reads the reply; one request at most is in flight."""
        process = self._process
        assert process.stdin is not None and self._pending is None, "collect() the reply in flight first"
        try:
            pickle.dump((method, args), process.stdin, protocol=pickle.HIGHEST_PROTOCOL)
            process.stdin.flush()
        except OSError:
            raise self._crashed(method) from None
        self._pending = method

    def collect(self, borrowed: bool = False) -> Any:
        """The reply to the request submit() sent (waiting for it); the child's error is raised here. A large
        array is read into memory of this process, or, `borrowed`, mapped in place (see logits_each)."""
        process, method = self._process, self._pending
        assert process.stdout is not None and method is not None, "nothing was submitted"
        try:
            status, value = pickle.load(process.stdout)
        except (EOFError, OSError, pickle.UnpicklingError):
            raise self._crashed(method) from None
        finally:
            self._pending = None
        if status == "error":
            raise value
        if isinstance(value, shared.SharedArray):
            if self._shared is None:
                raise self._crashed(method)
            try:
                return (shared.borrow if borrowed else shared.take)(self._shared, value)
            except OSError as exc:
                raise RuntimeCrashed(
                    f"the MNN runtime's reply to {method} on {shorten(str(self.path), 120)} "
                    f"could not be read back ({exc})"
                ) from None
        return value

    def _call(self, method: str, *args: Any) -> Any:
        self.submit(method, *args)
        return self.collect()

    def _crashed(self, method: str) -> RuntimeCrashed:
        try:
            code = self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            code = self._process.wait()
        doing = "loading" if method == "load" else f"running {method} on"
        return RuntimeCrashed(
            f"the MNN runtime {describe_exit(code)} while {doing} the bundle {shorten(str(self.path), 120)}",
            details=self._log_tail(),
        )

    def _log_tail(self) -> str:
        self._log.seek(0, os.SEEK_END)
        self._log.seek(max(0, self._log.tell() - _LOG_TAIL))
        return self._log.read().decode("utf-8", "replace")


def describe_exit(code: int) -> str:
    """How a child process ended, in words: the signal's name, or the exit status."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        if -code == signal.SIGKILL:
            return f"was killed ({name}; often the out-of-memory killer)"
        return f"crashed ({name}, signal {-code})"
    return f"exited unexpectedly with status {code}"


def serve(channel: str = _NO_FILES) -> None:
    """The child's loop: one reply per request until the parent closes the pipe. `channel`: the fds of the
    parent's shared files for large arrays (packager.runtime.shared), comma-separated, or _NO_FILES."""
    writer = shared.Writer(tuple(int(fd) for fd in channel.split(",")) if channel != _NO_FILES else ())
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle (exit 130)
    requests = os.fdopen(os.dup(0), "rb")
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    runtime = None
    while True:
        try:
            method, args = pickle.load(requests)
        except EOFError:
            return
        try:
            if method == "load":
                from .mnn import MNNRuntime

                runtime = MNNRuntime(Path(args[0]), threads=int(args[1]) if len(args) > 1 else 2)
                reply: tuple[str, Any] = ("ok", runtime.vocab)
            elif method == "logits_all" and runtime is not None:  # the rows go out from MNN's own buffer
                reply = ("ok", runtime.logits_all(args[0], keep=lambda rows: writer.put(rows, owned=False)))
            elif method in METHODS and runtime is not None:
                reply = ("ok", writer.put(getattr(runtime, method)(*args)))
            else:
                reply = ("error", BundleError(f"the MNN child cannot run {method!r} now"))
        except PackagerError as exc:
            reply = ("error", exc)
        except Exception as exc:
            reply = (
                "error",
                BundleError(
                    f"the MNN runtime failed ({type(exc).__name__}: {shorten(str(exc))})",
                    "run packager validate on the bundle",
                ),
            )
        try:
            _reply(replies, reply)
        except BrokenPipeError:  # the parent closed without reading the reply (MNNModel.close): done
            return


def _reply(replies: BinaryIO, reply: tuple[str, Any]) -> None:
    pickle.dump(reply, replies, protocol=pickle.HIGHEST_PROTOCOL)
    replies.flush()
