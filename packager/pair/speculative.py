"""A real greedy speculative-decoding loop over two transformers models with KV caches, and its AR baseline.

Lossless: the tokens equal the target's own greedy continuation (the tests check it, and that each step accepts
what the estimate's arithmetic says). bench/speculative_bench.py compares the estimate with its wall time.
"""

from __future__ import annotations

import time

from .models import HFModel


def autoregressive(target: HFModel, ids: list[int], n: int) -> list[int]:
    logits, cache = target.prefill(ids[:-1])
    pending, out = ids[-1], []
    while len(out) < n:
        pending = int(target.extend(cache, [pending], last_only=True)[-1].argmax())
        out.append(pending)
    return out


def speculative(draft: HFModel, target: HFModel, ids: list[int], n: int, d: int,
                accepted: list[int] | None = None) -> list[int]:
    """Both caches cover the sequence but its last token (`pending`), which each step feeds first. After a
    full acceptance the draft has not seen its own last proposal yet; it gets it in the same forward.
    `accepted`, when given, receives how many draft tokens each step accepted."""
    _, d_cache = draft.prefill(ids[:-1])
    _, t_cache = target.prefill(ids[:-1])
    base, pending, out = len(ids) - 1, ids[-1], []
    draft_feed = [pending]
    while len(out) < n:
        proposals = []
        for _ in range(d):
            proposals.append(int(draft.extend(d_cache, draft_feed, last_only=True)[-1].argmax()))
            draft_feed = proposals[-1:]
        checked = target.extend(t_cache, [pending, *proposals]).argmax(-1).tolist()
        k = 0
        while k < d and proposals[k] == checked[k]:
            k += 1
        out += proposals[:k] + [checked[k]]
        if accepted is not None:
            accepted.append(k)
        base += k + 1
        pending = checked[k]
        _keep(t_cache, base)
        _keep(d_cache, base)
        draft_feed = [proposals[-1], pending] if k == d else [pending]
    return out[:n]


def _keep(cache, length: int) -> None:  # type: ignore[no-untyped-def]
    """Drop the cached positions of rejected tokens (transformers 5 crops by a negative count)."""
    extra = cache.get_seq_length() - length
    if extra > 0:
        cache.crop(-extra)


def timed(action, repeats: int = 3) -> tuple[float, list[int]]:  # type: ignore[no-untyped-def]
    best, result = float("inf"), []
    for _ in range(repeats):
        start = time.perf_counter()
        result = action()
        best = min(best, time.perf_counter() - start)
    return best, result
