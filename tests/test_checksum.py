"""The manifest is what `xxhsum --tag -H2` writes: the real xxhsum accepts it, and both catch a flipped byte."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from packager.bundle.checksum import MANIFEST, check_manifest, read_manifest, write_manifest
from packager.convert.pipeline import ConvertResult
from packager.infra.hashing import xxh3_128_file
from tests.conftest import run_cli

REPO = Path(__file__).resolve().parents[1]
needs_xxhsum = pytest.mark.skipif(shutil.which("xxhsum") is None, reason="needs xxhsum (Debian package xxhash)")


@pytest.fixture()
def bundle(bundle4: ConvertResult, tmp_path: Path) -> Path:
    target = tmp_path / "b"
    shutil.copytree(bundle4.out, target)
    return target


def _xxhsum_check(bundle: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["xxhsum", "-c", MANIFEST], cwd=bundle, capture_output=True, text=True)


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


@needs_xxhsum
def test_manifest_matches_xxhsum_output_byte_for_byte(bundle: Path) -> None:
    write_manifest(bundle)
    names = sorted(p.name for p in bundle.iterdir() if p.name != MANIFEST)
    theirs = subprocess.run(["xxhsum", "--tag", "-H2", *names], cwd=bundle, capture_output=True, check=True).stdout
    assert (bundle / MANIFEST).read_bytes() == theirs


@needs_xxhsum
def test_real_xxhsum_accepts_the_manifest(bundle: Path) -> None:
    write_manifest(bundle)
    result = _xxhsum_check(bundle)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count(": OK") == 10


@needs_xxhsum
def test_one_flipped_byte_is_caught_by_both(bundle: Path) -> None:
    write_manifest(bundle)
    _flip(bundle / "llm.mnn.weight", 12345)
    theirs = _xxhsum_check(bundle)
    assert theirs.returncode != 0 and "llm.mnn.weight: FAILED" in theirs.stdout
    ours = run_cli("checksum", "--check", str(bundle))
    assert ours.returncode == 31
    assert ours.stdout.strip().splitlines() == ["MISMATCH llm.mnn.weight"]


def test_check_names_mismatching_missing_and_extra_files(bundle: Path) -> None:
    write_manifest(bundle)
    _flip(bundle / "config.json", 3)
    (bundle / "tokenizer.txt").unlink()
    (bundle / "README.md").write_text("# new\n")
    result = check_manifest(bundle)
    assert (result.mismatched, result.missing, result.extra) == (("config.json",), ("tokenizer.txt",), ("README.md",))
    cli = run_cli("checksum", "--check", str(bundle))
    assert cli.returncode == 31
    assert set(cli.stdout.split("\n")[:3]) == {"MISMATCH config.json", "MISSING  tokenizer.txt", "EXTRA    README.md"}


def test_manifest_digests_are_streaming_xxh3_128(bundle: Path) -> None:
    manifest = write_manifest(bundle)
    assert read_manifest(manifest.path) == {name: xxh3_128_file(bundle / name) for name in manifest.digests}
    assert run_cli("checksum", "--check", str(bundle)).returncode == 0


def test_manifest_refuses_links_and_paths_outside(bundle: Path) -> None:
    write_manifest(bundle)
    (bundle / MANIFEST).write_text((bundle / MANIFEST).read_text() + f"XXH128 (../x) = {'0' * 32}\n")
    result = run_cli("checksum", "--check", str(bundle))
    assert result.returncode == 23 and "outside the bundle folder" in result.stderr


def test_no_hashlib_in_packager() -> None:
    import re

    uses = re.compile(r"^\s*(import\s+hashlib|from\s+hashlib\s+import)|__import__\(.hashlib|hashlib\.", re.M)
    offenders = [str(p) for p in (REPO / "packager").rglob("*.py") if uses.search(p.read_text())]
    assert offenders == []
