"""Where each checkpoint tensor goes in llm.mnn.weight, read from the graph's `external` fields.

llmexport lays the weight file out as one region per graph op that holds weights, in graph order: a
LayerNorm region is gamma then beta (float32; an RMSNorm has no beta, so zeros; Gemma's gamma is 1 + w) and a
Convolution (Linear) region is header + packed quantized weight, then alpha (zero point and scale per block, float32),
then the bias (float32; Qwen2's q/k/v projections have one, Qwen3 and Llama none). With tied embeddings
lm_head's region quantizes the embedding table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from ...families import Layout
from .quant import QuantSpec

_LINEAR = re.compile(r"^/layers\.(?P<layer>\d+)/(?P<group>self_attn|mlp)/(?P<proj>[a-z_]+_proj)/Linear$")
_NORM = re.compile(r"^/blocks\.(?P<layer>\d+)/(?P<attn>self_attn/)?(?P<norm>[a-z_]+norm)/Mul_1_output_0$")
_LM_HEAD_OP = "/lm/lm_head/Linear"
# The final norm's op is named after its output: "hidden_states", or, when an EAGLE-3 head takes that output
# name for the concatenated hidden states it reads, after the module; a DFlash draft that reads the last layer
# gets it normed by a second call of the module, named after it (fence.patches.dflash_hidden_states).
_FINAL_NORMS = ("hidden_states", "/final_layernorm/Mul_1_output_0", "/final_layernorm_1/Mul_1_output_0")
EMBED = "model.embed_tokens.weight"
LM_HEAD = "lm_head.weight"  # an untied checkpoint's own output projection


class LayoutUnknown(Exception):
    """The graph holds a weight region packager cannot map to a checkpoint tensor."""


@dataclass(frozen=True)
class Region:
    op: str
    kind: Literal["norm", "linear"]
    tensor: str
    offset: int
    lengths: tuple[int, ...]
    out_features: int = 0
    in_features: int = 0
    bias: str = ""  # the tensor of a linear's bias, written after its alpha
    norm_offset: float = 0.0  # a norm's gamma is norm_offset + w in float32 (Gemma's 1 + w)

    @property
    def size(self) -> int:
        return sum(self.lengths)


def regions(graph: dict[str, Any], spec: QuantSpec, tied: bool, norm_offset: float = 0.0) -> tuple[Region, ...]:
    """Every weight region of the graph with its source tensor, checked to tile the weight file exactly; a norm's
    gamma is `norm_offset` + its weight (the family's: Gemma computes x * (1 + w))."""
    found = []
    for op in graph.get("oplists") or []:
        main = op.get("main") if isinstance(op.get("main"), dict) else {}
        external = main.get("external")
        if not isinstance(external, list):
            continue
        name = str(op.get("name"))
        if op.get("type") == "LayerNorm":
            lengths = tuple(int(x) for x in external[1:])
            found.append(Region(name, "norm", _norm_tensor(name), int(external[0]), lengths, norm_offset=norm_offset))
        elif op.get("type") == "Convolution":
            common = main.get("common") or {}
            tensor = _linear_tensor(name, tied)
            lengths = tuple(int(x) for x in external[1:])
            found.append(
                Region(
                    name,
                    "linear",
                    tensor,
                    int(external[0]),
                    lengths,
                    int(common.get("outputCount", 0)),
                    int(common.get("inputCount", 0)),
                    tensor.removesuffix(".weight") + ".bias" if len(lengths) > 2 and lengths[2] else "",
                )
            )
        else:
            raise LayoutUnknown(f"graph op {name} ({op.get('type')}) holds weights packager cannot map")
    _check(found, spec)
    return tuple(found)


def predict(
    hidden: int,
    layers: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    intermediate: int,
    vocab: int,
    spec: QuantSpec,
    tied: bool = True,
    *,
    family: Layout,
) -> tuple[Region, ...]:
    """The regions llmexport lays out for a dense decoder of this shape and family layout,
    before the graph exists (so the weights can be written while it is built); checked against the graph's own
    layout before use."""
    found: list[Region] = []

    def add(name: str, kind: str, out_features: int = 0, in_features: int = 0, bias: bool = False) -> None:
        offset = total_size(tuple(found))
        if kind == "linear":
            lengths = (*spec.sizes(out_features, in_features), out_features * 4 if bias else 0, 0)
            bias_name = name.removesuffix(".weight") + ".bias" if bias else ""
            found.append(Region("", "linear", name, offset, lengths, out_features, in_features, bias_name))
        else:
            widths = (out_features * 4, out_features * 4)
            found.append(Region("", "norm", name, offset, widths, norm_offset=family.norm_offset))

    rows = family.layer(hidden, heads, kv_heads, head_dim, intermediate)
    for layer in range(layers):
        for suffix, kind, out_features, in_features, bias in rows:
            add(f"model.layers.{layer}.{suffix}.weight", kind, out_features, in_features, bias)
    add("model.norm.weight", "norm", hidden)
    add(EMBED if tied else LM_HEAD, "linear", vocab, hidden)
    return tuple(found)


def placement(regions: tuple[Region, ...]) -> list[tuple[str, str, int, tuple[int, ...], int, int, str, float]]:
    """What decides the weight file's bytes: each region's tensor, kind, offset, lengths, shape and norm offset."""
    return sorted(
        (r.tensor, r.kind, r.offset, r.lengths, r.out_features, r.in_features, r.bias, r.norm_offset) for r in regions
    )


def total_size(layout: tuple[Region, ...]) -> int:
    return max((r.offset + r.size for r in layout), default=0)


def _linear_tensor(name: str, tied: bool) -> str:
    if name == _LM_HEAD_OP:
        return EMBED if tied else LM_HEAD
    match = _LINEAR.match(name)
    if not match:
        raise LayoutUnknown(f"graph op {name} is a Linear packager cannot map to a checkpoint tensor")
    return f"model.layers.{match['layer']}.{match['group']}.{match['proj']}.weight"


def _norm_tensor(name: str) -> str:
    if name in _FINAL_NORMS:
        return "model.norm.weight"
    match = _NORM.match(name)
    if not match:
        raise LayoutUnknown(f"graph op {name} is a norm packager cannot map to a checkpoint tensor")
    return f"model.layers.{match['layer']}.{'self_attn.' if match['attn'] else ''}{match['norm']}.weight"


def _check(found: list[Region], spec: QuantSpec) -> None:
    end = 0
    for region in sorted(found, key=lambda r: r.offset):
        if region.offset != end:
            raise LayoutUnknown(
                f"weight regions do not tile the file at {region.op} (offset {region.offset}, expected {end})"
            )
        expected: tuple[int, ...]
        if region.kind == "linear":
            bias = region.out_features * 4 if region.bias else 0
            expected = (*spec.sizes(region.out_features, region.in_features), bias, 0)
        else:
            expected = (region.lengths[0], region.lengths[0])
        if region.lengths != expected:
            raise LayoutUnknown(f"{region.op} has weight lengths {list(region.lengths)}, expected {list(expected)}")
        end += region.size
