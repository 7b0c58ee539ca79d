"""`verify` passes a faithful bundle and fails a tampered one with the numbers shown."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from packager.convert.pipeline import ConvertResult
from packager.verify import Thresholds, compare_positions, verify
from tests.conftest import run_cli


def test_faithful_8bit_bundle_passes(bundle8: ConvertResult, tiny_checkpoint: Path) -> None:
    report = verify(bundle8.out, tiny_checkpoint)
    assert report.ok, report.failures
    assert report.mean_cosine > 0.999 and report.mean_kl < 0.001
    assert report.positions >= 1000 and report.prompts == 54
    assert report.tokenizer_total == 44 and report.tokenizer_matched >= 37
    # Random weights have flat logits: almost no position is decisive, so top-1 is reported but not gated.
    assert report.top1_decisive is None and any("not gated" in note for note in report.notes)


def _few_prompts(folder: Path) -> Path:
    """A short --prompts file: the CLI tests check the gate's wiring, not the figures (fewer positions, faster)."""
    path = folder / "prompts.txt"
    path.write_text("The capital of France is\ndef fibonacci(n):\nQ: Why is the sky blue?\n", encoding="utf-8")
    return path


def test_tampered_weights_fail_with_numbers(bundle8: ConvertResult, tiny_checkpoint: Path, tmp_path: Path) -> None:
    bundle = tmp_path / "tampered"
    shutil.copytree(bundle8.out, bundle)
    weights = bytearray((bundle / "llm.mnn.weight").read_bytes())
    start = len(weights) // 3
    weights[start:start + 3_000_000] = bytes(reversed(weights[start:start + 3_000_000]))
    (bundle / "llm.mnn.weight").write_bytes(bytes(weights))
    result = run_cli("verify", str(bundle), "--source", str(tiny_checkpoint), "--json", "--quiet",
                     "--prompts", str(_few_prompts(tmp_path)))
    assert result.returncode == 50
    data = json.loads(result.stdout)
    assert not data["ok"] and data["mean_cosine"] < 0.98
    assert any(f.startswith("mean cosine 0.") and "< 0.9800" in f for f in data["failures"])


def test_thresholds_come_from_the_spec(bundle4: ConvertResult, tiny_checkpoint: Path, tmp_path: Path) -> None:
    spec = tmp_path / "release.toml"
    # Gates the defaults leave off (all-position top-1, greedy agreement) bite when the spec sets them.
    spec.write_text("[verify]\ntop1_agreement = 0.9999\ngreedy_agreement = 0.9999\n")
    result = run_cli("verify", str(bundle4.out), "--source", str(tiny_checkpoint), "--spec", str(spec), "--json",
                     "--quiet", "--prompts", str(_few_prompts(tmp_path)))
    assert result.returncode == 50, result.stdout
    failures = json.loads(result.stdout)["failures"]
    assert any(f.startswith("top-1 agreement") for f in failures)
    assert any(f.startswith("greedy agreement") for f in failures)
    assert Thresholds.from_spec({"mean_cosine": 0.5}).mean_cosine == 0.5
    assert Thresholds.from_spec(None).top1_agreement is None  # not gated by default


def test_position_metrics() -> None:
    import numpy as np

    a = np.array([[1.0, 2.0, 3.0], [3.0, 1.0, 0.0]])
    top1, cosine, kl = compare_positions(a, a.copy())
    assert top1 == [True, True] and all(abs(c - 1) < 1e-12 for c in cosine) and all(abs(k) < 1e-9 for k in kl)
    top1, _, kl = compare_positions(a, a[::-1].copy())
    assert top1 == [False, False] and all(k > 0.1 for k in kl)


def _zeroed_copy(bundle: Path, out: Path) -> Path:
    shutil.copytree(bundle, out)
    weights = out / "llm.mnn.weight"
    weights.write_bytes(bytes(weights.stat().st_size))
    return out


