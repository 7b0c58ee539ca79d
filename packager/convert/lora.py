"""LoRA adapters: check one against its base before any work, and merge it (inside the converter worker)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import AdapterMismatch
from . import safetensors_header
from .checkpoint import CheckpointInfo, read_json

_LORA_KEY = re.compile(r"^(?:base_model\.model\.)?(?P<module>.+)\.lora_(?P<part>[AB])(?:\.default)?\.weight$")


@dataclass(frozen=True)
class AdapterInfo:
    path: Path
    rank: int
    alpha: float
    target_modules: tuple[str, ...]
    base_model: str
    weight_file: Path
    modules: int


def inspect_adapter(path: Path, base: CheckpointInfo) -> AdapterInfo:
    """Check that a peft LoRA adapter fits `base`: every adapted module exists there with matching shapes."""
    if not path.is_dir():
        raise AdapterMismatch(f"LoRA adapter {path} is not a folder", "pass the folder peft's save_pretrained wrote")
    config_path = path / "adapter_config.json"
    if not config_path.is_file():
        raise AdapterMismatch(f"{path} has no adapter_config.json", "pass the folder peft's save_pretrained wrote")
    config: dict[str, Any] = read_json(config_path, AdapterMismatch)
    if str(config.get("peft_type", "LORA")).upper() != "LORA":
        raise AdapterMismatch(f"{config_path} is a {config.get('peft_type')} adapter, not LoRA")
    weight_file = path / "adapter_model.safetensors"
    if not weight_file.is_file():
        raise AdapterMismatch(f"{path} has no adapter_model.safetensors")
    tensors = safetensors_header.tensor_shapes(weight_file)
    rank = int(config.get("r") or 0)
    modules = _check_pairs(tensors, base, rank)
    targets = config.get("target_modules") or []
    return AdapterInfo(path=path.resolve(), rank=rank, alpha=float(config.get("lora_alpha") or rank),
                       target_modules=tuple(sorted(targets if isinstance(targets, list) else [targets])),
                       base_model=str(config.get("base_model_name_or_path") or ""),
                       weight_file=weight_file, modules=modules)


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
            raise AdapterMismatch(f"the adapter's {module} has lora_A {list(a)} and lora_B {list(b)}, which do "
                                  f"not fit the base weight {list(base_shape)} (rank {rank})")
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
        if item.is_file() and not item.name.endswith(".safetensors") and item.name not in {
                "config.json", "model.safetensors.index.json"}:
            shutil.copy2(item, out_dir / item.name)
