"""Tiny real Qwen3 checkpoints for tests: random weights, head_dim 128, the real Qwen3 tokenizer."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path
from typing import Any

from tests.tokenizers import qwen3_tokenizer_dir


def build_qwen3(
    out: Path,
    *,
    seed: int = 0,
    hidden: int = 256,
    layers: int = 2,
    heads: int = 2,
    kv_heads: int = 1,
    intermediate: int = 512,
    tie: bool = True,
    dtype: str = "bfloat16",
    **config: Any,
) -> Path:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen3Config(
        vocab_size=151936,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=128,
        tie_word_embeddings=tie,
        max_position_embeddings=4096,
        bos_token_id=151643,
        eos_token_id=151645,
        **config,
    )
    model = Qwen3ForCausalLM(cfg).to(getattr(torch, dtype))
    model.save_pretrained(out, safe_serialization=True)
    for item in qwen3_tokenizer_dir().iterdir():
        shutil.copy(item, out / item.name)
    (out / "generation_config.json").write_text(
        json.dumps({"bos_token_id": 151643, "eos_token_id": [151645, 151643], "pad_token_id": 151643}), encoding="utf-8"
    )
    return out


def build_lora(base: Path, out: Path, *, seed: int = 1, rank: int = 16, alpha: int = 32) -> Path:
    """A peft LoRA adapter on `base` with non-zero B matrices, so merging really changes the weights."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    config = LoraConfig(
        r=rank,
        lora_alpha=alpha,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        init_lora_weights=False,
    )
    peft_model = get_peft_model(model, config)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.02)
    peft_model.save_pretrained(out, safe_serialization=True)
    return out


def copy_checkpoint(src: Path, dst: Path) -> Path:
    """A cheap copy: weights hard-linked where possible, the small files copied so tests may edit them."""
    dst.mkdir(parents=True)
    for item in src.iterdir():
        if item.suffix == ".safetensors":
            try:
                (dst / item.name).hardlink_to(item)
                continue
            except OSError:
                pass
        shutil.copy(item, dst / item.name)
    return dst


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Build a tiny random Qwen3 checkpoint with the real tokenizer.")
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parsed = parser.parse_args()
    if parsed.out.exists():
        print(f"{parsed.out} exists; keeping it")
    else:
        build_qwen3(parsed.out, seed=parsed.seed)
        print(f"built {parsed.out}")


def build_deep_target(draft: Path, out: Path, *, extra_layers: int = 10, noise: float = 0.0, seed: int = 3) -> Path:
    """A target that costs several times the draft but computes (nearly) the same function: the draft's layers,
    then `extra_layers` whose attention and MLP outputs are zero (plus `noise`, to make them disagree a little)."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    small = AutoModelForCausalLM.from_pretrained(draft, dtype=torch.float32)
    config = Qwen3Config(
        **{
            **small.config.to_dict(),
            "num_hidden_layers": small.config.num_hidden_layers + extra_layers,
            "layer_types": None,
        }
    )
    big = Qwen3ForCausalLM(config)
    state = big.state_dict()
    state.update(small.state_dict())
    for layer in range(small.config.num_hidden_layers, config.num_hidden_layers):
        for name in ("self_attn.o_proj.weight", "mlp.down_proj.weight"):
            key = f"model.layers.{layer}.{name}"
            state[key] = torch.randn_like(state[key]) * noise
    big.load_state_dict(state)
    big.to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
    for item in draft.iterdir():
        if item.suffix != ".safetensors" and item.name not in ("config.json", "model.safetensors.index.json"):
            shutil.copy(item, out / item.name)
    return out


_RAW_LLMEXPORT = """
import importlib.util, sys, types
stub = types.ModuleType("MNN.tools.utils.log")
stub.mnn_logger = None  # MNN's own "no telemetry" value (as packager's converter worker does)
sys.modules["MNN.tools.utils.log"] = stub
sys.path.insert(0, importlib.util.find_spec("llmexport").submodule_search_locations[0])
import llmexport
parser = llmexport.argparse.ArgumentParser()
llmexport.build_args(parser)
llmexport.LlmExporter(parser.parse_args(["--path", sys.argv[1], "--dst_path", sys.argv[2], "--export", "mnn",
    "--quant_bit", sys.argv[3], "--quant_block", "64", "--mnnconvert", sys.argv[2] + "-no-native"]
    + (["--eagle_path", sys.argv[4]] if len(sys.argv) > 4 else []))).export("mnn")
