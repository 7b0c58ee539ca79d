"""An EAGLE-3 head checkpoint (SpecForge / AngelSlim layout), checked against its target before any work.

llmexport loads the head with strict=False, so a missing or misnamed tensor stays random and converts without
a word; its head counts come from the target and its head_dim overwrites the target's. Everything that would
make the exported head compute something else than the checkpoint is refused here, one line each.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ...errors import (
    CorruptWeights,
    EagleHeadLayout,
    EagleHeadMismatch,
    EagleVocabularyMap,
    PickleHeadRefused,
    TargetTooShallow,
    shorten,
)
from ...infra.jsonfile import read_json
from ..rope import scaling_of
from . import values
from .checkpoint import CheckpointInfo
from .safetensors_header import TensorRef, tensor_refs

MIN_TARGET_LAYERS = 7
# Activations llmexport's head can build (transformers' ACT2FN names a Llama-style head uses).
ACTIVATIONS = ("silu", "gelu", "gelu_new", "gelu_pytorch_tanh", "relu", "swish")
_FLOAT = ("BF16", "F16", "F32")
_INT = ("I64", "I32")
# Tensors a head may carry that the exported graph does not use (checked where they could matter).
OPTIONAL = ("t2d", "embed_tokens.weight")


@dataclass(frozen=True)
class HeadInfo:
    path: Path
    weights: Path
    pickle: bool
    hidden_size: int
    target_hidden_size: int
    intermediate_size: int
    draft_vocab_size: int
    vocab_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    hidden_act: str
    rope_theta: float
    dtype: str  # the stored float dtype of its weights ("" until the tensors are checked)
    aux_layers: tuple[int, ...]  # the target layers whose inputs feed fc, in order
    rope_scaling: dict[str, Any] | None = None  # a llama3 scaling (Llama 3.1 heads); None: plain rope


# Scaled ropes an exported head can carry: transformers' frequencies reach its graph (convert.fence.worker).
HEAD_ROPE_TYPES = ("llama3",)


def aux_layers(num_layers: int) -> tuple[int, ...]:
    """The target layers whose inputs llmexport concatenates into the `hidden_states` output (a set, in order)."""
    return tuple(sorted({2, num_layers // 2, num_layers - 3}))


def expected_shapes(head: HeadInfo) -> dict[str, tuple[int, ...]]:
    h, inter = head.hidden_size, head.intermediate_size
    q, kv = head.num_heads * head.head_dim, head.num_kv_heads * head.head_dim
    return {
        "fc.weight": (h, 3 * head.target_hidden_size),
        "midlayer.hidden_norm.weight": (h,),
        "midlayer.input_layernorm.weight": (h,),
        "midlayer.post_attention_layernorm.weight": (h,),
        "midlayer.self_attn.q_proj.weight": (q, 2 * h),
        "midlayer.self_attn.k_proj.weight": (kv, 2 * h),
        "midlayer.self_attn.v_proj.weight": (kv, 2 * h),
        "midlayer.self_attn.o_proj.weight": (h, q),
        "midlayer.mlp.gate_proj.weight": (inter, h),
        "midlayer.mlp.up_proj.weight": (inter, h),
        "midlayer.mlp.down_proj.weight": (h, inter),
        "norm.weight": (h,),
        "lm_head.weight": (head.draft_vocab_size, h),
        "d2t": (head.draft_vocab_size,),
    }


def inspect_head(path: Path, target: CheckpointInfo, allow_pickle: bool = False) -> HeadInfo:
    """Check the head folder against the target and describe it; raises one of the Eagle* errors."""
    folder = _folder(path)
    config = read_json(folder / "config.json", EagleHeadLayout) if (folder / "config.json").is_file() else None
    if not isinstance(config, dict):
        raise EagleHeadLayout(
            f"{folder} has no config.json object" if config is None else f"{folder}/config.json is not a JSON object"
        )
    weights, pickle = _weights(folder, allow_pickle)
    shape = target.shape
    if shape.num_layers < MIN_TARGET_LAYERS:
        raise TargetTooShallow(
            f"the target {target.path.name} has {shape.num_layers} layers; an EAGLE-3 head needs "
            f"a target with at least {MIN_TARGET_LAYERS}"
        )
    head = _describe(folder, config, weights, pickle, target)
    refs = _refs(weights, pickle)
    head = replace(head, dtype=_check_tensors(head, refs))
    _check_d2t(head)
    return head


def _folder(path: Path) -> Path:
    if not path.exists():
        raise EagleHeadLayout(f"EAGLE head folder {shorten(str(path))} does not exist")
    if not path.is_dir():
        raise EagleHeadLayout(f"EAGLE head {shorten(str(path))} is not a folder")
    return path.resolve()


def _weights(folder: Path, allow_pickle: bool) -> tuple[Path, bool]:
    safe, pickled = folder / "model.safetensors", folder / "pytorch_model.bin"
    if safe.is_file():
        return safe, False  # llmexport reads model.safetensors first, whatever else lies there
    if pickled.is_file():
        if not allow_pickle:
            raise PickleHeadRefused(f"the EAGLE head {folder.name} is stored as pytorch_model.bin (a pickle)")
        return pickled, True
    shards = sorted(p.name for p in folder.glob("*.safetensors"))
    found = f" (found {', '.join(shards)}: llmexport reads a single model.safetensors only)" if shards else ""
    raise EagleHeadLayout(f"{folder} has no model.safetensors{found}")


def _describe(folder: Path, config: dict[str, Any], weights: Path, pickle: bool, target: CheckpointInfo) -> HeadInfo:
    where = f"{folder.name}/config.json"
    shape = target.shape

    def positive(key: str, default: Any = None, kind: type = int) -> Any:
        return values.positive(config, key, where, EagleHeadLayout, default, kind)

    hidden = positive("hidden_size")
    if hidden != shape.hidden_size:
        raise EagleHeadMismatch(f"{where}: hidden_size {hidden} differs from the target's {shape.hidden_size}")
    target_hidden = positive("target_hidden_size", hidden)
    if target_hidden != shape.hidden_size:
        raise EagleHeadMismatch(
            f"{where}: target_hidden_size {target_hidden} differs from the target's hidden_size {shape.hidden_size}"
        )
    for key, mine in (
        ("num_attention_heads", shape.num_heads),
        ("num_key_value_heads", shape.num_kv_heads),
        ("head_dim", shape.head_dim),
    ):
        # llmexport builds the head's attention with the target's counts, and its head_dim replaces the target's
        if key in config and config[key] != mine:
            raise EagleHeadMismatch(
                f"{where}: {key} {shorten(repr(config[key]))} differs from the target's {mine} "
                "(llmexport builds the head with the target's attention shape)"
            )
    vocab = positive("vocab_size")
    if vocab != shape.vocab_size:
        raise EagleHeadMismatch(f"{where}: vocab_size {vocab} differs from the target's {shape.vocab_size}")
    draft_vocab = positive("draft_vocab_size", vocab)
    if draft_vocab > vocab:
        raise EagleVocabularyMap(f"{where}: draft_vocab_size {draft_vocab} exceeds the target vocabulary {vocab}")
    act = config.get("hidden_act", "silu")
    if act not in ACTIVATIONS:
        raise EagleHeadLayout(
            f"{where}: hidden_act {shorten(repr(act))} is not one packager can check ({', '.join(ACTIVATIONS)})"
        )
    scaled = scaling_of(config)
    if scaled is not None and scaled.get("rope_type", scaled.get("type")) not in HEAD_ROPE_TYPES:
        raise EagleHeadLayout(
            f"{where}: rope_scaling {shorten(repr(scaled))} is not supported (the exported head applies plain "
            f"rope or {', '.join(HEAD_ROPE_TYPES)})"
        )
    theta = positive("rope_theta", 10000.0, float)
    return HeadInfo(
        path=folder,
        weights=weights,
        pickle=pickle,
        hidden_size=hidden,
        target_hidden_size=target_hidden,
        intermediate_size=positive("intermediate_size"),
        draft_vocab_size=draft_vocab,
        vocab_size=vocab,
        num_heads=shape.num_heads,
        num_kv_heads=shape.num_kv_heads,
        head_dim=shape.head_dim,
        rms_norm_eps=float(positive("rms_norm_eps", 1e-6, float)),
        hidden_act=str(act),
        rope_theta=float(theta),
        rope_scaling=scaled,
        dtype="",
        aux_layers=aux_layers(shape.num_layers),
    )


def _refs(weights: Path, pickle: bool) -> dict[str, tuple[str, tuple[int, ...]]]:
    """name -> (safetensors dtype name, shape), without loading a safetensors file's data."""
    if not pickle:
        try:
            return {name: (ref.dtype, ref.shape) for name, ref in tensor_refs(weights).items()}
        except CorruptWeights as exc:
            raise EagleHeadLayout(
                f"the EAGLE head's {exc.message}", "re-save the head's model.safetensors (safetensors.torch.save_file)"
            ) from None
    import torch

    names = {
        torch.bfloat16: "BF16",
        torch.float16: "F16",
        torch.float32: "F32",
        torch.int64: "I64",
        torch.int32: "I32",
        torch.bool: "BOOL",
    }
    try:
        state = torch.load(weights, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many kinds for a bad pickle
        raise EagleHeadLayout(
            f"{weights} cannot be read as a weights-only torch file "
            f"({shorten(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)})"
        ) from None
    if not isinstance(state, dict):
        raise EagleHeadLayout(f"{weights} does not hold a state dict")
    return {str(k): (names.get(v.dtype, str(v.dtype)), tuple(v.shape)) for k, v in state.items() if hasattr(v, "dtype")}


def _check_tensors(head: HeadInfo, refs: dict[str, tuple[str, tuple[int, ...]]]) -> str:
    """Refuse missing, unexpected or misshapen tensors; return the weights' stored float dtype."""
    expected = expected_shapes(head)
    missing = [n for n in expected if n not in refs]
    unexpected = sorted(n for n in refs if n not in expected and n not in OPTIONAL)
    if any(n.startswith("model.layers.") for n in unexpected) and len(missing) > len(expected) // 2:
        raise EagleHeadLayout(
            f"{head.path.name} holds a model checkpoint ({len(refs)} tensors such as "
            f"{unexpected[0]}), not an EAGLE-3 head"
        )
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"missing {_some(missing)}")
        if unexpected:
            near = [f"{n} (did you mean {_near(n, missing)}?)" if _near(n, missing) else n for n in unexpected]
            parts.append(f"unexpected {_some(near)}")
        raise EagleHeadLayout(f"{head.weights.name} of {head.path.name}: {'; '.join(parts)}")
    wrong = [f"{n} is {list(refs[n][1])}, expected {list(s)}" for n, s in expected.items() if refs[n][1] != s]
    if "t2d" in refs and refs["t2d"][1] != (head.vocab_size,):
        wrong.append(f"t2d is {list(refs['t2d'][1])}, expected [{head.vocab_size}]")
    if "embed_tokens.weight" in refs and refs["embed_tokens.weight"][1] != (head.vocab_size, head.hidden_size):
        wrong.append(
            f"embed_tokens.weight is {list(refs['embed_tokens.weight'][1])}, expected "
            f"[{head.vocab_size}, {head.hidden_size}]"
        )
    if wrong:
        raise EagleHeadMismatch(shorten(f"{head.weights.name} of {head.path.name}: {'; '.join(wrong)}", 400))
    floats = {refs[n][0] for n in expected if n != "d2t"}
    if not floats <= set(_FLOAT) or len(floats) != 1:
        raise EagleHeadLayout(
            f"{head.weights.name}: the head's weights are stored as {', '.join(sorted(floats))}; "
            "one of BF16, F16 or F32 is expected"
        )
    if refs["d2t"][0] not in _INT:
        raise EagleVocabularyMap(f"{head.weights.name}: d2t is stored as {refs['d2t'][0]}, expected an integer type")
    return {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}[floats.pop()]


