"""Benchmark: how long `packager --help` takes to start, this checkout against another (the help grouped by stage
with cloup, issue 34, was to stay within 1.2x of the flat click help).

Each checkout's packager/ (with schemas/ and templates/, which it links to) is copied into a temporary folder and
compiled to bytecode there, so both start from .pyc files whatever PYTHONDONTWRITEBYTECODE says and neither
checkout is written to. Then `python -m packager.cli --help` runs from each copy, interleaved (A B A B ...) so that
load on the machine falls on both alike, each in a fresh process with PYTHONPATH set to its copy. Prints the median
of each, their ratio, and the spread of the ratio over pairs of runs (10th, 50th and 90th percentiles).
Usage: python bench/help_start_bench.py [--baseline /work/main] [--runs 40]
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def snapshot(checkout: Path, into: Path) -> Path:
    """A compiled copy of the checkout's package (and the data folders its symlinks name)."""
    for name in ("packager", "schemas", "templates"):
        shutil.copytree(checkout / name, into / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    compileall.compile_dir(into / "packager", quiet=1)
    return into


def once(checkout: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "packager.cli", "--help"], cwd=checkout, env=env, check=True, stdout=subprocess.DEVNULL
    )
    return time.perf_counter() - start


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--baseline", type=Path, default=Path("/work/main"), help="the checkout to compare with")
    parser.add_argument("--candidate", type=Path, default=REPO, help="the checkout measured (default: this one)")
    parser.add_argument("--runs", type=int, default=40, help="runs of each, interleaved")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="help-start-") as temp:
        baseline = snapshot(args.baseline, Path(temp) / "baseline")
        candidate = snapshot(args.candidate, Path(temp) / "candidate")
        for checkout in (baseline, candidate, baseline, candidate):  # warm the file cache
            once(checkout)
        base, cand = [], []
        for _ in range(args.runs):
            base.append(once(baseline))
            cand.append(once(candidate))
    ratios = [c / b for b, c in zip(base, cand)]
    result = {
        "runs_each": args.runs,
        "baseline": str(args.baseline),
        "candidate": str(args.candidate),
        "baseline_median_s": round(statistics.median(base), 4),
        "candidate_median_s": round(statistics.median(cand), 4),
        "ratio_of_medians": round(statistics.median(cand) / statistics.median(base), 3),
        "pair_ratio_p10_p50_p90": [round(quantile(ratios, q), 3) for q in (0.1, 0.5, 0.9)],
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
