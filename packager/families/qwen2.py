"""Qwen2 and Qwen2.5: Qwen3's predecessors, with q/k/v biases and no per-head q/k norms."""

from __future__ import annotations

from .base import Family, Layout, decoder
from .configkeys import SHAPE, full_attention_only, silu, table
from .qwen3 import APACHE, CHATML_STOPS

QWEN2 = Family(
    name="qwen2",
    title="Qwen2.5",
    model_types=("qwen2",),
    markers={"<|im_end|>": 151645},
    stop_tokens=CHATML_STOPS,
    known_stop_ids=(151645, 151643),  # the same vocabulary as Qwen3's
    config_keys=table(SHAPE, silu(), full_attention_only("Qwen2.5")),
    layout=Layout(decoder(qkv_bias=True)),  # q, k and v carry biases
    # Apache-2.0 for 0.5B, 1.5B, 7B, 14B and 32B; Qwen2.5-3B and 72B carry Qwen's own licenses (say so in the spec).
    license=APACHE,
    architecture="Qwen2 decoder (grouped-query attention with q/k/v biases, SwiGLU, rope theta 1e6)",
    tags=("qwen2.5",),
    base_models=("Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-1.5B-Instruct"),
    targets=("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-14B-Instruct", "Qwen/Qwen2.5-32B-Instruct"),
    compatible_targets={
        "qwen2_5_7b": {"enabled": True},
        "qwen2_5_14b": {"enabled": True},
        "qwen2_5_32b": {"enabled": True},
        "qwen3": {"enabled": False, "reason": "another chat template and end-of-turn convention"},
    },
    sampling="Qwen2.5 Instruct ships temperature 0.7, top-p 0.8, top-k 20, repetition penalty 1.05",
)
