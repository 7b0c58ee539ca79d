"""`convert --eagle` and `--kind target`: a head that would not compute what its checkpoint computes is refused
before any work (one line, its own exit code, nothing written); a good one becomes a target+eagle bundle whose
exported head is checked against the checkpoint's at the head's own rope theta; an untied target ships its
embeddings file; validate knows each kind's files and what MNN's eagle mode needs."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file

from packager.bundle.kinds import DRAFT, TARGET, TARGET_EAGLE, kind_of
from packager.convert.inspect.checkpoint import inspect_checkpoint
from packager.convert.inspect.eagle_head import aux_layers, inspect_head
from packager.convert.pipeline import ConvertRequest, convert
from packager.validate import validate
from tests.conftest import run_cli
from tests.inprocess import run_packager
from tests.models import build_qwen3


def _copy_head(head: Path, dst: Path) -> Path:
    shutil.copytree(head, dst)
    return dst


def _tensors(folder: Path, change: Callable[[dict[str, Any]], None]) -> None:
    state = load_file(str(folder / "model.safetensors"))
    change(state)
    (folder / "model.safetensors").unlink()
    save_file(state, str(folder / "model.safetensors"))


def _config(folder: Path, **changes: Any) -> None:
    data = json.loads((folder / "config.json").read_text())
    data.update(changes)
    (folder / "config.json").write_text(json.dumps(data))


def _rename(old: str, new: str) -> Callable[[dict[str, Any]], None]:
    return lambda s: s.__setitem__(new, s.pop(old))


def _d2t_outside(state: dict[str, Any]) -> None:
    state["d2t"][-1] = 200_000


def _pickle(folder: Path) -> None:
    torch.save(load_file(str(folder / "model.safetensors")), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()


HEADS: dict[str, tuple[Callable[[Path], None], int, str]] = {
    "a tensor missing": (
        lambda f: _tensors(f, lambda s: s.pop("midlayer.hidden_norm.weight")),
        53,
        "missing midlayer.hidden_norm.weight",
    ),
    "a tensor misnamed": (
        lambda f: _tensors(f, _rename("midlayer.self_attn.q_proj.weight", "layers.0.self_attn.q_proj.weight")),
        53,
        "unexpected layers.0.self_attn.q_proj.weight (did you mean midlayer.self_attn.q_proj.weight?)",
    ),
    "an unexpected tensor": (
        lambda f: _tensors(f, lambda s: s.__setitem__("midlayer.self_attn.q_norm.weight", torch.ones(128))),
        53,
        "unexpected midlayer.self_attn.q_norm.weight",
    ),
    "a wrong shape": (
        lambda f: _tensors(f, lambda s: s.__setitem__("fc.weight", torch.zeros(256, 512))),
        54,
        "fc.weight is [256, 512], expected [256, 768]",
    ),
    "another hidden size": (lambda f: _config(f, hidden_size=512), 54, "hidden_size 512 differs from the target's 256"),
    "other head counts": (lambda f: _config(f, num_key_value_heads=2), 54, "num_key_value_heads 2 differs"),
    "another head_dim": (lambda f: _config(f, head_dim=64), 54, "head_dim 64 differs"),
    "another vocabulary": (lambda f: _config(f, vocab_size=32000), 54, "vocab_size 32000 differs"),
    "d2t outside the vocabulary": (lambda f: _tensors(f, _d2t_outside), 56, "maps 1 draft id(s) outside"),
    "d2t of another length": (lambda f: _config(f, draft_vocab_size=1024), 54, "d2t is [2048], expected [1024]"),
    "draft vocabulary above the target's": (lambda f: _config(f, draft_vocab_size=200_000), 56, "exceeds"),
    "a pickle": (_pickle, 57, "pytorch_model.bin (a pickle)"),
    "rope scaling": (lambda f: _config(f, rope_scaling={"rope_type": "yarn", "factor": 4.0}), 53, "rope_scaling"),
    "no weights": (lambda f: (f / "model.safetensors").unlink(), 53, "has no model.safetensors"),
    "no config": (lambda f: (f / "config.json").unlink(), 53, "no config.json"),
}


@pytest.mark.parametrize("case", sorted(HEADS))
def test_a_head_that_would_not_compute_the_checkpoints_is_refused_before_any_work(
    case: str, target8: Path, head: Path, tmp_path: Path
) -> None:
    mutate, code, text = HEADS[case]
    broken = _copy_head(head, tmp_path / "head")
    mutate(broken)
    out = tmp_path / "bundle"
    done = run_packager("convert", str(target8), "--eagle", str(broken), "--out", str(out))
    assert done.returncode == code, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and text in lines[0] and "Traceback" not in done.stderr, done.stderr
    assert not out.exists() and not any(tmp_path.glob(".*bundle*"))


def test_a_target_with_fewer_than_7_layers_is_refused(head: Path, tmp_path: Path) -> None:
    shallow = build_qwen3(tmp_path / "qwen3-6l", layers=6, tie=False)
    done = run_packager("convert", str(shallow), "--eagle", str(head), "--out", str(tmp_path / "bundle"))
    assert done.returncode == 55 and "has 6 layers" in done.stderr and not (tmp_path / "bundle").exists()


def test_a_pickle_head_is_read_weights_only_when_the_user_allows_it(target8: Path, head: Path, tmp_path: Path) -> None:
    broken = _copy_head(head, tmp_path / "head")
    _pickle(broken)
    info = inspect_head(broken, inspect_checkpoint(target8, allow_untied=True), allow_pickle=True)
    assert info.pickle and info.weights.name == "pytorch_model.bin" and info.draft_vocab_size == 2048


def test_the_aux_layers_are_2_half_and_n_minus_3() -> None:
    assert aux_layers(8) == (2, 4, 5) and aux_layers(7) == (2, 3, 4) and aux_layers(36) == (2, 18, 33)


@pytest.mark.converter
def test_the_head_is_exported_with_its_own_rope_theta_and_checked_against_the_checkpoint(eagle_bundle: Any) -> None:
    result = eagle_bundle
    assert result.kind is TARGET_EAGLE and result.head.rope_theta == 1_000_000.0
    checked = result.faithfulness
    # the exported head matches the head at 1e6 within the weights' rounding, and is far from llmexport's 10000
    assert checked.hidden_error < 0.05 and checked.logprob_error < 0.05
    assert checked.other_theta_error > 3 * checked.hidden_error
    names = {p.name for p in result.out.iterdir()}
    assert names == set(TARGET_EAGLE.files) | {"embeddings_bf16.bin"}
    config = json.loads((result.out / "config.json").read_text())
    assert config["speculative_type"] == "eagle" and config["hidden_states"] is True
    assert config["sampler_type"] == "greedy" and config["embedding_file"] == "embeddings_bf16.bin"
    record = json.loads(result.provenance.read_text())
    assert record["kind"] == "target+eagle" and record["eagle_head"]["rope_theta"] == 1_000_000.0
    assert set(record["bundle_xxh3_128"]) == names


@pytest.mark.converter
def test_validate_knows_the_eagle_bundle_and_what_its_mode_needs(eagle_bundle: Any, tmp_path: Path) -> None:
    bundle = eagle_bundle.out
    report = validate(bundle)
    assert report.kind == "target+eagle" and not report.errors, report.errors
    broken = tmp_path / "broken"
    shutil.copytree(bundle, broken)
    config = json.loads((broken / "config.json").read_text())
    config.update(sampler_type="mixed", hidden_states=False)
    (broken / "config.json").write_text(json.dumps(config))
    messages = [f"{f.file}{f.pointer}: {f.message}" for f in validate(broken).errors]
    assert any("config.json/sampler_type" in m and "argmax" in m for m in messages), messages
    assert any("config.json/hidden_states" in m for m in messages), messages
    (broken / "eagle_fc.mnn").unlink()
    messages = [f"{f.file}{f.pointer}: {f.message}" for f in validate(broken).errors]
    assert any(m.startswith("eagle_fc.mnn: missing") for m in messages), messages
    assert any("config.json/eagle_fc" in m and "crashes" in m for m in messages), messages


@pytest.mark.converter
def test_validate_finds_a_d2t_that_does_not_fit_the_head(eagle_bundle: Any, head: Path, tmp_path: Path) -> None:
    import MNN.expr as F
    import numpy as np

    broken = tmp_path / "broken"
    shutil.copytree(eagle_bundle.out, broken)
    short = np.zeros(100, dtype=np.int32)
    var = F.const(short, [100], F.NHWC, F.int)
    var.name = "d2t"
    F.save([var], str(broken / "eagle_d2t.mnn"))
    messages = [f"{f.file}: {f.message}" for f in validate(broken).errors]
    assert any("eagle_d2t.mnn: holds 100 entries" in m and "2048" in m for m in messages), messages


@pytest.mark.converter
def test_an_untied_checkpoint_becomes_a_target_bundle_with_its_embeddings_file(target8: Path, tmp_path: Path) -> None:
    refused = run_cli("convert", str(target8), "--out", str(tmp_path / "draft"))
    assert refused.returncode == 13 and "--kind target" in refused.stderr
    done = run_cli("convert", str(target8), "--kind", "target", "--out", str(tmp_path / "target"), "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["kind"] == "target"
    assert set(summary["files"]) == set(TARGET.files) | {"embeddings_bf16.bin"}
    bundle = tmp_path / "target"
    assert kind_of(bundle) is TARGET and validate(bundle).kind == "target" and not validate(bundle).errors
    assert (bundle / "embeddings_bf16.bin").stat().st_size == 151936 * 256 * 2
    (bundle / "embeddings_bf16.bin").unlink()
    errors = validate(bundle).errors
    assert any(f.file == "config.json" and "embeddings_bf16.bin is missing" in f.message for f in errors), errors


@pytest.mark.converter
def test_a_draft_bundle_is_still_judged_a_draft(bundle4: Any) -> None:
    assert kind_of(bundle4.out) is DRAFT and validate(bundle4.out).kind == "draft"


@pytest.mark.converter
def test_the_card_of_an_eagle_bundle_says_its_kind_its_head_and_its_files(eagle_bundle: Any) -> None:
    from packager.card.measurements import gather_measurements
    from packager.card.render import render
    from packager.spec import model as spec_module
    from tests.specs import EXAMPLE

    text = render(eagle_bundle.out, spec_module.load(EXAMPLE), measurements=gather_measurements(eagle_bundle.out)).text
    assert "| Bundle kind | `target+eagle` |" in text and 'speculative_type: "eagle"' in text
    assert "| Rope theta | 1e+06 (the head's own" in text and "inputs of layers 2, 4, 5" in text
    assert "| Minimum MNN engine | 3.6.1 |" in text and "embeddings_bf16.bin" in text
    for name in TARGET_EAGLE.files:
        assert f"| `{name}` |" in text
    assert "config_opencl.json" not in text and "draft-model" not in text.split("---")[1]
