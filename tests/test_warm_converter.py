"""A warm converter (packager.convert.fence.warm) runs a job as a fresh worker would: the same bundle, its copy
gone with the client that asked for it, and a fresh worker for a client it cannot serve."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from packager.convert.fence.launch import WARM_VARIABLE, start_warm
from tests.conftest import run_cli

pytestmark = pytest.mark.converter

WARM_LINE = "starting the converter (a warm one"
FRESH_LINE = "starting the converter (loading torch"


@pytest.fixture(scope="module")
def warm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """A warm converter of this module's own (the session's is shared by every test)."""
    process, path = start_warm(tmp_path_factory.mktemp("warm"))
    yield process, path
    process.kill()
    process.wait()


def test_only_its_user_may_reach_the_warm_converter(warm: tuple[subprocess.Popen[bytes], Path]) -> None:
    assert warm[1].stat().st_mode & 0o777 == 0o600


def _env(cache: Path, socket: Path | str, **more: str) -> dict[str, str]:
    """A cold graph cache (`cache`, made here): each conversion builds its graph, a converter job."""
    return {**os.environ, WARM_VARIABLE: str(socket), "PACKAGER_CACHE_DIR": str(cache), **more}


def _files(bundle: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(bundle.iterdir())}


def test_a_warm_converters_bundle_is_the_fresh_workers_byte_for_byte(
    tiny_checkpoint: Path, tmp_path: Path, warm: tuple[subprocess.Popen[bytes], Path]
) -> None:
    done = {}
    for name, socket in (("warm", warm[1]), ("fresh", "")):
        out = tmp_path / name
        result = run_cli(
            "convert", str(tiny_checkpoint), "--out", str(out), env=_env(tmp_path / f"cache-{name}", socket)
        )
        assert result.returncode == 0, result.stderr
        assert (WARM_LINE if name == "warm" else FRESH_LINE) in result.stderr
        done[name] = _files(out)
    assert done["warm"] == done["fresh"]


def test_a_client_that_other_thread_settings_would_change_gets_a_fresh_worker(
    tiny_checkpoint: Path, tmp_path: Path, warm: tuple[subprocess.Popen[bytes], Path]
) -> None:
    # libgomp reads OMP_NUM_THREADS once, at import: the warm converter runs with its own value
    env = _env(tmp_path / "cache", warm[1], OMP_NUM_THREADS="1")
    result = run_cli("convert", str(tiny_checkpoint), "--out", str(tmp_path / "out"), env=env)
    assert result.returncode == 0, result.stderr
    assert FRESH_LINE in result.stderr and WARM_LINE not in result.stderr


def test_a_socket_no_converter_answers_means_a_fresh_worker(tiny_checkpoint: Path, tmp_path: Path) -> None:
    gone = tmp_path / "gone.sock"
    result = run_cli(
        "convert", str(tiny_checkpoint), "--out", str(tmp_path / "out"), env=_env(tmp_path / "cache", gone)
    )
    assert result.returncode == 0, result.stderr
    assert FRESH_LINE in result.stderr


def _copies(server: int) -> set[int]:
    """The warm converter's live copies (its children)."""
    found: set[int] = set()
    for task in Path(f"/proc/{server}/task").iterdir():
        found |= {int(p) for p in (task / "children").read_text().split()}
    return found


def test_a_killed_client_takes_its_copy_with_it(
    tiny_checkpoint: Path, tmp_path: Path, warm: tuple[subprocess.Popen[bytes], Path]
) -> None:
    client = subprocess.Popen(
        [sys.executable, "-m", "packager.cli", "convert", str(tiny_checkpoint), "--out", str(tmp_path / "out")],
        env=_env(tmp_path / "cache", warm[1]),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert client.stderr is not None
    for line in client.stderr:  # the copy exists once the client says the warm converter took the job
        if WARM_LINE in line:
            break
    copies = _copies(warm[0].pid)
    assert len(copies) == 1
    (copy,) = copies
    watch = os.pidfd_open(copy)
    client.send_signal(signal.SIGKILL)
    client.wait()
    client.stderr.close()
    ready, _, _ = select.select([watch], [], [], 120)  # a bound, not a timing: the copy ends when the kill lands
    os.close(watch)
    assert ready, "the copy outlived its client"  # a pidfd reads ready once its process has ended
    assert warm[0].poll() is None  # the warm converter itself serves on
    again = run_cli(
        "convert", str(tiny_checkpoint), "--out", str(tmp_path / "again"), env=_env(tmp_path / "cache", warm[1])
    )
    assert again.returncode == 0 and WARM_LINE in again.stderr, again.stderr
    assert not (tmp_path / "out").exists()  # nothing half-written where the killed one was going
