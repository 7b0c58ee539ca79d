"""tokenizer.txt: measure each candidate format against the HF tokenizer, pick one (its header: bundle)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..bundle.engine import Version
from ..bundle.tokenizer_txt import MIN_ENGINE, TokenizerFormat
from ..infra import heap


@dataclass(frozen=True)
class Agreement:
    format: TokenizerFormat
    matched: int
    total: int
    mismatched: tuple[str, ...]

    @property
    def rate(self) -> float:
        return self.matched / self.total if self.total else 0.0


@dataclass(frozen=True)
class TokenizerChoice:
    format: TokenizerFormat
    agreements: tuple[Agreement, ...]
    reason: str

    @property
    def chosen(self) -> Agreement:
        return next(a for a in self.agreements if a.format == self.format)


def hf_encodings(tokenizer_json: Path, corpus: tuple[str, ...]) -> list[list[int]]:
    """The reference ids from the Hugging Face `tokenizers` library: the text's ids after the prefix MNN puts
    before every encode (a BOS where the tokenizer adds one, as Llama 3's does; none for Qwen)."""
    from tokenizers import Tokenizer

    from ..runtime.models import prefix_ids

    tokenizer = Tokenizer.from_file(str(tokenizer_json))
    prefix = prefix_ids(tokenizer)
    ids = [prefix + tokenizer.encode(text, add_special_tokens=False).ids for text in corpus]
    del tokenizer
    heap.give_back()
    return ids


def agreement(
    fmt: TokenizerFormat, mnn: list[list[int]], reference: list[list[int]], corpus: tuple[str, ...]
) -> Agreement:
    mismatched = tuple(text for text, a, b in zip(corpus, mnn, reference, strict=True) if a != b)
    return Agreement(format=fmt, matched=len(corpus) - len(mismatched), total=len(corpus), mismatched=mismatched)


def choose(agreements: tuple[Agreement, ...], engine: Version) -> TokenizerChoice:
    """The best-agreeing format the bundle's engine can read; on a tie, the one older engines read too."""
    usable = [a for a in agreements if MIN_ENGINE[a.format] <= engine]
    if not usable:
        raise ValueError("no tokenizer format is readable by the bundle's engine")
    best = max(usable, key=lambda a: (a.matched, tuple(-p for p in MIN_ENGINE[a.format])))
    others = ", ".join(f"{a.format} {a.matched}/{a.total}" for a in agreements)
    return TokenizerChoice(
        format=best.format,
        agreements=agreements,
        reason=f"best agreement with the HF tokenizer for engine >= {engine} ({others})",
    )
