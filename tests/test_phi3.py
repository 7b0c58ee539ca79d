"""Phi-3.5-mini: a target only (its embeddings are untied, and a ten-file draft has no embeddings file), found from
its config and the real Llama 2 vocabulary with Phi-3.5's chat tokens, its fused q/k/v and gate/up projections
streamed byte for byte to llmexport's own split, and its longrope exact up to 4,096 positions, as the bundle
says."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from packager.convert.inspect.checkpoint import inspect_checkpoint
from packager.convert.pipeline import ConvertRequest, ConvertResult, convert
from packager.errors import UntiedEmbeddings
from packager.families import BY_NAME
from tests import shared
from tests.bundlecheck import assert_same_bundle
from tests.conftest import run_cli
from tests.families import build_phi35
from tests.inprocess import run_packager
from tests.localhub import LocalHub, hub
from tests.specs import family_release_spec


@pytest.fixture(scope="module")
def phi() -> Path:
    return shared.once("checkpoint", ["build_phi35"], lambda d: build_phi35(d / "tiny-phi35"))


@pytest.fixture(scope="module")
def phi_target(phi: Path) -> ConvertResult:
    result: ConvertResult = shared.converted(phi, quant_bits=8, kind="target")
    return result


def test_phi35_is_found_with_its_stops_and_the_positions_its_bundle_is_exact_for(phi: Path) -> None:
    info = inspect_checkpoint(phi, allow_untied=True)
    assert info.family is BY_NAME["phi3"]
    assert info.stop_ids == (32007, 32000, 32001)  # <|end|>, <|endoftext|>, <|assistant|>
    assert not info.tied and info.exact_positions == 4096


def test_phi35_as_a_draft_is_refused_in_one_line_saying_a_draft_has_no_embeddings_file(
    phi: Path, tmp_path: Path
) -> None:
    with pytest.raises(UntiedEmbeddings):
        inspect_checkpoint(phi)
    result = run_packager("convert", str(phi), "--out", str(tmp_path / "draft"))
    assert result.returncode == UntiedEmbeddings.exit_code, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "no embeddings file" in lines[0] and "--kind target" in lines[0], lines
    assert not (tmp_path / "draft").exists()


@pytest.mark.converter
def test_phi35_target_streams_its_fused_projections_byte_for_byte_to_llmexports_split(
    phi: Path, phi_target: ConvertResult, tmp_path: Path
) -> None:
    """llmexport splits qkv_proj into q, k and v with zero biases; the streaming writer reads the same rows as
    slices of qkv_proj and leaves the biases zero."""
    assert phi_target.path == "streamed"
    reference = convert(
        ConvertRequest(checkpoint=phi, out=tmp_path / "ref", quant_bits=8, kind="target", reference=True)
    )
    assert reference.path == "reference"
    assert_same_bundle(phi_target.out, reference.out)


@pytest.mark.converter
def test_phi35_logits_match_transformers_up_to_4096_positions_and_the_bundle_says_not_past_them(
    tmp_path: Path,
) -> None:
    """The last logits of prefixes up to 4,096 tokens match transformers' (longrope's short factor and its
    attention scaling reach the graph); past 4,096 transformers switches every position to the long factor and
    the bundle cannot follow, which is what its warning says (if an exporter learns to, this test says so)."""
    import MNN.llm as mnn_llm
    import torch
    from transformers import AutoModelForCausalLM

    source = build_phi35(tmp_path / "phi", seed=1, dtype="float32")
    result = convert(ConvertRequest(checkpoint=source, out=tmp_path / "bundle", quant_bits=8, kind="target"))
    assert any("up to 4,096 positions" in warning for warning in result.warnings), result.warnings
    tokens = np.random.default_rng(0).integers(100, 32000, size=4600).tolist()
    within, past = (50, 1000, 2500, 4000, 4096), (4200, 4600)
    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32).eval()
    llm = mnn_llm.create(str(result.out / "config.json"))
    llm.set_config({"all_logits": False, "precision": "high", "memory": "normal", "thread_num": 2})
    assert llm._c_obj.load()

    def cosine(n: int) -> tuple[float, bool]:
        with torch.no_grad():
            want = model(torch.tensor([tokens[:n]])).logits[0, -1].double().numpy()
        llm.reset()
        got = np.asarray(llm.forward(tokens[:n]).read(), dtype=np.float64).reshape(-1)[-want.size :]
        return float(want @ got / np.linalg.norm(want) / np.linalg.norm(got)), int(want.argmax()) == int(got.argmax())

    inside = [cosine(n) for n in within]  # top-1 on random weights may flip at a near-tie: cosine decides
    assert all(c > 0.99 for c, _ in inside) and sum(same for _, same in inside) >= 4, inside
    outside = [cosine(n) for n in past]  # measured: 0.3 at most (bench/phi3_bench.py)
    assert all(c < 0.6 for c, _ in outside), outside


@pytest.mark.converter
def test_verify_passes_the_phi35_target(phi: Path, phi_target: ConvertResult) -> None:
    result = run_cli("verify", str(phi_target.out), "--checkpoint", str(phi))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "tokenizer agreement: 44/44" in result.stdout


@pytest.mark.converter
def test_a_phi35_target_is_released_with_a_card_naming_its_family_license_and_position_limit(
    hub: LocalHub,
    phi: Path,
    tmp_path: Path,
) -> None:
    spec = family_release_spec(tmp_path, phi, "microsoft/Phi-3.5-mini-instruct")
    text = spec.read_text(encoding="utf-8").replace("quant_bits = 8\n", 'quant_bits = 8\nkind = "target"\n')
    spec.write_text(text, encoding="utf-8")
    out = tmp_path / "dist" / "bundle"
    result = hub.cli("release", str(spec), "--out", str(out), "--json", "--quiet", timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "up to 4,096 positions" in result.stderr
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "license: mit" in card and "Phi-3.5-mini" in card and "exact up to 4,096 positions" in card
    assert json.loads((out / "llm_config.json").read_text(encoding="utf-8"))["model_type"] == "phi3"
    assert (out / "embeddings_bf16.bin").is_file()
    assert hub.cli("verify-remote", "me/tiny-draft-mnn@v1").returncode == 0
