"""What a refused `packager convert` leaves: one error line, its own exit code, no traceback and no output."""

from __future__ import annotations

from pathlib import Path


def assert_refused(result, code: int, text: str, out: Path) -> None:  # type: ignore[no-untyped-def]
    lines = result.stderr.strip().splitlines()
    assert result.returncode == code, result.stderr
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("packager: error: ") and text in lines[0], lines[0]
    assert "Traceback" not in result.stderr + result.stdout
    assert not out.exists()
    assert not [p for p in out.parent.iterdir() if ".packager-partial-" in p.name]
