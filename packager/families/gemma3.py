"""Gemma 3 (270m, 1b; the text part of 4b and up): sliding-window and global layers with their own rope bases,
(1 + w) RMSNorms around each sublayer, embeddings scaled by sqrt(hidden), a SentencePiece-style BPE with a BOS.

llmexport 0.0.5 gives every layer the local rope base (its dual rotary exists only for gemma4); packager's
converter gives each layer type transformers' own frequencies (packager.convert.fence.worker). The sliding window
needs nothing: llmexport writes `attention_type: mix` and a mask per layer kind, and MNN keeps the whole KV cache
and masks it, so rejected draft tokens roll back as for any full-attention model."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import Dims, Family, Layout, License, Row, attention, gated_mlp, norm, shown
from .configkeys import (
    CARRIED,
    IRRELEVANT,
    REFUSED,
    SHAPE,
    ConfigKey,
    Finding,
    assumes,
    no_bias,
    positive_int,
    positive_number,
    table,
    window_within_positions,
)

# Gemma3TextConfig's defaults where a config leaves a key out.
DEFAULT_HEAD_DIM = 256


def _head_dim_named(config: Mapping[str, Any]) -> Finding | None:
    """transformers' Gemma 3 takes head_dim 256 when the config leaves it out, not hidden_size / heads."""
    if "head_dim" in config:
        return None
    return Finding(
        "head_dim", f"head_dim is missing: Gemma 3 configs name it (transformers takes {DEFAULT_HEAD_DIM})", False
    )


def _attention_scale(config: Mapping[str, Any]) -> Finding | None:
    """transformers scales Gemma 3's attention by query_pre_attn_scalar ** -0.5; MNN's fused attention (the graph
    llmexport writes) by head_dim ** -0.5 and never reads the key."""
    value = config.get("query_pre_attn_scalar", DEFAULT_HEAD_DIM)
    head_dim = config.get("head_dim", DEFAULT_HEAD_DIM)
    if value == head_dim:
        return None
    return Finding(
        "query_pre_attn_scalar",
        f"query_pre_attn_scalar is {shown(value)} but head_dim is {shown(head_dim)}: the graph scales attention by "
        f"head_dim ** -0.5; packager converts query_pre_attn_scalar = head_dim = {shown(head_dim)}",
        True,
    )


GEMMA3_KEYS = table(
    SHAPE,
    ConfigKey(
        "head_dim",
        CARRIED,
        "each head's width (named: transformers' default is 256)",
        (positive_int("head_dim"), _head_dim_named),
    ),
    assumes(
        "hidden_activation", "gelu_pytorch_tanh", "the graph's MLP is GeGLU with the tanh GELU", "gelu_pytorch_tanh"
    ),
    no_bias("attention_bias", "attention projections"),
    ConfigKey(
        "query_pre_attn_scalar",
        REFUSED,
        "MNN's fused attention scales by head_dim ** -0.5: the key must equal head_dim",
        (positive_number("query_pre_attn_scalar"), _attention_scale),
    ),
    assumes("attn_logit_softcapping", None, "MNN's fused attention caps no attention logits"),
    ConfigKey(
        "final_logit_softcapping",
        CARRIED,
        "the lm_head's logits are capped in the graph",
        (positive_number("final_logit_softcapping", nullable=True),),
    ),
    ConfigKey(
        "sliding_window",
        CARRIED,
        "llm_config.json's sliding_window, masked per sliding layer",
        (window_within_positions(),),
    ),
    ConfigKey("layer_types", CARRIED, "each layer's mask (sliding or global) and rope"),
    ConfigKey(
        "sliding_window_pattern",
        CARRIED,
        "transformers 4's spelling of layer_types (every Nth layer global)",
        (positive_int("sliding_window_pattern"),),
    ),
    ConfigKey("rope_local_base_freq", CARRIED, "transformers 4's rope base of the sliding layers"),
    assumes("use_bidirectional_attention", False, "the graph attends only to earlier positions", False, (None,)),
    *(
        ConfigKey(key, IRRELEVANT, "read only by the multimodal Gemma 3 (image tokens and the vision tower)")
        for key in (
            "image_token_id",
            "image_token_index",
            "boi_token_index",
            "eoi_token_index",
            "mm_tokens_per_image",
            "vision_config",
            "text_config",
        )
    ),
)


