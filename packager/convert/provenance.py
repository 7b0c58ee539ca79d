"""Provenance of a conversion: tool and library versions, source digests, options. Kept outside the bundle."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .. import __version__
from ..bundle.engine import EngineRequirement
from ..bundle.staging import write_atomic
from ..errors import InputTooLarge, PackagerError, ProvenanceUnusable, shorten
from ..infra.hashing import xxh3_128_file
from .inspect.checkpoint import (
    DERIVABLE_TOKENIZER_FILES,
    MODEL_FILES,
    OPTIONAL_TOKENIZER_FILES,
    TOKENIZER_FILES,
    CheckpointInfo,
)
from .inspect.lora import ADAPTER_FILES, AdapterInfo
from .plan import Conversion
from .tokenizer import TokenizerChoice


def _sources(folder: Path, names: tuple[str, ...], patterns: tuple[str, ...] = ()) -> dict[str, str]:
    """xxh3-128 of the files a conversion reads from `folder`: the named ones present, and pattern matches."""
    found = {folder / name for name in names} | {p for pattern in patterns for p in folder.glob(pattern)}
    return {p.name: xxh3_128_file(p) for p in sorted(found) if p.is_file()}


def checkpoint_sources(folder: Path) -> dict[str, str]:
    names = (*MODEL_FILES, *TOKENIZER_FILES, *DERIVABLE_TOKENIZER_FILES, *OPTIONAL_TOKENIZER_FILES)
    return _sources(folder, names, ("*.safetensors",))


@dataclass(frozen=True)
class InputDigests:
    """xxh3-128 of every file the conversion reads from the checkpoint and the adapter folders."""

    checkpoint: dict[str, str]
    adapter: dict[str, str] | None


def input_digests(info: CheckpointInfo, adapter: AdapterInfo | None) -> InputDigests:
    """Hashed while the converter runs (1.2 GB of a 0.6B's weights took 0.3-0.6 s at the end of a conversion)."""
    return InputDigests(checkpoint_sources(info.path), _sources(adapter.path, ADAPTER_FILES) if adapter else None)


@dataclass(frozen=True)
class Made:
    """What the converter and the assembly made of a conversion, as provenance records it."""

    engine: EngineRequirement
    tokenizer: TokenizerChoice
    digests: dict[str, str]
    versions: dict[str, str]
    graph_uuid: str
    blocked: tuple[str, ...]
    inputs: InputDigests
    path: str = "reference"  # how the weights were made: "streamed" or "reference"
    faithfulness: Any = None  # the exported EAGLE-3 head against the checkpoint's
    dflash_check: Any = None  # the exported DFlash draft against the torch reference (dflash.faithful)


def build(conversion: Conversion, made: Made) -> dict[str, Any]:
    info, adapter, head, faithfulness = conversion.info, conversion.adapter, conversion.head, made.faithfulness
    kind, spec, target, recipe = conversion.kind.name, conversion.request.spec, conversion.goal, conversion.recipe
    bits, block, engine, tokenizer, inputs = recipe.bits, recipe.block, made.engine, made.tokenizer, made.inputs
    lookahead = conversion.mode.record() if conversion.mode else None
    extra: dict[str, Any] = {} if kind == "draft" else {"kind": kind}  # a draft's record stays what it was
    if lookahead is not None:  # its settings, and the corpus's size and xxh3-128 (lookahead.Lookahead.record)
        extra["lookahead"] = lookahead
    if head is not None:
        extra["eagle_head"] = {
            "path": str(head.path),
            "weights": head.weights.name,
            "dtype": head.dtype,
            "rope_theta": head.rope_theta,
            **({"rope_scaling": head.rope_scaling} if head.rope_scaling else {}),
            "draft_vocab_size": head.draft_vocab_size,
            "aux_layers": list(head.aux_layers),
            "files_xxh3_128": {p.name: xxh3_128_file(p) for p in (head.path / "config.json", head.weights)},
        }
        if faithfulness is not None:
            extra["eagle_head"]["check"] = {
                "positions": faithfulness.positions,
                "state_error": round(faithfulness.hidden_error, 5),
                "logprob_error": round(faithfulness.logprob_error, 5),
                "top1_agreement": round(faithfulness.top1_agreement, 4),
                "state_error_at_theta_10000": None
                if faithfulness.other_theta_error is None
                else round(faithfulness.other_theta_error, 5),
            }
    draft = conversion.dflash
    if draft is not None:
        extra["dflash_draft"] = {
            "path": str(draft.path),
            "dtype": draft.dtype,
            "rope_theta": draft.rope_theta,
            **({"rope_scaling": draft.rope_scaling} if draft.rope_scaling else {}),
            "block_size": draft.block_size,
            "mask_token_id": draft.mask_token_id,
            "target_layer_ids": list(draft.target_layer_ids),
            "layers": draft.num_layers,
            "files_xxh3_128": {p.name: xxh3_128_file(p) for p in (draft.path / "config.json", draft.weights)},
        }
        if made.dflash_check is not None:
            found = made.dflash_check
            extra["dflash_draft"]["check"] = {
                "positions": found.positions,
                "min_cosine": round(found.min_cosine, 5),
                "top1_agreement": round(found.top1_agreement, 4),
                "context_error": round(found.context_error, 7),
                "target_state_error": round(found.state_error, 5),
                "target_state_margin": round(found.state_margin, 3),
            }
    return {
        **extra,
        "tool": {"name": "packager", "version": __version__},
        "versions": made.versions,
        "source": {
            "path": str(info.path),
            "model_type": info.model_type,
            "shape": asdict(info.shape),
            "dtype": info.dtype,
            "files_xxh3_128": inputs.checkpoint,
        },
        "adapter": None
        if adapter is None
        else {
            "path": str(adapter.path),
            "rank": adapter.rank,
            "alpha": adapter.alpha,
            "target_modules": list(adapter.target_modules),
            "base_model": adapter.base_model,
            "files_xxh3_128": inputs.adapter,
        },
        "options": {
            "quant_bits": bits,
            "quant_block": block,
            "spec": str(spec.path) if spec and spec.path else None,
            "weights": made.path,
            "quant_recipe": recipe.record(),
            # Only for convert --engine: the default (newest) keeps the record it always had.
            **(
                {}
                if target.default
                else {
                    "engine": {
                        "requested": target.requested,
                        "version": target.text,
                        "converter_flags": list(target.converter_flags),
                    }
                }
            ),
        },
        "min_mnn_engine": {"version": engine.text, "because": list(engine.reasons)},
        "tokenizer": {
            "format": tokenizer.format,
            "reason": tokenizer.reason,
            "stop_ids": list(info.stop_ids),
            "agreement": {
                a.format: {
                    "matched": a.matched,
                    "total": a.total,
                    "rate": round(a.rate, 4),
                    "mismatched": list(a.mismatched),
                }
                for a in tokenizer.agreements
            },
        },
        "graph_uuid": made.graph_uuid,
        "bundle_xxh3_128": made.digests,
        "sandbox_blocked": list(made.blocked),
    }


def write(path: Path, record: dict[str, Any]) -> None:
    write_atomic(path, (json.dumps(record, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))


def read(path: Path, error: type[PackagerError] = ProvenanceUnusable) -> dict[str, Any]:
    """A provenance record: a JSON object of at most REPORT_BYTES (a device or a sparse file is read no further:
    InputTooLarge); `error` names the file and what else is wrong with it."""
    from ..infra.jsonfile import read_json
    from ..infra.userfile import REPORT_BYTES

    what = "provenance record"
    record = read_json(path, error, REPORT_BYTES, what, too_large=InputTooLarge)
    if not isinstance(record, dict):
        raise error(f"{what} {shorten(str(path), 120)} is not a JSON object")
    return record


def provenance_path(out: Path) -> Path:
    """Provenance sits beside the bundle, so the bundle folder stays exactly ten files."""
    return out.with_name(out.name + ".provenance.json")