def test_runtime_crash_on_zeroed_weights_is_one_line_and_exit_27(bundle4: ConvertResult, tiny_checkpoint: Path,
                                                                 tmp_path: Path) -> None:
    # MNN 3.6.1 really segfaults loading an all-zero llm.mnn.weight; it happens in the child process.
    bundle = _zeroed_copy(bundle4.out, tmp_path / "zeroed")
    result = run_cli("verify", str(bundle), "--source", str(tiny_checkpoint), "--quiet")
    assert result.returncode == 27, (result.returncode, result.stderr[-2000:])
    assert result.stderr.count("\n") == 1 and result.stdout == ""
    assert result.stderr.startswith("packager: error: the MNN runtime crashed (SIGSEGV, signal 11) while loading")


def test_runtime_crash_is_runtime_crashed_in_the_library_too(bundle4: ConvertResult, tmp_path: Path) -> None:
    from packager.errors import RuntimeCrashed
    from packager.pair.child import MNNModel

    bundle = _zeroed_copy(bundle4.out, tmp_path / "zeroed")
    try:
        MNNModel(bundle)
    except RuntimeCrashed as exc:
        assert exc.exit_code == 27 and "SIGSEGV" in exc.message and str(bundle) in exc.message
    else:
        raise AssertionError("MNN loaded an all-zero weight file")


def test_runtime_child_serves_the_same_logits_as_the_runtime_in_process(bundle4: ConvertResult) -> None:
    from packager.pair.child import MNNModel
    from packager.pair.mnn_runtime import MNNRuntime

    child, here = MNNModel(bundle4.out), MNNRuntime(bundle4.out)
    ids = here.encode("The capital of France is")
    assert child.encode("The capital of France is") == ids and child.vocab == here.vocab
    assert (child.logits_all(ids) == here.logits_all(ids)).all()
    assert child.greedy(ids, 5) == here.greedy(ids, 5)
    assert child.start(ids) == len(ids) and child.timed_step(ids[:2], True) > 0
    process = child._process
    child.close()
    assert process.returncode == 0  # a closed pipe ends the child cleanly


@pytest.mark.parametrize("content, expect", [
    (b"\xff\xfe not utf-8", "is not UTF-8 text"),
    (b'["unclosed", ', "is not valid JSON"),
    (b"[" * 10_000 + b"]" * 10_000, "is not valid JSON (nested too deeply)"),
    (b'{"prompts": [1, 2]}', "must hold a list of non-empty strings"),
    (b"[]", "holds no prompts"),
    (b"\n  \n", "holds no prompts"),
])
def test_unusable_prompts_file_is_one_line(bundle4: ConvertResult, tiny_checkpoint: Path, tmp_path: Path,
                                           content: bytes, expect: str) -> None:
    prompts = tmp_path / "prompts.txt"
    prompts.write_bytes(content)
    result = run_cli("verify", str(bundle4.out), "--source", str(tiny_checkpoint), "--prompts", str(prompts),
                     "--quiet")
    assert result.returncode == 19 and result.stderr.count("\n") == 1, result.stderr[-2000:]
    assert f"--prompts {prompts} {expect}" in result.stderr


def test_unreadable_source_tokenizer_is_one_line(bundle4: ConvertResult, tiny_checkpoint: Path,
                                                 tmp_path: Path) -> None:
    source = tmp_path / "source"
    shutil.copytree(tiny_checkpoint, source)
    (source / "tokenizer.json").write_text("{ broken")
    result = run_cli("verify", str(bundle4.out), "--source", str(source), "--quiet")
    assert result.returncode == 15 and result.stderr.count("\n") == 1, result.stderr[-2000:]
    assert f"cannot load {source}/tokenizer.json" in result.stderr


@pytest.mark.parametrize("signal_number, words", [
    (9, "was killed (SIGKILL; often the out-of-memory killer) while running encode on the bundle"),
    (6, "crashed (SIGABRT, signal 6) while running encode on the bundle"),
])
def test_a_killed_runtime_child_is_named_by_its_signal(bundle4: ConvertResult, signal_number: int,
                                                       words: str) -> None:
    import os

    from packager.errors import RuntimeCrashed
    from packager.pair.child import MNNModel

    model = MNNModel(bundle4.out)
    os.kill(model._process.pid, signal_number)  # what the OOM killer or an abort inside MNN does
    with pytest.raises(RuntimeCrashed) as caught:
        model.encode("hello")
    assert caught.value.exit_code == 27 and f"the MNN runtime {words} {bundle4.out}" == caught.value.message