def _rows(d: Dims) -> tuple[Row, ...]:
    """Gemma's sandwich: each sublayer's output is normed too (post_attention_layernorm after attention,
    pre_feedforward_layernorm before the MLP and post_feedforward_layernorm after it); q and k are normed per head."""
    return (
        norm("input_layernorm", d),
        *attention(d, qk_norm=True),
        norm("post_attention_layernorm", d),
        norm("pre_feedforward_layernorm", d),
        *gated_mlp(d),
        norm("post_feedforward_layernorm", d),
    )


# The Gemma Terms of Use (section 3.1) ask every distribution to carry this notice.
GEMMA_TERMS = License(
    "gemma",
    "Gemma Terms of Use",
    "https://ai.google.dev/gemma/terms",
    notice="Gemma is provided under and subject to the Gemma Terms of Use found at ai.google.dev/gemma/terms",
)

GEMMA3 = Family(
    name="gemma3",
    title="Gemma 3",
    model_types=("gemma3_text",),
    markers={"<bos>": 2, "<start_of_turn>": 105, "<end_of_turn>": 106},
    # <end_of_turn> (106) ends a chat turn, <eos> (1) plain text.
    stop_tokens=("<end_of_turn>", "<eos>"),
    known_stop_ids=(106, 1),
    layout=Layout(_rows, norm_offset=1.0),  # Gemma computes x * (1 + w)
    license=GEMMA_TERMS,
    architecture=(
        "Gemma 3 decoder (five sliding-window layers to each global layer; rope bases 10,000 local and 1,000,000 "
        "global; (1 + w) RMSNorms before and after each sublayer and on q and k; GeGLU; embeddings scaled by "
        "sqrt(hidden))"
    ),
    bos_token="<bos>",
    # 270m and 1b: default rope for both layer kinds; 4b and up scale the global layers' rope linearly (factor 8).
    rope_types=("default", "linear"),
    template_variables={"bos_token": "<bos>"},
    # A SentencePiece-style BPE (byte fallback, "▁" for spaces): MNN's text format hard-codes Qwen2's byte-level
    # pre-tokenizer, so only the pipeline format reads it right.
    tokenizer_formats=("pipeline",),
    layer_types=("sliding_attention", "full_attention"),
    # llmexport 0.0.5 gives every layer the local rope base (its rotary per layer kind is gemma4's only): each
    # layer kind gets transformers' own frequencies; the weightless model of a graph-only export gets its
    # embedding scale (sqrt(hidden)) written.
    patches=lambda config: ("per_layer_type_rope", "embed_scale"),
    beyond_rows=("<image_soft_token>",),
    config_keys=GEMMA3_KEYS,
    multimodal_types=("gemma3",),  # Gemma 3 4b and up as released: Gemma3ForConditionalGeneration
    tags=("gemma3", "gemma"),
    base_models=("google/gemma-3-270m-it", "google/gemma-3-1b-it"),
    targets=("google/gemma-3-4b-it", "google/gemma-3-12b-it", "google/gemma-3-27b-it"),
    compatible_targets={
        "gemma3_4b": {"enabled": True},
        "gemma3_12b": {"enabled": True},
        "gemma3_27b": {"enabled": True},
    },
    # llmexport's exporter in MNN's tree writes precision "normal" for Gemma 3: its activations overflow fp16.
    runtime={"precision": "normal"},
    sampling="Gemma 3 instruction-tuned models ship top-k 64, top-p 0.95 (temperature 1.0)",
)
