"""What the parent asks of the converter worker and what it gets back, each serialising itself (one carrier: a
field is declared once, and JSON is made and read from the declaration)."""

from __future__ import annotations

import json
import types
import typing
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Union


@dataclass(frozen=True)
class WorkerJob:
    source: Path
    adapter: Path | None
    workdir: Path
    quant_bits: int
    quant_block: int
    stop_ids: tuple[int, ...]
    corpus: tuple[str, ...]
    family: str  # the family's name: the worker looks its facts up (packager.families.BY_NAME)
    graph_only: bool = False
    graph_dtype: str = "float32"  # the dtype the real path loads the model in (the checkpoint's, float32 after a merge)
    equal_tensors: tuple[tuple[str, int], ...] = ()  # tensor name -> equality class of its values
    fuse_c4: bool = True  # MNNConvert's FuseTransformerC4 pass (graphs it touches first run in MNN 3.6.1)
    symmetric: bool = False
    hqq: bool = False
    lm_bits: int | None = None  # None: quant_bits
    lm_block: int | None = None  # None: quant_block
    # More recipes exported from the same loaded model (whole-model path only): each a dict of name, quant_bits,
    # quant_block, symmetric, hqq, lm_bits, lm_block.
    also: tuple[dict[str, Any], ...] = ()
    eagle: Path | None = None  # an EAGLE-3 head exported with the target (llmexport --eagle_path)
    eagle_rope_theta: float | None = None  # the head's own rope theta (llmexport hard-codes 10000)
    eagle_rope_scaling: dict[str, Any] | None = None  # the head's scaled rope, None for plain rope
    # The target layers whose outputs a DFlash draft reads: the graph's hidden_states output becomes them.
    dflash_layers: tuple[int, ...] = ()
    # The torch patches (packager.convert.fence.patches, by name) the family declares for this checkpoint's config.
    patches: tuple[str, ...] = ()
    # Special tokens at ids past the model's rows, left out of the tokenizer llmexport reads: MNN would otherwise
    # encode their text to an id it has no embedding row for.
    left_out_tokens: tuple[str, ...] = ()

    def to_json(self) -> str:
        return to_json(self)

    @classmethod
    def from_json(cls, text: str) -> WorkerJob:
        return from_json(cls, text)


@dataclass(frozen=True)
class WorkerResult:
    """What the worker made, sent back as its `done` event (to_plain) and read by the parent (from_plain), which
    adds what the fence blocked and the log."""

    export_dir: Path
    tokenizers: dict[str, Path]  # tokenizer.txt candidates by format
    encodings: dict[str, list[list[int]]]  # MNN's ids for the corpus with each candidate
    versions: dict[str, str]
    blocked: tuple[str, ...] = ()
    log: Path | None = None
    also: dict[str, Path] = field(default_factory=dict)  # the `also` recipes' export folders, by name

    def to_plain(self) -> dict[str, Any]:
        return to_plain(self)

    @classmethod
    def from_plain(cls, data: dict[str, Any]) -> WorkerResult:
        return from_plain(cls, data)


def to_plain(value: Any) -> dict[str, Any]:
    """A dataclass of plain values (paths, tuples, dicts, numbers, strings, None) as a JSON-ready dict."""
    return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}


def from_plain(cls: type[Any], data: dict[str, Any]) -> Any:
    """The dataclass `cls` from to_plain's dict, each field turned back into its declared type."""
    hints = typing.get_type_hints(cls)
    return cls(**{f.name: _typed(hints[f.name], data[f.name]) for f in fields(cls) if f.name in data})


def to_json(value: Any) -> str:
    return json.dumps(to_plain(value))


def from_json(cls: type[Any], text: str) -> Any:
    return from_plain(cls, json.loads(text))


def _plain(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _typed(hint: Any, value: Any) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if value is None:
        return None
    if origin in (Union, types.UnionType):
        return _typed(next(a for a in args if a is not type(None)), value)
    if hint is Path:
        return Path(value)
    if origin is tuple:
        items = args[:1] * len(value) if len(args) == 2 and args[1] is Ellipsis else args
        return tuple(_typed(h, v) for h, v in zip(items, value, strict=True))
    if origin is dict:
        return {k: _typed(args[1], v) for k, v in value.items()}
    return value
