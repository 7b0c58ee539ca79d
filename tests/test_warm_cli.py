"""The tests' `packager` commands forked from a warm interpreter (tests/warmcli.py) answer as fresh processes do:
the same exit code and output, in the caller's folder and environment, under the network guard where the caller
has it, killed with a caller that goes away; a caller whose import-time settings differ gets a fresh process."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import warmcli
from tests.localhub import GUARD_PYTHONPATH

pytestmark = pytest.mark.slow  # a warm CLI of the module's own imports torch (seconds)


_started: list[subprocess.Popen[bytes]] = []


@pytest.fixture(scope="module")
def warm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Warm CLIs of this module's own, for the session's PYTHONPATH and the network guard's."""
    folder = tmp_path_factory.mktemp("warm") / "cli"
    _started[:] = warmcli.start(folder, [os.environ.get("PYTHONPATH", ""), GUARD_PYTHONPATH])
    yield folder
    for process in _started:
        process.kill()
        process.wait()


@pytest.fixture()
def ours(warm: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(warmcli.VARIABLE, str(warm))
    return warm


def _fresh(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "packager.cli", *argv], capture_output=True, text=True, cwd=cwd, env=env, timeout=300
    )


def test_only_its_user_may_reach_the_warm_cli(warm: Path) -> None:
    assert warm.stat().st_mode & 0o777 == 0o700
    sockets = sorted(warm.glob("*.sock"))
    assert len(sockets) == 2 and all(s.stat().st_mode & 0o777 == 0o600 for s in sockets)


@pytest.mark.parametrize(
    "argv",
    [
        ["cache", "ls"],  # names $PACKAGER_CACHE_DIR, relative to the folder it runs in
        ["validate", "no-such-bundle"],  # refused: one line, its exit code
        ["--version"],
        ["checksum", "--help"],
    ],
)
def test_a_warm_command_answers_as_the_same_command_started_fresh(ours: Path, tmp_path: Path, argv: list[str]) -> None:
    env = {**os.environ, "PACKAGER_CACHE_DIR": "relative-cache", "COLUMNS": "61"}
    warm = warmcli.run(argv, tmp_path, env, 300)
    assert warm is not None, warmcli.said(ours)
    fresh = _fresh(argv, tmp_path, env)
    assert (warm.returncode, warm.stdout, warm.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    assert warm.stdout or warm.stderr
    if argv == ["cache", "ls"]:
        assert "relative-cache/graphs" in warm.stdout


@pytest.mark.parametrize("home", ["one", "two"])
def test_a_warm_command_reads_the_hugging_face_settings_of_its_own_environment(
    ours: Path, tmp_path: Path, home: str
) -> None:
    """huggingface_hub read its settings when the warm CLI imported it; a command gets those of its caller: here the
    login file under the caller's HF_HOME, holding a token with a space, which the command names by its path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_ENDPOINT="http://127.0.0.1:9", HF_HOME=str(tmp_path / home))
    (tmp_path / home).mkdir()
    (tmp_path / home / "token").write_text("hf_abc def\n")
    argv = ["pull", "me/draft@v1", "out"]
    warm = warmcli.run(argv, tmp_path, env, 300)
    assert warm is not None
    fresh = _fresh(argv, tmp_path, env)
    assert (warm.returncode, warm.stdout, warm.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    assert str(tmp_path / home / "token") in warm.stderr, warm.stderr


def test_a_caller_with_other_import_time_settings_gets_no_warm_command(ours: Path, tmp_path: Path) -> None:
    served = warmcli.said(ours)[0]
    env = {**os.environ, "OMP_NUM_THREADS": "3"}
    assert warmcli.run(["--version"], tmp_path, env, 300) is None
    assert warmcli.said(ours) == (served, ["refused: other values of OMP_NUM_THREADS"])


def _serve(hub: Path) -> tuple[list[str], dict[str, str]]:
    """A command that runs until it is stopped: a local Hub."""
    return ["hub", "serve", "--root", str(hub), "--port", "0"], {**os.environ, "PACKAGER_HUB_TOKEN": "hf_test_w"}


def test_a_command_killed_by_a_signal_ends_as_a_killed_process_does(ours: Path, tmp_path: Path) -> None:
    argv, env = _serve(tmp_path / "hub")
    server = warmcli.spawn(argv, env)
    assert server is not None
    assert "serving http://127.0.0.1:" in server.stdout.readline()
    assert server.poll() is None
    server.kill()
    assert server.wait() == -signal.SIGKILL

    def kill(pid: int) -> None:
        os.kill(pid, signal.SIGKILL)

    result = warmcli.run(argv, tmp_path, env, 300, started=kill)
    assert result is not None and result.returncode == -signal.SIGKILL


_CALLER = """
import os, sys
from tests import warmcli
env = {**os.environ, "PACKAGER_HUB_TOKEN": "w"}
server = warmcli.spawn(["hub", "serve", "--root", sys.argv[1], "--port", "0"], env)
print(server.pid, server.stdout.readline().strip(), flush=True)
sys.stdin.read()
"""


def test_a_caller_that_goes_away_takes_its_command_with_it(ours: Path, tmp_path: Path) -> None:
    caller = subprocess.Popen(
        [sys.executable, "-c", _CALLER, str(tmp_path / "hub")],
        cwd=warmcli.ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert caller.stdout is not None
    pid, said = caller.stdout.readline().split(" ", 1)
    assert "serving http://127.0.0.1:" in said  # running, until its caller goes
    command = os.pidfd_open(int(pid))
    try:
        caller.kill()
        caller.wait()
        ended, _, _ = select.select([command], [], [], 300)  # readable once the command has ended
        assert ended == [command]
    finally:
        os.close(command)
    again = warmcli.run(["--version"], tmp_path, None, 300)  # and the warm CLI serves on
    assert again is not None and again.returncode == 0


def test_the_guards_warm_cli_refuses_and_records_a_connection_off_loopback(ours: Path, tmp_path: Path) -> None:
    log = tmp_path / "netguard.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}  # online, as the local Hub's tests
    env.update(PYTHONPATH=GUARD_PYTHONPATH, PACKAGER_NETGUARD_LOG=str(log))
    argv = ["pull", "me/draft@v1", str(tmp_path / "out"), "--endpoint", "http://203.0.113.9:9"]
    result = warmcli.run(argv, tmp_path, env, 300)
    assert result is not None and result.returncode != 0, result
    assert "is not loopback" in result.stderr and "203.0.113.9" in log.read_text()
    assert not (tmp_path / "out").exists()


def test_a_command_left_running_is_named_at_the_sessions_end_and_an_ended_one_is_not(
    ours: Path, tmp_path: Path
) -> None:
    ended = warmcli.run(["--version"], tmp_path, None, 300)
    assert ended is not None and ended.returncode == 0
    server = warmcli.spawn(*_serve(tmp_path / "hub"))
    assert server is not None
    try:
        assert "serving http://127.0.0.1:" in server.stdout.readline()
        line = f"pid {server.pid}: packager hub serve --root {tmp_path / 'hub'} --port 0"
        assert line in warmcli.still_running(_started, ours)
    finally:
        server.kill()
        assert server.wait() == -signal.SIGKILL
    assert not [found for found in warmcli.still_running(_started, ours) if str(tmp_path) in found]
