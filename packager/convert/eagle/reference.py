"""An EAGLE-3 head in torch (float32), computing what MNN 3.6.1's exported head computes.

The head folder is the SpecForge/AngelSlim layout: config.json and model.safetensors with fc.weight
[hidden, 3*target_hidden], midlayer.{hidden_norm,input_layernorm,post_attention_layernorm}.weight,
midlayer.self_attn.{q,k,v}_proj.weight (input 2*hidden), midlayer.self_attn.o_proj.weight,
midlayer.mlp.{gate,up,down}_proj.weight, norm.weight, lm_head.weight [draft_vocab, hidden], d2t (int64
[draft_vocab]: target id = draft id + d2t[draft id]) and, optionally, t2d.

What llmexport 0.0.5 exports (utils/eagle.py) and the engine feeds it (speculative_decoding/eagle.cpp):

- eagle_fc.mnn is `fc`: the target's three aux hidden states (aux_hidden_states) -> the head's width;
- eagle.mnn is `EagleHead.forward`: at position i the head gets fc(aux_i) (or, past the first draft step, its own
  out_hidden) and the target's embedding of token i+1, and predicts token i+2 as log-probabilities over the
  draft vocabulary. One decoder layer: the input embedding and the hidden state each RMS-normed, concatenated
  (embedding first), attention with rotate-half rope and the layer's own KV cache, the residual taken from the
  hidden state; an MLP; the final norm before lm_head only (out_hidden is the state before it).

llmexport hard-codes rope theta 10000 for the head (and takes the head counts from the target's config);
here theta is a parameter whose default is the head's own rope_theta.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from ...errors import CheckpointNotFound, InvalidCheckpointConfig
from ...runtime.eagle_head import HEAD_HINT
from ..rope import frequencies, scaling_of

KV = tuple[Tensor, Tensor]  # (keys, values), each [batch, length, kv_heads, head_dim], rope applied to keys


@dataclass(frozen=True)
class HeadConfig:
    hidden_size: int
    target_hidden_size: int
    vocab_size: int
    draft_vocab_size: int
    intermediate_size: int
    rms_norm_eps: float
    hidden_act: str
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rope_theta: float
    rope_scaling: dict[str, Any] | None = None  # a llama3 scaling (Llama 3.1 heads), None for plain rope

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> HeadConfig:
        try:
            hidden = int(raw["hidden_size"])
            heads = int(raw["num_attention_heads"])
            return cls(
                hidden_size=hidden,
                target_hidden_size=int(raw.get("target_hidden_size") or hidden),
                vocab_size=int(raw["vocab_size"]),
                draft_vocab_size=int(raw["draft_vocab_size"]),
                intermediate_size=int(raw["intermediate_size"]),
                rms_norm_eps=float(raw["rms_norm_eps"]),
                hidden_act=str(raw.get("hidden_act", "silu")),
                num_attention_heads=heads,
                num_key_value_heads=int(raw.get("num_key_value_heads") or heads),
                head_dim=int(raw.get("head_dim") or hidden // heads),
                rope_theta=float(raw.get("rope_theta", 10000.0)),
                rope_scaling=scaling_of(raw),
            )
        except KeyError as missing:
            raise InvalidCheckpointConfig(f"the EAGLE head's config.json has no {missing.args[0]}", HEAD_HINT) from None

    @classmethod
    def from_folder(cls, folder: Path) -> HeadConfig:
        path = Path(folder) / "config.json"
        if not path.is_file():
            raise CheckpointNotFound(f"{folder} has no config.json", HEAD_HINT)
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise InvalidCheckpointConfig(f"cannot read {path}: {error}", HEAD_HINT) from None
        return cls.from_dict(raw)

    def to_dict(self) -> dict[str, Any]:
        """The config.json a head folder of this shape carries (SpecForge's field names)."""
        return {
            "architectures": ["LlamaForCausalLMEagle3"],
            "model_type": "llama",
            "hidden_size": self.hidden_size,
            "target_hidden_size": self.target_hidden_size,
            "vocab_size": self.vocab_size,
            "draft_vocab_size": self.draft_vocab_size,
            "intermediate_size": self.intermediate_size,
            "rms_norm_eps": self.rms_norm_eps,
            "hidden_act": self.hidden_act,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "rope_theta": self.rope_theta,
            # A scaled rope comes with the positions it scales to (transformers reads both; SpecForge writes both).
            **({"rope_scaling": self.rope_scaling, "max_position_embeddings": 131072} if self.rope_scaling else {}),
            "num_hidden_layers": 1,
            "tie_word_embeddings": False,
            "torch_dtype": "float32",
        }


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rotate_half(x: Tensor) -> Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope(x: Tensor, positions: Tensor, inverse: Tensor) -> Tensor:
    """x [batch, seq, heads, head_dim] rotated by positions [batch, seq] (llmexport's llama form: the angles
    position * inverse frequency, cos and sin each repeated over both halves, x*cos + rotate_half(x)*sin)."""
    angles = positions.to(torch.float32).unsqueeze(-1) * inverse  # [batch, seq, dim/2]
    cos = torch.cat((angles.cos(), angles.cos()), dim=-1).unsqueeze(2)
    sin = torch.cat((angles.sin(), angles.sin()), dim=-1).unsqueeze(2)
    return x * cos + rotate_half(x) * sin


class _Attention(nn.Module):
    def __init__(self, config: HeadConfig) -> None:
        super().__init__()
        width = config.num_attention_heads * config.head_dim
        kv_width = config.num_key_value_heads * config.head_dim
        self.q_proj = nn.Linear(2 * config.hidden_size, width, bias=False)
        self.k_proj = nn.Linear(2 * config.hidden_size, kv_width, bias=False)
        self.v_proj = nn.Linear(2 * config.hidden_size, kv_width, bias=False)
        self.o_proj = nn.Linear(width, config.hidden_size, bias=False)
        self.heads, self.kv_heads, self.head_dim = (
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
        )


def _gelu_tanh(x: Tensor) -> Tensor:
    return nn.functional.gelu(x, approximate="tanh")


# transformers' ACT2FN for the activations a head may name (importing transformers for them costs ~3 s per
# conversion); gelu_new is the tanh approximation written out, which F.gelu computes too.
_ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "silu": nn.functional.silu,
    "swish": nn.functional.silu,
    "gelu": nn.functional.gelu,
    "gelu_new": _gelu_tanh,
    "gelu_pytorch_tanh": _gelu_tanh,
    "relu": nn.functional.relu,
}


