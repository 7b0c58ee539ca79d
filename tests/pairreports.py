"""Pair reports for the card and release tests, written by pair's own serializer with chosen figures."""

from __future__ import annotations

import json
from pathlib import Path

from packager.measure.digests import measured_digests
from packager.measure.intervals import Interval
from packager.measure.pair.costs import Costs, Spread
from packager.measure.pair.report import DepthReport, PairReport, as_dict
from packager.measure.pair.sampling import Sampling


def pair_report(
    path: Path,
    draft: Path,
    alpha: float = 0.62,
    tau3: float = 2.31,
    sampled: float | None = 0.71,
    recommended: int | None = None,
    target: str = "Qwen--Qwen3-8B",
) -> Path:
    """A pair report written by pair's own serializer (so its format is the real one), with chosen figures, whose
    draft was the bundle `draft` (its files' digests)."""
    spread = Spread.exact(0.01)
    taus = {d: 1 + (tau3 - 1) * d / 3 for d in range(1, 7)}  # tau grows with d, tau3 at d=3
    depths = tuple(
        DepthReport(
            d=d,
            steps=100,
            acceptance_rate=Interval(alpha, alpha - 0.05, alpha + 0.05),
            tokens_per_step=Interval(taus[d], taus[d] - 0.1, taus[d] + 0.1),
            tokens_per_step_formula=2.0,
            tokens_per_step_sampled=None,
            verify_seconds=spread,
            speedup_from_measured_tau=Spread(1.2, 1.1, 1.3),
            speedup_from_alpha_formula=1.2,
        )
        for d in range(1, 7)
    )
    costs = Costs(
        source="--costs phone.json" if recommended else "this CPU (test, 2 threads)",
        device=recommended is not None,
        draft_step=spread,
        target_step=spread,
        verify=dict.fromkeys(range(1, 7), spread),
        repeats=((0.01, 0.01, dict.fromkeys(range(1, 7), 0.01), 0.01),),
        draft_catchup=spread,
    )
    report = PairReport(
        draft=Path("/x/draft"),
        target=Path(f"/x/hub/models--{target}/snapshots/0123abcd"),  # a Hugging Face cache path: its Hub id
        prompts=54,
        positions=1728,
        new_tokens=32,
        threads=2,
        dtype="stored",
        tokenizer_strings_compared=100,
        alpha=Interval(alpha, alpha - 0.03, alpha + 0.03),
        sampling=Sampling(0.7, 20, 0.8) if sampled is not None else None,
        sampled_acceptance=Interval(sampled, sampled - 0.04, sampled + 0.04) if sampled else None,
        costs=costs,
        depths=depths,
        best_d=recommended,
        draft_files=measured_digests(draft),
    )
    path.write_text(json.dumps(as_dict(report)))
    return path
