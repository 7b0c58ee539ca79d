"""A DFlash draft checkpoint (z-lab's `DFlashDraftModel` layout), checked against its target before any work.

MNN's own exporter (its source tree, tag 3.6.1) loads the draft with strict=False, so a misnamed tensor stays
random; it defaults a missing mask_token_id to 0 and builds the attention with the target's shapes without looking
at the draft's. Everything that would make the exported draft compute something else than the checkpoint, or draft
for another target, is refused here in one line each, before anything is written.

The layout: a Qwen3Config plus `block_size`, `num_target_layers` (the target's depth) and `dflash_config`
(`mask_token_id`, `target_layer_ids`); tensors `layers.N.*`, `norm`, `fc` and `hidden_norm`, no embeddings and no
lm_head (the draft reads the target's).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeGuard

from ...errors import (
    CorruptWeights,
    DFlashDraftLayout,
    DFlashDraftMismatch,
    DFlashMaskToken,
    shorten,
)
from ...infra.jsonfile import read_json
from ..rope import scaling_of
from . import values
from .checkpoint import CheckpointInfo
from .safetensors_header import tensor_refs

# The activations the exported draft's MLP can compute (transformers' ACT2FN names of a Qwen3-style MLP).
ACTIVATIONS = ("silu", "gelu", "gelu_new", "gelu_pytorch_tanh", "relu", "swish")
# Scaled ropes the exported draft can carry (transformers' frequencies, as for EAGLE-3 heads): Llama 3.1 drafts.
ROPE_TYPES = ("llama3",)
# The block sizes packager exports: one drafts nothing; the engine verifies the whole block in one target pass,
# so a block wider than this costs more target work per step than any published draft accepts.
MIN_BLOCK, MAX_BLOCK = 2, 64
_FLOAT = {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}


@dataclass(frozen=True)
class DFlashDraft:
    path: Path
    weights: Path
    hidden_size: int
    intermediate_size: int
    num_layers: int  # the draft's own decoder layers
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    rms_norm_eps: float
    hidden_act: str
    rope_theta: float
    block_size: int
    mask_token_id: int
    target_layer_ids: tuple[int, ...]  # the target layers whose outputs feed fc, in fc's order
    layer_ids_given: bool  # False: derived as z-lab's build_target_layer_ids does (the config names none)
    dtype: str  # the stored float dtype of its weights
    rope_scaling: dict[str, Any] | None = None


def build_target_layer_ids(num_target_layers: int, num_draft_layers: int) -> tuple[int, ...]:
    """z-lab's default when dflash_config names no target_layer_ids: one layer per draft layer, spread from layer 1
    to the target's fourth-last (its middle layer for a one-layer draft)."""
    if num_draft_layers == 1:
        return (num_target_layers // 2,)
    start, end = 1, num_target_layers - 3
    return tuple(round(start + i * (end - start) / (num_draft_layers - 1)) for i in range(num_draft_layers))


def expected_shapes(draft: DFlashDraft) -> dict[str, tuple[int, ...]]:
    h, inter, d = draft.hidden_size, draft.intermediate_size, draft.head_dim
    q, kv = draft.num_heads * d, draft.num_kv_heads * d
    shapes: dict[str, tuple[int, ...]] = {
        "fc.weight": (h, len(draft.target_layer_ids) * h),
        "hidden_norm.weight": (h,),
        "norm.weight": (h,),
    }
    for i in range(draft.num_layers):
        p = f"layers.{i}."
        shapes.update(
            {
                p + "input_layernorm.weight": (h,),
                p + "post_attention_layernorm.weight": (h,),
                p + "self_attn.q_proj.weight": (q, h),
                p + "self_attn.k_proj.weight": (kv, h),
                p + "self_attn.v_proj.weight": (kv, h),
                p + "self_attn.o_proj.weight": (h, q),
                p + "self_attn.q_norm.weight": (d,),
                p + "self_attn.k_norm.weight": (d,),
                p + "mlp.gate_proj.weight": (inter, h),
                p + "mlp.up_proj.weight": (inter, h),
                p + "mlp.down_proj.weight": (h, inter),
            }
        )
    return shapes


def inspect_dflash(path: Path, target: CheckpointInfo) -> DFlashDraft:
    """Check the draft folder against the target and describe it; raises DFlashDraftLayout, DFlashDraftMismatch or
    DFlashMaskToken (one line each)."""
    folder = _folder(path)
    config = read_json(folder / "config.json", DFlashDraftLayout) if (folder / "config.json").is_file() else None
    if not isinstance(config, dict):
        raise DFlashDraftLayout(
            f"{folder} has no config.json object" if config is None else f"{folder}/config.json is not a JSON object"
        )
    weights = _weights(folder)
    draft = _describe(folder, config, weights, target)
    refs = _refs(weights)
    dtype = _check_tensors(draft, refs)
    _check_mask_token(draft, target)
    return replace(draft, dtype=dtype)


def _folder(path: Path) -> Path:
    if not path.exists():
        raise DFlashDraftLayout(f"DFlash draft folder {shorten(str(path))} does not exist")
    if not path.is_dir():
        raise DFlashDraftLayout(f"DFlash draft {shorten(str(path))} is not a folder")
    return path.resolve()


def _weights(folder: Path) -> Path:
    safe = folder / "model.safetensors"
    if safe.is_file():
        return safe
    if (folder / "pytorch_model.bin").is_file():
        raise DFlashDraftLayout(
            f"the DFlash draft {folder.name} is stored as pytorch_model.bin (a pickle), which packager does not read",
            "re-save it as model.safetensors (safetensors.torch.save_file)",
        )
    shards = sorted(p.name for p in folder.glob("*.safetensors"))
    found = f" (found {', '.join(shards[:3])}: a DFlash draft is one model.safetensors)" if shards else ""
    raise DFlashDraftLayout(f"{folder} has no model.safetensors{found}")


def _integer(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _describe(folder: Path, config: dict[str, Any], weights: Path, target: CheckpointInfo) -> DFlashDraft:
    where = f"{folder.name}/config.json"
    shape = target.shape
    dflash = config.get("dflash_config")
    if not isinstance(dflash, dict):
        what = (
            "no dflash_config" if dflash is None else f"a dflash_config that is not a table ({shorten(repr(dflash))})"
        )
        raise DFlashDraftLayout(f"{where} has {what}: not a DFlash draft (z-lab's DFlashDraftModel layout)")

    def positive(key: str, default: Any = None, kind: type = int) -> Any:
        return values.positive(config, key, where, DFlashDraftLayout, default, kind)

    hidden = positive("hidden_size")
    if hidden != shape.hidden_size:
        raise DFlashDraftMismatch(f"{where}: hidden_size {hidden} differs from the target's {shape.hidden_size}")
    heads = positive("num_attention_heads")
    kv_heads = positive("num_key_value_heads", heads)
    head_dim = positive("head_dim", hidden // heads)
    for key, mine, theirs in (
        ("num_attention_heads", heads, shape.num_heads),
        ("num_key_value_heads", kv_heads, shape.num_kv_heads),
        ("head_dim", head_dim, shape.head_dim),
    ):
        if mine != theirs:
            raise DFlashDraftMismatch(f"{where}: {key} {mine} differs from the target's {theirs}")
    vocab = positive("vocab_size")
    if vocab != shape.vocab_size:
        raise DFlashDraftMismatch(f"{where}: vocab_size {vocab} differs from the target's {shape.vocab_size}")
    layers = positive("num_hidden_layers")
    depth = config.get("num_target_layers")
    if depth is not None and depth != shape.num_layers:
        raise DFlashDraftMismatch(
            f"{where}: num_target_layers {shorten(repr(depth))} differs from the target's {shape.num_layers} layers "
            "(a draft made for another target)"
        )
    block = config.get("block_size")
    if not _integer(block) or not MIN_BLOCK <= block <= MAX_BLOCK:
        raise DFlashDraftLayout(
            f"{where}: block_size {shorten(repr(block))} is not one the exported graph takes "
            f"(an integer from {MIN_BLOCK} to {MAX_BLOCK})"
        )
    ids = _layer_ids(where, dflash, shape.num_layers, layers)
    mask = dflash.get("mask_token_id")
    if not _integer(mask):
        raise DFlashMaskToken(
            f"{where}: dflash_config.mask_token_id is {'missing' if mask is None else shorten(repr(mask))}, "
            "expected the id of the token the draft was trained to fill (MNN's exporter would use 0)"
        )
    if not 0 <= mask < shape.vocab_size:
        raise DFlashMaskToken(
            f"{where}: dflash_config.mask_token_id {mask} has no embedding row in the target "
            f"(its vocabulary has {shape.vocab_size} rows)"
        )
    act = config.get("hidden_act", "silu")
    if act not in ACTIVATIONS:
        raise DFlashDraftLayout(
            f"{where}: hidden_act {shorten(repr(act))} is not one packager can check ({', '.join(ACTIVATIONS)})"
        )
    if config.get("attention_bias") is True:
        raise DFlashDraftLayout(f"{where}: attention_bias is true; the exported DFlash graph has no attention biases")
    sliding = [t for t in config.get("layer_types") or () if t != "full_attention"]
    if config.get("use_sliding_window") is True or sliding:
        raise DFlashDraftLayout(
            f"{where}: sliding-window attention is not supported in a DFlash draft (the exported graph attends to "
            "the whole context)"
        )
    scaled = scaling_of(config)
    if scaled is not None and scaled.get("rope_type", scaled.get("type")) not in ROPE_TYPES:
        raise DFlashDraftLayout(
            f"{where}: rope_scaling {shorten(repr(scaled))} is not supported (the exported draft applies plain "
            f"rope or {', '.join(ROPE_TYPES)})"
        )
    params = config.get("rope_parameters")
    theta_default = params.get("rope_theta", 10000.0) if isinstance(params, dict) else 10000.0
    theta = positive("rope_theta", theta_default, float)
    return DFlashDraft(
        path=folder,
        weights=weights,
        hidden_size=hidden,
        intermediate_size=positive("intermediate_size"),
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        vocab_size=vocab,
        rms_norm_eps=float(positive("rms_norm_eps", 1e-6, float)),
        hidden_act=str(act),
        rope_theta=float(theta),
        rope_scaling=scaled,
        block_size=block,
        mask_token_id=mask,
        target_layer_ids=ids,
        layer_ids_given="target_layer_ids" in dflash,
        dtype="",
    )


def _layer_ids(where: str, dflash: dict[str, Any], target_layers: int, draft_layers: int) -> tuple[int, ...]:
    if "target_layer_ids" not in dflash:
        ids = build_target_layer_ids(target_layers, draft_layers)
    else:
        given = dflash["target_layer_ids"]
        if not isinstance(given, list) or not given or not all(_integer(i) for i in given):
            raise DFlashDraftLayout(
                f"{where}: dflash_config.target_layer_ids must be a non-empty list of layer indices, "
                f"found {shorten(repr(given))}"
            )
        ids = tuple(given)
    outside = [i for i in ids if not 0 <= i < target_layers]
    if outside:
        raise DFlashDraftMismatch(
            f"{where}: dflash_config.target_layer_ids {list(ids)} name layer(s) {outside} outside the target's "
            f"{target_layers} layers (0 to {target_layers - 1})"
        )
    if list(ids) != sorted(set(ids)):
        raise DFlashDraftLayout(
            f"{where}: dflash_config.target_layer_ids {list(ids)} must be strictly increasing (MNN's target graph "
            "concatenates the layers' outputs in layer order)"
        )
    return ids


def _refs(weights: Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    try:
        return {name: (ref.dtype, ref.shape) for name, ref in tensor_refs(weights).items()}
    except CorruptWeights as exc:
        raise DFlashDraftLayout(
            f"the DFlash draft's {exc.message}", "re-save the draft's model.safetensors (safetensors.torch.save_file)"
        ) from None


def _check_tensors(draft: DFlashDraft, refs: dict[str, tuple[str, tuple[int, ...]]]) -> str:
    """Refuse missing, unexpected or misshapen tensors (never a partial load); return the weights' float dtype."""
    expected = expected_shapes(draft)
    missing = [n for n in expected if n not in refs]
    unexpected = sorted(n for n in refs if n not in expected)
    if any(n.startswith(("midlayer.", "model.layers.")) for n in unexpected) and len(missing) > len(expected) // 2:
        what = "an EAGLE-3 head" if any(n.startswith("midlayer.") for n in unexpected) else "a model checkpoint"
        raise DFlashDraftLayout(f"{draft.path.name} holds {what} ({len(refs)} tensors), not a DFlash draft")
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"missing {_some(missing)}")
        if unexpected:
            near = [f"{n} (did you mean {_near(n, missing)}?)" if _near(n, missing) else n for n in unexpected]
            parts.append(f"unexpected {_some(near)}")
        raise DFlashDraftLayout(f"{draft.weights.name} of {draft.path.name}: {'; '.join(parts)}")
    wrong = [f"{n} is {list(refs[n][1])}, expected {list(s)}" for n, s in expected.items() if refs[n][1] != s]
    if wrong:
        raise DFlashDraftMismatch(shorten(f"{draft.weights.name} of {draft.path.name}: {'; '.join(wrong)}", 400))
    floats = {refs[n][0] for n in expected}
    if not floats <= set(_FLOAT) or len(floats) != 1:
        raise DFlashDraftLayout(
            f"{draft.weights.name} of {draft.path.name}: the draft's weights are stored as "
            f"{', '.join(sorted(floats))}; one of BF16, F16 or F32 is expected"
        )
    return _FLOAT[floats.pop()]


def _some(names: list[str], shown: int = 4) -> str:
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(shorten(n, 160) for n in names[:shown]) + more


def _near(name: str, missing: list[str]) -> str | None:
    """The missing name an unexpected one most likely stands for (same last parts, or a prefix added)."""
    tail = name.split(".")[-3:]
    for candidate in missing:
        if candidate.split(".")[-3:] == tail or name.endswith("." + candidate):
            return candidate
    return None


def _check_mask_token(draft: DFlashDraft, target: CheckpointInfo) -> None:
    """The mask token must not be one the tokenizer produces from ordinary text: the draft fills every position
    holding it, so a text token there would be read as a hole to fill. An added special token (or an id past the
    tokenizer, with an embedding row) is fine."""
    tokenizer = read_json(target.path / "tokenizer.json", DFlashMaskToken)
    model = tokenizer.get("model") if isinstance(tokenizer, dict) else None
    vocab = model.get("vocab") if isinstance(model, dict) else None
    special = {
        a.get("id")
        for a in (tokenizer.get("added_tokens") or [] if isinstance(tokenizer, dict) else [])
        if isinstance(a, dict) and a.get("special") is True
    }
    if draft.mask_token_id in special:
        return
    texts: dict[int, str] = {}
    if isinstance(vocab, dict):
        texts = {i: t for t, i in vocab.items() if i == draft.mask_token_id}
    elif (
        isinstance(vocab, list)  # unigram: [[piece, score], ...]
        and draft.mask_token_id < len(vocab)
        and isinstance(vocab[draft.mask_token_id], list)
    ):
        texts = {draft.mask_token_id: str(vocab[draft.mask_token_id][0])}
    for a in tokenizer.get("added_tokens") or [] if isinstance(tokenizer, dict) else []:
        if isinstance(a, dict) and a.get("id") == draft.mask_token_id:
            texts[draft.mask_token_id] = str(a.get("content"))
    if draft.mask_token_id in texts:
        raise DFlashMaskToken(
            f"{draft.path.name}/config.json: dflash_config.mask_token_id {draft.mask_token_id} is "
            f"{shorten(repr(texts[draft.mask_token_id]), 40)}, a token the target's tokenizer produces from text "
            "(a mask token must be special or unused)"
        )
