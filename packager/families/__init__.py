"""Model families: the facts of each family packager converts, one module each (a leaf: imports nothing else of
packager). `of_checkpoint` and `of_bundle` are the only places a model_type is looked at."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import (
    Family,
    Layout,
    License,
    UnknownFamily,
    exact_positions,
    find,
    per_layer_type_rope,
    rope_type,
    rope_types,
    shown,
)
from .configkeys import ROLES, ConfigKey, Finding, findings
from .gemma3 import GEMMA3
from .llama3 import LLAMA3
from .phi3 import PHI3
from .qwen2 import QWEN2
from .qwen3 import QWEN3
from .smollm2 import SMOLLM2

FAMILIES: tuple[Family, ...] = (QWEN3, QWEN2, LLAMA3, SMOLLM2, GEMMA3, PHI3)
BY_NAME = {f.name: f for f in FAMILIES}

# The first MNN release that rolls linear-attention state back when draft tokens are rejected; None: none yet.
# MNN 3.6.1's CPULinearAttention restores only a snapshot taken after the prompt, or zeroes the state, and nothing
# stops speculation on such a graph; tests/test_linear_attention.py runs MNN's own speculative decoding on a tiny
# LFM2 and shows it diverge from plain decoding. Set this the day an engine passes that test: the refusal then
# lifts for bundles built for that engine or later (convert --engine).
LINEAR_ROLLBACK_SINCE: tuple[int, int, int] | None = None
_NO_ROLLBACK = (
    "MNN (3.6.1 and every release packager builds for) does not roll its state back when draft tokens are "
    "rejected, so speculative decoding with it diverges from plain decoding"
)
# Model types with linear-attention layers, and what the layers are.
LINEAR_ATTENTION = {
    "qwen3_5": "Qwen3.5, whose Gated DeltaNet layers are linear attention",
    "qwen3_5_text": "Qwen3.5, whose Gated DeltaNet layers are linear attention",
    "qwen3_5_moe": "Qwen3.5 MoE, whose Gated DeltaNet layers are linear attention",
    "qwen3_next": "Qwen3-Next, whose Gated DeltaNet layers are linear attention",
    "lfm2": "LFM2, whose short convolutions MNN runs as linear attention",
}
# What packager says of the other model types people try that it does not convert, and why.
REFUSED = {
    "qwen3_moe": "a mixture-of-experts model",
    "qwen2_moe": "a mixture-of-experts model",
    "mixtral": "a mixture-of-experts model",
    "llama4": "Llama 4, a mixture-of-experts model",
    **{kind: f"{what}: {_NO_ROLLBACK}" for kind, what in LINEAR_ATTENTION.items()},
}


def refusal(model_type: str, engine: tuple[int, ...] | None = None) -> str | None:
    """Why packager refuses `model_type` for a bundle that must run on `engine` (None: the newest it builds
    for), or None when it does not refuse it outright."""
    fixed = LINEAR_ROLLBACK_SINCE
    if model_type in LINEAR_ATTENTION and fixed is not None and engine is not None and tuple(engine) >= fixed:
        return None
    for family in FAMILIES:
        if model_type in family.multimodal_types:
            text = family.model_types[0]
            return (
                f"a multimodal {family.title} model (text and images), of which packager converts the text model: "
                f"save model.language_model with the lm_head as a checkpoint of its own, its config.json the "
                f"text_config with model_type {text!r} (e.g. transformers' AutoModelForCausalLM from the text "
                f"config), and convert that"
            )
    return REFUSED.get(model_type)


__all__ = [
    "BY_NAME",
    "FAMILIES",
    "LINEAR_ATTENTION",
    "LINEAR_ROLLBACK_SINCE",
    "REFUSED",
    "ROLES",
    "ConfigKey",
    "Family",
    "Finding",
    "Layout",
    "License",
    "UnknownFamily",
    "exact_positions",
    "findings",
    "of_bundle",
    "of_checkpoint",
    "per_layer_type_rope",
    "refusal",
    "rope_type",
    "rope_types",
    "shown",
    "supported",
    "supported_hint",
]


def of_checkpoint(
    config: Mapping[str, Any], vocabulary: Mapping[str, int], where: str, engine: tuple[int, ...] | None = None
) -> Family:
    """The family of a checkpoint, from its config.json and its tokenizer's vocabulary (token text -> id);
    UnknownFamily (one line naming what was found) for anything packager does not convert, or converts under
    other facts."""
    model_type = str(config.get("model_type") or "")
    refused = refusal(model_type, engine)
    if refused:
        raise UnknownFamily(f"{where} has model_type {shown(model_type)}: {refused}")
    if not model_type:
        raise UnknownFamily(f"{where} names no model_type")
    family = find(FAMILIES, model_type, vocabulary, where)
    for rope in rope_types(config):
        if rope not in family.rope_types:
            raise UnknownFamily(
                f"{where} asks for rope_type {shown(rope, 40)}, which packager does not convert for {family.title} "
                f"(it converts {', '.join(family.rope_types)})"
            )
    kinds = config.get("layer_types") or []
    odd = sorted({str(k) for k in kinds if k not in family.layer_types}) if isinstance(kinds, list) else [kinds]
    if odd:
        raise UnknownFamily(
            f"{where} has layer_types {shown(odd, 80)}, which packager does not convert for {family.title} "
            f"(it converts {', '.join(family.layer_types)})"
        )
    if per_layer_type_rope(config):
        ropes = config["rope_parameters"]
        missing = sorted(set(family.layer_types) - {k for k, v in ropes.items() if isinstance(v, Mapping)})
        if len(family.layer_types) < 2 or missing:
            raise UnknownFamily(
                f"{where} gives each layer type its own rope, "
                + (f"but names none for {', '.join(missing)}" if missing else f"which {family.title} does not have")
            )
    return family


def of_bundle(llm_config: Mapping[str, Any], where: str = "llm_config.json") -> Family:
    """The family of an MNN bundle, from its llm_config.json (model_type, and the bos/eos tokens llmexport
    copies into its `jinja` block)."""
    found = llm_config.get("jinja")
    jinja: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    tokens = {str(v) for k, v in jinja.items() if k in ("bos", "eos") and v}
    # A bundle names only its bos and eos, not its whole vocabulary: a family is known when one of its stop
    # tokens or its BOS is among them (the markers proper are checked when the checkpoint is converted).
    model_type = str(llm_config.get("model_type") or "")
    candidates = [
        f
        for f in FAMILIES
        if model_type in f.model_types
        and (any(t in tokens for t in f.stop_tokens) or (f.bos_token and f.bos_token in tokens))
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


def supported_hint() -> str:
    """The hint every refusal of a model ends with: the families packager converts, from the registry."""
    return f"packager converts {supported()} (README: Supported families)"