"""


def llmexport_raw(checkpoint: Path, out: Path, bits: int = 4, eagle: Path | None = None) -> Path:
    """Plain llmexport's own output folder (no packager files): tokenizer.mtok, llm.mnn.json, and
    embeddings_bf16.bin for an untied checkpoint; with `eagle` (a head folder) also eagle.mnn, eagle_fc.mnn and
    eagle_d2t.mnn. Runs in a child process with the work folder as its cwd."""
    import subprocess
    import sys

    out.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-c", _RAW_LLMEXPORT, str(checkpoint), str(out), str(bits)]
        + ([str(eagle)] if eagle is not None else []),
        cwd=out.parent,
        check=True,
        capture_output=True,
        timeout=600,
    )
    return out


def save_eagle_head(head, out: Path, dtype: str = "float32", draft_ids=None) -> Path:  # type: ignore[no-untyped-def]
    """Write an EagleHead (packager.convert.eagle.reference) as a SpecForge-layout folder: config.json and
    model.safetensors with its tensors, d2t and (when `draft_ids`, the sorted target ids of the draft
    vocabulary, are given) t2d, a bool mask over the target vocabulary."""
    import torch
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    state = {k: (v if k == "d2t" else v.to(getattr(torch, dtype))).contiguous() for k, v in head.state_dict().items()}
    if draft_ids is not None:
        t2d = torch.zeros(head.config.vocab_size, dtype=torch.bool)
        t2d[torch.as_tensor(draft_ids)] = True
        state["t2d"] = t2d
    save_file(state, str(out / "model.safetensors"))
    config = {**head.config.to_dict(), "torch_dtype": dtype}
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return out


def build_eagle_head(
    target: Path,
    out: Path,
    *,
    seed: int = 0,
    draft_vocab: int = 4096,
    intermediate: int = 512,
    rope_theta: float = 1_000_000.0,
    scale: float = 1.0,
    rope_scaling: dict | None = None,  # type: ignore[type-arg]
) -> Path:
    """A random EAGLE-3 head for the checkpoint `target` (its width, heads and head_dim): a draft vocabulary of
    `draft_vocab` random target ids (sorted), d2t mapping them; weights `scale` times torch's default init."""
    import torch

    from packager.convert.eagle.reference import EagleHead, HeadConfig

    cfg = json.loads((target / "config.json").read_text(encoding="utf-8"))
    torch.manual_seed(seed)
    config = HeadConfig(
        hidden_size=cfg["hidden_size"],
        target_hidden_size=cfg["hidden_size"],
        vocab_size=cfg["vocab_size"],
        draft_vocab_size=draft_vocab,
        intermediate_size=intermediate,
        rms_norm_eps=cfg.get("rms_norm_eps", 1e-6),
        hidden_act="silu",
        num_attention_heads=cfg["num_attention_heads"],
        num_key_value_heads=cfg["num_key_value_heads"],
        head_dim=cfg["head_dim"],
        rope_theta=rope_theta,
        rope_scaling=rope_scaling,
    )
    head = EagleHead(config)
    with torch.no_grad():
        for name, param in head.named_parameters():
            if name.endswith("norm.weight"):
                param.uniform_(0.5, 1.5)
            else:
                param.mul_(scale)
        ids = torch.randperm(config.vocab_size)[:draft_vocab].sort().values
        head.d2t.copy_(ids - torch.arange(draft_vocab))
    return save_eagle_head(head, out, draft_ids=ids)
