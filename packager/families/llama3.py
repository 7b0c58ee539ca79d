"""Llama 3.x (3.1, 3.2, 3.3): byte BPE with digits in threes, a BOS before every text, and the llama3 rope.

llmexport 0.0.5 ignores `rope_type: llama3` and exports the default frequencies; packager's converter gives the
graph transformers' own llama3 frequencies (packager.convert.fence.worker)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import Family, Layout, License, decoder, rope_type
from .configkeys import LLAMA_KEYS

LLAMA32_LICENSE = License(
    "llama3.2",
    "Llama 3.2 Community License",
    "https://www.llama.com/llama3_2/license/",
    attribution="Built with Llama",
    file="LICENSE",
    aliases=("llama3", "llama3.1", "llama3.3"),
    # Section 1.b.iii.
    notice="Llama 3.2 is licensed under the Llama 3.2 Community License, Copyright © Meta Platforms, Inc. "
    "All Rights Reserved.",
)


def _patches(config: Mapping[str, Any]) -> tuple[str, ...]:
    """llmexport 0.0.5 exports the llama3 rope with the default frequencies: the graph gets transformers' own."""
    return ("transformers_rope",) if rope_type(config) == "llama3" else ()


LLAMA3 = Family(
    name="llama3",
    title="Llama 3.x",
    model_types=("llama",),
    markers={"<|begin_of_text|>": 128000, "<|eot_id|>": 128009},
    # <|eot_id|> ends a chat turn, <|end_of_text|> plain text, <|eom_id|> a turn that calls a tool.
    stop_tokens=("<|eot_id|>", "<|end_of_text|>", "<|eom_id|>"),
    known_stop_ids=(128009, 128001, 128008),
    config_keys=LLAMA_KEYS,
    layout=Layout(decoder()),
    license=LLAMA32_LICENSE,
    architecture="Llama 3 decoder (grouped-query attention, SwiGLU, llama3 rope scaling, rope theta 5e5)",
    bos_token="<|begin_of_text|>",
    rope_types=("default", "llama3"),
    patches=_patches,
    dflash=True,  # z-lab: Llama-3.1-8B-Instruct
    template_variables={"bos_token": "<|begin_of_text|>"},
    tokenizer_formats=("pipeline",),
    tags=("llama", "llama-3"),
    base_models=("meta-llama/Llama-3.2-1B-Instruct", "meta-llama/Llama-3.2-3B-Instruct"),
    targets=("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.3-70B-Instruct"),
    compatible_targets={
        "llama3_1_8b": {"enabled": True},
        "llama3_3_70b": {"enabled": True},
        "llama3_2_3b": {"enabled": True},
    },
    sampling="Llama 3.2 Instruct ships temperature 0.6, top-p 0.9",
)