def _some(names: list[str], shown: int = 4) -> str:
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(shorten(n, 160) for n in names[:shown]) + more


def _near(name: str, missing: list[str]) -> str | None:
    """The missing name an unexpected one most likely stands for (same last part, or a common prefix swap)."""
    tail = name.split(".")[-2:]
    for candidate in missing:
        if candidate.split(".")[-2:] == tail or candidate.endswith(name.split(".", 1)[-1]):
            return candidate
    return None


def load_d2t(head: HeadInfo) -> Any:
    """The d2t offsets as an int64 numpy array."""
    import numpy as np

    if head.pickle:
        import torch

        return torch.load(head.weights, map_location="cpu", weights_only=True)["d2t"].to(torch.int64).numpy()
    ref: TensorRef = tensor_refs(head.weights)["d2t"]
    dtype = np.int64 if ref.dtype == "I64" else np.int32
    with open(ref.file, "rb") as handle:
        handle.seek(ref.start)
        return np.frombuffer(handle.read(ref.nbytes), dtype=dtype).astype(np.int64)


def _check_d2t(head: HeadInfo) -> None:
    import numpy as np

    offsets = load_d2t(head)
    targets = np.arange(offsets.size, dtype=np.int64) + offsets
    outside = np.flatnonzero((targets < 0) | (targets >= head.vocab_size))
    if outside.size:
        first = int(outside[0])
        raise EagleVocabularyMap(
            f"{head.weights.name}: d2t maps {outside.size} draft id(s) outside the target "
            f"vocabulary of {head.vocab_size} (first: draft id {first} -> {int(targets[first])})"
        )
