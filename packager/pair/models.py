"""Two runtimes behind one small interface: an MNN bundle (MNN.llm) or a checkpoint (transformers).

Every method is greedy and deterministic; timings use the runtime's KV cache, as decoding on a phone does.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Protocol

import numpy as np

from ..errors import BundleError


class Model(Protocol):
    path: Path

    def encode(self, text: str) -> list[int]: ...
    def logits_all(self, ids: list[int]) -> np.ndarray: ...
    def greedy(self, ids: list[int], n: int) -> list[int]: ...
    def time_forward(self, context: list[int], new: list[int], repeats: int) -> float: ...


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


class MNNModel:
    def __init__(self, bundle: Path, precision: str = "high") -> None:
        self.path = bundle
        with quiet_stdout():
            import MNN.llm as mnn_llm

            self.llm = mnn_llm.create(str(bundle / "config.json"))
            self.llm.set_config({"precision": precision, "all_logits": True, "sampler_type": "greedy",
                                 "thread_num": 2})
            if not self.llm._c_obj.load():
                raise BundleError(f"MNN could not load the bundle {bundle}", "run packager validate on it")
        self.vocab = int(self.logits_all([0]).shape[-1])

    def encode(self, text: str) -> list[int]:
        return list(self.llm.tokenizer_encode(text))

    def logits_all(self, ids: list[int]) -> np.ndarray:
        with quiet_stdout():
            out = np.array(self.llm.forward(ids).read(), dtype=np.float64).reshape(len(ids), -1)
            self.llm.reset()
        return out

    def greedy(self, ids: list[int], n: int) -> list[int]:
        """Argmax decoding through the KV cache. (MNN's own generate() can pick other tokens than the
        argmax of the very logits forward() returns, so it is not used.)"""
        tokens: list[int] = []
        with quiet_stdout():
            self.llm.reset()
            logits = self.llm.forward(ids)
            while len(tokens) < n:
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


class HFModel:
    def __init__(self, checkpoint: Path) -> None:
        import torch
        from tokenizers import Tokenizer
        from transformers import AutoModelForCausalLM

        torch.set_num_threads(2)
        self.path = checkpoint
        self.tokenizer = Tokenizer.from_file(str(checkpoint / "tokenizer.json"))
        self.model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
        self.torch = torch

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def logits_all(self, ids: list[int]) -> np.ndarray:
        with self.torch.no_grad():
            return self.model(self.torch.tensor([ids])).logits[0].double().numpy()

    def greedy(self, ids: list[int], n: int) -> list[int]:
        with self.torch.no_grad():
            out = self.model.generate(self.torch.tensor([ids]), max_new_tokens=n, min_new_tokens=n, do_sample=False,
                                      pad_token_id=0, eos_token_id=None)
        return out[0, len(ids):].tolist()

    def prefill(self, ids: list[int]) -> Any:
        from transformers import DynamicCache

        cache = DynamicCache()
        with self.torch.no_grad():
            out = self.model(self.torch.tensor([ids]), cache=cache, use_cache=True)
        return out.logits[0], cache

    def extend(self, cache: Any, new: list[int], last_only: bool = False) -> Any:
        """Logits for `new` on top of `cache` (only the last position's when that is all the caller needs)."""
        keep = {"logits_to_keep": 1} if last_only else {}
        with self.torch.no_grad():
            return self.model(self.torch.tensor([new]), cache=cache, use_cache=True, **keep).logits[0]

    def time_forward(self, context: list[int], new: list[int], repeats: int) -> float:
        best = float("inf")
        for _ in range(repeats):
            _, cache = self.prefill(context)
            start = time.perf_counter()
            self.extend(cache, new).argmax(-1).tolist()  # a step includes picking its tokens
            best = min(best, time.perf_counter() - start)
        return best


def is_bundle(path: Path) -> bool:
    return (path / "llm.mnn").is_file() and (path / "config.json").is_file()


def load(path: Path) -> Model:
    return MNNModel(path) if is_bundle(path) else HFModel(path)
