"""The wheel carries the schemas, templates and data files the code reads through importlib.resources."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _clean_copy(target: Path) -> Path:
    """The tracked files only: a stale build/ folder must not fill in for a missing package entry."""
    import shutil

    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout
    for name in filter(None, listed.decode().split("\0")):
        source, dest = REPO / name, target / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            dest.symlink_to(source.readlink())
        elif source.is_file():
            shutil.copy2(source, dest)
    return target


def test_wheel_contains_package_data(tmp_path: Path) -> None:
    source = _clean_copy(tmp_path / "src")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path / "dist"),
            str(source),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    # The distribution is mnn-packager (PyPI's `packager` is another project); the import package is packager.
    wheel = next((tmp_path / "dist").glob("mnn_packager-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "\nName: mnn-packager\n" in metadata
    for schema in (REPO / "schemas").glob("*.json"):
        assert f"packager/schemas/{schema.name}" in names
    for template in (REPO / "templates").rglob("*.j2"):
        assert f"packager/templates/{template.relative_to(REPO / 'templates').as_posix()}" in names
    assert "packager/data/tokenizer_corpus.json" in names and "packager/data/prompts.json" in names
    for module in (REPO / "packager").rglob("*.py"):
        assert module.relative_to(REPO).as_posix() in names, module
