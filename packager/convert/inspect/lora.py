"""LoRA adapters: check one against its base before any work, and merge it (inside the converter worker)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import AdapterMismatch, shorten
from ...infra.jsonfile import read_json
from . import safetensors_header
from .checkpoint import CheckpointInfo

_LORA_KEY = re.compile(r"^(?:base_model\.model\.)?(?P<module>.+)\.lora_(?P<part>[AB])(?:\.default)?\.weight$")
# A whole trained module (peft's modules_to_save) is stored under its base name.
_SAVED_KEY = re.compile(
    r"^(?:base_model\.model\.)?(?P<name>.+?)(?:\.modules_to_save\.default)?(?P<leaf>\.weight|\.bias)$"
)
EMBED, LM_HEAD = "model.embed_tokens.weight", "lm_head.weight"
# The adapter files a conversion reads (provenance hashes these).
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")


@dataclass(frozen=True)
class AdapterInfo:
    path: Path
    rank: int
    alpha: float
    target_modules: tuple[str, ...]
    base_model: str
    weight_file: Path
    modules: int
    saved_modules: tuple[str, ...] = ()


def inspect_adapter(path: Path, base: CheckpointInfo) -> AdapterInfo:
    """Check that a peft LoRA adapter fits `base`: every adapted module exists there with matching shapes."""
    if not path.is_dir():
        raise AdapterMismatch(f"LoRA adapter {path} is not a folder", "pass the folder peft's save_pretrained wrote")
    config_path = path / "adapter_config.json"
    if not config_path.is_file():
        raise AdapterMismatch(f"{path} has no adapter_config.json", "pass the folder peft's save_pretrained wrote")
    config: dict[str, Any] = read_json(config_path, AdapterMismatch)
    if not isinstance(config, dict):
        raise AdapterMismatch(f"{config_path} is not a JSON object")
    if str(config.get("peft_type", "LORA")).upper() != "LORA":
        raise AdapterMismatch(f"{config_path} is a {shorten(str(config.get('peft_type')))} adapter, not LoRA")
    weight_file = path / "adapter_model.safetensors"
    if not weight_file.is_file():
        raise AdapterMismatch(f"{path} has no adapter_model.safetensors")
    tensors = safetensors_header.tensor_shapes(weight_file)
    rank = config.get("r") or 0
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 0:
        raise AdapterMismatch(f"{config_path}: r must be a positive integer, found {shorten(repr(rank))}")
    modules = _check_pairs(tensors, base, rank)
    saved = _check_saved_modules(tensors, base, weight_file)
    targets = config.get("target_modules") or []
    alpha = config.get("lora_alpha") or rank
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool):
        raise AdapterMismatch(f"{config_path}: lora_alpha must be a number, found {shorten(repr(alpha))}")
    return AdapterInfo(
        path=path.resolve(),
        rank=rank,
        alpha=float(alpha),
        target_modules=tuple(sorted(map(str, targets if isinstance(targets, list) else [targets]))),
        base_model=str(config.get("base_model_name_or_path") or ""),
        weight_file=weight_file,
        modules=modules,
        saved_modules=saved,
    )


def _check_saved_modules(
    tensors: dict[str, tuple[int, ...]], base: CheckpointInfo, weight_file: Path
) -> tuple[str, ...]:
    """Whole modules the adapter replaces (modules_to_save): each must fit the base, and the tied table must stay tied.

    The ten-file bundle has one table that is both the input embedding and lm_head, so an adapter may
    replace it only by replacing both with the same values.
    """
    saved: dict[str, tuple[int, ...]] = {}
    for key, shape in tensors.items():
        match = _SAVED_KEY.match(key)
        if ".lora_" in key or not match:
            continue
        name = match["name"] + match["leaf"]
        if name == LM_HEAD:
            saved[name] = shape
            continue
        if base.tensor_shapes.get(name) != shape:
            raise AdapterMismatch(
                f"the adapter replaces {shorten(name)} with shape {list(shape)}, which the base "
                + ("does not have" if name not in base.tensor_shapes else f"has as {list(base.tensor_shapes[name])}")
            )
        saved[name] = shape
    table = {EMBED, LM_HEAD} & set(saved)
    if table and not _tied(table, saved, weight_file, base):
        which = " and ".join(sorted(table))
        raise AdapterMismatch(
            f"the adapter replaces {which} (modules_to_save) so the output layer no longer equals the tied "
            "embedding table, which the ten-file bundle stores once for both",
            "train with the embeddings and lm_head frozen (no modules_to_save for them), or save both as one tied "
            "table",
        )
    return tuple(sorted(saved))


def _tied(table: set[str], saved: dict[str, tuple[int, ...]], weight_file: Path, base: CheckpointInfo) -> bool:
    if table != {EMBED, LM_HEAD} or saved[LM_HEAD] != base.tensor_shapes.get(EMBED):
        return False
    from safetensors import safe_open

    keys = {}
    with safe_open(str(weight_file), "numpy") as handle:
        for key in handle.keys():  # noqa: SIM118 - safe_open is not iterable
            match = _SAVED_KEY.match(key)
            if match and ".lora_" not in key and match["name"] + match["leaf"] in table:
                keys[match["name"] + match["leaf"]] = key
        return bool((handle.get_tensor(keys[EMBED]) == handle.get_tensor(keys[LM_HEAD])).all())


def other_base_warning(adapter: AdapterInfo, base: CheckpointInfo) -> str | None:
    """A warning when the adapter's config names a base model that is not recognisably this checkpoint."""
    named = adapter.base_model.strip().rstrip("/")
    if not named:
        return None
    ours = {base.path.name.lower(), str(base.path).lower()}
    for part in base.path.parts:  # a Hugging Face cache snapshot: .../models--org--name/snapshots/<rev>
        if part.startswith("models--"):
            ours |= {part[len("models--") :].replace("--", "/").lower(), part.split("--")[-1].lower()}
    candidates = {named.lower(), named.lower().split("/")[-1]}
    local = Path(named).expanduser()
    if local.is_absolute() or local.exists():
        try:
            candidates.add(str(local.resolve()).lower())
        except OSError:
            pass
    if candidates & ours:
        return None
    return (
        f"the adapter says it was trained on {shorten(named, 120)!r}, which is not {base.path}; "
        "check that you pass the adapter's own base model"
    )


