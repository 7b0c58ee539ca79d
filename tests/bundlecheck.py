"""Two bundles compared file by file."""

from __future__ import annotations

from pathlib import Path


def assert_same_bundle(a: Path, b: Path) -> None:
    """Every file of either bundle, byte for byte (a bundle of any kind: both hold the same names)."""
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir()) and "llm.mnn.weight" in names, names
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
