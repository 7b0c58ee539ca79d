"""Benchmark: `packager convert TARGET --eagle HEAD` against llmexport's own `--eagle_path` on the same inputs.

A 0.6B-shaped target (hidden 1024, 28 layers, 16/8 heads, untied, random bf16 weights; bench/work) and a random
EAGLE-3 head of matching shape (draft vocabulary 32000). Both run as fresh processes, alternating order, on the
same machine; wall time and the peaks of the process tree's summed RSS and PSS (bench.convert_bench.measure:
a cold conversion forks copies of its converter, whose shared pages RSS counts twice). packager runs with its graph
cache emptied (cold) and with the entry the cold run left (warm). Ratios are per run, reported as median and
min-max. Writes bench/work/eagle_convert_bench.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.convert_bench import BASELINE, measure, spread  # noqa: E402
from tests.models import build_eagle_head, build_qwen3  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--work", type=Path, default=REPO / "bench" / "work")
    args = parser.parse_args()
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    target = work / "qwen3-0.6b-shaped-untied"
    if not target.exists():
        build_qwen3(target, hidden=1024, layers=28, heads=16, kv_heads=8, intermediate=3072, tie=False)
    head = work / "eagle3-head-0.6b-shaped"
    if not head.exists():
        build_eagle_head(target, head, draft_vocab=32000, intermediate=3072)
    cache = work / "graph-cache-eagle"
    env = {**os.environ, "PACKAGER_CACHE_DIR": str(cache)}
    llmexport = [
        sys.executable,
        "-c",
        BASELINE,
        "--path",
        str(target),
        "--export",
        "mnn",
        "--quant_bit",
        "4",
        "--quant_block",
        "128",
        "--eagle_path",
        str(head),
        "--dst_path",
    ]
    packager = [
        sys.executable,
        "-m",
        "packager.cli",
        "convert",
        str(target),
        "--eagle",
        str(head),
        "--quiet",
        "--force",
        "--out",
    ]
    # cold: the graph cache emptied first (packager builds the graph, llmexport weightless, beside the weights);
    # warm: the entry the cold run left (a second conversion of this shape and head, e.g. after a retrain of the
    # target's weights only changes the weights; the head is part of the key).
    cases = {
        "llmexport --eagle_path": (llmexport, False),
        "packager convert --eagle, cold cache": (packager, True),
        "packager convert --eagle, warm cache": (packager, False),
    }
    load_before = [round(x, 2) for x in os.getloadavg()]
    results: dict[str, list[dict[str, float]]] = {name: [] for name in cases}
    for run in range(args.runs):
        order = list(cases) if run % 2 == 0 else [list(cases)[1], list(cases)[2], next(iter(cases))]
        for name in order:
            command, empty_cache = cases[name]
            if empty_cache:
                shutil.rmtree(cache, ignore_errors=True)
            out = work / ("out-eagle-llmexport" if name.startswith("llmexport") else "out-eagle-packager")
            shutil.rmtree(out, ignore_errors=True)
            cwd = work / "cwd-eagle"
            shutil.rmtree(cwd, ignore_errors=True)
            cwd.mkdir()
            results[name].append(measure([*command, str(out)], cwd, env))
            print(name, run, results[name][-1], flush=True)
    base = results["llmexport --eagle_path"]
    report: dict[str, object] = {"runs": results, "load_before": load_before}
    for name in list(cases)[1:]:
        ours = results[name]
        report[name] = {
            "time_ratio": spread([o["wall_s"] / b["wall_s"] for o, b in zip(ours, base)]),
            "peak_rss_ratio": spread([o["peak_rss_mb"] / b["peak_rss_mb"] for o, b in zip(ours, base)]),
            "peak_pss_ratio": spread([o["peak_pss_mb"] / b["peak_pss_mb"] for o, b in zip(ours, base)]),
        }
    report["load_after"] = [round(x, 2) for x in os.getloadavg()]
    (work / "eagle_convert_bench.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "runs"}, indent=2))


if __name__ == "__main__":
    main()
