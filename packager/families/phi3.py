"""Phi-3.5-mini: a Llama 2 SentencePiece vocabulary with chat tokens at 32000-32010, fused q/k/v and gate/up
projections, untied embeddings and the longrope rope.

A target only: its embeddings are untied, and a ten-file draft bundle has no embeddings file, so it cannot be a
draft (and at 3.8B it is no phone draft). llmexport 0.0.5 splits the fused q/k/v into three projections with zero
biases and exports longrope with its short factor and its attention scaling: exactly transformers' rope for
sequences of up to original_max_position_embeddings (4,096) positions; past that transformers switches every
position to the long factor, which a graph with fixed frequencies cannot do: conversion says so in a warning.
Phi-4-mini (model_type phi3 too) has another vocabulary (o200k) and a partial rotary: its markers do not match, so
it is refused as a family packager does not convert."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import Dims, Family, Layout, License, Row, attention, exact_positions, norm, shown
from .configkeys import CARRIED, IRRELEVANT, REFUSED, SHAPE, ConfigKey, Finding, positive_int, silu, table


def _original_positions(config: Mapping[str, Any]) -> Finding | None:
    """longrope's switch point: from 2 (its attention factor takes a log of it) up to max_position_embeddings."""
    top = config.get("max_position_embeddings")
    for where in ("rope_parameters", "rope_scaling", None):
        place = config.get(where) if where else config
        if isinstance(place, Mapping) and place.get("original_max_position_embeddings") is not None:
            found = _original_in(place["original_max_position_embeddings"], top, where)
            if found is not None:
                return found
    return None


def _original_in(value: Any, top: Any, where: str | None) -> Finding | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 2
    if ok and isinstance(top, int) and value > top:
        ok = False
    if ok:
        return None
    key = f"{where}.original_max_position_embeddings" if where else "original_max_position_embeddings"
    return Finding(
        key,
        f"{key} must be a whole number from 2 up to max_position_embeddings ({shown(top)}), found {shown(value)}",
        False,
    )


def _no_window(config: Mapping[str, Any]) -> Finding | None:
    """transformers masks Phi-3 attention to sliding_window positions; the graph attends to every earlier one, so a
    window is converted only where it covers every position the model takes."""
    value, top = config.get("sliding_window"), config.get("max_position_embeddings")
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        return Finding(
            "sliding_window", f"sliding_window must be a whole number from 1 or null, found {shown(value)}", False
        )
    if isinstance(top, int) and value < top:
        return Finding(
            "sliding_window",
            f"sliding_window is {value:,} of max_position_embeddings {top:,}: the graph attends to every earlier "
            "position; packager converts a sliding_window of at least max_position_embeddings (or null)",
            True,
        )
    return None


def _rows(d: Dims) -> tuple[Row, ...]:
    """llmexport splits the fused q/k/v into three projections, each with a bias of zeros; the fused gate and up
    projections (gate rows first) stay one linear."""
    return (
        norm("input_layernorm", d),
        *attention(d, bias=True),
        norm("post_attention_layernorm", d),
        Row("mlp.gate_up_proj", "linear", 2 * d.intermediate, d.hidden),
        Row("mlp.down_proj", "linear", d.hidden, d.intermediate),
    )


def _checkpoint_rows(d: Dims) -> tuple[Row, ...]:
    """The checkpoint holds q, k and v as one qkv_proj (rows q, then k, then v), without a bias."""
    qkv = Row("self_attn.qkv_proj", "linear", (d.heads + 2 * d.kv_heads) * d.head_dim, d.hidden)
    split = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")
    return tuple(qkv if row.suffix == split[0] else row for row in _rows(d) if row.suffix not in split[1:])


def _slices(d: Dims) -> dict[str, tuple[str, int, int]]:
    """Each split projection's rows of qkv_proj."""
    q, kv = d.heads * d.head_dim, d.kv_heads * d.head_dim
    fused = "self_attn.qkv_proj.weight"
    return {
        "self_attn.q_proj.weight": (fused, 0, q),
        "self_attn.k_proj.weight": (fused, q, kv),
        "self_attn.v_proj.weight": (fused, q + kv, kv),
    }


PHI3_KEYS = table(
    SHAPE,
    silu(),
    ConfigKey(
        "max_position_embeddings",
        CARRIED,
        "longrope's attention factor (sqrt(1 + log(max / original) / log(original)))",
        (positive_int("max_position_embeddings"),),
    ),
    ConfigKey(
        "original_max_position_embeddings",
        CARRIED,
        "longrope's short factor up to it (the positions the bundle computes exactly), its attention factor",
        (_original_positions,),
    ),
    ConfigKey("sliding_window", REFUSED, "the graph attends to every earlier position", (_no_window,)),
    ConfigKey("embd_pdrop", IRRELEVANT, "dropout is off at inference"),
    ConfigKey("resid_pdrop", IRRELEVANT, "dropout is off at inference"),
)


def _warnings(config: Mapping[str, Any]) -> tuple[str, ...]:
    """longrope's limit: what the graph computes as transformers does, and up to where."""
    positions = exact_positions(config)
    if positions is None:
        return ()
    return (
        f"the bundle computes what transformers does up to {positions:,} positions "
        "(original_max_position_embeddings), not past them: llmexport exports longrope's short factor, and "
        "past them transformers switches every position to the long factor, which a graph with fixed rope "
        "frequencies cannot do; keep prompt and output within that many tokens",
    )


PHI3 = Family(
    name="phi3",
    title="Phi-3.5-mini",
    model_types=("phi3",),
    markers={"<s>": 1, "<|assistant|>": 32001, "<|end|>": 32007, "<|user|>": 32010},
    # <|end|> ends a chat turn, <|endoftext|> plain text; generation_config also stops on <|assistant|>.
    stop_tokens=("<|end|>", "<|endoftext|>", "<|assistant|>"),
    known_stop_ids=(32007, 32000, 32001),
    layout=Layout(_rows, _checkpoint_rows, _slices),
    license=License("mit", "MIT", "https://opensource.org/license/mit"),
    architecture=(
        "Phi-3 decoder (fused q/k/v and gate/up projections, SwiGLU, untied embeddings, longrope rope scaling "
        "exported with its short factor: exact up to 4,096 positions)"
    ),
    rope_types=("longrope",),
    warnings=_warnings,
    config_keys=PHI3_KEYS,
    tokenizer_formats=("pipeline",),
    tags=("phi3", "phi"),
    base_models=("microsoft/Phi-3.5-mini-instruct",),
    sampling="Phi-3.5-mini-instruct is usually run greedy or at temperature 0.7",
)
