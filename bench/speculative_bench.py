"""Benchmark: `pair`'s speedup estimate against the wall time of a real KV-cached greedy speculative loop.

A tiny Qwen3 draft (2 layers) and two targets built from it with 30 extra layers (2x the cost): "same" (the
extra layers output zero, so the target computes the draft's function: alpha 1) and "noisy" (noise in them:
alpha about 0.3). For each, `pair` gives the estimate at its best d; then rounds alternate the autoregressive
baseline and the speculative loop at that d (best of 3 interleaved runs each per round) and report the real
speedup of every round, with min/median/max and estimate / real. One torch thread by default: on a shared
2-core machine two threads spin-wait on each other and the spread explodes. The tests assert only what does
not depend on timing.

Usage: python bench/speculative_bench.py [--rounds 5] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from common import WORK

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from packager.families.qwen3 import QWEN3
from packager.measure import workload
from packager.measure.pair import Options, pair
from packager.runtime.models import HFModel
from packager.runtime.speculative import autoregressive, speculative, timed
from tests.models import build_deep_target, build_qwen3

PROMPTS = ("The capital of France is", "def fibonacci(n):")
NEW_TOKENS = 60  # a whole number of steps for every d <= 5 when all is accepted


def models() -> tuple[Path, dict[str, Path]]:
    root = WORK / "speculative"
    draft = root / "draft"
    if not draft.exists():
        build_qwen3(draft)
    targets = {"same": root / "target-same", "noisy": root / "target-noisy"}
    for kind, path in targets.items():
        if not path.exists():
            build_deep_target(draft, path, extra_layers=30, noise=0.0 if kind == "same" else 0.02)
    return draft, targets


def measure(draft_path: Path, target_path: Path, rounds: int) -> dict[str, object]:
    report = pair(
        draft_path,
        target_path,
        PROMPTS,
        Options(new_tokens=NEW_TOKENS, repeats=5, dtype="float32", threads=HFModel.threads),
    )
    # The loop runs at the best d, or at d = 1 when no d gains beyond the noise.
    d = report.best_d or 1
    speedup = report.depths[d - 1].speedup_from_measured_tau
    assert speedup is not None
    estimate = speedup.median
    draft, target = HFModel(draft_path), HFModel(target_path)
    template = workload.chat_template(target_path)
    prompts = [
        target.encode(workload.render(template, p, QWEN3.template_variables)) for p in workload.from_texts(PROMPTS)
    ]
    real = []
    for _ in range(rounds):
        ar, spec = [], []
        for _ in range(3):  # interleaved, so a burst of load from elsewhere hits both sides alike
            ar.append(timed(lambda: [autoregressive(target, ids, NEW_TOKENS) for ids in prompts], repeats=1))
            spec.append(timed(lambda: [speculative(draft, target, ids, NEW_TOKENS, d) for ids in prompts], repeats=1))
        assert all(tokens == ar[0][1] for _, tokens in ar + spec)  # lossless
        real.append(min(t for t, _ in ar) / min(t for t, _ in spec))
    real.sort()
    return {
        "alpha": report.alpha.value,
        "best_d": report.best_d,
        "loop_d": d,
        "estimate": estimate,
        "real_per_round": real,
        "real_min": real[0],
        "real_median": statistics.median(real),
        "real_max": real[-1],
        "estimate_vs_real_median": estimate / statistics.median(real),
        "estimate_vs_real_range": [estimate / real[-1], estimate / real[0]],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch threads for every model (estimate and loop)")
    args = parser.parse_args()
    HFModel.threads = args.threads
    draft, targets = models()
    result = {kind: {"threads": args.threads, **measure(draft, path, args.rounds)} for kind, path in targets.items()}
    (WORK / "speculative_bench.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
