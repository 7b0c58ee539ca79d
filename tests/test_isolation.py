"""Converting changes nothing in the environment and needs no network."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import run_cli

pytestmark = pytest.mark.converter


def _freeze() -> str:
    return subprocess.run(
        [sys.executable, "-m", "pip", "freeze", "--all"], capture_output=True, text=True, check=True
    ).stdout


def _unshare_works() -> bool:
    return (
        shutil.which("unshare") is not None
        and subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode == 0
    )


def test_conversion_leaves_pip_freeze_and_cwd_unchanged(tiny_checkpoint: Path, tmp_path: Path) -> None:
    before = _freeze()
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    result = run_cli("convert", str(tiny_checkpoint), "--out", str(tmp_path / "b"), "--quiet", cwd=cwd)
    assert result.returncode == 0, result.stderr
    assert _freeze() == before
    assert list(cwd.iterdir()) == []  # no .export.log or anything else in the caller's folder
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b", "b.provenance.json", "cwd"]


@pytest.mark.skipif(not _unshare_works(), reason="needs unshare -n (network namespaces)")
def test_conversion_succeeds_without_any_network(tiny_checkpoint: Path, tmp_path: Path) -> None:
    probe = subprocess.run(
        ["unshare", "-n", sys.executable, "-c", "import socket; socket.create_connection(('1.1.1.1', 80), timeout=2)"],
        capture_output=True,
        text=True,
    )
    assert probe.returncode != 0  # the namespace really has no network
    result = run_cli(
        "convert", str(tiny_checkpoint), "--out", str(tmp_path / "b"), "--json", "--quiet", prefix=("unshare", "-n")
    )
    assert result.returncode == 0, result.stderr
    assert '"sandbox_blocked": []' in result.stdout
