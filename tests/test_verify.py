"""`verify` passes a faithful bundle and fails a tampered one with the numbers shown."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from packager.convert.pipeline import ConvertResult
from packager.verify import Thresholds, compare_positions, verify
from tests.conftest import run_cli


def test_faithful_8bit_bundle_passes(bundle8: ConvertResult, tiny_checkpoint: Path) -> None:
    report = verify(bundle8.out, tiny_checkpoint)
    assert report.ok, report.failures
    assert report.mean_cosine > 0.999 and report.mean_kl < 0.001 and report.greedy_agreement == 1.0
    assert report.positions > 100 and report.tokenizer_total == 44 and report.tokenizer_matched >= 37


def test_tampered_weights_fail_with_numbers(bundle8: ConvertResult, tiny_checkpoint: Path, tmp_path: Path) -> None:
    bundle = tmp_path / "tampered"
    shutil.copytree(bundle8.out, bundle)
    weights = bytearray((bundle / "llm.mnn.weight").read_bytes())
    start = len(weights) // 3
    weights[start:start + 3_000_000] = bytes(reversed(weights[start:start + 3_000_000]))
    (bundle / "llm.mnn.weight").write_bytes(bytes(weights))
    result = run_cli("verify", str(bundle), "--source", str(tiny_checkpoint), "--json", "--quiet")
    assert result.returncode == 50
    data = json.loads(result.stdout)
    assert not data["ok"] and data["mean_cosine"] < 0.98
    assert any(f.startswith("mean cosine 0.") and "< 0.9800" in f for f in data["failures"])


def test_thresholds_come_from_the_spec(bundle4: ConvertResult, tiny_checkpoint: Path, tmp_path: Path) -> None:
    strict = verify(bundle4.out, tiny_checkpoint)
    assert not strict.ok  # 4-bit random weights have nearly flat logits: top-1 is fragile
    spec = tmp_path / "release.toml"
    spec.write_text("[verify]\ntop1_agreement = 0.3\nmean_cosine = 0.9\ngreedy_agreement = 0.1\n")
    result = run_cli("verify", str(bundle4.out), "--source", str(tiny_checkpoint), "--spec", str(spec), "--quiet")
    assert result.returncode == 0, result.stdout
    assert Thresholds.from_spec({"mean_cosine": 0.5}).mean_cosine == 0.5


def test_position_metrics() -> None:
    import numpy as np

    a = np.array([[1.0, 2.0, 3.0], [3.0, 1.0, 0.0]])
    top1, cosine, kl = compare_positions(a, a.copy())
    assert top1 == [True, True] and all(abs(c - 1) < 1e-12 for c in cosine) and all(abs(k) < 1e-9 for k in kl)
    top1, _, kl = compare_positions(a, a[::-1].copy())
    assert top1 == [False, False] and all(k > 0.1 for k in kl)
