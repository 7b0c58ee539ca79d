"""Model families: the facts of each family packager converts, one module each (a leaf: imports nothing else of
packager). `of_checkpoint` and `of_bundle` are the only places a model_type is looked at."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import Family, Layout, License, UnknownFamily, find, rope_type, shown
from .llama3 import LLAMA3
from .qwen2 import QWEN2
from .qwen3 import QWEN3
from .smollm2 import SMOLLM2

FAMILIES: tuple[Family, ...] = (QWEN3, QWEN2, LLAMA3, SMOLLM2)
BY_NAME = {f.name: f for f in FAMILIES}

# What packager says of the model types people try that it does not convert, and why.
REFUSED = {
    "qwen3_moe": "a mixture-of-experts model",
    "qwen2_moe": "a mixture-of-experts model",
    "qwen3_5": "Qwen3.5, which uses linear attention: MNN cannot roll rejected draft tokens back",
    "qwen3_5_text": "Qwen3.5, which uses linear attention: MNN cannot roll rejected draft tokens back",
    "qwen3_5_moe": "Qwen3.5 MoE, which uses linear attention: MNN cannot roll rejected draft tokens back",
    "qwen3_next": "Qwen3-Next, which uses linear attention: MNN cannot roll rejected draft tokens back",
    "lfm2": "LFM2, whose short convolutions are linear attention to MNN: rejected draft tokens are not rolled back",
    "mixtral": "a mixture-of-experts model",
    "llama4": "Llama 4, a mixture-of-experts model",
}

__all__ = [
    "BY_NAME",
    "FAMILIES",
    "REFUSED",
    "Family",
    "Layout",
    "License",
    "UnknownFamily",
    "of_bundle",
    "of_checkpoint",
    "rope_type",
    "shown",
    "supported",
]


def of_checkpoint(config: Mapping[str, Any], vocabulary: Mapping[str, int], where: str) -> Family:
    """The family of a checkpoint, from its config.json and its tokenizer's vocabulary (token text -> id);
    UnknownFamily (one line naming what was found) for anything packager does not convert, or converts under
    other facts."""
    model_type = str(config.get("model_type") or "")
    if model_type in REFUSED:
        raise UnknownFamily(f"{where} has model_type {shown(model_type)}: {REFUSED[model_type]}")
    if not model_type:
        raise UnknownFamily(f"{where} names no model_type")
    family = find(FAMILIES, model_type, vocabulary, where)
    rope = rope_type(config)
    if rope not in family.rope_types:
        raise UnknownFamily(
            f"{where} asks for rope_type {shown(rope, 40)}, which packager does not convert for {family.title} "
            f"(it converts {', '.join(family.rope_types)})"
        )
    return family


def of_bundle(llm_config: Mapping[str, Any], where: str = "llm_config.json") -> Family:
    """The family of an MNN bundle, from its llm_config.json (model_type, and the bos/eos tokens llmexport
    copies into its `jinja` block)."""
    found = llm_config.get("jinja")
    jinja: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    tokens = {str(v) for k, v in jinja.items() if k in ("bos", "eos") and v}
    # A bundle names only its bos and eos, not its whole vocabulary: a family is known when its end of turn or
    # its BOS is among them (the markers proper are checked when the checkpoint is converted).
    model_type = str(llm_config.get("model_type") or "")
    candidates = [
        f
        for f in FAMILIES
        if model_type in f.model_types and (f.stop_tokens[0] in tokens or (f.bos_token and f.bos_token in tokens))
    ]
    if len(candidates) == 1:
        return candidates[0]
    if model_type in REFUSED:
        raise UnknownFamily(f"{where} has model_type {shown(model_type)}: {REFUSED[model_type]}")
    if not any(model_type in f.model_types for f in FAMILIES):
        raise UnknownFamily(f"{where} has model_type {shown(model_type)}")
    named = shown(" and ".join(sorted(tokens)), 80) if tokens else "none"
    raise UnknownFamily(f"{where} has model_type {shown(model_type)} with bos/eos tokens {named}: no family matches")


def supported() -> str:
    """One line for messages: the families packager converts."""
    return ", ".join(f"{f.title} ({'/'.join(f.model_types)})" for f in FAMILIES)
