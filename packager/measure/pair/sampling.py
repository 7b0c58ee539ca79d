"""Acceptance under speculative sampling (Leviathan et al. 2023; Chen et al. 2023): a draft token x ~ q is kept
with probability min(1, p(x)/q(x)), so a position accepts with probability sum_x min(p(x), q(x)), where p and q
are the target's and the draft's distributions after the same temperature, top-k and top-p."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import InvalidOption


@dataclass(frozen=True)
class Sampling:
    temperature: float = 1.0
    top_k: int = 0  # 0: off
    top_p: float = 1.0  # 1: off

    def __post_init__(self) -> None:
        if not self.temperature > 0:
            raise InvalidOption(
                f"--temperature {self.temperature} must be above 0", "greedy is the default (no sampling options)"
            )
        if self.top_k < 0:
            raise InvalidOption(
                f"--top-k {self.top_k} must be 0 (off) or more",
                "use 0 (off) or the family's advice (the bundle card's Sampling line)",
            )
        if not 0 < self.top_p <= 1:
            raise InvalidOption(
                f"--top-p {self.top_p} must be in (0, 1]",
                "use 1 (off) or the family's advice (the bundle card's Sampling line)",
            )

    def distribution(self, logits: np.ndarray) -> np.ndarray:
        """Temperature, then top-k, then top-p (the order transformers' and MNN's samplers use), renormalized."""
        scaled = np.asarray(logits, dtype=np.float64) / self.temperature
        if 0 < self.top_k < scaled.shape[-1]:
            cut = np.partition(scaled, -self.top_k)[-self.top_k]
            scaled = np.where(scaled >= cut, scaled, -np.inf)
        probs = np.exp(scaled - scaled.max())
        probs /= probs.sum()
        if self.top_p < 1:
            order = np.argsort(-probs, kind="stable")
            before = np.cumsum(probs[order]) - probs[order]  # mass of the more likely tokens
            probs[order[before >= self.top_p]] = 0.0  # keep the smallest head reaching top_p (at least one)
            probs /= probs.sum()
        return probs


def acceptance(settings: Sampling, target_logits: np.ndarray, draft_logits: np.ndarray) -> np.ndarray:
    """Per position (row), the probability that speculative sampling accepts the draft's token."""
    return np.array(
        [
            np.minimum(settings.distribution(t), settings.distribution(d)).sum()
            for t, d in zip(target_logits, draft_logits, strict=True)
        ]
    )
