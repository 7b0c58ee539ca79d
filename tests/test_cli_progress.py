"""Progress people expect (issue 34): a tqdm bar on a terminal, today's one-line stages elsewhere, nothing with
--quiet; the library only reports (a Step is still its line)."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from packager.bundle.checksum import render
from packager.cli.progress import StderrProgress
from packager.infra.hashing import xxh3_128_bytes
from packager.infra.progress import Step
from tests.conftest import run_cli
from tests.inprocess import run_packager
from tests.localhub import WRITE_TOKEN, LocalHub, hub, online
from tests.terminal import fake_terminal, finished_lines, words

STAGE_LINE = re.compile(r"^packager: \[ *\d+\.\ds\] ")


def on_a_terminal(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """The real command with its stderr on a pseudo-terminal (as in a shell): exit code, stdout, what it drew."""
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "packager.cli", *args], stdout=subprocess.PIPE, stderr=follower, env=env
    )
    os.close(follower)
    drawn: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the command ended and closed the terminal
                return
            if not chunk:
                return
            drawn.append(chunk)

    reader = threading.Thread(target=drain)
    reader.start()
    out, _ = process.communicate(timeout=300)
    reader.join(timeout=30)
    os.close(leader)
    return process.returncode, out.decode(), b"".join(drawn).decode("utf-8", errors="replace")


def frames(drawn: str) -> list[str]:
    return [frame.strip() for frame in re.split(r"[\r\n]+", drawn) if frame.strip()]


def test_a_step_is_still_its_line() -> None:
    """A callback that collects or prints lines takes a Step unchanged; the counts ride along."""
    step = Step("  3/54 prompts decoded", 3, 54, "the source's continuations")
    assert step == "  3/54 prompts decoded" and isinstance(step, str)
    assert (step.done, step.total, step.label) == (3, 54, "the source's continuations")


@pytest.fixture()
def two_folders(tmp_path: Path) -> list[str]:
    folders = [tmp_path / "a", tmp_path / "b"]
    for folder in folders:
        folder.mkdir()
        (folder / "notes.txt").write_text("no bundle")
    return [str(f) for f in folders]


def test_validate_draws_a_bar_on_a_terminal_and_nothing_with_quiet(two_folders: list[str]) -> None:
    code, out, drawn = on_a_terminal("validate", *two_folders)
    assert code == 30 and "validating" not in out  # stdout: the findings only
    shown = frames(drawn)
    assert shown[-1].startswith("validating: 100%|") and shown[-1].split("| ")[1].startswith("2/2"), drawn
    assert not any(STAGE_LINE.match(frame) for frame in shown)  # the bar, not the lines
    code, _, drawn = on_a_terminal("validate", *two_folders, "--quiet")
    assert code == 30 and drawn == ""


def test_validate_prints_no_progress_when_stderr_is_no_terminal(two_folders: list[str]) -> None:
    """validate's output in pre-commit and CI logs stays as it was: the bar is for a terminal only."""
    result = run_packager("validate", *two_folders)
    assert result.returncode == 30 and result.stderr == ""


@pytest.fixture()
def box(hub: LocalHub, online: None) -> str:
    """A repo of three small files and their manifest on the local Hub, committed straight through the Hub API."""
    from huggingface_hub import CommitOperationAdd, HfApi

    files = {f"part-{n}.txt": f"part {n}\n".encode() * 1000 for n in range(3)}
    manifest = render({name: xxh3_128_bytes(data) for name, data in files.items()})
    api = HfApi(endpoint=hub.url, token=WRITE_TOKEN)
    api.create_repo("me/box")
    api.create_commit(
        "me/box",
        operations=[
            CommitOperationAdd(path_in_repo=name, path_or_fileobj=data)
            for name, data in {**files, "checksums.xxh128": manifest}.items()
        ],
        commit_message="three files",
    )
    return "me/box"


