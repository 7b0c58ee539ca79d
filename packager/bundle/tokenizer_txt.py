"""tokenizer.txt's header: the three text lines every MNN tokenizer file starts with (type, special, stop and
prefix ids), and the formats MNN reads."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from .engine import Version, parse_version

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
    return TokenizerHeader(
        type=kind,
        special=tuple(ids[:special]),
        stop=tuple(ids[special : special + stop]),
        prefix=tuple(ids[special + stop :]),
    )
