"""A real greedy speculative-decoding loop over two models with KV caches, and its autoregressive baseline.

The loop runs on transformers checkpoints (HFModel) or MNN bundles (MNNModel, whose cache MNN rolls back with
erase_history), in any mix, through one small interface: `start` a cache, `step` tokens on top of it (the argmax
after each), `keep` a prefix of it. Lossless: the tokens equal the target's own greedy continuation (the tests
check it, and that each step accepts what the estimate's arithmetic counts). bench/mnn_loop_bench.py and
bench/speculative_bench.py compare `pair`'s estimate with the loop's wall time.
"""

from __future__ import annotations

import time
from typing import Any, Protocol


class Stepper(Protocol):
    def start(self, ids: list[int]) -> int: ...
    def step(self, tokens: list[int], every: bool) -> list[int]: ...
    def keep(self, length: int) -> None: ...


def autoregressive(
    target: Any, ids: list[int], n: int, stop: tuple[int, ...] = (), clock: list[float] | None = None
) -> list[int]:
    """The target's greedy continuation, one cached step per token (ends after a stop id). `clock`, when given,
    receives the seconds spent decoding (after the prompt's prefill)."""
    model: Stepper = target
    model.start(ids[:-1])
    began = time.perf_counter()
    pending, out = ids[-1], list[int]()
    while len(out) < n and not (out and out[-1] in stop):
        pending = model.step([pending], every=False)[-1]
        out.append(pending)
    if clock is not None:
        clock.append(time.perf_counter() - began)
    return out


def speculative(
    draft: Any,
    target: Any,
    ids: list[int],
    n: int,
    d: int,
    accepted: list[int] | None = None,
    stop: tuple[int, ...] = (),
    clock: list[float] | None = None,
) -> list[int]:
    """Greedy speculative decoding with draft length d. Both caches cover the sequence but its last token
    (`pending`), which each step feeds first. After a full acceptance the draft has not seen its own last
    proposal yet; it gets it in the same forward. `accepted`, when given, receives how many draft tokens each
    step accepted; `clock` the seconds spent decoding (after both prefills)."""
    small: Stepper = draft
    big: Stepper = target
    small.start(ids[:-1])
    big.start(ids[:-1])
    began = time.perf_counter()
    base, pending, out = len(ids) - 1, ids[-1], list[int]()
    draft_feed = [pending]
    while len(out) < n and not (out and out[-1] in stop):  # accepted proposals never hold a stop id
        proposals: list[int] = []
        for _ in range(d):
            proposals.append(small.step(draft_feed, every=False)[-1])
            draft_feed = proposals[-1:]
        checked = big.step([pending, *proposals], every=True)
        k = 0
        while k < d and proposals[k] == checked[k] and proposals[k] not in stop:
            k += 1
        out += proposals[:k] + [checked[k]]
        if accepted is not None:
            accepted.append(k)
        base += k + 1
        pending = checked[k]
        big.keep(base)
        small.keep(base)
        draft_feed = [proposals[-1], pending] if k == d else [pending]
    if clock is not None:
        clock.append(time.perf_counter() - began)
    return out[:n]


def timed(action, repeats: int = 3) -> tuple[float, list[int]]:
    best, result = float("inf"), []
    for _ in range(repeats):
        start = time.perf_counter()
        result = action()
        best = min(best, time.perf_counter() - start)
    return best, result
