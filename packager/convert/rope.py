"""Rope frequencies as transformers computes them: the one place the converter's graph and its torch references get
a scaled rope's (llama3) from."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import Tensor


def scaling_of(config: dict[str, Any]) -> dict[str, Any] | None:
    """A config's rope scaling (`rope_scaling`, or transformers 5's `rope_parameters`) without its theta, when it is
    not plain rope; a value that is not a table comes back as a rope type no one converts (its repr)."""
    for key in ("rope_scaling", "rope_parameters"):
        value = config.get(key)
        if isinstance(value, dict) and value.get("rope_type", value.get("type", "default")) != "default":
            return {k: v for k, v in value.items() if k != "rope_theta"}
        if value not in (None, {}) and not isinstance(value, dict):
            return {"rope_type": repr(value)}
    return None


def frequencies(head_dim: int, theta: float, rope_scaling: dict[str, Any] | None = None) -> Tensor:
    """The rope's inverse frequencies: theta^(-2j/d), or transformers' own for a scaled rope (llama3)."""
    import torch

    if rope_scaling:
        from transformers import LlamaConfig
        from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

        kind = str(rope_scaling.get("rope_type", rope_scaling.get("type")))
        config = LlamaConfig(
            hidden_size=head_dim,
            num_attention_heads=1,
            head_dim=head_dim,
            max_position_embeddings=131072,
            rope_parameters={**rope_scaling, "rope_type": kind, "rope_theta": theta},
        )
        inverse, factor = ROPE_INIT_FUNCTIONS[kind](config, "cpu")
        if factor != 1.0:
            raise ValueError(f"rope type {kind} scales attention by {factor}, which the exported head does not")
        return inverse.to(torch.float32)
    return 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
