"""Random DFlash drafts in z-lab's DFlashDraftModel layout (config.json and model.safetensors), written with numpy
so the fast layer can build them; `target_view` describes a target checkpoint of a given shape without its weights
(the real Qwen3 tokenizer beside it), for inspection tests that need no converter."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

# target8's shape (tests/conftest.py): the converter tests pair these drafts with it.
TARGET8 = {"hidden": 256, "layers": 8, "heads": 2, "kv_heads": 1, "head_dim": 128, "intermediate": 512}
VOCAB = 151936
# An id past the Qwen3 tokenizer's last token (</think> is 151668) with an embedding row: z-lab's Qwen3 drafts' kind.
MASK_ID = 151669


def draft_config(
    *,
    hidden: int = 256,
    heads: int = 2,
    kv_heads: int = 1,
    head_dim: int = 128,
    intermediate: int = 512,
    layers: int = 2,
    target_layers: int = 8,
    layer_ids: list[int] | None = None,
    block_size: int = 4,
    mask_token_id: int | None = MASK_ID,
    rope_theta: float = 1_000_000.0,
    **extra: Any,
) -> dict[str, Any]:
    dflash: dict[str, Any] = {"target_layer_ids": layer_ids if layer_ids is not None else [1, 5]}
    if mask_token_id is not None:
        dflash["mask_token_id"] = mask_token_id
    return {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "hidden_size": hidden,
        "intermediate_size": intermediate,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "vocab_size": VOCAB,
        "rms_norm_eps": 1e-6,
        "hidden_act": "silu",
        "rope_theta": rope_theta,
        "max_position_embeddings": 4096,
        "attention_bias": False,
        "tie_word_embeddings": False,
        "block_size": block_size,
        "num_target_layers": target_layers,
        "dflash_config": dflash,
        **extra,
    }


def draft_tensors(config: dict[str, Any], seed: int = 0, scale: float = 0.05) -> dict[str, Any]:
    import numpy as np

    rng = np.random.default_rng(seed)
    h, inter, d = config["hidden_size"], config["intermediate_size"], config["head_dim"]
    q, kv = config["num_attention_heads"] * d, config["num_key_value_heads"] * d
    n_ids = len(config["dflash_config"]["target_layer_ids"])

    def linear(rows: int, cols: int) -> Any:
        return (rng.standard_normal((rows, cols)) * scale).astype(np.float32)

    def norm(size: int) -> Any:
        return (1.0 + 0.1 * rng.standard_normal(size)).astype(np.float32)

    state = {"fc.weight": linear(h, n_ids * h), "hidden_norm.weight": norm(h), "norm.weight": norm(h)}
    for i in range(config["num_hidden_layers"]):
        p = f"layers.{i}."
        state.update(
            {
                p + "input_layernorm.weight": norm(h),
                p + "post_attention_layernorm.weight": norm(h),
                p + "self_attn.q_proj.weight": linear(q, h),
                p + "self_attn.k_proj.weight": linear(kv, h),
                p + "self_attn.v_proj.weight": linear(kv, h),
                p + "self_attn.o_proj.weight": linear(h, q),
                p + "self_attn.q_norm.weight": norm(d),
                p + "self_attn.k_norm.weight": norm(d),
                p + "mlp.gate_proj.weight": linear(inter, h),
                p + "mlp.up_proj.weight": linear(inter, h),
                p + "mlp.down_proj.weight": linear(h, inter),
            }
        )
    return state


def write_draft(out: Path, config: dict[str, Any], state: dict[str, Any]) -> Path:
    from safetensors.numpy import save_file

    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    save_file(state, str(out / "model.safetensors"))
    return out


def build_draft(out: Path, *, seed: int = 0, **config: Any) -> Path:
    """A random draft of the given config (draft_config's defaults fit target8)."""
    cfg = draft_config(**config)
    return write_draft(out, cfg, draft_tensors(cfg, seed))


def target_view(folder: Path, family: str = "qwen3", **shape: int) -> Any:
    """A CheckpointInfo of a target of target8's shape (or `shape`'s), with the real Qwen3 tokenizer in `folder`."""
    from packager.convert.inspect.checkpoint import CheckpointInfo, ModelShape
    from packager.families import BY_NAME
    from tests.tokenizers import qwen3_tokenizer_dir

    dims = {**TARGET8, **shape}
    folder.mkdir(parents=True, exist_ok=True)
    for item in qwen3_tokenizer_dir().iterdir():
        if item.is_file():
            shutil.copy(item, folder / item.name)
    return CheckpointInfo(
        path=folder,
        model_type=BY_NAME[family].model_types[0],
        family=BY_NAME[family],
        shape=ModelShape(
            hidden_size=dims["hidden"],
            num_layers=dims["layers"],
            num_heads=dims["heads"],
            num_kv_heads=dims["kv_heads"],
            head_dim=dims["head_dim"],
            intermediate_size=dims["intermediate"],
            vocab_size=VOCAB,
        ),
        dtype="bfloat16",
        weight_files=(),
        tensor_shapes={},
        stop_ids=(151645, 151643),
        tokenizer_vocab_size=151669,
        tied=False,
    )
