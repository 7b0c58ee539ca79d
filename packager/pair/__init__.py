"""`pair`: is DRAFT a useful draft for TARGET? Compatibility first, then greedy acceptance, costs, speedup."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable


from .. import resources
from . import acceptance, compat
from .models import Model, load

Progress = Callable[[str], None]


@dataclass(frozen=True)
class DepthReport:
    d: int
    acceptance_rate: float  # accepted / proposed
    mean_accepted_length: float  # tokens per step, the target's own token included
    verify_seconds: float
    expected_tokens: float  # the standard formula with alpha
    speedup_measured_alpha: float  # from mean_accepted_length
    speedup_formula: float  # from expected_tokens


@dataclass(frozen=True)
class PairReport:
    draft: Path
    target: Path
    prompts: int
    new_tokens: int
    tokenizer_strings_compared: int
    alpha: float  # per-token agreement of the draft's greedy choice with the target's
    draft_step_seconds: float
    target_step_seconds: float
    depths: tuple[DepthReport, ...]

    @property
    def best(self) -> DepthReport:
        return max(self.depths, key=lambda r: r.speedup_measured_alpha)


def runs_for(draft: Model, target: Model, prompt_ids: list[int], new_tokens: int) -> tuple[list[int], list[int]]:
    """The target's greedy continuation and, for each of its positions, how many draft tokens it accepts."""
    continuation = target.greedy(prompt_ids, new_tokens)
    logits = draft.logits_all(prompt_ids + continuation)
    start = len(prompt_ids) - 1
    draft_argmax = [int(logits[start + i].argmax()) for i in range(len(continuation))]
    return continuation, acceptance.match_runs(draft_argmax, continuation)


def pair(draft_path: Path, target_path: Path, prompts: tuple[str, ...] | None = None, new_tokens: int = 32,
         max_d: int = acceptance.MAX_D, repeats: int = 5, progress: Progress = lambda _: None) -> PairReport:
    draft_facts, target_facts = compat.facts(draft_path), compat.facts(target_path)
    compat.check_files(draft_facts, target_facts)  # refused here, before any model is loaded
    progress("loading both models")
    draft, target = load(draft_path), load(target_path)
    compared = compat.check_tokenizers(draft, target, draft_facts, target_facts)
    prompts = prompts or resources.parity_prompts()
    progress(f"measuring greedy acceptance on {len(prompts)} prompts x {new_tokens} tokens")
    all_runs, agree, total, context = [], 0, 0, None
    for prompt in prompts:
        ids = target.encode(prompt)
        continuation, runs = runs_for(draft, target, ids, new_tokens)
        all_runs.append(runs)
        agree += sum(1 for r in runs if r > 0)
        total += len(runs)
        context = context or (ids + continuation)
    alpha = agree / total if total else 0.0
    progress("timing a draft step, a target step and the verifications")
    assert context is not None
    ctx, probe = context[:-max_d - 1], context[-max_d - 1:]
    draft_step = draft.time_forward(ctx, probe[:1], repeats)
    target_step = target.time_forward(ctx, probe[:1], repeats)
    depths = []
    for d in range(1, max_d + 1):
        steps = [acceptance.simulate(runs, d) for runs in all_runs]
        taken = sum(s.steps for s in steps)
        tau = sum(s.tokens for s in steps) / taken if taken else 1.0
        rate = sum(s.accepted for s in steps) / max(1, sum(s.proposed for s in steps))
        verify = target.time_forward(ctx, probe[: d + 1], repeats)
        expected = acceptance.expected_tokens(alpha, d)
        depths.append(DepthReport(
            d=d, acceptance_rate=rate, mean_accepted_length=tau, verify_seconds=verify, expected_tokens=expected,
            speedup_measured_alpha=acceptance.speedup(tau, d, draft_step, verify, target_step),
            speedup_formula=acceptance.speedup(expected, d, draft_step, verify, target_step)))
    return PairReport(draft=draft_path, target=target_path, prompts=len(prompts), new_tokens=new_tokens,
                      tokenizer_strings_compared=compared, alpha=alpha, draft_step_seconds=draft_step,
                      target_step_seconds=target_step, depths=tuple(depths))


__all__ = ["DepthReport", "PairReport", "pair"]
