"""Benchmark: `packager verify` against the work it cannot avoid, the source's own greedy continuations.

Baseline (issue 19): transformers, float32, KV cache, 16 new tokens on the same 54 chat-templated prompts, one
prompt at a time, in a process of its own; its figure is the decoding loop alone (loading excluded, so the
baseline is the smallest it can be). Against it: the whole `packager verify BUNDLE --source SRC` process, loading
included, with the peak RSS of its process tree (the MNN child too) sampled every 20 ms. Runs alternate baseline
and verify; the ratio is per run, with median and spread.

Cases: the 0.6B-shaped bundle (random bf16 weights, bench/work/out-packager) against its checkpoint; and, on the
trained miniature (small recipe, seed 0), a faithful bundle (the teacher at 4 bits against the teacher) and a
broken one (the same bundle against the distilled draft: verify must fail it).

Usage: python bench/verify_bench.py [--runs 3] [--cases 06b,faithful,broken]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil
from common import REPO, WORK, tree_peak

sys.path.insert(0, str(REPO))

BASELINE = """
import sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from packager.measure.pair import compat, workload
from packager.runtime.models import HFModel
from packager.runtime.speculative import autoregressive
from packager.families.qwen3 import QWEN3
source = Path(sys.argv[2])
model = HFModel(source, dtype="float32")
template, stop = workload.chat_template(source), tuple(sorted(compat.facts(source).stop))
prompts = [model.encode(workload.render(template, item, QWEN3.template_variables)) for item in workload.builtin()]
began = time.perf_counter()
for ids in prompts:
    autoregressive(model, ids, 16, stop)
print(time.perf_counter() - began)
"""


def baseline(source: Path) -> float:
    out = subprocess.run(
        [sys.executable, "-c", BASELINE, str(REPO), str(source)], check=True, capture_output=True, text=True
    )
    return float(out.stdout.strip().splitlines()[-1])


def run_verify(bundle: Path, source: Path) -> dict[str, object]:
    began = time.perf_counter()
    proc = psutil.Popen(
        [sys.executable, "-m", "packager.cli", "verify", str(bundle), "--checkpoint", str(source), "--json", "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO,
    )
    peak = tree_peak(proc)
    wall = time.perf_counter() - began
    report = json.loads(proc.stdout.read() or b"{}")
    return {
        "wall_s": round(wall, 1),
        "peak_rss_mb": round(peak / 1e6),
        "ok": report.get("ok"),
        "mean_kl": report.get("mean_kl"),
        "exit": proc.returncode,
        "positions": report.get("positions"),
    }


def cases(names: list[str]) -> dict[str, tuple[Path, Path]]:
    found: dict[str, tuple[Path, Path]] = {}
    if "06b" in names:
        from common import bundle_06b

        found["06b"] = (bundle_06b(), WORK / "qwen3-0.6b-shaped")
    if {"faithful", "broken"} & set(names):
        from packager.convert.pipeline import ConvertRequest, convert
        from tests.trained import fixture

        trained = fixture("small", seed=0)
        teacher4 = WORK / "verify-bench" / "teacher-4"
        if not teacher4.is_dir():
            convert(ConvertRequest(checkpoint=trained.teacher, out=teacher4, quant_bits=4))
        if "faithful" in names:
            found["faithful"] = (teacher4, trained.teacher)
        if "broken" in names:
            found["broken"] = (teacher4, trained.draft)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cases", default="06b,faithful,broken")
    args = parser.parse_args()
    results: dict[str, dict[str, object]] = {}
    for name, (bundle, source) in cases(args.cases.split(",")).items():
        rows = []
        for run in range(args.runs):
            base = baseline(source)
            mine = run_verify(bundle, source)
            rows.append({"baseline_s": round(base, 1), **mine, "ratio": round(float(mine["wall_s"]) / base, 3)})
            print(name, run, rows[-1], flush=True)
        ratios = [float(r["ratio"]) for r in rows]
        results[name] = {
            "runs": rows,
            "ratio": {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)},
            "peak_rss_mb_max": max(int(r["peak_rss_mb"]) for r in rows),
        }
    results["load_average_at_end"] = os.getloadavg()
    (WORK / "verify_bench.json").write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
