"""Test helper: next-token logits of a bundle (MNN runtime) against its source checkpoint (transformers), last
position. Not part of packager: verify is the command that judges a bundle against its source."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packager.runtime.models import HFModel, MNNModel


@dataclass(frozen=True)
class PromptParity:
    prompt: str
    cosine: float
    top1_mnn: int
    top1_source: int

    @property
    def same_top1(self) -> bool:
        return self.top1_mnn == self.top1_source


@dataclass(frozen=True)
class ParityReport:
    prompts: tuple[PromptParity, ...]

    @property
    def min_cosine(self) -> float:
        return min(p.cosine for p in self.prompts)

    @property
    def mean_cosine(self) -> float:
        return sum(p.cosine for p in self.prompts) / len(self.prompts)

    @property
    def top1_agreement(self) -> float:
        return sum(p.same_top1 for p in self.prompts) / len(self.prompts)


def load_mnn(bundle: Path) -> Any:
    """The bundle's MNN.llm object in THIS process, loaded with the C-level result checked (the wrapper's
    load() hides it). For tests that need the raw object; commands use the child process (MNNModel)."""
    from packager.runtime.mnn import MNNRuntime

    return MNNRuntime(bundle).llm


def compare(bundle: Path, checkpoint: Path, prompts: tuple[str, ...]) -> ParityReport:
    """Cosine and top-1 of the last position's logits, MNN vs transformers (float32), per prompt."""
    from packager.measure.logits import compare_positions

    ours, theirs = MNNModel(bundle), HFModel(checkpoint)
    rows = []
    for prompt in prompts:
        ids = theirs.encode(prompt)
        a, b = ours.logits_all(ids)[-1:], theirs.logits_all(ids)[-1:]
        _, (cosine,), _ = compare_positions(a, b)
        rows.append(
            PromptParity(prompt=prompt, cosine=cosine, top1_mnn=int(a[0].argmax()), top1_source=int(b[0].argmax()))
        )
    return ParityReport(tuple(rows))
