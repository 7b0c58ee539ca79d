"""Every file a user names is read to its limit and no further: a device, a pipe or a sparse file claims any size."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from packager.errors import InputTooLarge, SpecError
from packager.infra.userfile import COSTS_BYTES, REPORT_BYTES, SPEC_BYTES, TEMPLATE_BYTES, read_bytes, read_text
from tests.conftest import run_cli
from tests.inprocess import invoke, one_error_line

# A memory cap far below what an unbounded read of /dev/zero or of a 3 GB sparse file takes, far above what
# packager needs to refuse it (numpy and OpenBLAS reserve address space at import).
CAP_KB = 3_000_000
EXAMPLE_SPEC = Path(__file__).resolve().parents[1] / "examples" / "release.toml"


def run_capped(*args: str, cwd: Path | None = None):
    """The real command under `ulimit -v`: an unbounded read ends in MemoryError instead of eating the machine."""
    return run_cli(*args, cwd=cwd, prefix=("bash", "-c", f'ulimit -v {CAP_KB}; exec "$0" "$@"'))


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


@pytest.fixture()
def sparse(tmp_path: Path) -> Path:
    """A 3 GB file that takes no disk: st_size says 3 GB, every read returns zeros."""
    path = tmp_path / "sparse"
    with path.open("wb") as handle:
        handle.truncate(3 << 30)
    return path


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    (tmp_path / "b").mkdir()
    return tmp_path / "b"


def test_read_stops_one_byte_past_the_limit_on_a_device() -> None:
    with pytest.raises(InputTooLarge, match=r"release spec /dev/zero is over 1 MiB: too large for a release spec"):
        read_bytes(Path("/dev/zero"), SPEC_BYTES, what="release spec", unreadable=SpecError)


def test_a_file_of_exactly_the_limit_is_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 100)
    assert read_bytes(path, 100, what="f", unreadable=SpecError) == b"x" * 100
    path.write_bytes(b"x" * 101)
    with pytest.raises(InputTooLarge, match="over 100 bytes"):
        read_bytes(path, 100, what="f", unreadable=SpecError)


def test_first_line_reads_no_further_than_its_newline(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"secret\n" + b"y" * 1000)
    assert read_bytes(path, 10, what="f", unreadable=SpecError, first_line=True) == b"secret"
    with pytest.raises(InputTooLarge, match="over 10 bytes in its first line"):
        read_bytes(Path("/dev/zero"), 10, what="f", unreadable=SpecError, first_line=True)


def test_unreadable_and_missing_and_folder_are_the_callers_error(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="does not exist"):
        read_text(tmp_path / "absent", 10, what="f", unreadable=SpecError)
    with pytest.raises(SpecError, match="is a folder, not a file"):
        read_text(tmp_path, 10, what="f", unreadable=SpecError)
    (tmp_path / "latin").write_bytes(b"caf\xe9")
    with pytest.raises(SpecError, match="is not UTF-8 text"):
        read_text(tmp_path / "latin", 10, what="f", unreadable=SpecError)


def test_a_spec_that_is_a_device_is_one_line_and_exit_26() -> None:
    result = run_capped("release", "/dev/zero")
    assert result.returncode == 26, result.stderr
    assert "release spec /dev/zero is over 1 MiB" in one_line(result.stderr)


def test_a_sparse_3_gb_spec_is_one_line_and_exit_26(sparse: Path) -> None:
    result = run_capped("release", str(sparse))
    assert result.returncode == 26, result.stderr
    assert "is over 1 MiB" in one_line(result.stderr)


@pytest.mark.parametrize("source", ["/dev/zero", "sparse"])
def test_check_spec_reports_a_spec_too_large_to_be_one_as_a_finding_and_the_others_too(
    source: str, sparse: Path
) -> None:
    large = "/dev/zero" if source == "/dev/zero" else str(sparse)
    example = str(EXAMPLE_SPEC)
    result = invoke("check-spec", large, example)
    assert result.exit_code == 17 and result.stderr == "", result.stderr
    assert f"ERROR   {large}: is over 1 MiB: too large for a release spec" in result.stdout
    assert f"{example}: ok (0 errors, 0 warnings)" in result.stdout


@pytest.mark.parametrize("source", ["/dev/zero", "sparse"])
@pytest.mark.parametrize("command", ["speculate", "verify", "pair"])
def test_prompts_that_are_a_device_or_sparse_are_one_line_and_exit_26(
    command: str, source: str, folder: Path, sparse: Path
) -> None:
    prompts = "/dev/zero" if source == "/dev/zero" else str(sparse)
    operands = {
        "speculate": [str(folder)],
        "verify": [str(folder), "--checkpoint", str(folder)],
        "pair": [str(folder), str(folder)],
    }[command]
    result = run_capped(command, *operands, "--prompts", prompts)
    assert result.returncode == 26, result.stderr
    assert "--prompts" in one_line(result.stderr) and "is over 16 MiB" in result.stderr


def test_keyless_identity_token_that_is_a_device_is_one_line(folder: Path) -> None:
    result = run_capped("sign", str(folder), "--keyless", "--identity-token-file", "/dev/zero")
    assert result.returncode == 26, result.stderr
    assert "--identity-token-file /dev/zero is over 64 KiB" in one_line(result.stderr)


@pytest.mark.parametrize("config", ["/dev/zero", "sparse"])
def test_a_checkpoint_config_that_is_a_device_or_sparse_is_one_line(
    config: str, tiny_checkpoint: Path, tmp_path: Path, sparse: Path
) -> None:
    checkpoint = tmp_path / "ck"
    checkpoint.mkdir()
    for item in tiny_checkpoint.iterdir():
        (checkpoint / item.name).symlink_to(item)
    (checkpoint / "config.json").unlink()
    (checkpoint / "config.json").symlink_to(config if config == "/dev/zero" else sparse)
    result = run_capped("convert", str(checkpoint), "--out", str(tmp_path / "out"))
    assert result.returncode == 11, result.stderr
    expected = "config.json is not a regular file" if config == "/dev/zero" else "is over 256 MiB"
    assert expected in one_line(result.stderr)
    assert not (tmp_path / "out").exists()


def test_validate_reports_a_bundle_file_that_is_a_device_without_reading_it_whole(folder: Path) -> None:
    for name in ("config.json", "llm_config.json"):
        (folder / name).symlink_to("/dev/zero")
    result = run_capped("validate", str(folder), "--json")
    assert "Traceback" not in result.stderr and "MemoryError" not in result.stderr
    assert result.returncode in (22, 30), result.stderr
    assert os.path.islink(folder / "config.json")  # nothing of the user's changed


def test_a_manifest_that_is_sparse_or_a_device_is_one_line(folder: Path, sparse: Path) -> None:
    (folder / "config.json").write_text("{}")
    (folder / "checksums.xxh128").symlink_to(sparse)
    result = run_capped("checksum", "--check", str(folder))
    assert result.returncode == 26, result.stderr
    assert "checksums.xxh128" in one_line(result.stderr) and "is over 1 MiB" in result.stderr
    (folder / "checksums.xxh128").unlink()
    (folder / "checksums.xxh128").symlink_to("/dev/zero")
    result = run_capped("checksum", "--check", str(folder))
    assert result.returncode == 23 and "is not a regular file" in one_line(result.stderr), result.stderr


def _past(limit: int, path: Path) -> Path:
    """A sparse file one byte over `limit`: it holds no disk, and a read that does not stop reads it all."""
    with path.open("wb") as handle:
        handle.truncate(limit + 1)
    return path


@pytest.mark.parametrize("source", ["/dev/zero", "sparse"])
def test_card_provenance_is_read_to_its_limit_and_a_device_is_refused_not_skipped(
    source: str, folder: Path, tmp_path: Path
) -> None:
    record = "/dev/zero" if source == "/dev/zero" else str(_past(REPORT_BYTES, tmp_path / "record.json"))
    result = invoke("card", str(folder), "--spec", str(EXAMPLE_SPEC), "--provenance", record)
    assert result.exit_code == 26, result.stderr
    assert f"provenance record {record} is over 64 MiB" in one_error_line(result)
    assert list(folder.iterdir()) == []


def test_card_template_is_read_to_its_limit(folder: Path, tmp_path: Path) -> None:
    template = _past(TEMPLATE_BYTES, tmp_path / "card.md.j2")
    result = invoke("card", str(folder), "--spec", str(EXAMPLE_SPEC), "--template", str(template))
    assert result.exit_code == 26, result.stderr
    assert f"card template {template} is over 1 MiB" in one_error_line(result)
    assert list(folder.iterdir()) == []


def test_pair_costs_are_read_to_their_limit_before_anything_loads(folder: Path, tmp_path: Path) -> None:
    costs = _past(COSTS_BYTES, tmp_path / "costs.json")
    result = invoke("pair", str(folder), str(folder), "--costs", str(costs))
    assert result.exit_code == 26, result.stderr
    assert f"--costs file {costs} is over 1 MiB" in one_error_line(result)