def _check_pairs(tensors: dict[str, tuple[int, ...]], base: CheckpointInfo, rank: int) -> int:
    pairs: dict[str, dict[str, tuple[int, ...]]] = {}
    for key, shape in tensors.items():
        match = _LORA_KEY.match(key)
        if match:
            pairs.setdefault(match["module"], {})[match["part"]] = shape
    if not pairs:
        raise AdapterMismatch("the adapter holds no LoRA weights (no *.lora_A/lora_B tensors)")
    for module, parts in sorted(pairs.items()):
        base_shape = base.tensor_shapes.get(f"{module}.weight")
        if base_shape is None:
            raise AdapterMismatch(f"the adapter adapts {module}, which the base checkpoint does not have")
        if set(parts) != {"A", "B"}:
            raise AdapterMismatch(f"the adapter's {module} lacks lora_{'A' if 'A' not in parts else 'B'}")
        out_features, in_features = base_shape
        a, b = parts["A"], parts["B"]
        if a[1] != in_features or b[0] != out_features or a[0] != b[1] or (rank and a[0] != rank):
            raise AdapterMismatch(
                f"the adapter's {module} has lora_A {list(a)} and lora_B {list(b)}, which do "
                f"not fit the base weight {list(base_shape)} (rank {rank})"
            )
    return len(pairs)


def merge(base_dir: Path, adapter_dir: Path, out_dir: Path) -> None:
    """Merge the adapter into the base weights with peft and save a plain checkpoint (float32 kept exact)."""
    import shutil

    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    merged = PeftModel.from_pretrained(model, adapter_dir).merge_and_unload()
    merged.save_pretrained(out_dir, safe_serialization=True)
    for item in base_dir.iterdir():
        if (
            item.is_file()
            and not item.name.endswith(".safetensors")
            and item.name not in {"config.json", "model.safetensors.index.json"}
        ):
            shutil.copy2(item, out_dir / item.name)
