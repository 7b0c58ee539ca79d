"""Benchmark: peak memory of `packager pair` with a 0.6B-shaped draft against a 4B-shaped target, both as bf16
checkpoints vs both as 4-bit MNN bundles (peak summed RSS of the whole process tree, MNN children included,
sampled every 20 ms; wall time too, but on a shared machine it is only indicative).

Uses bench/work/qwen3-0.6b-shaped and its bundle bench/work/out-packager (convert_bench.py makes them), and
bench/work/qwen3-4b-shaped and its bundle bench/work/out-4b when convert_bench.py --shape-4b made them;
otherwise writes the 4B-shaped checkpoint (random bf16, ~8 GB) and converts it here. The workload is kept small
(2 prompts, 8 tokens, 1 timing repeat): memory is set by the weights, not by how long pair runs.

Usage: python bench/pair_bench.py [--work bench/work] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from convert_bench import measure, write_4b_shaped  # noqa: E402

from packager.pair import memory  # noqa: E402
from packager.pair.models import is_bundle  # noqa: E402

PROMPTS = ["Write a short paragraph about the sea.", "What is the capital of France?"]


def bundle_of(checkpoint: Path, out: Path) -> Path:
    if not is_bundle(out):
        subprocess.run([sys.executable, "-m", "packager.cli", "convert", str(checkpoint), "--out", str(out),
                        "--force", "--quiet"], check=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--work", type=Path, default=REPO / "bench" / "work")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    work = args.work.resolve()
    draft_ckpt, draft_bundle = work / "qwen3-0.6b-shaped", work / "out-packager"
    if not (draft_ckpt.is_dir() and is_bundle(draft_bundle)):
        raise SystemExit("run bench/convert_bench.py first (it makes the 0.6B-shaped checkpoint and bundle)")
    target_ckpt = write_4b_shaped(work / "qwen3-4b-shaped")
    target_bundle = work / "out-4b" if is_bundle(work / "out-4b") else bundle_of(target_ckpt, work / "pair-4b-4bit")
    prompts = work / "pair-prompts.txt"
    prompts.write_text("\n".join(PROMPTS), encoding="utf-8")
    routes = {"checkpoints (bf16)": (draft_ckpt, target_ckpt), "4-bit MNN bundles": (draft_bundle, target_bundle)}
    report: dict[str, object] = {"mem_available_gib_at_start": round(memory.available() / memory.GIB, 2),
                                 "cpu_count": os.cpu_count(), "threads": args.threads}
    for name, (draft, target) in routes.items():
        estimate = sum(memory.estimate(p, mnn=is_bundle(p)).total for p in (draft, target))
        cmd = [sys.executable, "-m", "packager.cli", "pair", str(draft), str(target), "--prompts", str(prompts),
               "--tokens", "8", "--repeats", "1", "--threads", str(args.threads), "--quiet"]
        result = measure(cmd, work, dict(os.environ))
        report[name] = {**result, "draft": draft.name, "target": target.name,
                        "pair_estimate_gib": round(estimate / memory.GIB, 2),
                        "weights_gib": round(sum(memory.estimate(p, mnn=is_bundle(p)).weight_bytes
                                                 for p in (draft, target)) / memory.GIB, 2)}
        print(name, report[name], flush=True)
    (work / "pair_bench.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
