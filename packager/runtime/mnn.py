"""A bundle in the MNN runtime (MNN.llm), in this process. packager itself only uses it inside the child
process of packager.runtime.child, so a crash of the runtime cannot take packager down with it."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from ..bundle.tokenizer_txt import HeaderError, read_header
from ..errors import BundleError


@contextmanager
def quiet_stdout() -> Iterator[None]:
    """MNN's C++ code prints to fd 1 at load; keep it off our stdout (which may carry --json)."""
    saved = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)


def _tokenizer_setting(bundle: Path) -> dict[str, str]:
    """Without config.json MNN looks for tokenizer.txt; llmexport may have written tokenizer.mtok instead
    (MNN's LlmConfig: a path to llm.mnn gives {llm_model, llm_weight}, the rest comes from llm_config.json)."""
    if (bundle / "config.json").is_file() or (bundle / "tokenizer.txt").is_file():
        return {}
    return {"tokenizer_file": "tokenizer.mtok"} if (bundle / "tokenizer.mtok").is_file() else {}


def _prefix(bundle: Path) -> tuple[int, ...]:
    """The ids MNN puts before every encode: the prefix of the bundle's tokenizer file (none when unreadable)."""
    for name in ("tokenizer.txt", "tokenizer.mtok"):
        if (bundle / name).is_file():
            try:
                return read_header(bundle / name).prefix
            except (HeaderError, OSError):
                return ()
    return ()


class MNNRuntime:
    """Greedy, deterministic access to a bundle: token ids, logits at every position, KV-cached steps."""

    def __init__(self, bundle: Path, precision: str = "high", threads: int = 2) -> None:
        self.path, self.threads = bundle, threads
        with quiet_stdout():
            import MNN.llm as mnn_llm

            self.llm = mnn_llm.create(
                str(bundle / "config.json") if (bundle / "config.json").is_file() else str(bundle / "llm.mnn")
            )
            self.llm.set_config(
                {
                    "precision": precision,
                    "all_logits": True,
                    "sampler_type": "greedy",
                    "thread_num": threads,
                    **_tokenizer_setting(bundle),
                }
            )
            if not self.llm._c_obj.load():
                raise BundleError(f"MNN could not load the bundle {bundle}", "run packager validate on it")
        self.vocab = int(self.logits_all([0]).shape[-1])
        self.prefix = _prefix(bundle)

    def encode(self, text: str) -> list[int]:
        """MNN's ids for `text`, its tokenizer's prefix (Llama 3's BOS) first. A text that starts with the prefix
        token itself (a chat template that writes bos_token) gets it once, as transformers' apply_chat_template
        gives it, not twice."""
        ids = list(self.llm.tokenizer_encode(text))
        width = len(self.prefix)
        if width and tuple(ids[: 2 * width]) == self.prefix * 2:
            del ids[:width]
        return ids

    def texts(self, n: int) -> list[str | None]:
        """The text MNN decodes each of the first n ids to ("" for a special token; None for a piece that is not
        UTF-8 on its own, a lone byte)."""
        found: list[str | None] = []
        for index in range(n):
            try:
                found.append(str(self.llm.tokenizer_decode(index)))
            except UnicodeDecodeError:
                found.append(None)
        return found

    def logits_all(self, ids: list[int], keep: Callable[[np.ndarray], Any] | None = None) -> Any:
        """float32 logits, one row per position of `ids` (from an empty cache, whatever was stepped before).
        MNN's read() gives a view of the runtime's own buffer, valid until its next forward or reset: `keep`
        takes that view and returns what to give back (the child writes it to shared memory from there, with
        no copy of its own); without it, a copy."""
        with quiet_stdout():
            self.llm.reset()
            rows = np.asarray(self.llm.forward(ids).read(), dtype=np.float32).reshape(len(ids), -1)
            out = keep(rows) if keep is not None else rows.copy()
            self.llm.reset()
        return out

    def greedy(self, ids: list[int], n: int, stop: tuple[int, ...] = ()) -> list[int]:
        """Argmax decoding through the KV cache, ending after a stop id. (MNN's own generate() can pick other
        tokens than the argmax of the very logits forward() returns, so it is not used.)"""
        tokens: list[int] = []
        with quiet_stdout():
            self.llm.reset()
            logits = self.llm.forward(ids)
            while len(tokens) < n and not (tokens and tokens[-1] in stop):
                last = np.array(logits.read()).reshape(-1, self.vocab)[-1]
                tokens.append(int(last.argmax()))
                logits = self.llm.forward(tokens[-1:])
            self.llm.reset()
        return tokens

    # Stepping through one KV cache, for the real speculative loop (packager.runtime.speculative). MNN applies an
    # erase_history() at the next forward, dropping the cached positions of rejected tokens.

    def start(self, ids: list[int]) -> int:
        """A fresh cache holding `ids`; returns its length."""
        with quiet_stdout():
            self.llm.reset()
            if ids:
                self.llm.forward(ids)
        return len(ids)

    def step(self, tokens: list[int], every: bool) -> list[int]:
        """Feed `tokens` on top of the cache; the argmax after each of them (`every`) or after the last."""
        with quiet_stdout():
            rows = np.array(self.llm.forward(tokens).read(), dtype=np.float32).reshape(-1, self.vocab)
        return [int(i) for i in rows.argmax(-1)] if every else [int(rows[-1].argmax())]

    def timed_step(self, tokens: list[int], every: bool) -> float:
        """Seconds for one step as the loop takes it: the forward, reading its logits and the argmax."""
        start = time.perf_counter()
        self.step(tokens, every)
        return time.perf_counter() - start

    def keep(self, length: int) -> None:
        """Keep the cache's first `length` positions."""
        if int(self.llm._c_obj.get_current_history()) > length:
            self.llm._c_obj.erase_history(length, 0)

    def decode(
        self, draft: str | None, ids: list[int], n: int, d: int, stop: tuple[int, ...]
    ) -> tuple[list[int], list[int], float]:
        """This model decoding `ids` greedily: alone (`draft` None) or verifying drafts of length d from the MNN
        bundle at `draft` (loaded once, in this same process, so no pipe sits inside the timed loop). Returns
        the tokens, the accepted count per step and the decode seconds."""
        from .speculative import autoregressive, speculative

        clock: list[float] = []
        accepted: list[int] = []
        with quiet_stdout():
            if draft is None:
                tokens = autoregressive(self, ids, n, stop, clock=clock)
            else:
                kept: MNNRuntime | None = getattr(self, "_draft", None)
                if kept is None or kept.path != Path(draft):
                    kept = self._draft = MNNRuntime(Path(draft), threads=self.threads)
                tokens = speculative(kept, self, ids, n, d, accepted=accepted, stop=stop, clock=clock)
        return tokens, accepted, clock[0]
