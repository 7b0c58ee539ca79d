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

from .base import Family, Layout, License

PHI3 = Family(
    name="phi3",
    title="Phi-3.5-mini",
    model_types=("phi3",),
    markers={"<s>": 1, "<|assistant|>": 32001, "<|end|>": 32007, "<|user|>": 32010},
    # <|end|> ends a chat turn, <|endoftext|> plain text; generation_config also stops on <|assistant|>.
    stop_tokens=("<|end|>", "<|endoftext|>", "<|assistant|>"),
    known_stop_ids=(32007, 32000, 32001),
    layout=Layout(qk_norm=False, qkv_bias=False, fused_qkv=True, fused_gate_up=True),
    license=License("mit", "MIT", "https://opensource.org/license/mit"),
    architecture=(
        "Phi-3 decoder (fused q/k/v and gate/up projections, SwiGLU, untied embeddings, longrope rope scaling "
        "exported with its short factor: exact up to 4,096 positions)"
    ),
    rope_types=("longrope",),
    tokenizer_formats=("pipeline",),
    tags=("phi3", "phi"),
    base_models=("microsoft/Phi-3.5-mini-instruct",),
    sampling="Phi-3.5-mini-instruct is usually run greedy or at temperature 0.7",
)
