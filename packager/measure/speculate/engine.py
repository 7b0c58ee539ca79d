"""One bundle in MNN.llm with its own generation strategy, run inside packager.measure.speculate.child's process.

Each generation starts from an empty cache (generate_init; MNN's lookahead samples its first token only when
current_token is -1, which generate_init sets) and is timed around the engine's own generate(ids, n); the
engine's prefill time is taken off, so the figure is the decode phase as the strategy runs it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Generation:
    generated: tuple[int, ...]  # history_tokens after the prompt (the engine's step counter is not in it)
    output_tokens: tuple[int, ...]
    generate_str: str | None  # None when it could not be read safely (see Engine._context)
    decode_seconds: float  # wall time of generate() less the engine's prefill_us
    status: int


class Engine:
    def __init__(self, bundle: Path, overrides: dict[str, Any]) -> None:
        import MNN.llm as mnn_llm

        self.llm = mnn_llm.create(str(bundle / "config.json"))
        self.llm.set_config(overrides)  # the wrapper JSON-encodes the dict itself
        if not self.llm._c_obj.load():
            raise RuntimeError(f"MNN could not load {bundle} with {overrides}")
        self._whole: dict[int, bool] = {}

    def encode(self, text: str) -> list[int]:
        return [int(i) for i in self.llm.tokenizer_encode(text)]

    def text(self, token: int) -> str:
        """The token's text; a token that is part of a UTF-8 character gets a text no generate_str holds."""
        try:
            return str(self.llm.tokenizer_decode(int(token)))
        except UnicodeDecodeError:
            return f"\x00{token}\x00"

    def generate(self, ids: list[int], max_new_tokens: int) -> Generation:
        engine = self.llm._c_obj
        engine.generate_init()
        start = time.perf_counter()
        output = [int(t) for t in engine.generate(ids, max_new_tokens)]
        wall = time.perf_counter() - start
        context, text = self._context(output)
        history = [int(t) for t in context["history_tokens"]]
        return Generation(
            tuple(history[len(ids) :]),
            tuple(int(t) for t in context["output_tokens"]),
            text,
            max(wall - context["prefill_us"] / 1e6, 1e-9),
            int(context["status"]),
        )

    def stepwise(
        self, ids: list[int], max_new_tokens: int, stops: frozenset[int]
    ) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """DFlash one verification step a call: the tokens, and how many there were after each step. MNN 3.6.1's
        DFlashGeneration runs steps until it has max_new_tokens, so generate(ids, 1) runs the prefill and one
        step; the engine keeps its draft state (that is 3.6.1's multi-response defect), so after the last token in
        the cache is erased and fed again (one position, the same token), generate([token], 1) runs exactly the
        next step. The caller compares the tokens with an uninterrupted run's: equal, the step count is the
        engine's own (the engine exposes no step counter)."""
        engine = self.llm._c_obj
        engine.generate_init()
        out = [int(t) for t in engine.generate(ids, 1)]
        bounds = [len(out)] if len(out) > 1 else []
        while len(out) - 1 < max_new_tokens and not stops.intersection(out):
            context = engine.get_context()  # DFlash writes no generate_str: nothing here can be a partial character
            last = int(context["output_tokens"][-2])  # the newest token in the cache (the last is the next block's)
            engine.erase_history(int(context["all_seq_len"]) - 1, 0)
            grown = [int(t) for t in engine.generate([last], 1)]
            if len(grown) <= len(out):
                break
            out = grown
            bounds.append(len(out))
        return tuple(out), tuple(bounds)

    def _context(self, output: list[int]) -> tuple[dict[str, Any], str | None]:
        """The engine's context and its generate_str. pymnn 3.6.1's get_context() crashes the process (a failed
        strict UTF-8 decode put into a dict) when generate_str ends inside a UTF-8 character. generate_str only
        ever holds generated tokens' texts, so it is read when each of them is whole characters (any
        concatenation is then valid UTF-8), and cleared first otherwise (set_context sets only the keys given)."""
        engine = self.llm._c_obj
        if all(self._is_whole(token) for token in output):
            context = engine.get_context()
            return context, str(context["generate_str"])
        engine.set_context({"generate_str": ""})
        return engine.get_context(), None

    def _is_whole(self, token: int) -> bool:
        if token not in self._whole:
            self._whole[token] = not self.text(token).startswith("\x00")
        return self._whole[token]

    def next_logits(self, ids: list[int]) -> np.ndarray:
        """The logits of the token after `ids`, from an empty cache."""
        self.llm.reset()
        out = np.array(self.llm.forward(ids).read(), dtype=np.float32).reshape(-1)
        self.llm.reset()
        return out
