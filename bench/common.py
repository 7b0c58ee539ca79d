"""Shared helpers for the benchmarks: the 0.6B-shaped bundle and a best-of-N timer."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WORK = REPO / "bench" / "work"


def bundle_06b() -> Path:
    """The 0.6B-shaped bundle convert_bench.py makes (made here if missing), copied so benches may add files."""
    source = WORK / "out-packager"
    if not source.is_dir():
        subprocess.run([sys.executable, str(REPO / "bench" / "convert_bench.py"), "--runs", "1"], check=True)
    copy = WORK / "bench-bundle"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(source, copy)
    return copy


def tree_peak(proc: psutil.Popen) -> int:  # noqa: F821 - psutil is imported where the function runs
    """Wait for `proc`, sampling the summed RSS of its process tree every 20 ms; returns the peak in bytes."""
    import psutil

    peak = 0
    while proc.poll() is None:
        try:
            peak = max(peak, sum(p.memory_info().rss for p in [proc, *proc.children(recursive=True)]))
        except psutil.Error:
            pass
        time.sleep(0.02)
    return peak


def best_of(runs: int, action: Callable[[], object]) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return min(times)


def read_all(folder: Path) -> int:
    total = 0
    for path in sorted(folder.iterdir()):
        with open(path, "rb") as handle:
            while chunk := handle.read(8 * 1024 * 1024):
                total += len(chunk)
    return total
