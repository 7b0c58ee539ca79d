"""A base + LoRA adapter converts to a bundle that matches the merged model, and the merge is exact."""

from __future__ import annotations

from pathlib import Path

import pytest

from packager import resources
from packager.convert import provenance
from packager.convert.inspect.checkpoint import inspect_checkpoint
from packager.convert.inspect.lora import inspect_adapter, merge
from packager.convert.pipeline import ConvertResult
from tests.parity import compare


@pytest.fixture(scope="module")
def merged(tiny_checkpoint: Path, lora_adapter: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("merged") / "merged"
    merge(tiny_checkpoint, lora_adapter, out)
    return out


def test_adapter_is_described(tiny_checkpoint: Path, lora_adapter: Path) -> None:
    info = inspect_adapter(lora_adapter, inspect_checkpoint(tiny_checkpoint))
    assert (info.rank, info.alpha) == (16, 32.0)
    assert info.modules == 2 * 7
    assert "q_proj" in info.target_modules


def test_merged_model_gives_the_unmerged_peft_logits(tiny_checkpoint: Path, lora_adapter: Path, merged: Path) -> None:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    ids = torch.tensor([[9707, 11, 1879, 0, 358, 1079, 264, 1273]])
    base = AutoModelForCausalLM.from_pretrained(tiny_checkpoint, dtype=torch.float32)
    with torch.no_grad():
        plain = base(ids).logits
        unmerged = PeftModel.from_pretrained(base, lora_adapter).eval()(ids).logits
        merged_logits = AutoModelForCausalLM.from_pretrained(merged, dtype=torch.float32)(ids).logits
    assert torch.allclose(merged_logits, unmerged, atol=1e-4)
    assert not torch.allclose(plain, unmerged, atol=1e-2)  # the adapter really changes the model


@pytest.mark.converter
def test_lora_bundle_matches_the_merged_model(lora_bundle8: ConvertResult, merged: Path, tiny_checkpoint: Path) -> None:
    report = compare(lora_bundle8.out, merged, resources.parity_prompts())
    assert report.min_cosine >= 0.99
    assert all(p.same_top1 for p in report.prompts)
    # ... and it is not just the base model.
    assert compare(lora_bundle8.out, tiny_checkpoint, resources.parity_prompts()[:4]).min_cosine < 0.99


@pytest.mark.converter
def test_lora_provenance_names_the_adapter(lora_bundle8: ConvertResult, lora_adapter: Path) -> None:
    record = provenance.read(lora_bundle8.provenance)
    assert record["adapter"]["rank"] == 16 and record["adapter"]["alpha"] == 32.0
    assert "adapter_model.safetensors" in record["adapter"]["files_xxh3_128"]
