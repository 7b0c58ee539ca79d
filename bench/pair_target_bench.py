"""Benchmark: `packager pair` against a real-size target, cold and with the target cache warm.

The target is the Qwen3-4B-shaped 4-bit bundle (tied; bench/work/target-4b-4bit, made from convert_bench.py's
4B-shaped checkpoint with `packager convert`), stored as an app stores it: the seven runtime files, no
llm.mnn.json. First draft: the 0.6B-shaped 4-bit bundle (bench/work/out-packager); second draft: the 0.6B-shaped
checkpoint itself (bf16, transformers). The built-in workload (54 chat prompts x 32 target tokens) and the
default 5 timing repeats. Each round uses a fresh cache folder: draft 1 runs cold (the target decoded), draft 2
warm (the target's continuations from the cache). Wall time and the peak RSS of the whole process tree (MNN
children included), sampled every 20 ms, and the target step time pair reports.

Usage: python bench/pair_target_bench.py [--rounds 2] [--target DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from common import REPO, WORK, tree_peak

sys.path.insert(0, str(REPO))

from packager.bundle.kinds import APP_FILES


def app_folder(bundle: Path) -> Path:
    folder = WORK / f"{bundle.name}-app"
    if not folder.is_dir():
        folder.mkdir()
        for name in APP_FILES:
            os.link(bundle / name, folder / name)
    return folder


def run_pair(draft: Path, target: Path, cache: Path) -> dict[str, object]:
    env = {**os.environ, "PACKAGER_CACHE_DIR": str(cache)}
    began = time.perf_counter()
    proc = psutil.Popen(
        [sys.executable, "-m", "packager.cli", "pair", str(draft), str(target), "--json", "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO,
        env=env,
    )
    peak = tree_peak(proc)
    wall = time.perf_counter() - began
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"pair failed ({proc.returncode}): {err.decode()[-2000:]}")
    report = json.loads(out)
    return {
        "wall_s": round(wall, 1),
        "peak_rss_mb": round(peak / 1e6),
        "alpha": report["alpha"]["value"],
        "positions": report["positions"],
        "target_cached_prompts": report["target_cached_prompts"],
        "target_step_ms": round(report["costs"]["target_step_s"]["median"] * 1e3, 1),
        "draft_step_ms": round(report["costs"]["draft_step_s"]["median"] * 1e3, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--target", type=Path, default=WORK / "target-4b-4bit")
    args = parser.parse_args()
    target = app_folder(args.target)
    drafts = (WORK / "out-packager", WORK / "qwen3-0.6b-shaped")
    rounds = []
    for number in range(args.rounds):
        cache = Path(tempfile.mkdtemp(prefix="pair-target-bench-"))
        try:
            cold, warm = (run_pair(d, target, cache) for d in drafts)
        finally:
            shutil.rmtree(cache, ignore_errors=True)
        rounds.append({"cold": cold, "warm": warm, "warm_over_cold": round(warm["wall_s"] / cold["wall_s"], 3)})
        print(number, rounds[-1], flush=True)
    ratios = [r["warm_over_cold"] for r in rounds]
    result = {
        "target": str(target),
        "rounds": rounds,
        "warm_over_cold": {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)},
        "load_average_at_end": os.getloadavg(),
    }
    (WORK / "pair_target_bench.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
