"""The exported DFlash draft must compute what the checkpoint's draft computes, or the bundle is not written.

On the same inputs (the target's hidden states from the converted target graph's `hidden_states` output over a
short chat prompt, and the checkpoint's embeddings of each block: the next token, then mask tokens), the bundle's
dflash_fc.mnn + dflash.mnn (+ dflash_lmhead.mnn) run in MNN and z-lab's architecture runs in torch
(dflash.reference, float32), scoring with the target's lm_head as the target graph stores it (both sides then use
the same head, which the target's own checks cover). The block's logits must agree: per position the cosine of the
two logit vectors, and the top-1 token. The draft graph is 8-bit, so the logits differ by what rounding leaves
(measured on a random draft: cosine above 0.999, every top-1 equal), where a wrong rope, a layer out of order or a
swapped weight gives cosines far lower.

Those hidden states are the target graph's, and they are checked too: each layer's state the graph exposes
against transformers' (the target checkpoint in float32, hidden_states[id + 1], the convention z-lab's drafts are
trained on) over the same prompt, its linears rounded as the recipe stores them (plain round-to-nearest, as the
EAGLE-3 check does). What is left is MNN's arithmetic on the 4-bit weights, which grows with depth on random
weights: measured at 4 bits, the trained 8-layer target 2.2 % (4.5 % without the rounding emulated), a random
4-layer Llama 3.1-shaped one 14 % (28 %; 3.1 % at 8 bits), a random 28-layer Qwen3 0.6B-shaped one 24 % after layer
25 (42 %). What names a layer is that its state is nearer transformers' after that layer than after any other
(margins measured: 2.1x, 6.1x, 1.34x; a state one layer off is below 1x), within MAX_STATE_ERROR
(MAX_UNEMULATED_ERROR for a recipe not emulated, HQQ's). The last layer's state is the normed one, as
transformers gives it: the raw state is 3,190 % off the trained target's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import DFlashDraftUnfaithful, DFlashTargetUnfaithful
from ..eagle.faithful import PROBE, _embeddings, _relative, _target_hidden
from ..inspect.checkpoint import CheckpointInfo
from ..inspect.dflash_draft import DFlashDraft
from ..recipe import QuantRecipe

# The least cosine allowed between the exported block logits and the reference's, at any position.
MIN_COSINE = 0.99
# Agreement of the top-1 token over the checked positions (a near-tie may fall either way after rounding).
MIN_TOP1 = 0.9
STEPS = 3  # draft steps checked, at context lengths spread over the probe
# The exported top-1 agrees where the reference ranks it first or within this share of the row's logit range of its
# own first: an 8-bit draft may swap two tokens that close (a random draft's logits are full of them; measured: a
# position at cosine 0.9998 whose top two the reference puts 0.3% of the range apart).
NEAR_TIE = 0.01
# The most relative error allowed of an exposed target state against transformers' state after the layer it names,
# the reference's linears rounded as the recipe's (measured: up to 24 %), or not (a recipe this check does not
# emulate; measured up to 42 %).
MAX_STATE_ERROR = 0.35
MAX_UNEMULATED_ERROR = 0.6


@dataclass(frozen=True)
class Faithfulness:
    positions: int
    min_cosine: float
    top1_agreement: float
    context_error: float  # relative error of dflash_fc's output against the reference's
    state_error: float  # the most relative error of an exposed target state against transformers' (its layer's)
    state_margin: float  # the least ratio of its error to another layer's state over its error to its own layer's


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(-1) / np.maximum(np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1), 1e-12)


def _const(array: np.ndarray, integer: bool = False) -> Any:
    import MNN.expr as F

    data = np.ascontiguousarray(array, dtype=np.int32 if integer else np.float32)
    return F.const(data, list(data.shape), F.NCHW, F.int if integer else F.float)


def transformers_states(
    info: CheckpointInfo, embeds: np.ndarray, upto: int, recipe: QuantRecipe | None = None
) -> list[np.ndarray]:
    """transformers' hidden_states of the target over `embeds` [n, hidden], float32: [0] the embeddings, [i + 1]
    after layer i, through layer `upto` (the model is built with the layers up to one past it only, so the state
    after `upto` is the raw one unless `upto` is the model's last layer, as transformers gives it). With `recipe`,
    the layers' linears are rounded as it stores them first.

    The model is transformers' own, built without weights (on the meta device); each decoder layer gets its weights
    from the checkpoint as the forward reaches it and gives them back after, so one layer is in memory at a time and
    the embedding table (not used: the inputs are embeddings) never is. (A 0.6B target whole in float32 is 2.3 GB,
    whose pages cost more than its arithmetic; the states are the same, tested.)"""
    from contextlib import ExitStack

    import torch
    from safetensors import safe_open
    from transformers import AutoConfig, AutoModel

    from ..eagle.faithful import quantized
    from ..stream.weightwriter import index

    config = AutoConfig.from_pretrained(str(info.path))
    config.num_hidden_layers = min(int(config.num_hidden_layers), upto + 2)
    with torch.device("meta"):
        model = AutoModel.from_config(config, dtype=torch.float32).eval()
    for name, module in list(model.named_modules()):  # rotary tables are made at init: make them again, for real
        if any(buffer.is_meta for buffer in module.buffers(recurse=False)) and not list(module.parameters()):
            model.set_submodule(name, type(module)(config=config))
    refs = index(info.weight_files)
    prefix = "model." if any(key.startswith("model.") for key in refs) else ""
    with ExitStack() as opened:
        handles = {file: opened.enter_context(safe_open(str(file), framework="pt")) for file in info.weight_files}

        def load(module: Any, name: str) -> None:
            module.to_empty(device="cpu")
            with torch.no_grad():
                for key, param in module.named_parameters():
                    tensor = f"{prefix}{name}.{key}"
                    value = handles[refs[tensor].file].get_tensor(tensor).to(torch.float32)
                    if recipe is not None and isinstance(module.get_submodule(key.rpartition(".")[0]), torch.nn.Linear):
                        value = quantized(value, recipe.bits, recipe.block, recipe.symmetric)
                    param.copy_(value)

        def unload(module: Any, _args: Any, _out: Any) -> None:  # (a hook returning something replaces the output)
            module.to("meta")

        for index_, layer in enumerate(model.layers):
            layer.register_forward_pre_hook(lambda module, _args, name=f"layers.{index_}": load(module, name))
            layer.register_forward_hook(unload)
        load(model.norm, "norm")
        with torch.no_grad():
            out = model(inputs_embeds=torch.from_numpy(embeds)[None], output_hidden_states=True)
    return [state[0].numpy() for state in out.hidden_states[: upto + 2]]


def target_states(features: np.ndarray, wanted: list[np.ndarray], layer_ids: tuple[int, ...]) -> tuple[float, float]:
    """The exposed states (`features` [n, k * hidden]) against transformers' (`wanted`): the most error of a state
    against its own layer's, and the least ratio of its error to any other layer's over that."""
    width = features.shape[1] // len(layer_ids)
    worst, margin = 0.0, float("inf")
    for k, layer in enumerate(layer_ids):
        state = features[:, k * width : (k + 1) * width]
        errors = [_relative(state, other) for other in wanted]
        own = errors.pop(layer + 1)
        worst = max(worst, own)
        margin = min(margin, min(errors) / max(own, 1e-12))
    return worst, margin


def emulated(recipe: QuantRecipe) -> bool:
    """Whether the check rounds its reference as `recipe` stores the target (plain round-to-nearest; not HQQ)."""
    return recipe.algorithm == "plain"


@dataclass(frozen=True)
class Prepared:
    """The torch side of the check, which needs nothing of the bundle (made beside the conversion): the probe's
    ids and embeddings, the mask token's row, transformers' states and the reference draft."""

    ids: list[int]
    embeds: np.ndarray  # [n, hidden] float32
    mask_row: np.ndarray
    states: list[np.ndarray]
    reference: Any  # packager.convert.dflash.reference.Reference


def prepare(draft: DFlashDraft, info: CheckpointInfo, recipe: QuantRecipe) -> Prepared:
    from tokenizers import Tokenizer

    from .reference import Reference

    ids = Tokenizer.from_file(str(info.path / "tokenizer.json")).encode(PROBE, add_special_tokens=False).ids
    embeds = _embeddings(info, [*ids, draft.mask_token_id])
    wanted = transformers_states(info, embeds[:-1], max(draft.target_layer_ids), recipe if emulated(recipe) else None)
    return Prepared(ids, embeds[:-1], embeds[-1], wanted, Reference(draft))


def measure(
    bundle: Path,
    draft: DFlashDraft,
    info: CheckpointInfo,
    recipe: QuantRecipe,
    threads: int = 2,
    prepared: Prepared | None = None,
) -> Faithfulness:
    import torch

    from ...bundle.modes import DFLASH_LMHEAD_INPUTS, DFLASH_LMHEAD_OUTPUTS, dflash_draft_outputs
    from ...runtime.mnn import quiet_stdout
    from .graph import DRAFT_INPUTS, FC_INPUTS, FC_OUTPUTS

    ready = prepared if prepared is not None else prepare(draft, info, recipe)
    ids, embeds, mask_row, reference = ready.ids, ready.embeds, ready.mask_row, ready.reference
    features = _target_hidden(bundle, embeds, threads)  # [n, k*hidden]: after each target layer named
    states = target_states(features, ready.states, draft.target_layer_ids)
    separate = _separate_head(bundle)
    with quiet_stdout():
        import MNN.nn as nn

        fc = nn.load_module_from_file(str(bundle / "dflash_fc.mnn"), FC_INPUTS, FC_OUTPUTS)
        main = nn.load_module_from_file(str(bundle / "dflash.mnn"), DRAFT_INPUTS, dflash_draft_outputs(bool(separate)))
        scorer = (
            nn.load_module_from_file(str(separate), DFLASH_LMHEAD_INPUTS, DFLASH_LMHEAD_OUTPUTS) if separate else None
        )
        block = draft.block_size
        context_errors, exported, states_ref = [], [], []
        n = len(ids)
        for length in sorted({max(1, n * (s + 1) // (STEPS + 1)) for s in range(STEPS)}):
            feats = features[:length]
            exported_ctx = np.array(fc.forward([_const(feats[None])])[0].read(), dtype=np.float32).reshape(length, -1)
            want_ctx = reference.context(torch.from_numpy(feats)).numpy()
            context_errors.append(_relative(exported_ctx, want_ctx))
            noise = np.stack([embeds[length], *([mask_row] * (block - 1))])  # the next token, then masks
            out = main.forward(
                [
                    _const(noise[None]),
                    _const(exported_ctx[None]),
                    _const(np.zeros((1, 1, block, length + block))),
                    _const(np.arange(length, length + block)[None], integer=True),
                    _const(np.arange(length + block)[None], integer=True),
                ]
            )[0]
            if scorer is not None:
                out = scorer.forward([out])[0]
            exported.append(np.array(out.read(), dtype=np.float32).reshape(block, -1)[1:])  # 0 is never a draft
            states_ref.append(reference.hidden(reference.context(torch.from_numpy(feats)), torch.from_numpy(noise))[1:])
    got = np.concatenate(exported)
    want = stored_head_logits(bundle, torch.cat(states_ref).numpy())  # every step's positions in one pass
    cosines = _cosines(got, want).tolist()
    picked = np.take_along_axis(want, got.argmax(-1)[:, None], axis=-1)[:, 0]
    spread = want.max(-1) - want.min(-1)
    agree = (picked >= want.max(-1) - NEAR_TIE * spread).tolist()
    return Faithfulness(
        positions=len(cosines),
        min_cosine=float(min(cosines)),
        top1_agreement=float(np.mean(agree)),
        context_error=float(max(context_errors)),
        state_error=states[0],
        state_margin=states[1],
    )


def stored_head_logits(bundle: Path, states: np.ndarray) -> np.ndarray:
    """`states` [n, hidden] scored by the target's lm_head as its graph computes with it (dequantized from
    llm.mnn.weight a few thousand rows at a time: a 0.6B target's head whole in float32 is 622 MB, whose pages
    cost more than the arithmetic)."""
    import json

    from ...bundle.graph import read
    from ...bundle.quantized import dequantized_rows

    head = read(json.loads((bundle / "llm.mnn.json").read_text(encoding="utf-8"))).lm_head
    if head is None:
        raise ValueError("the target graph has no lm_head")
    states = np.ascontiguousarray(states, dtype=np.float32)
    logits = np.empty((states.shape[0], head.out_features), np.float32)
    for first, rows in dequantized_rows(bundle / "llm.mnn.weight", head):
        np.matmul(states, rows.T, out=logits[:, first : first + rows.shape[0]])
    return logits


def _separate_head(bundle: Path) -> Path | None:
    """The lm_head graph the bundle's config names for its draft (dflash_lmhead), if any."""
    import json

    from ...bundle.modes import DFLASH_LMHEAD_KEY

    name = json.loads((bundle / "config.json").read_text(encoding="utf-8")).get(DFLASH_LMHEAD_KEY)
    return bundle / name if isinstance(name, str) and name else None


def check(
    bundle: Path, draft: DFlashDraft, info: CheckpointInfo, recipe: QuantRecipe, prepared: Prepared | None = None
) -> Faithfulness:
    found = measure(bundle, draft, info, recipe, prepared=prepared)
    bound = MAX_STATE_ERROR if emulated(recipe) else MAX_UNEMULATED_ERROR
    if found.state_error > bound or found.state_margin <= 1.0:
        raise DFlashTargetUnfaithful(
            f"the target graph's hidden states are not transformers' after layers "
            f"{list(draft.target_layer_ids)}: {found.state_error:.1%} off (at most {bound:.0%} expected), "
            f"{found.state_margin:.2f}x closer to their own layers' states than to any other's (above 1 expected)"
        )
    if found.min_cosine < MIN_COSINE or found.top1_agreement < MIN_TOP1:
        raise DFlashDraftUnfaithful(
            f"the exported DFlash draft differs from the checkpoint's: block logits cosine down to "
            f"{found.min_cosine:.4f} (at least {MIN_COSINE} expected) and top-1 agreement "
            f"{found.top1_agreement:.0%} over {found.positions} positions"
        )
    return found
