"""The pair report: acceptance per d with intervals, the costs and where they come from, the speedup per d with
its spread, and the best d only when one gains beyond the noise. Also its JSON form and its text."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..intervals import Interval, ratio
from . import acceptance
from .costs import Costs, Spread
from .sampling import Sampling


@dataclass(frozen=True)
class DepthReport:
    d: int
    steps: int  # speculative steps whose whole window fits in a continuation (0: d not measurable)
    acceptance_rate: Interval | None  # accepted / proposed draft tokens
    tokens_per_step: Interval | None  # tau: mean tokens per target step, the target's own token included
    tokens_per_step_formula: float  # (1 - alpha^(d+1)) / (1 - alpha)
    tokens_per_step_sampled: float | None  # the same formula with the speculative-sampling acceptance
    verify_seconds: Spread
    speedup_from_measured_tau: (
        Spread | None
    )  # from tau and the costs: median from median costs; low/high from tau's interval
    speedup_from_alpha_formula: float  # from the formula's tokens per step and the median costs


def _speedup(tau: float, d: int, full: float, draft: float, target: float, verify: float, catchup: float) -> float:
    return acceptance.speedup(tau, d, draft, verify, target, full, catchup)


def depth_report(
    d: int, all_runs: list[list[int]], alpha: Interval | None, sampled: Interval | None, costs: Costs
) -> DepthReport:
    steps = [acceptance.simulate(runs, d) for runs in all_runs]
    tau = ratio([s.tokens for s in steps], [s.steps for s in steps])
    rate = ratio([s.accepted for s in steps], [s.proposed for s in steps])
    median = (costs.draft_step.median, costs.target_step.median, costs.verify[d].median, costs.draft_catchup.median)
    formula = acceptance.expected_tokens(alpha.value if alpha else 0.0, d)
    speedup = None
    if tau is not None:
        full = sum(s.full for s in steps) / max(1, sum(s.steps for s in steps))
        per_repeat = [(row[0], row[1], row[2][d], row[3]) for row in costs.repeats]
        speedup = Spread(
            median=_speedup(tau.value, d, full, *median),
            low=min(_speedup(tau.low, d, full, *row) for row in per_repeat),
            high=max(_speedup(tau.high, d, full, *row) for row in per_repeat),
        )
    return DepthReport(
        d=d,
        steps=sum(s.steps for s in steps),
        acceptance_rate=rate,
        tokens_per_step=tau,
        tokens_per_step_formula=formula,
        tokens_per_step_sampled=acceptance.expected_tokens(sampled.value, d) if sampled else None,
        verify_seconds=costs.verify[d],
        speedup_from_measured_tau=speedup,
        speedup_from_alpha_formula=_speedup(formula, d, (alpha.value if alpha else 0.0) ** d, *median),
    )


@dataclass(frozen=True)
class PairReport:
    draft: Path
    target: Path
    prompts: int
    positions: int  # continuation tokens acceptance was measured on (up to the stop token)
    new_tokens: int
    threads: int
    dtype: str
    tokenizer_strings_compared: int
    alpha: Interval  # per-token agreement of the draft's greedy choice with the target's
    sampling: Sampling | None
    sampled_acceptance: Interval | None  # mean sum_x min(p, q) under `sampling`
    costs: Costs
    depths: tuple[DepthReport, ...]
    best_d: int | None  # None: no d gains beyond the noise with these costs
    target_cached: int = 0  # prompts whose target continuation came from the target cache
    draft_files: dict[str, str] = field(default_factory=dict)  # xxh3-128 of the draft's files: a card checks them

    @property
    def recommended_draft_predict_length(self) -> int | None:
        """What config_opencl.json's draft_predict_length may be set to: only from device costs."""
        return self.best_d if self.costs.device else None

    @property
    def verdict(self) -> str:
        where = "the device (" + self.costs.source + ")" if self.costs.device else self.costs.source
        if self.best_d is None:
            return f"no speedup at any d on {where}"
        best = next(d for d in self.depths if d.d == self.best_d)
        speedup = best.speedup_from_measured_tau
        assert speedup is not None
        return (
            f"best d: {self.best_d} (speedup {speedup.median:.2f}x, {speedup.low:.2f}-{speedup.high:.2f}, on {where})"
        )