class _Mlp(nn.Module):
    def __init__(self, config: HeadConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)
        self.act = _ACTIVATIONS[config.hidden_act]

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


class _MidLayer(nn.Module):
    def __init__(self, config: HeadConfig) -> None:
        super().__init__()
        self.hidden_norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = _Attention(config)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = _Mlp(config)


class EagleHead(nn.Module):
    """The head; its state_dict keys are the head folder's tensor names."""

    d2t: Tensor  # the registered buffer (nn.Module types its attributes as Tensor | Module)

    def __init__(self, config: HeadConfig, theta: float | None = None) -> None:
        super().__init__()
        self.config = config
        self.theta = config.rope_theta if theta is None else float(theta)
        self.fc = nn.Linear(3 * config.target_hidden_size, config.hidden_size, bias=False)
        self.midlayer = _MidLayer(config)
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.lm_head = nn.Linear(config.hidden_size, config.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(config.draft_vocab_size, dtype=torch.long))

    def forward(
        self,
        input_embeds: Tensor,
        hidden: Tensor,
        position_ids: Tensor,
        past: KV | None = None,
        mask: Tensor | None = None,
    ) -> tuple[Tensor, Tensor, KV]:
        """input_embeds, hidden [seq, hidden] (or [batch, seq, hidden]); position_ids [seq] (or [batch, seq]);
        past: the keys/values returned by the previous call. mask: bool [seq, past+seq], True where a query may
        attend (default causal: query i sees the past and current positions 0..i).
        Returns (log-probabilities over the draft vocabulary, out_hidden (the state before the final norm),
        the keys/values of past plus this call)."""
        batched = input_embeds.dim() == 3
        embeds, hidden = (input_embeds, hidden) if batched else (input_embeds[None], hidden[None])
        positions = position_ids if position_ids.dim() == 2 else position_ids[None].expand(embeds.shape[0], -1)
        layer = self.midlayer
        attention = layer.self_attn
        batch, seq, _ = embeds.shape
        x = torch.cat([layer.input_layernorm(embeds), layer.hidden_norm(hidden)], dim=-1)
        # The head's own rope at its own theta (scaled as its config says); plain rope at any other theta (the
        # faithfulness check compares against llmexport's built-in 10000).
        own = self.theta == self.config.rope_theta
        inverse = frequencies(attention.head_dim, self.theta, self.config.rope_scaling if own else None)
        q = rope(attention.q_proj(x).view(batch, seq, attention.heads, attention.head_dim), positions, inverse)
        k = rope(attention.k_proj(x).view(batch, seq, attention.kv_heads, attention.head_dim), positions, inverse)
        v = attention.v_proj(x).view(batch, seq, attention.kv_heads, attention.head_dim)
        if past is not None:
            k, v = torch.cat([past[0], k], dim=1), torch.cat([past[1], v], dim=1)
        total = k.shape[1]
        if mask is None:
            mask = torch.ones(seq, total, dtype=torch.bool).tril(total - seq)
        groups = attention.heads // attention.kv_heads
        keys = k.repeat_interleave(groups, dim=2).transpose(1, 2)  # [batch, heads, total, dim]
        values = v.repeat_interleave(groups, dim=2).transpose(1, 2)
        scores = q.transpose(1, 2) @ keys.transpose(-1, -2) / math.sqrt(attention.head_dim)
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        attended = (scores.softmax(-1) @ values).transpose(1, 2).reshape(batch, seq, -1)
        h = hidden + attention.o_proj(attended)
        h = h + layer.mlp(layer.post_attention_layernorm(h))
        logprobs = self.lm_head(self.norm(h)).log_softmax(-1)
        if not batched:
            return logprobs[0], h[0], (k, v)
        return logprobs, h, (k, v)

    def to_target(self, draft_ids: Tensor) -> Tensor:
        """Draft-vocabulary ids -> the target's ids (id + d2t[id])."""
        return draft_ids + self.d2t[draft_ids]


