"""Next-token logits of a bundle (MNN runtime) against its source checkpoint (transformers)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import BundleError


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


def load_mnn(bundle: Path, precision: str = "high") -> Any:
    """Load a bundle with MNN.llm and check the C-level result (the Python wrapper's load() hides it)."""
    import MNN.llm as mnn_llm

    llm = mnn_llm.create(str(bundle / "config.json"))
    llm.set_config({"precision": precision})
    if not llm._c_obj.load():
        raise BundleError(f"MNN could not load the bundle {bundle}", "run packager validate on it")
    return llm


def mnn_next_logits(llm: Any, ids: list[int]) -> Any:
    import numpy as np

    logits = np.array(llm.forward(ids).read(), dtype=np.float64).reshape(-1)
    llm.reset()
    return logits


def compare(bundle: Path, checkpoint: Path, prompts: tuple[str, ...]) -> ParityReport:
    """Cosine and top-1 of the last position's logits, MNN vs transformers (float32), per prompt."""
    import numpy as np
    import torch
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM

    tokenizer = Tokenizer.from_file(str(checkpoint / "tokenizer.json"))
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    llm = load_mnn(bundle)
    rows = []
    for prompt in prompts:
        ids = tokenizer.encode(prompt, add_special_tokens=False).ids
        ours = mnn_next_logits(llm, ids)
        with torch.no_grad():
            theirs = model(torch.tensor([ids])).logits[0, -1].double().numpy()
        cosine = float(ours @ theirs / (np.linalg.norm(ours) * np.linalg.norm(theirs)))
        rows.append(PromptParity(prompt=prompt, cosine=cosine, top1_mnn=int(ours.argmax()),
                                 top1_source=int(theirs.argmax())))
    return ParityReport(tuple(rows))
