"""Benchmark: full `validate` of the 0.6B-shaped bundle (checksums and sampled weight checks included) vs
reading its files once, in alternating rounds (the ratio of each round, then min/median/max over rounds), and
CLI start-up (`packager --help`, `packager validate --help`) vs `python -c "import click"`.

Usage: python bench/validate_bench.py [--rounds 7]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

from common import WORK, best_of, bundle_06b, read_all

from packager.bundle.checksum import write_manifest
from packager.validate import validate


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    rounds = parser.parse_args().rounds
    bundle = bundle_06b()
    write_manifest(bundle)
    read_all(bundle)  # warm the page cache for both sides
    report = validate(bundle)
    assert report.ok(strict=True), report.findings
    pairs = [(best_of(5, lambda: read_all(bundle)), best_of(5, lambda: validate(bundle))) for _ in range(rounds)]
    ratios = sorted(v / r for r, v in pairs)
    t_read, t_validate = min(r for r, _ in pairs), min(v for _, v in pairs)
    py = sys.executable
    click_only = best_of(7, lambda: subprocess.run([py, "-c", "import click"], check=True))
    help_top = best_of(7, lambda: subprocess.run([py, "-m", "packager.cli", "--help"], check=True, capture_output=True))
    help_validate = best_of(
        7, lambda: subprocess.run([py, "-m", "packager.cli", "validate", "--help"], check=True, capture_output=True)
    )
    whole = best_of(
        3, lambda: subprocess.run([py, "-m", "packager.cli", "validate", str(bundle)], check=True, capture_output=True)
    )
    result = {
        "bundle_bytes": sum(p.stat().st_size for p in bundle.iterdir()),
        "read_once_s": t_read,
        "validate_s": t_validate,
        "validate_vs_read": t_validate / t_read,
        "ratio_per_round": ratios,
        "ratio_min": ratios[0],
        "ratio_median": statistics.median(ratios),
        "ratio_max": ratios[-1],
        "import_click_s": click_only,
        "help_s": help_top,
        "validate_help_s": help_validate,
        "help_vs_click": help_top / click_only,
        "validate_help_vs_click": help_validate / click_only,
        "cli_validate_whole_s": whole,
    }
    (WORK / "validate_bench.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
