"""tokenizer.txt: read its header, measure each candidate format against the HF tokenizer, pick one."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..infra import heap
from ..bundle.engine import Version, parse_version

TokenizerFormat = Literal["text", "pipeline"]
MAGIC = 430
# Header type number -> our name; the runtime picks the parser from line 1, not from the file name.
TYPES: dict[int, str] = {0: "sentencepiece", 1: "tiktoken", 2: "bert", 3: "text", 4: "pipeline"}
# The oldest engine that reads each format: PIPELINE (.mtok) arrived in MNN 3.5.0.
MIN_ENGINE: dict[TokenizerFormat, Version] = {"text": parse_version("3.0.0"), "pipeline": parse_version("3.5.0")}


@dataclass(frozen=True)
class TokenizerHeader:
    type: int
    special: tuple[int, ...]
    stop: tuple[int, ...]
    prefix: tuple[int, ...]


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


class HeaderError(ValueError):
    pass


def read_header(path: Path) -> TokenizerHeader:
    """Parse the three text lines every MNN tokenizer file starts with."""
    with open(path, "rb") as handle:
        lines = [handle.readline() for _ in range(3)]
    try:
        magic, kind = (int(x) for x in lines[0].split())
        counts = [int(x) for x in lines[1].split()]
        ids = [int(x) for x in lines[2].split()]
    except ValueError:
        raise HeaderError("the first three lines are not the MNN tokenizer header") from None
    if magic != MAGIC or kind not in TYPES:
        raise HeaderError(f"line 1 is {lines[0].strip().decode(errors='replace')!r}, expected '430 <type 0-4>'")
    if len(counts) != 3 or sum(counts) != len(ids):
        raise HeaderError(f"line 2 announces {sum(counts)} ids but line 3 holds {len(ids)}")
    special, stop = counts[0], counts[1]
    return TokenizerHeader(type=kind, special=tuple(ids[:special]), stop=tuple(ids[special:special + stop]),
                           prefix=tuple(ids[special + stop:]))


def hf_encodings(tokenizer_json: Path, corpus: tuple[str, ...]) -> list[list[int]]:
    """The reference ids from the Hugging Face `tokenizers` library, without added BOS/EOS."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_json))
    ids = [tokenizer.encode(text, add_special_tokens=False).ids for text in corpus]
    del tokenizer
    heap.give_back()
    return ids


def agreement(fmt: TokenizerFormat, mnn: list[list[int]], reference: list[list[int]],
              corpus: tuple[str, ...]) -> Agreement:
    mismatched = tuple(text for text, a, b in zip(corpus, mnn, reference, strict=True) if a != b)
    return Agreement(format=fmt, matched=len(corpus) - len(mismatched), total=len(corpus), mismatched=mismatched)


def choose(agreements: tuple[Agreement, ...], engine: Version) -> TokenizerChoice:
    """The best-agreeing format the bundle's engine can read; on a tie, the one older engines read too."""
    usable = [a for a in agreements if MIN_ENGINE[a.format] <= engine]
    if not usable:
        raise ValueError("no tokenizer format is readable by the bundle's engine")
    best = max(usable, key=lambda a: (a.matched, tuple(-p for p in MIN_ENGINE[a.format])))
    others = ", ".join(f"{a.format} {a.matched}/{a.total}" for a in agreements)
    return TokenizerChoice(format=best.format, agreements=agreements,
                           reason=f"best agreement with the HF tokenizer for engine >= {engine} ({others})")
