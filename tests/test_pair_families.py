"""pair, verify and quant-sweep read the family: stops, BOS and template variables on both sides, one family per
pair, vocabularies up to 128 rows apart when the shared ids read the same."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from packager.convert.pipeline import ConvertResult
from packager.convert.recipe import default_block, default_grid
from packager.measure import compat, workload
from packager.measure.pair import Options, fit_width, pair
from tests.conftest import run_cli
from tests.families import build_qwen25, smollm2_checkpoint
from tests.models import copy_checkpoint
from tests.specs import few_prompts

PROMPTS = ("Write one sentence about rivers.", "List three colours.")
QUICK = Options(new_tokens=12, repeats=1, target_cache=False)


@pytest.mark.converter
def test_pair_refuses_a_draft_of_another_family_in_one_line_naming_both(
    llama_bundle8: ConvertResult, tiny_checkpoint: Path
) -> None:
    result = run_cli("pair", str(llama_bundle8.out), str(tiny_checkpoint))
    assert result.returncode == 51, result.stderr
    assert "the draft is Llama 3.x, the target Qwen3" in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) <= 2


@pytest.mark.converter
def test_a_llama_draft_paired_with_its_own_checkpoint_accepts_every_token(llama_checkpoint: Path) -> None:
    """Stops, BOS and the Llama template on both sides: a model paired with itself agrees everywhere."""
    assert pair(llama_checkpoint, llama_checkpoint, PROMPTS, QUICK).alpha.value == 1.0


@pytest.mark.converter
def test_llama_prompts_start_with_exactly_one_bos_on_both_sides(
    llama_checkpoint: Path, llama_bundle8: ConvertResult
) -> None:
    from packager.runtime.mnn import MNNRuntime
    from packager.runtime.models import HFModel

    facts = compat.facts(llama_checkpoint)
    assert facts.variables == {"bos_token": "<|begin_of_text|>"}  # no enable_thinking for Llama's template
    text = workload.render(facts.chat_template, workload.Prompt("chat", "en", (("user", "Hello"),)), facts.variables)
    assert text.startswith("<|begin_of_text|>")
    source, bundle = HFModel(llama_checkpoint), MNNRuntime(llama_bundle8.out, threads=1)
    for ids in (source.encode(text), bundle.encode(text), source.encode("plain text"), bundle.encode("plain text")):
        assert ids[0] == 128000 and ids[1] != 128000, ids[:3]
    assert source.encode(text) == bundle.encode(text)


def _qwen25_pair(root: Path, target_vocab: int) -> tuple[Path, Path]:
    """A Qwen2.5 draft, and a target of the same weights padded to `target_vocab` rows (zero rows, as the 7B's
    padding rows are never the argmax)."""
    import torch
    from transformers import AutoModelForCausalLM

    draft = build_qwen25(root / "draft", seed=1)
    target = copy_checkpoint(draft, root / f"target-{target_vocab}")
    model = AutoModelForCausalLM.from_pretrained(draft, dtype=torch.bfloat16)
    model.resize_token_embeddings(target_vocab, mean_resizing=False)
    with torch.no_grad():
        model.get_input_embeddings().weight[151936:] = 0
    for name in ("model.safetensors", "config.json"):
        (target / name).unlink()
    model.save_pretrained(target, safe_serialization=True)
    return draft, target


@pytest.mark.converter
@pytest.mark.parametrize("target_vocab, accepted", [(152064, True), (152065, False)])
def test_pair_accepts_vocabularies_at_most_128_apart(tmp_path: Path, target_vocab: int, accepted: bool) -> None:
    """Qwen2.5-0.5B (151,936 ids) drafts for Qwen2.5-7B (152,064): llama.cpp's rule, 128 rows at most."""
    draft, target = _qwen25_pair(tmp_path, target_vocab)
    if accepted:  # the same weights: every token accepted although the target has 128 more (padding) rows
        assert pair(draft, target, PROMPTS, QUICK).alpha.value == 1.0
    else:
        result = run_cli("pair", str(draft), str(target), "--no-target-cache")
        assert result.returncode == 51 and "more than 128 apart" in result.stderr, result.stderr


