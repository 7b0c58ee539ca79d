"""What MNN 3.6.1's own record of a generation says about its steps (one target forward each).

- eagle (speculative_decoding/eagle.cpp): the first token comes from the prefill's logits; every step then
  verifies a drafted chain in one forward and accepts one or more tokens. When it ends on a stop token or at
  max_new_tokens the engine appends its step count to `output_tokens` (not to `history_tokens`), so
  output_tokens = [first, accepted..., steps].
- lookahead (lookahead.cpp): a step starts from the current token, appends that token's text, and only that
  token's, to `generate_str`, then verifies the n-gram drafts after it in one forward; accepted drafts go to the
  token lists but not to generate_str. So the steps are the segments of the generated tokens whose first tokens'
  texts concatenate to generate_str, each at most draft_predict_length + 1 long. The engine exposes no counter;
  where two segmentations fit (tokens whose texts concatenate alike), the count is given as a range.
- plain decoding: one token per forward; generate_str holds every token's text but the stop token's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Steps:
    tokens: int  # tokens emitted by the steps
    low: int  # fewest steps consistent with the engine's record
    high: int  # most steps (equal to low when the record fixes the count)

    @property
    def exact(self) -> bool:
        return self.low == self.high


class StepsUnreadable(ValueError):
    """The engine's record does not have the shape this module reads (another engine version, or an error)."""


def eagle_steps(output_tokens: Sequence[int], generated: Sequence[int], depth: int) -> Steps:
    """Steps of an EAGLE generation: output_tokens must be the generated tokens plus the step count."""
    if len(output_tokens) != len(generated) + 1 or list(output_tokens[:-1]) != list(generated):
        raise StepsUnreadable("output_tokens is not the generated tokens followed by a step count")
    steps, accepted = int(output_tokens[-1]), len(generated) - 1
    if not 1 <= steps <= accepted or accepted > steps * (depth + 1):
        raise StepsUnreadable(f"a step count of {steps} cannot have accepted {accepted} tokens at depth {depth}")
    return Steps(accepted, steps, steps)


def dflash_steps(stepwise: Sequence[int], bounds: Sequence[int], generated: Sequence[int]) -> Steps:
    """Steps of a DFlash generation from the engine run one step a call (Engine.stepwise: its tokens and their
    count after each step). The first token is the prefill's, every other one came from a step. Where the
    step-by-step run leaves the uninterrupted one (a near-tie the re-fed token's arithmetic tips), the steps are
    counted up to the last one that ended before it."""
    at = next((i for i, (a, b) in enumerate(zip(stepwise, generated)) if a != b), None)
    if at is None and len(stepwise) != len(generated):
        at = min(len(stepwise), len(generated))
    kept = [b for b in bounds if at is None or b <= at]
    if not kept or kept[-1] <= 1:
        raise StepsUnreadable(
            "nothing was generated after the prefill's token"
            if at is None
            else f"run one step a call, the engine's tokens left its uninterrupted run's at token {at}"
        )
    return Steps(kept[-1] - 1, len(kept), len(kept))


def lookahead_steps(
    generated: Sequence[int],
    generate_str: str,
    text: Callable[[int], str],
    longest: int,
    stops: frozenset[int] = frozenset(),
) -> Steps:
    """Steps of a lookahead generation, from the segmentation of `generated` that generate_str allows."""
    tokens = list(generated)
    if tokens and tokens[-1] in stops:
        tokens = tokens[:-1]  # the stop token is pushed after the last step, its text never written
    if not tokens:
        raise StepsUnreadable("nothing was generated")
    pieces = [text(token) for token in tokens]
    # states[i]: for each offset of generate_str that tokens[:i] can spell (the texts of its segments' first
    # tokens), the fewest and most segments doing so.
    states: list[dict[int, tuple[int, int]]] = [{0: (0, 0)}] + [{} for _ in tokens]
    for start, piece in enumerate(pieces):
        for offset, (low, high) in states[start].items():
            if not generate_str.startswith(piece, offset):
                continue
            for end in range(start + 1, min(start + longest, len(tokens)) + 1):
                was = states[end].get(offset + len(piece))
                states[end][offset + len(piece)] = (
                    (low + 1, high + 1) if was is None else (min(was[0], low + 1), max(was[1], high + 1))
                )
    final = states[-1].get(len(generate_str))
    if final is None:
        raise StepsUnreadable("no segmentation of the tokens spells the engine's generate_str")
    return Steps(len(tokens), *final)


def first_divergence(a: Sequence[int], b: Sequence[int], stops: frozenset[int]) -> int | None:
    """The first position where two greedy generations differ, each cut after its first stop token; None when
    one is a prefix of the other (the shorter reached max_new_tokens first)."""
    a, b = _cut(a, stops), _cut(b, stops)
    for index, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return index
    return None


def _cut(tokens: Sequence[int], stops: frozenset[int]) -> list[int]:
    for index, token in enumerate(tokens):
        if token in stops:
            return list(tokens[: index + 1])
    return list(tokens)