def as_dict(report: PairReport) -> dict[str, Any]:
    """The `pair --json` document (README: "pair --json")."""
    c = report.costs
    return {
        "draft": str(report.draft),
        "target": str(report.target),
        "prompts": report.prompts,
        "positions": report.positions,
        "new_tokens": report.new_tokens,
        "threads": report.threads,
        "dtype": report.dtype,
        "tokenizer_strings_compared": report.tokenizer_strings_compared,
        "alpha": asdict(report.alpha),
        "sampling": None
        if report.sampling is None
        else {
            **asdict(report.sampling),
            "acceptance": asdict(report.sampled_acceptance) if report.sampled_acceptance else None,
        },
        "costs": {
            "source": c.source,
            "device": c.device,
            "repeats": len(c.repeats),
            "draft_step_s": asdict(c.draft_step),
            "target_step_s": asdict(c.target_step),
            "draft_catchup_s": asdict(c.draft_catchup),
        },
        "depths": [_depth_dict(d) for d in report.depths],
        "best_d": report.best_d,
        "verdict": report.verdict,
        "target_cached_prompts": report.target_cached,
        "recommended_draft_predict_length": report.recommended_draft_predict_length,
        "draft_files_xxh3_128": dict(report.draft_files),
    }


def _depth_dict(depth: DepthReport) -> dict[str, Any]:
    return {
        key: asdict(value) if isinstance(value, (Interval, Spread)) else value for key, value in depth.__dict__.items()
    }


def _interval(value: Interval | None, digits: int = 3) -> str:
    if value is None:
        return "n/a"
    return f"{value.value:.{digits}f} [{value.low:.{digits}f}, {value.high:.{digits}f}]"


def text(report: PairReport) -> str:
    """The human report: portable figures first, then the costs with where they were measured."""
    lines = [
        f"{report.prompts} prompts, {report.positions} target tokens (up to {report.new_tokens} each, stopping "
        f"at end of text); 95% intervals over prompts",
        f"alpha (greedy per-token acceptance): {_interval(report.alpha)}",
    ]
    if report.target_cached:
        lines.append(
            f"the target's continuations of {report.target_cached} of {report.prompts} prompts came from "
            "the target cache (packager cache ls)"
        )
    if report.sampling is not None:
        s = report.sampling
        lines.append(
            f"acceptance under speculative sampling (T {s.temperature:g}, top-k {s.top_k or 'off'}, "
            f"top-p {s.top_p:g}): {_interval(report.sampled_acceptance)}"
        )
    c = report.costs
    repeats = f" (median of {len(c.repeats)} interleaved repeats)" if not c.device else ""
    lines.append(
        f"costs from {c.source}: draft step {c.draft_step.median * 1e3:.2f} ms (catch-up "
        f"{c.draft_catchup.median * 1e3:.2f} ms), target step {c.target_step.median * 1e3:.2f} ms{repeats}"
    )
    sampled_col = "  sampled" if report.sampling is not None else ""
    lines.append(f" d  accept                 tokens/step            formula{sampled_col}  verify ms  speedup (range)")
    for d in report.depths:
        spread = d.speedup_from_measured_tau
        speed = f"{spread.median:.3f} ({spread.low:.3f}-{spread.high:.3f})" if spread else "n/a"
        sampled = f"  {d.tokens_per_step_sampled:7.3f}" if d.tokens_per_step_sampled is not None else ""
        lines.append(
            f"{d.d:2}  {_interval(d.acceptance_rate):21}  {_interval(d.tokens_per_step):21}  "
            f"{d.tokens_per_step_formula:7.3f}{sampled}  {d.verify_seconds.median * 1e3:9.2f}  {speed}"
        )
    lines.append(report.verdict)
    if report.recommended_draft_predict_length is not None:
        lines.append(f"config_opencl.json draft_predict_length: {report.recommended_draft_predict_length}")
    return "\n".join(lines)