def test_verify_remote_draws_a_file_bar_on_a_terminal_and_lines_elsewhere(hub: LocalHub, box: str) -> None:
    code, out, drawn = on_a_terminal("verify-remote", box, env=hub.env(token=None))
    assert code == 0, drawn
    assert "all 3 files match" in out
    shown = frames(drawn)
    assert shown[-1].startswith("checking files: 100%|") and "| 3/3 [" in shown[-1], drawn
    piped = hub.cli("verify-remote", box, token=None)
    assert piped.returncode == 0, piped.stderr
    assert [STAGE_LINE.sub("", line) for line in piped.stderr.splitlines()] == [
        f"checking part-{n}.txt" for n in range(3)
    ]
    quiet, _, nothing = on_a_terminal("verify-remote", box, "-q", env=hub.env(token=None))
    assert quiet == 0 and nothing == ""
    assert hub.cli("verify-remote", box, "--quiet", token=None).stderr == ""


@pytest.mark.converter
def test_convert_draws_its_stages_and_a_weight_bar_on_a_terminal(tiny_checkpoint: Path, tmp_path: Path) -> None:
    """The longest stage people wait for: each stage a bar line with its time, the quantized megabytes filling one
    (the only line about quantizing weights, though the graph is built beside it: its own cache is empty)."""
    cold = {**os.environ, "PACKAGER_CACHE_DIR": str(tmp_path / "cache")}
    code, out, drawn = on_a_terminal("convert", str(tiny_checkpoint), "--out", str(tmp_path / "bundle"), env=cold)
    assert code == 0, drawn
    assert out.startswith("bundle: ")  # the result on stdout, after the bars are closed
    shown = frames(drawn)
    weights = [frame for frame in shown if frame.startswith("quantizing weights (MB):")]
    assert weights and "100%|" in weights[-1], drawn
    assert any(line.startswith("graph cache miss") for line in finished_lines(drawn)), drawn
    assert [line for line in finished_lines(drawn) if "quantizing weights" in line] == [weights[-1]], drawn
    assert any(re.match(r"validating the bundle \(draft\) \[\d\d:\d\d\]$", frame) for frame in shown), drawn
    assert not any(STAGE_LINE.match(frame) for frame in shown)


LONG_STAGE = (
    "graph cache miss: building the graph once for this shape (llmexport, weights skipped), writing the weights "
    "meanwhile"
)


def test_a_stage_wider_than_the_terminal_is_wrapped_between_words_never_cut() -> None:
    with fake_terminal() as screen, StderrProgress(False) as progress:
        progress(LONG_STAGE)
        progress("assembling the bundle")
    shown = finished_lines(screen.getvalue())
    assert all(len(line) < 80 for line in shown), shown
    elapsed = re.compile(r"^\[\d+:\d\d\]$")  # each stage's time, on its last line
    assert [word for word in words(" ".join(shown)) if not elapsed.match(word)] == words(
        LONG_STAGE + " assembling the bundle"
    )
    assert elapsed.match(shown[-2].split()[-1]) and elapsed.match(shown[-1].split()[-1]), shown


def test_a_stage_beside_a_filling_bar_is_written_above_it_and_the_bar_stays_one() -> None:
    """convert writes its weights while the graph is built: the weight bar is one bar, the graph's stages lines."""
    label = "quantizing weights (MB)"
    with fake_terminal() as screen, StderrProgress(False) as progress:
        progress("starting the converter")
        progress(Step("17 MB", 17, 80, label))
        progress("writing both tokenizer candidates and measuring their agreement (beside the graph)")
        progress(Step("34 MB", 34, 80, label))
        progress("exporting the ONNX graph")
        progress(Step("80 MB", 80, 80, label))
        progress("assembling the bundle")
    shown = finished_lines(screen.getvalue())
    assert [line for line in shown if label in line] == [shown[-2]], shown
    assert "| 80/80 [" in shown[-2] and shown[-1].startswith("assembling the bundle [")
    assert "writing both tokenizer candidates and measuring their agreement (beside the graph)" in " ".join(shown)
    assert "exporting the ONNX graph" in shown


def test_a_bar_first_shown_part_way_claims_no_rate_until_its_count_moves() -> None:
    """A stage that reports its first count late must not show the count as done in no time ([00:00<00:00])."""
    with fake_terminal() as screen, StderrProgress(False) as progress:
        progress(Step("16/54", 16, 54, "the source's continuations"))
        assert re.search(r"\| 16/54 \[[\d:]+<\?\]$", screen.getvalue()), screen.getvalue()
