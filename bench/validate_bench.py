"""Benchmark: full `validate` of the 0.6B-shaped bundle (checksums included) vs reading its files once,
and CLI start-up (`packager --help`, `packager validate --help`) vs `python -c "import click"`.

Usage: python bench/validate_bench.py
"""

from __future__ import annotations

import json
import subprocess
import sys

from common import WORK, best_of, bundle_06b, read_all

from packager.checksum import write_manifest
from packager.validate import validate


def main() -> None:
    bundle = bundle_06b()
    write_manifest(bundle)
    read_all(bundle)  # warm the page cache for both sides
    report = validate(bundle)
    assert report.ok(strict=True), report.findings
    t_read = best_of(5, lambda: read_all(bundle))
    t_validate = best_of(5, lambda: validate(bundle))
    py = sys.executable
    click_only = best_of(7, lambda: subprocess.run([py, "-c", "import click"], check=True))
    help_top = best_of(7, lambda: subprocess.run([py, "-m", "packager.cli", "--help"], check=True,
                                                 capture_output=True))
    help_validate = best_of(7, lambda: subprocess.run([py, "-m", "packager.cli", "validate", "--help"], check=True,
                                                      capture_output=True))
    whole = best_of(3, lambda: subprocess.run([py, "-m", "packager.cli", "validate", str(bundle)], check=True,
                                              capture_output=True))
    result = {
        "bundle_bytes": sum(p.stat().st_size for p in bundle.iterdir()),
        "read_once_s": t_read, "validate_s": t_validate, "validate_vs_read": t_validate / t_read,
        "import_click_s": click_only, "help_s": help_top, "validate_help_s": help_validate,
        "help_vs_click": help_top / click_only, "validate_help_vs_click": help_validate / click_only,
        "cli_validate_whole_s": whole,
    }
    (WORK / "validate_bench.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
