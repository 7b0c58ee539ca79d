"""What a checkpoint and its LoRA adapter already state, for the release spec `packager init` writes."""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

from ...convert import recipe
from ...convert.inspect.checkpoint import inspect_checkpoint
from ...convert.inspect.lora import inspect_adapter
from ...errors import InvalidCheckpointConfig
from ...families import Family
from ...infra.jsonfile import read_json

# A Hub id as people write it: namespace/name (a local path that happens to look like one is not taken).
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class Facts:
    base_model: str | None  # a Hub id, when the checkpoint or the adapter names one
    parameters: str  # as people say it: 0.6B, 41M
    parameter_count: int
    architecture: str
    layers: int
    hidden_size: int
    family: Family  # its license, tags, base models and targets fill the spec
    lora_r: int | None = None
    lora_alpha: float | None = None
    base_named_by: str | None = None  # which file named the base model
    # The recipe convert takes for this checkpoint when the spec says nothing: the family's bits, the largest block
    # of 128, 64 and 32 that divides its input sizes (SmolLM2-135M: 8-bit, block 64).
    quant_bits: int = recipe.DEFAULT_BITS
    quant_block: int = recipe.DEFAULT_BLOCK


def gather(checkpoint: Path, adapter: Path | None) -> Facts:
    """Inspect (the same checks as convert, no weights loaded) and read off the facts."""
    _refuse_a_dflash_draft(checkpoint)
    info = inspect_checkpoint(checkpoint)
    lora = inspect_adapter(adapter, info) if adapter is not None else None
    count = sum(math.prod(shape) for name, shape in info.tensor_shapes.items() if name != "lm_head.weight")
    named: list[tuple[str | None, str]] = [(lora.base_model, "adapter_config.json")] if lora else []
    named += [(_config_name(info.path), "config.json"), (_cache_name(info.path), "the Hugging Face cache path")]
    base = next(((value, where) for value, where in named if value and _is_hub_id(value)), (None, None))
    return Facts(
        base_model=base[0],
        base_named_by=base[1],
        parameters=say_parameters(count),
        parameter_count=count,
        architecture=f"{info.family.title} (dense, {_attention(info.family.layer_types)})",
        layers=info.shape.num_layers,
        hidden_size=info.shape.hidden_size,
        family=info.family,
        lora_r=lora.rank if lora else None,
        lora_alpha=lora.alpha if lora else None,
        **recipe.defaults(info.family.default_bits, info.shape),
    )


def _attention(layer_types: tuple[str, ...]) -> str:
    return "sliding-window and global attention" if "sliding_attention" in layer_types else "full attention"


def say_parameters(count: int) -> str:
    """0.6B, 1.7B, 4B for the usual sizes (tied embeddings counted once), 41M below 100 million."""
    if count >= 100_000_000:
        return f"{count / 1e9:.2g}B"
    return f"{max(1, round(count / 1e6))}M"


def _refuse_a_dflash_draft(checkpoint: Path) -> None:
    """A DFlash draft (z-lab's DFlashDraftModel) is no draft bundle of its own: it ships inside its target's
    bundle (target+dflash), so a release starts from the target and names the draft."""
    from ...errors import UnsupportedModel

    path = checkpoint / "config.json"
    try:
        config = read_json(path, UnsupportedModel) if path.is_file() else None
    except UnsupportedModel:
        return  # inspect_checkpoint says what is wrong with it
    if isinstance(config, dict) and (
        "DFlashDraftModel" in (config.get("architectures") or []) or isinstance(config.get("dflash_config"), dict)
    ):
        raise UnsupportedModel(
            f"{str(checkpoint)[:120]} is a DFlash draft (z-lab's DFlashDraftModel), which ships inside its target's "
            "bundle (kind target+dflash), not as a release of its own",
            "start from the target (packager init DIR --checkpoint TARGET), then set "
            f'dflash = "{str(checkpoint)[:120]}" under [convert] in release.toml (as packager convert TARGET --dflash '
            "DRAFT)",
        )


def _config_name(folder: Path) -> str | None:
    try:
        config = read_json(folder / "config.json", InvalidCheckpointConfig)
    except InvalidCheckpointConfig:
        return None
    value = config.get("_name_or_path") if isinstance(config, dict) else None
    return value if isinstance(value, str) else None


def _cache_name(folder: Path) -> str | None:
    """huggingface_hub's cache keeps a snapshot under .../models--org--name/snapshots/<revision>."""
    for part in reversed(folder.resolve().parts):
        if part.startswith("models--") and part.count("--") >= 2:
            return part[len("models--") :].replace("--", "/", 1)
    return None


def _is_hub_id(value: str) -> bool:
    return bool(_HUB_ID.match(value)) and not os.path.isabs(value) and not os.path.exists(value)
