"""z-lab's DFlash draft (`DFlashDraftModel`, dflash/model.py) in torch, as its checkpoint computes it: the reference
the exported graphs are checked against. Built from transformers' Qwen3 pieces (RMS norm, MLP, rotary embedding
of the draft's own config, rotate-half), not from packager's export graph, so that one cannot confirm the other's
mistake.

One draft step (z-lab's dflash_generate with an empty draft cache): the context features are the target's hidden
states after each layer of target_layer_ids, concatenated; the draft sees them through fc and hidden_norm; the
block is the target's embeddings of [last accepted token, mask, ..., mask] at positions start..start+block-1, the
context at 0..start-1. Each layer: queries from the normed block; keys and values from the context and the normed
block (in that order), keys and queries normed per head, rotary by position; attention over everything (not
causal); residual; MLP. The final norm, then the target's lm_head (not here: the check scores these states with the
head as the target's graph stores it, which the bundle's draft scores with too: faithful.stored_head_logits).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ..inspect.dflash_draft import DFlashDraft


def _config(draft: DFlashDraft) -> Any:
    from transformers import Qwen3Config

    rope: dict[str, Any] = {"rope_type": "default", "rope_theta": draft.rope_theta}
    if draft.rope_scaling:
        rope = {**draft.rope_scaling, "rope_theta": draft.rope_theta}
    return Qwen3Config(
        hidden_size=draft.hidden_size,
        intermediate_size=draft.intermediate_size,
        num_hidden_layers=draft.num_layers,
        num_attention_heads=draft.num_heads,
        num_key_value_heads=draft.num_kv_heads,
        head_dim=draft.head_dim,
        rms_norm_eps=draft.rms_norm_eps,
        hidden_act=draft.hidden_act,
        vocab_size=draft.vocab_size,
        max_position_embeddings=131072,
        rope_parameters=rope,
    )


class Reference:
    """The checkpoint's draft, float32."""

    def __init__(self, draft: DFlashDraft) -> None:
        from safetensors.torch import load_file
        from transformers.models.qwen3.modeling_qwen3 import Qwen3MLP, Qwen3RMSNorm, Qwen3RotaryEmbedding

        self.draft, self.config = draft, _config(draft)
        state = {k: v.to(torch.float32) for k, v in load_file(str(draft.weights)).items()}
        eps = draft.rms_norm_eps

        def norm(name: str, size: int) -> Any:
            module = Qwen3RMSNorm(size, eps=eps)
            module.weight.data.copy_(state[name])
            return module

        def linear(name: str) -> Tensor:
            return state[name]

        self.fc, self.hidden_norm = linear("fc.weight"), norm("hidden_norm.weight", draft.hidden_size)
        self.final_norm = norm("norm.weight", draft.hidden_size)
        self.rotary = Qwen3RotaryEmbedding(self.config)
        self.layers = []
        for i in range(draft.num_layers):
            p = f"layers.{i}."
            mlp = Qwen3MLP(self.config)
            for part in ("gate_proj", "up_proj", "down_proj"):
                getattr(mlp, part).weight.data.copy_(state[f"{p}mlp.{part}.weight"])
            self.layers.append(
                {
                    "in": norm(p + "input_layernorm.weight", draft.hidden_size),
                    "post": norm(p + "post_attention_layernorm.weight", draft.hidden_size),
                    "q_norm": norm(p + "self_attn.q_norm.weight", draft.head_dim),
                    "k_norm": norm(p + "self_attn.k_norm.weight", draft.head_dim),
                    **{n: linear(f"{p}self_attn.{n}.weight") for n in ("q_proj", "k_proj", "v_proj", "o_proj")},
                    "mlp": mlp,
                }
            )

    def context(self, target_hidden: Tensor) -> Tensor:
        """[n, k*hidden] target features -> [n, hidden] (fc, hidden_norm)."""
        with torch.no_grad():
            return self.hidden_norm(target_hidden @ self.fc.T)

    def hidden(self, context: Tensor, block: Tensor) -> Tensor:
        """The block's states before lm_head: context [n, hidden] (after fc), block embeddings [b, hidden]."""
        from transformers.models.qwen3.modeling_qwen3 import apply_rotary_pos_emb, repeat_kv

        d = self.draft
        n, b = context.shape[0], block.shape[0]
        positions = torch.arange(n + b).reshape(1, -1)
        with torch.no_grad():
            cos, sin = self.rotary(block.reshape(1, b, -1), positions)
            x = block.reshape(1, b, -1)
            ctx = context.reshape(1, n, -1)
            for layer in self.layers:
                normed = layer["in"](x)
                q = layer["q_norm"]((normed @ layer["q_proj"].T).reshape(1, b, d.num_heads, d.head_dim)).transpose(1, 2)
                kv_in = torch.cat([ctx, normed], dim=1)
                k = (kv_in @ layer["k_proj"].T).reshape(1, n + b, d.num_kv_heads, d.head_dim)
                k = layer["k_norm"](k).transpose(1, 2)
                v = (kv_in @ layer["v_proj"].T).reshape(1, n + b, d.num_kv_heads, d.head_dim).transpose(1, 2)
                # queries take the block's positions (the last b), keys all of them
                q, _ = apply_rotary_pos_emb(q, q, cos[:, n:], sin[:, n:])
                _, k = apply_rotary_pos_emb(k, k, cos, sin)
                groups = d.num_heads // d.num_kv_heads
                k, v = repeat_kv(k, groups), repeat_kv(v, groups)
                weights = torch.softmax((q @ k.transpose(-2, -1)) * d.head_dim**-0.5, dim=-1)
                out = (weights @ v).transpose(1, 2).reshape(1, b, d.num_heads * d.head_dim) @ layer["o_proj"].T
                x = x + out
                x = x + layer["mlp"](layer["post"](x))
            return self.final_norm(x)[0]
