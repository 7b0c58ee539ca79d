"""The torch patches the converter worker applies to llmexport, one registry keyed by the names families declare
(`Family.patches`): each fixes what llmexport 0.0.5 exports otherwise than transformers computes. Runs inside the
worker after llmexport is imported; a patch returns the objects it changed (the worker checks one was)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...bundle.engine import NO_C4_FUSION
from ...families import rope_type


def head_rope(theta: float, scaling: dict[str, Any] | None = None) -> None:
    """llmexport builds every EAGLE head's rope with theta 10000 (utils/eagle.py); Qwen3 heads are trained at
    1e6. The head's own theta goes into the rope its graph is traced with. (The converter then checks the
    exported head against the checkpoint's, so a change here that stopped working could not pass unseen.)"""
    import utils.eagle
    from utils.transformers import Rotary

    original = utils.eagle.Eagle.__init__
    if scaling:
        _head_config_without_scaling(utils.eagle)

    def init(self: Any, eagle_path: str, base: Any) -> None:
        original(self, eagle_path, base)
        self.rope_theta = theta
        self.config.rotary = Rotary(self)
        if scaling:  # a Llama 3.1 head's llama3 frequencies, as transformers computes them
            from ..rope import frequencies

            self.config.rotary.theta = frequencies(self.config.rotary.rotary_dim, theta, scaling)

    utils.eagle.Eagle.__init__ = init


def _head_config_without_scaling(module: Any) -> None:
    """llmexport reads the head's config.json with transformers' base PretrainedConfig, which under transformers 5
    cannot take a rope scaling (it standardizes the rope before max_position_embeddings is set). llmexport never
    uses the scaling (the frequencies come from _head_rope), so the head's config is read without it."""
    base = module.PretrainedConfig

    class WithoutScaling(base):  # type: ignore[misc,valid-type]
        @classmethod
        def from_json_file(cls, path: Any) -> Any:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
            for key in ("rope_scaling", "rope_parameters"):
                data.pop(key, None)
            return base(**data)

    module.PretrainedConfig = WithoutScaling


def dflash_hidden_states(layer_ids: tuple[int, ...]) -> list[Any]:
    """A DFlash draft reads the target's hidden states *after* the layers its config names (z-lab's
    hidden_states[id + 1]), concatenated in that order; llmexport 0.0.5 knows only EAGLE-3's (the inputs of layers
    2, N//2 and N-3). The model's `hidden_states` output (otherwise the last normed state, which MNN's DFlash mode
    does not read) becomes those layers' outputs: each named layer is hooked while the model runs, and its output
    kept. transformers' hidden_states[N] (the last layer's) is the final norm's output, not the layer's: a draft
    trained on it gets it normed here too, over every position (MNN's own exporter takes the layer's raw output, 30x
    off a trained 8-layer target's normed state; the faithful check compares every state with transformers').
    Returns the list of traced forwards (the worker checks the graph was traced through it)."""
    import torch
    import utils.model

    original = utils.model.LlmModel.forward
    traced: list[Any] = []

    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        seen: dict[int, Any] = {}
        hooks = [
            self.blocks[i].register_forward_hook(lambda _m, _a, out, i=i: seen.__setitem__(i, out)) for i in layer_ids
        ]
        try:
            logits, _last, *rest = original(self, *args, **kwargs)
        finally:
            for hook in hooks:
                hook.remove()
        traced.append(self)
        last = len(self.blocks) - 1
        states = [self.final_layernorm(seen[i]) if i == last else seen[i] for i in layer_ids]
        return (logits, torch.cat(states, dim=-1), *rest)

    utils.model.LlmModel.forward = forward
    return traced


def transformers_rope(source: Path) -> list[Any]:
    """llmexport's Rotary knows dynamic, yarn and longrope; any other rope type (llama3) falls back to the default
    frequencies, wrong by up to 32x on Llama 3.2. The rotary built for the checkpoint's own config gets
    transformers' frequencies for its rope type instead (the reference the families issue names); a rotary of
    another config (an EAGLE head's) is left as it was. tests/test_families.py checks the graph's logits at
    positions past 1,024 against transformers'."""
    import torch
    from transformers import AutoConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    from utils.transformers import Rotary

    config = AutoConfig.from_pretrained(str(source))
    kind = rope_type(json.loads((source / "config.json").read_text(encoding="utf-8")))
    inv_freq, scaling = ROPE_INIT_FUNCTIONS[kind](config, "cpu")
    if scaling != 1.0:
        raise RuntimeError(f"rope type {kind} scales attention by {scaling}, which packager does not export")
    own = dict(config.rope_parameters or {})
    original = Rotary.__init__
    fixed: list[Any] = []  # the rotaries given the frequencies (the caller checks there is one)

    def init(self: Any, rotary_config: Any) -> None:
        original(self, rotary_config)
        params = getattr(rotary_config, "rope_parameters", None)
        if isinstance(params, dict) and dict(params) == own and self.rotary_dim == 2 * inv_freq.numel():
            self.theta = inv_freq.to(torch.float32).clone()
            fixed.append(self)

    Rotary.__init__ = init
    return fixed


