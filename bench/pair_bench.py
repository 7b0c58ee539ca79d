"""Benchmark: peak memory of `packager pair` with a 0.6B-shaped draft against a 4B-shaped target, both as bf16
checkpoints vs both as 4-bit MNN bundles (peak summed RSS of the whole process tree, MNN children included,
sampled every 20 ms; wall time too, but on a shared machine it is only indicative).

Uses bench/work/qwen3-0.6b-shaped and its bundle bench/work/out-packager (convert_bench.py makes them), and
bench/work/qwen3-4b-shaped and its bundle bench/work/out-4b when convert_bench.py --shape-4b made them (and the
checkpoint is complete); otherwise writes its own 4B-shaped checkpoint (random bf16, ~8 GB) under
bench/work/pair-bench and converts it there with `packager convert` (4-bit). The workload is kept small
(2 prompts, 8 tokens, 1 timing repeat): memory is set by the weights, not by how long pair runs.

Usage: python bench/pair_bench.py [--work bench/work] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import psutil  # noqa: E402
from convert_bench import write_4b_shaped  # noqa: E402

from packager.measure.pair import memory  # noqa: E402
from packager.runtime.models import is_bundle  # noqa: E402

PROMPTS = ["Write a short paragraph about the sea.", "What is the capital of France?"]


def complete(checkpoint: Path) -> bool:
    """A checkpoint another bench wrote completely (its file as long as its header says), not one being written."""
    weights = checkpoint / "model.safetensors"
    if not (checkpoint / "config.json").is_file() or not weights.is_file():
        return False
    with weights.open("rb") as handle:
        length = int.from_bytes(handle.read(8), "little")
        header = json.loads(handle.read(length))
    end = max(v["data_offsets"][1] for k, v in header.items() if k != "__metadata__")
    return weights.stat().st_size == 8 + length + end


def bundle_of(checkpoint: Path, out: Path) -> Path:
    if not is_bundle(out):
        subprocess.run(
            [sys.executable, "-m", "packager.cli", "convert", str(checkpoint), "--out", str(out), "--force", "--quiet"],
            check=True,
        )
    return out


def peak_rss(cmd: list[str], cwd: Path, limit_s: float) -> dict[str, object]:
    """Peak summed RSS of the process tree (every 20 ms) and wall time; after `limit_s` the tree is stopped and
    the peak so far is kept (it is set once both models are loaded; what follows is compute)."""
    start = time.monotonic()
    proc = psutil.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak, stopped = 0, False
    while proc.poll() is None:
        try:
            peak = max(peak, sum(p.memory_info().rss for p in [proc, *proc.children(recursive=True)]))
        except psutil.Error:
            pass
        if time.monotonic() - start > limit_s and not stopped:
            for child in [*proc.children(recursive=True), proc]:
                child.kill()
            stopped = True
        time.sleep(0.02)
    error = "" if stopped or proc.returncode == 0 else proc.stderr.read().decode()[-500:]
    return {
        "wall_s": round(time.monotonic() - start, 1),
        "peak_rss_gib": round(peak / memory.GIB, 2),
        "stopped_after_s": limit_s if stopped else None,
        "error": error,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--work", type=Path, default=REPO / "bench" / "work")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--limit", type=float, default=900, help="seconds per route before it is stopped")
    args = parser.parse_args()
    work = args.work.resolve()
    draft_ckpt = work / "qwen3-0.6b-shaped"
    if not complete(draft_ckpt):
        raise SystemExit("run bench/convert_bench.py first (it makes the 0.6B-shaped checkpoint)")
    draft_bundle = bundle_of(draft_ckpt, work / "pair-bench" / "qwen3-0.6b-4bit")
    shared = work / "qwen3-4b-shaped"
    if complete(shared) and is_bundle(work / "out-4b"):  # convert_bench.py --shape-4b made both
        target_ckpt, target_bundle = shared, work / "out-4b"
    else:
        target_ckpt = write_4b_shaped(work / "pair-bench" / "qwen3-4b-shaped")
        target_bundle = bundle_of(target_ckpt, work / "pair-bench" / "qwen3-4b-4bit")
    prompts = work / "pair-prompts.txt"
    prompts.write_text("\n".join(PROMPTS), encoding="utf-8")
    routes = {"4-bit MNN bundles": (draft_bundle, target_bundle), "checkpoints (bf16)": (draft_ckpt, target_ckpt)}
    report: dict[str, object] = {
        "mem_available_gib_at_start": round(memory.available() / memory.GIB, 2),
        "cpu_count": os.cpu_count(),
        "threads": args.threads,
    }
    for name, (draft, target) in routes.items():
        estimate = sum(memory.estimate(p, mnn=is_bundle(p)).total for p in (draft, target))
        cmd = [
            sys.executable,
            "-m",
            "packager.cli",
            "pair",
            str(draft),
            str(target),
            "--prompts",
            str(prompts),
            "--tokens",
            "8",
            "--repeats",
            "1",
            "--threads",
            str(args.threads),
            "--quiet",
        ]
        result = peak_rss(cmd, work, args.limit)
        report[name] = {
            **result,
            "draft": draft.name,
            "target": target.name,
            "pair_estimate_gib": round(estimate / memory.GIB, 2),
            "weights_gib": round(
                sum(memory.estimate(p, mnn=is_bundle(p)).weight_bytes for p in (draft, target)) / memory.GIB, 2
            ),
        }
        print(name, report[name], flush=True)
    (work / "pair_bench.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
