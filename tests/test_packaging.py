"""The wheel carries the schemas, templates and data files the code reads through importlib.resources."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_wheel_contains_package_data(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path), str(REPO)], check=True, capture_output=True, timeout=300)
    wheel = next(tmp_path.glob("packager-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for schema in (REPO / "schemas").glob("*.json"):
        assert f"packager/schemas/{schema.name}" in names
    for template in (REPO / "templates").glob("*.j2"):
        assert f"packager/templates/{template.name}" in names
    assert "packager/data/tokenizer_corpus.json" in names and "packager/data/prompts.json" in names
    assert "packager/convert/worker.py" in names
