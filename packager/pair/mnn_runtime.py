"""A bundle in the MNN runtime (MNN.llm), in this process. packager itself only uses it inside the child
process of packager.pair.child, so a crash of the runtime cannot take packager down with it."""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np

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


class MNNRuntime:
    """Greedy, deterministic access to a bundle: token ids, logits at every position, KV-cached steps."""

    def __init__(self, bundle: Path, precision: str = "high", threads: int = 2) -> None:
        self.path = bundle
        with quiet_stdout():
            import MNN.llm as mnn_llm

            self.llm = mnn_llm.create(str(bundle / "config.json") if (bundle / "config.json").is_file()
                                      else str(bundle / "llm.mnn"))
            self.llm.set_config({"precision": precision, "all_logits": True, "sampler_type": "greedy",
                                 "thread_num": threads, **_tokenizer_setting(bundle)})
            if not self.llm._c_obj.load():
                raise BundleError(f"MNN could not load the bundle {bundle}", "run packager validate on it")
        self.vocab = int(self.logits_all([0]).shape[-1])

    def encode(self, text: str) -> list[int]:
        return list(self.llm.tokenizer_encode(text))

    def logits_all(self, ids: list[int]) -> np.ndarray:
        """float32 logits, one row per position of `ids`."""
        with quiet_stdout():
            out = np.array(self.llm.forward(ids).read(), dtype=np.float32).reshape(len(ids), -1)
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

    def time_forward(self, context: list[int], new: list[int], repeats: int) -> float:
        """Seconds for one forward of `new` on top of a cached `context` (best of `repeats`)."""
        best = float("inf")
        with quiet_stdout():
            for _ in range(repeats):
                self.llm.reset()
                self.llm.forward(context)
                start = time.perf_counter()
                self.llm.forward(new).read()
                best = min(best, time.perf_counter() - start)
            self.llm.reset()
        return best