@pytest.mark.slow
def test_pair_refuses_vocabularies_of_different_sizes_whose_shared_ids_read_differently(tmp_path: Path) -> None:
    draft, target = _qwen25_pair(tmp_path, 152064)
    data = json.loads((target / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = data["model"]["vocab"]
    first, second = (next(text for text, index in vocab.items() if index == i) for i in (20000, 20001))
    vocab[first], vocab[second] = 20001, 20000  # two texts trade ids: the merges still load
    (target / "tokenizer.json").write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    result = run_cli("pair", str(draft), str(target), "--no-target-cache")
    assert result.returncode == 51 and "id 20000" in result.stderr, result.stderr


def test_a_drafts_extra_rows_are_never_proposed() -> None:
    import numpy as np

    logits = np.zeros((2, 6))
    logits[:, 5] = 9.0  # the draft's best is a row the target does not have
    assert fit_width(logits, 5).argmax(-1).tolist() == [0, 0]
    assert fit_width(np.ones((1, 3)), 5)[0, 3:].tolist() == [-np.inf, -np.inf]


@pytest.mark.converter
def test_verify_fails_a_llama_bundle_whose_tokenizer_stops_on_qwens_ids(
    llama_bundle8: ConvertResult, llama_checkpoint: Path, tmp_path: Path
) -> None:
    bundle = tmp_path / "bundle"
    shutil.copytree(llama_bundle8.out, bundle)
    tokenizer = bundle / "tokenizer.txt"
    data = tokenizer.read_bytes()
    first, second, third, rest = data.split(b"\n", 3)
    ids = third.decode().split()
    special = int(second.split()[0])
    ids[special : special + 2] = ["151645", "151643"]  # Qwen's <|im_end|> and <|endoftext|>
    tokenizer.write_bytes(b"\n".join([first, second, " ".join(ids).encode(), rest]))
    prompts = few_prompts(tmp_path)
    result = run_cli("verify", str(bundle), "--checkpoint", str(llama_checkpoint), "--prompts", str(prompts))
    assert result.returncode != 0, result.stdout
    assert "stop ids: the bundle's tokenizer stops on [151645, 151643" in result.stdout + result.stderr


@pytest.mark.converter
def test_quant_sweeps_default_grid_is_around_the_block_smollm2_takes() -> None:
    from packager.convert.inspect.checkpoint import inspect_checkpoint
    from packager.convert.pipeline import quantized_inputs

    block = default_block(quantized_inputs(inspect_checkpoint(smollm2_checkpoint())))
    assert block == 64  # hidden 576 = 9 x 64
    grid = default_grid(block)
    assert {r.block for r in grid} == {64, 32, 16} and any(r.bits == 8 for r in grid)
    assert [r.name for r in default_grid()][:3] == ["4bit-b128", "4bit-b64", "4bit-b32"]  # Qwen3's, as before


def test_the_same_checkpoint_family_is_found_for_a_copy(llama_checkpoint: Path, tmp_path: Path) -> None:
    copied = copy_checkpoint(llama_checkpoint, tmp_path / "copy")
    assert compat.facts(copied).family == compat.facts(llama_checkpoint).family == "Llama 3.x"


@pytest.mark.converter
def test_verify_refuses_a_bundle_of_another_family_than_its_source_in_one_line(
    llama_bundle8: ConvertResult, tiny_checkpoint: Path
) -> None:
    result = run_cli("verify", str(llama_bundle8.out), "--checkpoint", str(tiny_checkpoint))
    assert result.returncode == 50 and result.stderr.count("\n") == 1, result.stderr[-2000:]
    assert "the bundle is Llama 3.x, its source Qwen3" in result.stderr
