"""Benchmark: `packager convert` vs plain llmexport on a Qwen3-0.6B-shaped checkpoint, in the same run.

Builds the checkpoint (hidden 1024, 28 layers, 16 heads, 8 kv heads, head_dim 128, intermediate 3072,
vocab 151936, tied, random bf16 weights), then converts it with both tools, alternating, and reports wall
time and peak RSS of each whole process tree (sampled every 20 ms) plus the output sizes.

The baseline is llmexport's own command line (`llmexport.py --path ... --export mnn --quant_bit 4
--quant_block 128`), run with one change only: MNN's telemetry module is stubbed, as packager does, because
the unmodified tool would `pip install` a package into this environment and post usage logs.

Usage: python bench/convert_bench.py [--runs 2] [--work bench/work]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.models import build_qwen3  # noqa: E402

BASELINE = """
import importlib.util, sys, types
stub = types.ModuleType("MNN.tools.utils.log"); stub.mnn_logger = None
sys.modules["MNN.tools.utils.log"] = stub
folder = __import__("pathlib").Path(importlib.util.find_spec("llmexport").origin).parent
script = str(folder / "llmexport.py")
sys.argv = [script] + sys.argv[1:]
sys.path.insert(0, str(folder))
# Not runpy: llmexport sets sys.argv = [] mid-run, which breaks runpy's restore of argv[0].
exec(compile(open(script).read(), script, "exec"), {"__name__": "__main__", "__file__": script})
"""
REFERENCE = {"llm.mnn.weight": 336e6, "llm.mnn": 0.5e6}


def measure(cmd: list[str], cwd: Path) -> dict[str, float]:
    """Wall time and peak summed RSS of the process tree."""
    start = time.monotonic()
    proc = psutil.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = 0
    while proc.poll() is None:
        try:
            tree = [proc, *proc.children(recursive=True)]
            peak = max(peak, sum(p.memory_info().rss for p in tree if p.is_running()))
        except psutil.Error:
            pass
        time.sleep(0.02)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[:3]} failed:\n{proc.stderr.read().decode()[-3000:]}")
    return {"wall_s": wall, "peak_rss_mb": peak / 1e6}


def sizes(folder: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in sorted(folder.iterdir()) if p.is_file()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--work", type=Path, default=REPO / "bench" / "work")
    args = parser.parse_args()
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    ckpt = work / "qwen3-0.6b-shaped"
    if not ckpt.exists():
        t = time.monotonic()
        build_qwen3(ckpt, hidden=1024, layers=28, heads=16, kv_heads=8, intermediate=3072)
        print(f"built {ckpt} in {time.monotonic() - t:.0f}s", flush=True)
    packager = [sys.executable, "-m", "packager.cli", "convert", str(ckpt), "--quiet", "--force", "--out"]
    results: dict[str, list[dict[str, float]]] = {"packager": [], "llmexport": []}
    for run in range(args.runs):
        for name in ("llmexport", "packager") if run % 2 == 0 else ("packager", "llmexport"):
            out = work / f"out-{name}"
            shutil.rmtree(out, ignore_errors=True)
            cwd = work / f"cwd-{name}"
            shutil.rmtree(cwd, ignore_errors=True)
            cwd.mkdir()
            if name == "packager":
                cmd = [*packager, str(out)]
            else:
                cmd = [sys.executable, "-c", BASELINE, "--path", str(ckpt), "--export", "mnn", "--quant_bit", "4",
                       "--quant_block", "128", "--dst_path", str(out)]
            results[name].append(measure(cmd, cwd))
            print(name, run, results[name][-1], flush=True)
    best = {name: min(runs, key=lambda r: r["wall_s"]) for name, runs in results.items()}
    peak = {name: max(r["peak_rss_mb"] for r in runs) for name, runs in results.items()}
    report = {
        "runs": results,
        "time_ratio_best": best["packager"]["wall_s"] / best["llmexport"]["wall_s"],
        "time_ratio_mean": (sum(r["wall_s"] for r in results["packager"]) / len(results["packager"]))
        / (sum(r["wall_s"] for r in results["llmexport"]) / len(results["llmexport"])),
        "peak_rss_ratio": peak["packager"] / peak["llmexport"],
        "sizes": {"packager": sizes(work / "out-packager"), "llmexport": sizes(work / "out-llmexport"),
                  "reference": REFERENCE},
        "cpu_count": os.cpu_count(),
    }
    (work / "convert_bench.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
