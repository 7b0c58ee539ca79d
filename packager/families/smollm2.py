"""SmolLM2 (135M, 360M, 1.7B): the Llama architecture with a 49,152-token GPT-2 BPE and ChatML turns.

Hidden 576 (135M) and 960 (360M) are not multiples of 128: the default block is then 64
(packager.convert.recipe.default_block)."""

from __future__ import annotations

from .base import Family, Layout, decoder
from .configkeys import LLAMA_KEYS
from .qwen3 import APACHE

SMOLLM2 = Family(
    name="smollm2",
    title="SmolLM2",
    model_types=("llama",),
    markers={"<|im_start|>": 1, "<|im_end|>": 2},
    # <|im_end|> (2) ends a chat turn, <|endoftext|> (0) plain text.
    stop_tokens=("<|im_end|>", "<|endoftext|>"),
    known_stop_ids=(2, 0),
    config_keys=LLAMA_KEYS,
    layout=Layout(decoder()),
    license=APACHE,
    architecture="Llama decoder (grouped-query attention, SwiGLU, rope theta 1e5) with SmolLM2's GPT-2 BPE",
    tokenizer_formats=("pipeline",),
    tags=("smollm2", "llama"),
    base_models=("HuggingFaceTB/SmolLM2-135M-Instruct", "HuggingFaceTB/SmolLM2-360M-Instruct"),
    targets=("HuggingFaceTB/SmolLM2-1.7B-Instruct",),
    compatible_targets={"smollm2_1_7b": {"enabled": True}},
    # MNN's memory "low" quantizes activations to 8 bits on the CPU; SmolLM2-135M's activations do not survive
    # it (8-bit weights: mean logit cosine 0.978 and top-1 0.90 against transformers with it, 0.999 and 0.98
    # without, on the real model; bench/RESULTS.md). "normal" keeps float activations.
    runtime={"memory": "normal"},
    # 4-bit weights cost SmolLM2-135M a mean KL of 0.08-0.77 against its source (blocks 32-64; 0.50 even in a torch
    # simulation), which verify rightly fails; 8-bit passes it (0.005-0.008). bench/RESULTS.md.
    default_bits=8,
    sampling="SmolLM2 Instruct is usually run greedy or at temperature 0.2, top-p 0.9",
)
