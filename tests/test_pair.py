"""`pair`: compatibility before measurement, greedy acceptance, and a speedup estimate that matches a real loop."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from packager.convert.pipeline import ConvertResult
from packager.pair import acceptance, pair
from packager.pair.models import HFModel
from packager.pair.speculative import autoregressive, speculative, timed
from tests.conftest import run_cli
from tests.models import build_deep_target, build_qwen3, copy_checkpoint

PROMPTS = ("The capital of France is", "def fibonacci(n):", "Q: What is the boiling point of water?\nA:",
           "Once upon a time, in a small village,")


def test_acceptance_arithmetic() -> None:
    assert acceptance.match_runs([1, 2, 9, 4, 5], [1, 2, 3, 4, 5]) == [2, 1, 0, 2, 1]
    runs = [6] * 40
    for d in range(1, 7):
        steps = acceptance.simulate(runs, d)
        assert steps.accepted == steps.proposed and steps.tokens / steps.steps == d + 1
    assert acceptance.expected_tokens(1.0, 3) == 4 and abs(acceptance.expected_tokens(0.5, 1) - 1.5) < 1e-12


def test_draft_paired_with_itself_accepts_everything(bundle4: ConvertResult) -> None:
    report = pair(bundle4.out, bundle4.out, PROMPTS, new_tokens=24, repeats=2)
    assert report.alpha == 1.0
    for depth in report.depths:
        assert depth.acceptance_rate == 1.0 and depth.mean_accepted_length == depth.d + 1


def test_4bit_bundle_against_its_8bit_bundle_accepts_most(bundle4: ConvertResult, bundle8: ConvertResult) -> None:
    report = pair(bundle4.out, bundle8.out, PROMPTS, new_tokens=24, repeats=2)
    assert report.alpha > 0.7


@pytest.fixture(scope="module")
def unrelated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_qwen3(tmp_path_factory.mktemp("unrelated") / "other", seed=7)


def test_unrelated_models_accept_little(tiny_checkpoint: Path, unrelated: Path) -> None:
    report = pair(tiny_checkpoint, unrelated, PROMPTS, new_tokens=24, repeats=2)
    assert report.alpha < 0.2


def test_other_vocabulary_is_refused_before_any_measurement(tiny_checkpoint: Path, tmp_path: Path) -> None:
    target = copy_checkpoint(tiny_checkpoint, tmp_path / "qwen3_5-like")
    config = json.loads((target / "config.json").read_text())
    config.update(model_type="qwen3_5", vocab_size=248320)
    (target / "config.json").write_text(json.dumps(config))
    (target / "model.safetensors").unlink()  # nothing to load: the refusal must come from the files alone
    result = run_cli("pair", str(tiny_checkpoint), str(target), "--quiet")
    assert result.returncode == 51 and result.stderr.count("\n") == 1
    assert "family qwen3 vs qwen3_5" in result.stderr and "vocabulary 151936 vs 248320" in result.stderr


def test_other_chat_template_is_refused(tiny_checkpoint: Path, tmp_path: Path) -> None:
    target = copy_checkpoint(tiny_checkpoint, tmp_path / "other-template")
    tok = json.loads((target / "tokenizer_config.json").read_text())
    tok["chat_template"] = "{{ messages }}"
    (target / "tokenizer_config.json").write_text(json.dumps(tok))
    result = run_cli("pair", str(tiny_checkpoint), str(target), "--quiet")
    assert result.returncode == 51 and "different chat templates" in result.stderr


@pytest.fixture(scope="module")
def deep_targets(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("deep")
    return {"same": build_deep_target(tiny_checkpoint, root / "same", extra_layers=30, noise=0.0),
            "noisy": build_deep_target(tiny_checkpoint, root / "noisy", extra_layers=30, noise=0.02)}


@pytest.mark.parametrize("kind", ["same", "noisy"])
def test_speedup_estimate_matches_a_real_speculative_loop(kind: str, tiny_checkpoint: Path,
                                                          deep_targets: dict[str, Path]) -> None:
    target_path = deep_targets[kind]
    # The estimate and the loop see the same workload: acceptance depends on the text.
    report = pair(tiny_checkpoint, target_path, PROMPTS[:2], new_tokens=60, repeats=5)
    draft, target = HFModel(tiny_checkpoint), HFModel(target_path)
    prompts = [target.encode(p) for p in PROMPTS[:2]]
    # 60 tokens: a whole number of steps for every d <= 5 when all is accepted, so no tail step is wasted.
    t_ar, reference = timed(lambda: [autoregressive(target, ids, 60) for ids in prompts], repeats=3)
    d = report.best.d
    t_spec, produced = timed(lambda: [speculative(draft, target, ids, 60, d) for ids in prompts], repeats=3)
    assert produced == reference  # greedy speculative decoding is lossless
    measured = t_ar / t_spec
    estimate = report.best.speedup_measured_alpha
    print(f"{kind}: d={d} estimate {estimate:.3f}x, real loop {measured:.3f}x")
    assert abs(estimate / measured - 1) <= 0.2, (kind, d, estimate, measured)
