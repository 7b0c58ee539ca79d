"""95% bootstrap intervals over prompts: resample the prompts (fixed seed), recompute the ratio of sums."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

RESAMPLES = 1000
SEED = 0


@dataclass(frozen=True)
class Interval:
    value: float
    low: float
    high: float


def ratio(numerators: list[float], denominators: list[float]) -> Interval | None:
    """sum(numerators) / sum(denominators), with the 2.5 and 97.5 percentiles over resampled prompts; None
    when nothing was counted."""
    num, den = np.asarray(numerators, dtype=np.float64), np.asarray(denominators, dtype=np.float64)
    if den.sum() <= 0:
        return None
    picks = np.random.default_rng(SEED).integers(0, len(num), size=(RESAMPLES, len(num)))
    sums = den[picks].sum(axis=1)
    values = num[picks].sum(axis=1)[sums > 0] / sums[sums > 0]
    low, high = np.percentile(values, [2.5, 97.5])
    return Interval(float(num.sum() / den.sum()), float(low), float(high))