def load_head(folder: Path, theta: float | None = None, pickle: bool = False) -> EagleHead:
    """The head in `folder`, float32, in eval mode; theta defaults to the head's own rope_theta. `pickle`: read
    pytorch_model.bin (weights only) instead of model.safetensors."""
    from safetensors.torch import load_file

    folder = Path(folder)
    config = HeadConfig.from_folder(folder)
    weights = folder / ("pytorch_model.bin" if pickle else "model.safetensors")
    if not weights.is_file():
        raise CheckpointNotFound(f"{folder} has no {weights.name}", HEAD_HINT)
    state = torch.load(weights, map_location="cpu", weights_only=True) if pickle else load_file(str(weights))
    head = EagleHead(config, theta)
    expected = head.state_dict()
    missing = sorted(set(expected) - set(state))
    if missing:
        raise InvalidCheckpointConfig(f"the EAGLE head in {folder} has no {', '.join(missing)}", HEAD_HINT)
    for name, tensor in expected.items():
        if tuple(state[name].shape) != tuple(tensor.shape):
            raise InvalidCheckpointConfig(
                f"the EAGLE head's {name} is {list(state[name].shape)}, its config.json says {list(tensor.shape)}",
                HEAD_HINT,
            )
    # t2d (and a copied embed_tokens) are not part of what the head computes
    head.load_state_dict({name: state[name].to(tensor.dtype) for name, tensor in expected.items()})
    return head.eval()


def aux_layers(num_layers: int) -> list[int]:
    """The decoder layers whose INPUTS the target exports as `hidden_states` for the head (llmexport's
    utils/model.py: layers 2, N//2 and N-3, in layer order); HF's output_hidden_states[i] is layer i's input."""
    if num_layers < 7:
        raise InvalidCheckpointConfig(
            f"an EAGLE-3 target needs at least 7 layers, this one has {num_layers}",
            "llmexport reads the inputs of layers 2, N//2 and N-3, which coincide below 7",
        )
    from ..inspect.eagle_head import aux_layers as layers

    return list(layers(num_layers))


