"""Two runtimes behind one small interface: an MNN bundle (MNN.llm, in a child process) or a checkpoint
(transformers, in this process).

Every method is greedy and deterministic; timings use the runtime's KV cache, as decoding on a phone does.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np

from ..errors import CheckpointNotFound, MissingTokenizer, from_os_error, shorten
from .child import MNNModel
from .imports import without_collection

Dtype = Literal["stored", "float32"]


def all_cores() -> int:
    return len(os.sched_getaffinity(0))


class Model(Protocol):
    path: Path
    vocab: int

    def encode(self, text: str) -> list[int]: ...
    def texts(self, n: int) -> list[str | None]: ...
    def logits_all(self, ids: list[int]) -> np.ndarray: ...
    def greedy(self, ids: list[int], n: int, stop: tuple[int, ...] = ()) -> list[int]: ...
    def start(self, ids: list[int]) -> int: ...
    def step(self, tokens: list[int], every: bool) -> list[int]: ...
    def keep(self, length: int) -> None: ...
    def timed_step(self, tokens: list[int], every: bool) -> float: ...


def prefix_ids(tokenizer: Any) -> list[int]:
    """The ids a `tokenizers.Tokenizer` puts before a text (BOS for Llama 3; none for Qwen), found as llmexport
    finds the prefix it writes into tokenizer.txt (and MNN puts before every encode): what precedes the last id
    of encode("A")."""
    return list(tokenizer.encode("A", add_special_tokens=True).ids[:-1])


class HFModel:
    threads = 2  # torch threads when none are given; bench/speculative_bench.py lowers it on a shared machine

    def __init__(self, checkpoint: Path, threads: int | None = None, dtype: Dtype = "float32") -> None:
        """`dtype="stored"` keeps the checkpoint's own dtype (bf16 for Qwen3): half the memory of float32, and
        the argmax, which is all acceptance needs, is the model's own."""
        with without_collection():
            import torch
            from tokenizers import Tokenizer
            from transformers import AutoModelForCausalLM

        torch.set_num_threads(threads or self.threads)
        self.path = checkpoint
        name = shorten(str(checkpoint), 120)
        try:
            self.tokenizer = Tokenizer.from_file(str(checkpoint / "tokenizer.json"))
            self.prefix = prefix_ids(self.tokenizer)
        except Exception as exc:
            raise MissingTokenizer(f"cannot load {name}/tokenizer.json ({shorten(str(exc))})") from None
        try:
            self.model = AutoModelForCausalLM.from_pretrained(
                checkpoint, dtype="auto" if dtype == "stored" else torch.float32
            ).eval()
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            if isinstance(exc, OSError) and exc.errno is not None:  # the OS's reason: permissions, ...
                raise from_os_error(exc, f"cannot load the checkpoint {name}") from None
            raise CheckpointNotFound(
                f"transformers cannot load the checkpoint {name} ({shorten(str(exc))})",
                "pass a checkpoint folder that transformers can load",
            ) from None
        self.torch = torch
        self.vocab = int(self.model.config.vocab_size)
        self._cache: Any = None  # the KV cache `start` makes

    def encode(self, text: str) -> list[int]:
        """The text's ids after the tokenizer's prefix (Llama 3's BOS), as MNN encodes; a text that already starts
        with it (a template that writes bos_token) keeps the one it has."""
        ids = list(self.tokenizer.encode(text, add_special_tokens=False).ids)
        prefix = self.prefix
        return ids if not prefix or ids[: len(prefix)] == prefix else prefix + ids

    def texts(self, n: int) -> list[str | None]:
        """The text each of the first n ids decodes to, special tokens included."""
        return [self.tokenizer.decode([index], skip_special_tokens=False) for index in range(n)]

    def logits_all(self, ids: list[int]) -> np.ndarray:
        with self.torch.no_grad():
            return self.model(self.torch.tensor([ids])).logits[0].double().numpy()

    def greedy(self, ids: list[int], n: int, stop: tuple[int, ...] = ()) -> list[int]:
        """Up to n argmax tokens; with `stop`, ends after the first stop id (which is kept)."""
        until = {"eos_token_id": list(stop)} if stop else {"eos_token_id": None, "min_new_tokens": n}
        with self.torch.no_grad():
            out = self.model.generate(
                self.torch.tensor([ids]), max_new_tokens=n, do_sample=False, pad_token_id=0, **until
            )
        tokens = out[0, len(ids) :].tolist()
        return tokens[: next((i + 1 for i, t in enumerate(tokens) if t in stop), len(tokens))]

    def extend(self, cache: Any, new: list[int], last_only: bool = False) -> Any:
        """Logits for `new` on top of `cache` (only the last position's when that is all the caller needs)."""
        keep = {"logits_to_keep": 1} if last_only else {}
        with self.torch.no_grad():
            return self.model(self.torch.tensor([new]), cache=cache, use_cache=True, **keep).logits[0]

    # One KV cache, stepped as the speculative loop (packager.runtime.speculative) and the costs do.

    def start(self, ids: list[int]) -> int:
        """A fresh cache holding `ids`; returns its length."""
        from transformers import DynamicCache

        self._cache = DynamicCache()
        if ids:
            self.extend(self._cache, ids, last_only=True)
        return len(ids)

    def step(self, tokens: list[int], every: bool) -> list[int]:
        """Feed `tokens` on top of the cache; the argmax after each of them (`every`) or after the last."""
        logits = self.extend(self._cache, tokens, last_only=not every)
        return [int(i) for i in logits.argmax(-1).tolist()]

    def keep(self, length: int) -> None:
        """Drop the cached positions of rejected tokens (transformers 5 crops by a negative count)."""
        extra = self._cache.get_seq_length() - length
        if extra > 0:
            self._cache.crop(-extra)

    def timed_step(self, tokens: list[int], every: bool) -> float:
        """Seconds for one step, picking its tokens included."""
        start = time.perf_counter()
        self.step(tokens, every)
        return time.perf_counter() - start


def is_bundle(path: Path) -> bool:
    """Any MNN model folder llmexport makes: its graph, weights and llm_config.json (config.json, llm.mnn.json and
    an embeddings file are optional), or a folder with llm.mnn and config.json."""
    if not (path / "llm.mnn").is_file():
        return False
    return (path / "config.json").is_file() or all((path / n).is_file() for n in ("llm.mnn.weight", "llm_config.json"))


def load(path: Path, threads: int | None = None, dtype: Dtype = "float32") -> Model:
    return MNNModel(path, threads) if is_bundle(path) else HFModel(path, threads, dtype)
