"""Two runtimes behind one small interface: an MNN bundle (MNN.llm, in a child process) or a checkpoint
(transformers, in this process).

Every method is greedy and deterministic; timings use the runtime's KV cache, as decoding on a phone does.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ..errors import CheckpointNotFound, MissingTokenizer, from_os_error, shorten
from .child import MNNModel


class Model(Protocol):
    path: Path

    def encode(self, text: str) -> list[int]: ...
    def logits_all(self, ids: list[int]) -> np.ndarray: ...
    def greedy(self, ids: list[int], n: int) -> list[int]: ...
    def time_forward(self, context: list[int], new: list[int], repeats: int) -> float: ...


class HFModel:
    threads = 2  # torch threads; bench/speculative_bench.py lowers it to stay steady on a shared machine

    def __init__(self, checkpoint: Path) -> None:
        import torch
        from tokenizers import Tokenizer
        from transformers import AutoModelForCausalLM

        torch.set_num_threads(self.threads)
        self.path = checkpoint
        name = shorten(str(checkpoint), 120)
        try:
            self.tokenizer = Tokenizer.from_file(str(checkpoint / "tokenizer.json"))
        except Exception as exc:  # noqa: BLE001 - tokenizers raises plain Exception for a missing/broken file
            raise MissingTokenizer(f"cannot load {name}/tokenizer.json ({shorten(str(exc))})") from None
        try:
            self.model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            if isinstance(exc, OSError) and exc.errno is not None:  # the OS's reason: permissions, ...
                raise from_os_error(exc, f"cannot load the checkpoint {name}") from None
            raise CheckpointNotFound(f"transformers cannot load the checkpoint {name} ({shorten(str(exc))})",
                                     "pass a Qwen3 checkpoint folder that transformers can load") from None
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
