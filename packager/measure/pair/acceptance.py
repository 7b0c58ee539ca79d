"""Greedy acceptance arithmetic: from one teacher-forced draft pass to alpha, accepted length and speedup.

With greedy drafting and greedy verification every accepted token is the target's own greedy token, so the
context at each step is always a prefix of the target's greedy continuation. The draft's proposal from
position i therefore matches the target for exactly as many tokens as the draft's teacher-forced argmax
agrees with the target's tokens from i on: one draft forward over prompt + continuation gives every step.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_D = 6


def match_runs(draft_argmax: list[int], target: list[int], cap: int = MAX_D) -> list[int]:
    """m[i]: how many draft tokens proposed at continuation position i the target would accept (<= cap)."""
    agree = [a == b for a, b in zip(draft_argmax, target, strict=True)]
    runs = [0] * (len(agree) + 1)
    for i in range(len(agree) - 1, -1, -1):
        runs[i] = runs[i + 1] + 1 if agree[i] else 0
    return [min(r, cap) for r in runs[:-1]]


@dataclass(frozen=True)
class Steps:
    steps: int
    accepted: int
    proposed: int
    tokens: int
    full: int  # steps that accepted all d proposals


def accepted_per_step(runs: list[int], d: int) -> list[int]:
    """Walk the continuation as the speculative loop does: each step accepts min(run, d) and the target
    adds one token of its own (the correction, or the bonus token after a full acceptance). Only steps whose
    whole window fits in the continuation count, so the tail does not bias the figures."""
    position, taken = 0, []
    while position + d + 1 <= len(runs):
        taken.append(min(runs[position], d))
        position += taken[-1] + 1
    return taken


def simulate(runs: list[int], d: int) -> Steps:
    taken = accepted_per_step(runs, d)
    return Steps(
        steps=len(taken),
        accepted=sum(taken),
        proposed=len(taken) * d,
        tokens=sum(taken) + len(taken),
        full=sum(1 for k in taken if k == d),
    )


def expected_tokens(alpha: float, d: int) -> float:
    """The standard formula (Leviathan et al. 2023): E[tokens per step] = (1 - alpha^(d+1)) / (1 - alpha)."""
    if alpha >= 1.0:
        return d + 1.0
    return (1 - alpha ** (d + 1)) / (1 - alpha)


def speedup(
    tokens_per_step: float,
    d: int,
    draft_step: float,
    verify: float,
    target_step: float,
    full: float = 0.0,
    catchup: float | None = None,
) -> float:
    """Time per token without a draft over time per token with it. A step costs d draft forwards and one
    verification; in the fraction `full` of steps that accept all d proposals, one of the draft's forwards is
    the two-token catch-up (its last proposal and the bonus token), costing `catchup` instead of a step."""
    extra = full * ((draft_step if catchup is None else catchup) - draft_step)
    return tokens_per_step * target_step / (d * draft_step + extra + verify)
