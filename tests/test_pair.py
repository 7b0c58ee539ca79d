"""`pair`: compatibility before measurement, greedy acceptance, and an estimate whose arithmetic matches a real
speculative loop step by step (its wall-time comparison is bench/speculative_bench.py: tests do not time)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from packager.convert.pipeline import ConvertResult
from packager.pair import acceptance, pair, runs_for
from packager.pair.models import HFModel
from packager.pair.speculative import autoregressive, speculative
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
def test_real_speculative_loop_is_lossless_and_accepts_what_the_estimate_counts(
        kind: str, tiny_checkpoint: Path, deep_targets: dict[str, Path]) -> None:
    # Timing-free: the loop's tokens equal the target's greedy ones, and each of its steps accepts exactly the
    # tokens the estimate's arithmetic (one teacher-forced draft pass) predicts. Wall time: bench/.
    target_path = deep_targets[kind]
    report = pair(tiny_checkpoint, target_path, PROMPTS[:2], new_tokens=60, repeats=1)
    draft, target = HFModel(tiny_checkpoint), HFModel(target_path)
    tokens = steps = 0
    for prompt in PROMPTS[:2]:
        ids = target.encode(prompt)
        reference = autoregressive(target, ids, 60)
        continuation, runs = runs_for(draft, target, ids, 60)
        assert continuation == reference
        for d in sorted({1, report.best.d, acceptance.MAX_D}):
            taken: list[int] = []
            assert speculative(draft, target, ids, 60, d, accepted=taken) == reference  # lossless
            predicted = acceptance.accepted_per_step(runs, d)
            assert taken[:len(predicted)] == predicted, (kind, d)
            if d == report.best.d:
                tokens, steps = tokens + sum(predicted) + len(predicted), steps + len(predicted)
    assert abs(tokens / steps - report.best.mean_accepted_length) < 1e-12
    assert (report.alpha == 1.0) if kind == "same" else (0.05 < report.alpha < 0.9)


def test_runtime_crash_while_pairing_is_one_line_and_exit_27(bundle4: ConvertResult, tmp_path: Path) -> None:
    draft = tmp_path / "zeroed"
    shutil.copytree(bundle4.out, draft)
    (draft / "llm.mnn.weight").write_bytes(bytes((draft / "llm.mnn.weight").stat().st_size))
    result = run_cli("pair", str(draft), str(bundle4.out), "--quiet")
    assert result.returncode == 27 and result.stderr.count("\n") == 1 and result.stdout == ""
    assert result.stderr.startswith(f"packager: error: the MNN runtime crashed (SIGSEGV, signal 11) while loading "
                                    f"the bundle {draft}")


def test_malformed_bundle_files_in_pair_are_one_line(bundle4: ConvertResult, tmp_path: Path) -> None:
    draft = tmp_path / "malformed"
    shutil.copytree(bundle4.out, draft)
    lines = (draft / "tokenizer.txt").read_bytes().split(b"\n", 1)
    (draft / "tokenizer.txt").write_bytes(b"430 " + b"7" * 3000 + b"\n" + lines[1])
    result = run_cli("pair", str(draft), str(bundle4.out), "--quiet")
    assert result.returncode == 51 and result.stderr.count("\n") == 1, result.stderr[-2000:]
    assert f"packager: error: {draft} is malformed (line 1 is '430 7777" in result.stderr
    assert len(result.stderr) < 700  # the 3,000-character line is shortened


def test_too_few_tokens_is_a_usage_error_before_anything_loads(tmp_path: Path) -> None:
    # Fewer than 8 would leave the timings no cached context (an empty forward crashes MNN).
    result = run_cli("pair", str(tmp_path), str(tmp_path), "--tokens", "0")
    assert result.returncode == 2 and "Invalid value for '--tokens': 0 is not in the range 8<=x<=4096" in result.stderr