def aux_hidden_states(target: Any, ids: Sequence[int] | Tensor) -> Tensor:
    """[seq, 3*target_hidden] float32: the target's (an HF causal LM) aux hidden states for `ids`."""
    tensor = torch.as_tensor(ids, dtype=torch.long).reshape(1, -1)
    with torch.no_grad():
        states = target(input_ids=tensor, output_hidden_states=True).hidden_states
    layers = aux_layers(len(states) - 1)
    return torch.cat([states[i][0] for i in layers], dim=-1).float()


@dataclass(frozen=True)
class Decoded:
    tokens: list[int]  # the generated ids, the first (the target's own sample after the prompt) included
    accepted: list[int]  # tokens accepted per verification step (1 + matched drafts)


def _target_pass(target: Any, ids: list[int]) -> tuple[Tensor, Tensor]:
    tensor = torch.tensor([ids])
    with torch.no_grad():
        out = target(input_ids=tensor, output_hidden_states=True)
    layers = aux_layers(len(out.hidden_states) - 1)
    return out.logits[0].argmax(-1), torch.cat([out.hidden_states[i][0] for i in layers], dim=-1).float()


def draft_chain(head: EagleHead, embed: nn.Module, aux: Tensor, tokens: list[int], depth: int) -> list[int]:
    """The `depth` target ids the head drafts after `tokens` (eagle_topk 1: a chain), given the target's aux
    states for tokens[:-1]. As the engine's cache holds them: position i is fc(aux_i) with token i+1, then each
    deeper step is the head's own out_hidden with the token it just drafted, one position further."""
    length = len(tokens)
    assert aux.shape[0] == length - 1, "aux covers every token but the last"
    with torch.no_grad():
        logprobs, hidden, past = head(embed(torch.tensor(tokens[1:])), head.fc(aux), torch.arange(length - 1))
        drafts = [int(head.to_target(logprobs[-1].argmax()))]
        for step in range(1, depth):
            logprobs, hidden, past = head(
                embed(torch.tensor(drafts[-1:])), hidden[-1:], torch.tensor([length - 2 + step]), past
            )
            drafts.append(int(head.to_target(logprobs[-1].argmax())))
    return drafts


def eagle_decode(
    target: Any, head: EagleHead, prompt: list[int], n: int, depth: int = 3, stop: tuple[int, ...] = ()
) -> Decoded:
    """Greedy EAGLE decoding as MNN's EagleGeneration runs it with eagle_topk 1 (a chain of `depth` drafts per
    step, the longest prefix the target's argmax agrees with accepted, plus the target's next token). The
    tokens equal the target's plain greedy decoding; at least `n` are generated unless a stop id comes first."""
    predicted, aux = _target_pass(target, prompt)
    tokens = prompt + [int(predicted[-1])]
    generated, accepted = [tokens[-1]], []
    embed = target.get_input_embeddings()
    while len(generated) < n and generated[-1] not in stop:
        drafts = draft_chain(head, embed, aux[: len(tokens) - 1], tokens, depth)
        predicted, aux = _target_pass(target, tokens + drafts)
        verdict = predicted[len(tokens) - 1 :].tolist()
        matched = 0
        while matched < depth and drafts[matched] == verdict[matched]:
            matched += 1
        new = drafts[:matched] + [verdict[matched]]
        for token in new:
            generated.append(token)
            if token in stop:
                break
        tokens += new
        accepted.append(len(new))
    return Decoded(generated, accepted)


def greedy(target: Any, prompt: list[int], n: int, stop: tuple[int, ...] = ()) -> list[int]:
    """The target's plain greedy continuation (n tokens, or up to and including a stop id)."""
    from transformers import DynamicCache

    cache = DynamicCache()
    generated: list[int] = []
    step = torch.tensor([list(prompt)])
    with torch.no_grad():
        while len(generated) < n and not (generated and generated[-1] in stop):
            logits = target(input_ids=step, cache=cache, use_cache=True, logits_to_keep=1).logits
            generated.append(int(logits[0, -1].argmax()))
            step = torch.tensor([generated[-1:]])
    return generated