def per_layer_type_rope(source: Path) -> list[Any]:
    """Gemma 3 gives each layer type its own rope (base 10,000 for sliding-window layers, 1,000,000 for global ones,
    the global scaled linearly from 4b up). llmexport 0.0.5 builds a second rotary only for gemma4, so every Gemma 3
    layer got the local base. The model llmexport builds gets transformers' own frequencies for each layer type
    (from the checkpoint's rotary embedding module): the sliding one in its rotary, the global one in the
    `rotary_full` its forward already uses for every layer outside `sliding_attn_layers`.
    tests/test_gemma3.py checks the graph's logits past position 1,024 against transformers'."""
    import copy

    import torch
    import utils.model
    from transformers import AutoConfig
    from transformers.models.gemma3.modeling_gemma3 import Gemma3RotaryEmbedding

    config = AutoConfig.from_pretrained(str(source))
    rotary = Gemma3RotaryEmbedding(config)
    frequencies = {}
    for kind in ("sliding_attention", "full_attention"):
        if not hasattr(rotary, f"{kind}_inv_freq"):  # no layer of this kind: the other's serves (and is unused)
            continue
        scaling = getattr(rotary, f"{kind}_attention_scaling")
        if scaling != 1.0:
            raise RuntimeError(f"the {kind} rope scales attention by {scaling}, which packager does not export")
        frequencies[kind] = getattr(rotary, f"{kind}_inv_freq").to(torch.float32).clone()
    for kind, other in (("sliding_attention", "full_attention"), ("full_attention", "sliding_attention")):
        frequencies.setdefault(kind, frequencies[other])
    original = utils.model.LlmModel.from_pretrained.__func__
    fixed: list[Any] = []

    def from_pretrained(cls: Any, *args: Any, **kwargs: Any) -> Any:
        model = original(cls, *args, **kwargs)
        local = model.rotary
        if local is None or local.rotary_dim != 2 * frequencies["full_attention"].numel():
            return model
        if model.rotary_full is not None:
            raise RuntimeError(
                "llmexport built this model with a rotary per layer kind already; packager's fix is stale"
            )
        glob = copy.deepcopy(local)
        local.theta, glob.theta = frequencies["sliding_attention"], frequencies["full_attention"]
        model.rotary_full = glob
        fixed.append(model)
        return model

    utils.model.LlmModel.from_pretrained = classmethod(from_pretrained)
    return fixed


# MNNConvert runs FuseTransformerC4 only in the MNN-to-MNN pass at --optimizeLevel=1 (llmexport's removeDupOps;
# tools/converter/source/common/cli.cpp, MNN 3.6.1), unless --transformerFuseC4 is 0.


def without_c4_fusion(converter: Any) -> None:
    """Every MNNConvert run llmexport makes that would fuse attention to C4 gets --transformerFuseC4=0."""
    original = converter.convert

    def convert(self: Any, convert_args: list[str]) -> Any:
        if "--optimizeLevel=1" in convert_args:
            convert_args = [*convert_args, NO_C4_FUSION]
        return original(self, convert_args)

    converter.convert = convert


def embed_scale(model: Any) -> None:
    """The embedding scale (sqrt(hidden), a constant of the trace) of a weightless model: to_empty left the buffer
    unwritten, and the scaled embedding module keeps the value as a number as well."""
    import torch

    for module in model.modules():
        scale = getattr(module, "scalar_embed_scale", None)
        if scale is not None and isinstance(getattr(module, "embed_scale", None), torch.Tensor):
            module.embed_scale.fill_(scale)


# name -> the patch, given the checkpoint folder (the names are what families declare; tests/test_family_contract.py
# checks every declared name is here).
PATCHES: dict[str, Callable[[Path], list[Any]]] = {
    "transformers_rope": transformers_rope,
    "per_layer_type_rope": per_layer_type_rope,
}


# name -> what writes a buffer of the weightless model the graph-only export traces (packager.convert.fence.skeleton).
FILLS: dict[str, Callable[[Any], None]] = {"embed_scale": embed_scale}


def apply(names: tuple[str, ...], source: Path) -> dict[str, list[Any]]:
    """Each named patch installed for the checkpoint at `source`: name -> the list its patch fills as llmexport
    builds the model (the names of FILLS are the skeleton's, `fills`)."""
    return {name: PATCHES[name](source) for name in names if name not in FILLS}


def fills(names: tuple[str, ...]) -> tuple[Callable[[Any], None], ...]:
    """The named buffer fills of the weightless model, in the order named."""
    return tuple(FILLS[name] for name in names if name in FILLS)
