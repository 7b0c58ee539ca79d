"""Lookahead bundles: the settings MNN's lookahead mode reads, and its corpus, `lookup_file.txt`.

MNN 3.6.1's lookahead (speculative_decoding/lookahead.cpp) needs no weights. At every generate() call it builds an
n-gram table from the prompt and, when `base_dir + lookup_file` opens, from that whole file, read and tokenized
there and then; each step it drafts what followed the longest matching n-gram and verifies the drafts in one
batch. A corpus MNN cannot open is skipped without a word, so packager checks it before it ships and validate
after. Keys longer than 8 tokens write past a fixed array in ngram.hpp (MNN_NGRAM_KEY_MAX; 3.6.1 crashed at 12).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import CorpusNotText, CorpusUnusable, shorten
from ..infra.hashing import xxh3_128_bytes
from .kinds import LOOKUP

# MNN 3.6.1's defaults (llmconfig.hpp), written out so the card, validate and a reader see them.
SETTINGS: dict[str, Any] = {
    "speculative_type": "lookahead",
    "draft_predict_length": 3,
    "draft_match_strictness": "low",
    "draft_selection_rule": "freqxlen",
    "ngram_match_maxlen": 4,
    "ngram_update": False,
}
TUNABLES = (
    "draft_predict_length",
    "draft_match_strictness",
    "draft_selection_rule",
    "ngram_match_maxlen",
    "ngram_update",
)
MAX_CORPUS = 8 << 20  # MNN tokenizes it at every generate(): 8 MiB took 2.4 s, 1 MiB 0.4 s (x86 core, 3.6.1)
WARN_CORPUS = 1 << 20
MIB = 1 << 20


@dataclass(frozen=True)
class Corpus:
    path: Path  # as given
    data: bytes  # what was checked is what ships: read once
    digest: str  # xxh3-128

    @property
    def size(self) -> int:
        return len(self.data)


@dataclass(frozen=True)
class Lookahead:
    """A bundle configured for lookahead: MNN's settings (its defaults unless set) and the corpus, if any."""

    corpus: Corpus | None = None
    settings: dict[str, Any] = field(default_factory=lambda: dict(SETTINGS))

    def keys(self) -> dict[str, Any]:
        """What config.json gets: the settings, and lookup_file only when the bundle carries a corpus."""
        return {**self.settings, **({"lookup_file": LOOKUP} if self.corpus is not None else {})}

    def record(self) -> dict[str, Any]:
        """For provenance: the settings and the corpus's size and digest."""
        corpus = (
            None
            if self.corpus is None
            else {
                "path": str(self.corpus.path),
                "file": LOOKUP,
                "bytes": self.corpus.size,
                "xxh3_128": self.corpus.digest,
            }
        )
        return {"settings": {k: self.settings[k] for k in TUNABLES}, "corpus": corpus}

    def warnings(self) -> tuple[str, ...]:
        if self.corpus is None or self.corpus.size <= WARN_CORPUS:
            return ()
        return (
            f"the lookahead corpus is {self.corpus.size / MIB:.1f} MiB: MNN tokenizes all of it at every "
            "generate() call (1 MiB took 0.4 s on a desktop core before the first token)",
        )


def settings(overrides: dict[str, Any], draft_length: int | None = None) -> dict[str, Any]:
    """MNN's defaults, then the tunables of the spec's [runtime.main], then --lookahead-length."""
    chosen = {**SETTINGS, **{k: overrides[k] for k in TUNABLES if k in overrides}}
    return {**chosen, **({"draft_predict_length": draft_length} if draft_length is not None else {})}


def read_corpus(path: Path, out: Path) -> Corpus:
    """The corpus's bytes, refused in one line when MNN could not use them or packager must not read them.

    A symbolic link is followed (the bundle gets a regular file with the bytes); what it points at is judged."""
    shown = shorten(str(path), 120)
    try:
        real = Path(os.path.realpath(path))
        mode = os.stat(real).st_mode
    except FileNotFoundError:
        raise CorpusUnusable(f"lookahead corpus {shown} does not exist") from None
    except (OSError, ValueError) as exc:
        raise CorpusUnusable(f"lookahead corpus {shown} cannot be read ({_reason(exc)})") from None
    if stat.S_ISDIR(mode):
        raise CorpusUnusable(
            f"lookahead corpus {shown} is a folder, not a text file",
            "--lookahead takes the word after it as its corpus: write --lookahead=CORPUS, or put "
            "--lookahead after CHECKPOINT",
        )
    if not stat.S_ISREG(mode):
        raise CorpusUnusable(f"lookahead corpus {shown} is a device, pipe or socket, not a regular file")
    out_real = Path(os.path.realpath(out))
    if real.is_relative_to(out_real):
        where = "is" if real == out_real else "lies inside"
        raise CorpusUnusable(
            f"lookahead corpus {shown} {where} --out {shorten(str(out), 120)}, which the conversion replaces",
            "keep the corpus outside the bundle folder",
        )
    data = _read(real, shown)
    problem = text_problem(data)
    if problem:
        raise CorpusNotText(f"lookahead corpus {shown} {problem}")
    return Corpus(path=path, data=data, digest=xxh3_128_bytes(data))


def _read(real: Path, shown: str) -> bytes:
    try:
        with open(real, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):  # replaced since it was judged
                raise CorpusUnusable(f"lookahead corpus {shown} is not a regular file")
            return handle.read(MAX_CORPUS + 1)
    except OSError as exc:
        raise CorpusUnusable(f"lookahead corpus {shown} cannot be read ({_reason(exc)})") from None


def _reason(exc: Exception) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)


def text_problem(data: bytes) -> str | None:
    """Why MNN could not use these bytes as a corpus (or None): empty, too large, NUL bytes, not UTF-8."""
    if len(data) > MAX_CORPUS:
        return (
            f"is larger than {MAX_CORPUS // MIB} MiB; MNN tokenizes all of it at every generate() call "
            "(8 MiB took 2.4 s on a desktop core)"
        )
    if not data.strip():
        return "is empty" if not data else "holds only whitespace"
    if (nul := data.find(b"\0")) >= 0:
        return f"holds a NUL byte at byte {nul}: it is binary, not text"
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"is not UTF-8 text ({exc.reason} at byte {exc.start})"
    return None
