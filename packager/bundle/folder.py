"""What an MNN model folder states about its embedding and vocabulary, read one way wherever packager reads a
folder it did not make (pair, verify, validate, card).

A folder can state its vocabulary in three places, and an app's copy often lacks the first: the graph
description (`llm.mnn.json`, the lm_head's output width), the tied embedding's declaration in
`llm_config.json` (`tie_embeddings`: the list form of 5 or 6 entries or the object form engines 3.6.0+ write;
its weight span is vocab x hidden x bits / 8), and an embeddings file (`embeddings_bf16.bin`: vocab x hidden x
2 bytes; `embeddings_int8/int4.bin`: the quantized table a `tie_embeddings` with weight offset 0 describes).
Every place that states it must agree; MNN's runtime (diskembedding.cpp) reads the same numbers."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

TIE_KEYS = ("weight_offset", "alpha_offset", "alpha_size", "quant_bit", "quant_block")
ALPHA_BYTES = {"fp32": 4, "fp16": 2}


class FolderConflict(ValueError):
    """The folder's files state different things (or one states something impossible)."""


@dataclass(frozen=True)
class TiedEmbedding:
    """`tie_embeddings` in whichever form it was written."""

    weight_offset: int
    alpha_offset: int
    alpha_size: int
    bits: int
    block: int
    alpha_bytes: int  # 4 (fp32 alphas) or 2 (fp16: the list's sixth entry 1, or alpha_dtype "fp16")
    form: str  # "list5", "list6" or "object"

    @property
    def in_weight_file(self) -> bool:
        """Offset 0 means the table is an embeddings file of its own (untied, quantized embeddings)."""
        return self.weight_offset != 0


def tied_embedding(value: Any) -> TiedEmbedding | None:
    """None when absent; FolderConflict naming what is wrong when present but malformed."""
    if value is None:
        return None
    if isinstance(value, list):
        if len(value) not in (5, 6) or not all(_is_int(v) for v in value):
            raise FolderConflict(
                f"llm_config.json tie_embeddings is a list of {len(value)} entries; MNN reads 5 "
                "integers (offset, alpha offset, alpha size, bits, block) and an optional sixth"
            )
        alpha = 2 if len(value) == 6 and value[5] == 1 else 4
        numbers, form = value[:5], f"list{len(value)}"
    elif isinstance(value, dict):
        missing = [k for k in TIE_KEYS if not _is_int(value.get(k))]
        dtype = value.get("alpha_dtype", "fp32")
        if missing or dtype not in ALPHA_BYTES:
            what = f"lacks integer {', '.join(missing)}" if missing else f"has alpha_dtype {str(dtype)[:40]!r}"
            raise FolderConflict(f"llm_config.json tie_embeddings {what}")
        numbers, alpha, form = [value[k] for k in TIE_KEYS], ALPHA_BYTES[dtype], "object"
    else:
        raise FolderConflict(f"llm_config.json tie_embeddings is a {type(value).__name__}, not a list or object")
    weight, alpha_offset, alpha_size, bits, block = (int(v) for v in numbers)
    if bits not in (4, 8, 16) or min(weight, alpha_offset, alpha_size, block) < 0 or alpha_offset < weight:
        raise FolderConflict(
            f"llm_config.json tie_embeddings {list(numbers)} is impossible (bits must be 4, 8 or 16; "
            "offsets and sizes non-negative, the alphas after the weights)"
        )
    return TiedEmbedding(weight, alpha_offset, alpha_size, bits, block, alpha, form)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _tie_vocabulary(tie: TiedEmbedding, hidden: int) -> int | None:
    """The rows the weight span holds, checked against the alphas' size; None for a 16-bit table (no alphas)."""
    if tie.bits == 16:
        return None
    span_bits = (tie.alpha_offset - tie.weight_offset) * 8
    if span_bits % (tie.bits * hidden):
        raise FolderConflict(
            f"llm_config.json tie_embeddings spans {tie.alpha_offset - tie.weight_offset} bytes, "
            f"not a whole number of {hidden}-wide {tie.bits}-bit rows"
        )
    vocab = span_bits // (tie.bits * hidden)
    blocks = hidden // tie.block if tie.block else 1
    fits = [vocab * blocks * pairs * tie.alpha_bytes for pairs in (1, 2)]  # symmetric, asymmetric
    if tie.alpha_size not in fits:
        raise FolderConflict(
            f"llm_config.json tie_embeddings alpha size {tie.alpha_size} does not fit its "
            f"{vocab} rows of {blocks} blocks (expected {fits[0]} or {fits[1]})"
        )
    return vocab


def embeddings_file(folder: Path, config: dict[str, Any], tie: TiedEmbedding | None) -> Path:
    """The embeddings file MNN opens for this folder (config.json's `embedding_file`, else the default; a
    quantized table declared with offset 0 is the int file llmexport writes when config.json names none)."""
    named = config.get("embedding_file")
    if isinstance(named, str) and named:
        return folder / named
    if tie is not None and not tie.in_weight_file and tie.bits != 16:
        quantized = folder / f"embeddings_int{tie.bits}.bin"
        if quantized.is_file():
            return quantized
    return folder / "embeddings_bf16.bin"


def vocabulary(folder: Path, llm_config: dict[str, Any], config: dict[str, Any], graph_vocab: int | None = None) -> int:
    """The vocabulary every statement in the folder agrees on; 0 when none states it (checked after loading);
    FolderConflict when two disagree. `graph_vocab` is the lm_head width of llm.mnn.json when the caller read it."""
    stated = llm_config.get("hidden_size")
    hidden = stated if isinstance(stated, int) and not isinstance(stated, bool) and stated > 0 else 0
    tie = tied_embedding(llm_config.get("tie_embeddings"))
    said: list[tuple[str, int]] = []
    if graph_vocab:
        said.append(("llm.mnn.json (lm_head)", graph_vocab))
    if tie is not None and hidden and (rows := _tie_vocabulary(tie, hidden)) is not None:
        said.append(("llm_config.json tie_embeddings", rows))
    table = embeddings_file(folder, config, tie)
    if hidden and table.is_file():
        said += _file_statement(table, hidden, tie)
    distinct = sorted({n for _, n in said})
    if len(distinct) > 1:
        raise FolderConflict(
            "the folder's files disagree on the vocabulary: " + ", ".join(f"{where} says {n}" for where, n in said)
        )
    return distinct[0] if distinct else 0


def _file_statement(table: Path, hidden: int, tie: TiedEmbedding | None) -> list[tuple[str, int]]:
    size = table.stat().st_size
    if tie is not None and not tie.in_weight_file and tie.bits != 16:  # the quantized table lives in this file
        end = tie.alpha_offset + tie.alpha_size
        if size < end:
            raise FolderConflict(f"{table.name} has {size} bytes; tie_embeddings reads up to byte {end}")
        return []  # its rows are the tie's, already stated
    if tie is not None and tie.in_weight_file:
        return []  # tied: MNN never opens the file
    if size % (2 * hidden):
        raise FolderConflict(f"{table.name} has {size} bytes, not a whole number of {hidden}-wide bf16 rows")
    return [(table.name, size // (2 * hidden))]
