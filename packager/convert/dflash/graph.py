"""The DFlash draft as the graphs MNN 3.6.1's DFlashGeneration loads (speculative_decoding/dflash.cpp), in torch
for ONNX export: plain operations, every weight the checkpoint's (loaded strictly: a tensor missing or left over
is an error, never a random one).

- dflash_fc: `target_hidden` [1, n, k*hidden] (the target's hidden states after the layers named by
  target_layer_ids, concatenated) -> `context_hidden` = hidden_norm(fc(target_hidden)).
- dflash: `noise_embedding` [1, block, hidden] (the target's embeddings of the block: the last accepted token, then
  mask tokens), `context_hidden` [1, n, hidden] (every context position so far), `attention_mask`
  [1, 1, block, n+block] (zeros: nothing is masked), `q_position_ids` [1, block] and `k_position_ids`
  [1, n+block] -> `hidden_states` [1, block, hidden]: each decoder layer's queries come from the normed block, its
  keys and values from the context (as it is) and the normed block together, keys and queries RMS-normed per head
  and rotated; then the final norm. The engine turns them into logits with dflash_lmhead (export.lm_head_graph:
  the target's own lm_head as its graph stores it), which 3.6.1 reads when the config names it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from ...bundle.modes import DFLASH_FC_INPUTS, DFLASH_FC_OUTPUTS, DFLASH_INPUTS, DFLASH_STATES_OUTPUTS
from ..rope import frequencies

if TYPE_CHECKING:
    from ..inspect.dflash_draft import DFlashDraft

FC_INPUTS, FC_OUTPUTS = DFLASH_FC_INPUTS, DFLASH_FC_OUTPUTS
DRAFT_INPUTS, DRAFT_OUTPUTS = DFLASH_INPUTS, DFLASH_STATES_OUTPUTS


class Norm(nn.Module):
    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        scale = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return x * scale * self.weight


def _rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


class _Attention(nn.Module):
    def __init__(self, d: DFlashDraft) -> None:
        super().__init__()
        h, hd = d.hidden_size, d.head_dim
        self.heads, self.kv_heads, self.head_dim = d.num_heads, d.num_kv_heads, hd
        self.q_proj = nn.Linear(h, d.num_heads * hd, bias=False)
        self.k_proj = nn.Linear(h, d.num_kv_heads * hd, bias=False)
        self.v_proj = nn.Linear(h, d.num_kv_heads * hd, bias=False)
        self.o_proj = nn.Linear(d.num_heads * hd, h, bias=False)
        self.q_norm = Norm(hd, d.rms_norm_eps)
        self.k_norm = Norm(hd, d.rms_norm_eps)

    def forward(self, x: Tensor, context: Tensor, rope: tuple[Tensor, Tensor, Tensor, Tensor], mask: Tensor) -> Tensor:
        q_cos, q_sin, k_cos, k_sin = rope
        block = x.shape[1]
        both = torch.cat([context, x], dim=1)
        q = self.q_norm(self.q_proj(x).reshape(1, block, self.heads, self.head_dim)).transpose(1, 2)
        k = self.k_norm(self.k_proj(both).reshape(1, -1, self.kv_heads, self.head_dim)).transpose(1, 2)
        v = self.v_proj(both).reshape(1, -1, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = _rotate(q, q_cos, q_sin), _rotate(k, k_cos, k_sin)
        groups = self.heads // self.kv_heads
        if groups > 1:
            k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        weights = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * self.head_dim**-0.5 + mask, dim=-1)
        return self.o_proj(torch.matmul(weights, v).transpose(1, 2).reshape(1, block, self.heads * self.head_dim))


class _Mlp(nn.Module):
    def __init__(self, d: DFlashDraft) -> None:
        from transformers.activations import ACT2FN

        super().__init__()
        self.gate_proj = nn.Linear(d.hidden_size, d.intermediate_size, bias=False)
        self.up_proj = nn.Linear(d.hidden_size, d.intermediate_size, bias=False)
        self.down_proj = nn.Linear(d.intermediate_size, d.hidden_size, bias=False)
        self.act = ACT2FN[d.hidden_act]

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


class _Layer(nn.Module):
    def __init__(self, d: DFlashDraft) -> None:
        super().__init__()
        self.input_layernorm = Norm(d.hidden_size, d.rms_norm_eps)
        self.post_attention_layernorm = Norm(d.hidden_size, d.rms_norm_eps)
        self.self_attn = _Attention(d)
        self.mlp = _Mlp(d)

    def forward(self, x: Tensor, context: Tensor, rope: tuple[Tensor, Tensor, Tensor, Tensor], mask: Tensor) -> Tensor:
        x = x + self.self_attn(self.input_layernorm(x), context, rope, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class DraftGraph(nn.Module):
    """dflash.mnn: the block's final states from its embeddings and the context."""

    def __init__(self, d: DFlashDraft) -> None:
        super().__init__()
        self.layers = nn.ModuleList([_Layer(d) for _ in range(d.num_layers)])
        self.norm = Norm(d.hidden_size, d.rms_norm_eps)
        self.inv_freq: Tensor
        self.register_buffer("inv_freq", frequencies(d.head_dim, d.rope_theta, d.rope_scaling), persistent=False)

    def _rope(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        angles = positions.to(torch.float32).reshape(-1, 1) * self.inv_freq.reshape(1, -1)
        both = torch.cat([angles, angles], dim=-1).reshape(1, 1, -1, 2 * self.inv_freq.numel())
        return both.cos(), both.sin()

    def forward(
        self, noise_embedding: Tensor, context_hidden: Tensor, attention_mask: Tensor, q_pos: Tensor, k_pos: Tensor
    ) -> Tensor:
        rope = (*self._rope(q_pos), *self._rope(k_pos))
        x = noise_embedding
        for layer in self.layers:
            x = layer(x, context_hidden, rope, attention_mask)
        return self.norm(x)


class FcGraph(nn.Module):
    """dflash_fc.mnn: the target's hidden states, compressed to the draft's context."""

    def __init__(self, d: DFlashDraft) -> None:
        super().__init__()
        self.fc = nn.Linear(len(d.target_layer_ids) * d.hidden_size, d.hidden_size, bias=False)
        self.hidden_norm = Norm(d.hidden_size, d.rms_norm_eps)

    def forward(self, target_hidden: Tensor) -> Tensor:
        return self.hidden_norm(self.fc(target_hidden))


def load(draft: DFlashDraft) -> tuple[DraftGraph, FcGraph]:
    """Both graphs with the checkpoint's weights (float32), loaded strictly."""
    from safetensors.torch import load_file

    state = {k: v.to(torch.float32) for k, v in load_file(str(draft.weights)).items()}
    main, fc = DraftGraph(draft), FcGraph(draft)
    fc.load_state_dict({k: state.pop(k) for k in ("fc.weight", "hidden_norm.weight")}, strict=True)
    main.load_state_dict(state, strict=True)
    return main.eval(), fc.eval()


def example_inputs(draft: DFlashDraft, context: int = 3) -> tuple[tuple[Tensor, ...], tuple[Tensor, ...]]:
    """Inputs to trace each graph with (the block and context lengths stay dynamic)."""
    h, block = draft.hidden_size, draft.block_size
    fc_in = (torch.ones(1, context, len(draft.target_layer_ids) * h),)
    main_in = (
        torch.ones(1, block, h),
        torch.ones(1, context, h),
        torch.zeros(1, 1, block, context + block),
        torch.arange(context, context + block, dtype=torch.int32).reshape(1, -1),
        torch.arange(context + block, dtype=torch.int32).reshape(1, -1),
    )
    return fc_in, main_in


def export_onnx(main: DraftGraph, fc: FcGraph, draft: DFlashDraft, folder: Any) -> tuple[Any, Any]:
    """dflash.onnx and dflash_fc.onnx in `folder` (torch's TorchScript exporter, opset 15, dynamic lengths)."""
    fc_in, main_in = example_inputs(draft)
    fc_path, main_path = folder / "dflash_fc.onnx", folder / "dflash.onnx"
    with torch.no_grad():
        torch.onnx.export(
            fc,
            fc_in,
            str(fc_path),
            input_names=FC_INPUTS,
            output_names=FC_OUTPUTS,
            dynamic_axes={"target_hidden": {1: "context"}},
            opset_version=15,
            dynamo=False,
        )
        torch.onnx.export(
            main,
            main_in,
            str(main_path),
            input_names=DRAFT_INPUTS,
            output_names=DRAFT_OUTPUTS,
            dynamic_axes={
                "noise_embedding": {1: "block"},
                "context_hidden": {1: "context"},
                "attention_mask": {2: "block", 3: "total"},
                "q_position_ids": {1: "block"},
                "k_position_ids": {1: "total"},
            },
            opset_version=15,
            dynamo=False,
        )
    return main_path, fc_path
