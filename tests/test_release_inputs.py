"""`release` refuses what it was given before any work (a missing source, a report of other files), and a dry run
of a built bundle writes nothing in the user's folder."""

from __future__ import annotations

import shutil
from pathlib import Path

from packager.convert.pipeline import ConvertResult
from tests.conftest import run_cli

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "release.toml"


def _spec(tmp_path: Path, convert: str = "", card: str = "") -> Path:
    """The example spec with more [convert] and [card] keys."""
    text = EXAMPLE.read_text().replace("[convert]\n", f"[convert]\n{convert}\n", 1)
    path = tmp_path / "release.toml"
    path.write_text(text.replace("[card]\n", f"[card]\n{card}\n", 1))
    return path


def _one_line(result, code: int, *words: str) -> None:  # type: ignore[no-untyped-def]
    assert result.returncode == code, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("packager: error:"), result.stderr
    for word in words:
        assert word in lines[0], lines[0]


def test_a_convert_source_that_does_not_exist_is_10_before_any_work(bundle4: ConvertResult, tmp_path: Path) -> None:
    spec = _spec(tmp_path, convert='source = "missing/checkpoint"')
    bundle = tmp_path / "bundle"
    shutil.copytree(bundle4.out, bundle)
    # with --bundle the release verifies against the source: refused before validate, never looked up on a Hub
    _one_line(run_cli("release", str(spec), "--bundle", str(bundle), "--dry-run"), 10,
              "[convert] source", "missing/checkpoint does not exist")
    _one_line(run_cli("release", str(spec), "--dry-run"), 10, "missing/checkpoint does not exist")
    _one_line(run_cli("convert", "--spec", str(spec), "--out", str(tmp_path / "out")), 10,
              "missing/checkpoint does not exist")
    assert not (tmp_path / "out").exists() and not (tmp_path / "dist").exists()
