"""Qwen3 (dense): the family packager has converted from the start."""

from __future__ import annotations

from .base import Family, Layout, License, decoder
from .configkeys import SHAPE, full_attention_only, no_bias, silu, table

APACHE = License("apache-2.0", "Apache License 2.0", "https://www.apache.org/licenses/LICENSE-2.0")
# <|im_end|> ends a chat turn, <|endoftext|> ends plain text.
CHATML_STOPS = ("<|im_end|>", "<|endoftext|>")

QWEN3 = Family(
    name="qwen3",
    title="Qwen3",
    model_types=("qwen3",),
    markers={"<|im_end|>": 151645},
    stop_tokens=CHATML_STOPS,
    known_stop_ids=(151645, 151643),
    layout=Layout(decoder(qk_norm=True)),  # a per-head RMSNorm of q and k
    license=APACHE,
    dflash=True,  # z-lab: Qwen3-4B, Qwen3-8B
    architecture="Qwen3 decoder (grouped-query attention with per-head q/k RMSNorm, SwiGLU, rope theta 1e6)",
    config_keys=table(SHAPE, silu(), no_bias("attention_bias", "attention projections"), full_attention_only("Qwen3")),
    template_variables={"enable_thinking": False},  # its template thinks unless told not to
    tags=("qwen3",),
    base_models=("Qwen/Qwen3-0.6B", "Qwen/Qwen3-1.7B"),
    targets=("Qwen/Qwen3-4B", "Qwen/Qwen3-8B", "Qwen/Qwen3-14B", "Qwen/Qwen3-32B"),
    compatible_targets={
        "qwen3_8b": {"enabled": True},
        "qwen3_14b": {"enabled": True},
        "qwen3_4b": {"enabled": True},
        "qwen3_5": {"enabled": False, "reason": "different architecture (linear attention) and vocabulary"},
    },
    sampling=(
        "Qwen3 recommends temperature 0.7, top-p 0.8 without thinking (0.6 and 0.95 with it); "
        "never greedy with thinking on"
    ),
)
QWEN3_STOP_IDS = QWEN3.known_stop_ids
