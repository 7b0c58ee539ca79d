"""A matrix released to the local Hub by the real converter, with two processes: a failing job fails alone, a run
killed by SIGKILL mid-way finishes on its rerun with every release landed exactly once, and the jobs run as Hugging
Face Jobs through the local Hub's Jobs endpoints. Each releases the tiny checkpoint at 4 and 8 bits, whose graphs
the session's graph cache holds once built."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from packager.errors import MATRIX_JOBS_FAILED
from tests.localhub import LocalHub, history, hub, jobs_hub
from tests.matrixruns import released_in_journal
from tests.specs import matrix_spec

pytestmark = [pytest.mark.converter, pytest.mark.hub]

LENIENT = ("mean_cosine = 0.9",)  # the tiny random checkpoint at 4 bits is not the point here
REPOS = ("me/tiny-tiny-q4-mnn", "me/tiny-tiny-q8-mnn")  # every test releases the tiny checkpoint at 4 and 8 bits


def _release(hub: LocalHub, spec: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return hub.cli("release", str(spec), "--json", *args, timeout=900)


def test_a_matrix_releases_with_two_processes_and_a_failing_job_fails_alone(
    hub: LocalHub, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{}", encoding="utf-8")
    spec = matrix_spec(
        tmp_path,
        checkpoints={"tiny": tiny_checkpoint, "broken": broken},
        base="Qwen/Qwen3-0.6B",
        verify=LENIENT,
    )
    text = spec.read_text(encoding="utf-8").replace('version = "v1"', 'version = "v1"\ncollection = "Tiny drafts"')
    spec.write_text(text, encoding="utf-8")
    result = _release(hub, spec, "--jobs", "2")
    assert result.returncode == MATRIX_JOBS_FAILED, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("packager: error:")]
    assert len(lines) == 1 and "2 of 4 jobs failed: broken-q4:" in lines[0] and "broken-q8:" in lines[0]
    assert "Traceback" not in result.stderr
    data = json.loads(result.stdout)
    status = {job["job"]: job["status"] for job in data["jobs"]}
    assert status == {"tiny-q4": "released", "tiny-q8": "released", "broken-q4": "failed", "broken-q8": "failed"}
    for repo in REPOS:
        assert len(history(hub, repo)) == 1
        assert hub.cli("verify-remote", f"{repo}@v1").returncode == 0
    folder = tmp_path / "dist" / "matrix-release"
    assert json.loads((folder / "summary.json").read_text(encoding="utf-8")) == data
    assert "| tiny-q8 | me/tiny-tiny-q8-mnn@v1 (" in (folder / "summary.md").read_text(encoding="utf-8")
    slug = data["collection"].split("(")[1].split(")")[0]
    items = hub.api(f"/api/collections/{slug}")["items"]
    assert sorted(i["id"] for i in items) == list(REPOS)
    assert [i["note"]["text"].split(",")[0] for i in items] == ["tiny × q4: draft", "tiny × q8: draft"]
    again = _release(hub, spec, "--jobs", "2")  # only the failed jobs run again; the released are confirmed
    assert again.returncode == MATRIX_JOBS_FAILED
    status = {job["job"]: job["status"] for job in json.loads(again.stdout)["jobs"]}
    assert status["tiny-q4"] == status["tiny-q8"] == "skipped"
    assert [len(history(hub, r)) for r in REPOS] == [1, 1]


def test_a_matrix_killed_mid_run_finishes_on_its_rerun_with_each_release_landed_once(
    hub: LocalHub, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    spec = matrix_spec(tmp_path, checkpoints={"tiny": tiny_checkpoint}, base="Qwen/Qwen3-0.6B", verify=LENIENT)
    folder = tmp_path / "dist" / "matrix-release"
    run = subprocess.Popen(
        [sys.executable, "-m", "packager.cli", "release", str(spec), "--jobs", "2", "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=hub.env(),
    )
    try:
        released_in_journal(folder, run)  # the first job is released, the other one is still on its way
        run.send_signal(signal.SIGKILL)
    finally:
        run.communicate(timeout=60)
    again = _release(hub, spec, "--jobs", "2")
    assert again.returncode == 0, again.stderr
    jobs = json.loads(again.stdout)["jobs"]
    assert {job["job"] for job in jobs} == {"tiny-q4", "tiny-q8"}
    assert "skipped" in {job["status"] for job in jobs}  # what the killed run released is not redone
    for repo in REPOS:
        assert len(history(hub, repo)) == 1  # no duplicate commit, nothing missing
        tags = hub.api(f"/api/models/{repo}/refs")["tags"]
        assert [t["name"] for t in tags] == ["v1"]


def test_a_matrix_runs_as_hugging_face_jobs_through_the_local_hubs_jobs_endpoints(
    jobs_hub: LocalHub, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    spec = matrix_spec(tmp_path, checkpoints={"tiny": tiny_checkpoint}, base="Qwen/Qwen3-0.6B", verify=LENIENT)
    result = _release(jobs_hub, spec, "--backend", "hf-jobs", "--jobs", "2", "--flavor", "cpu-basic")
    assert result.returncode == 0, result.stderr
    jobs = json.loads(result.stdout)["jobs"]
    assert [(job["job"], job["status"]) for job in jobs] == [("tiny-q4", "released"), ("tiny-q8", "released")]
    assert "[tiny-q4] " in result.stderr and "[tiny-q8] " in result.stderr  # each job's log, under its id
    ran = sorted((jobs_hub.root / "jobs").iterdir())
    assert len(ran) == 2 and all((folder / "journal.jsonl").is_file() for folder in ran)  # each in its own folder
    for repo in REPOS:
        assert len(history(jobs_hub, repo)) == 1
    journal = (tmp_path / "dist" / "matrix-release" / "journal.jsonl").read_text(encoding="utf-8")
    assert journal.count('"event": "submitted"') == 2
    again = _release(jobs_hub, spec, "--backend", "hf-jobs")
    assert {job["status"] for job in json.loads(again.stdout)["jobs"]} == {"skipped"}
    assert len(list((jobs_hub.root / "jobs").iterdir())) == 2  # nothing submitted again
    shutil.rmtree(tmp_path / "dist")  # a run killed before it recorded what it submitted: the Hub's jobs say it
    adopted = _release(jobs_hub, spec, "--backend", "hf-jobs", "--jobs", "2")
    assert adopted.returncode == 0, adopted.stderr
    assert {job["status"] for job in json.loads(adopted.stdout)["jobs"]} == {"released"}
    assert len(list((jobs_hub.root / "jobs").iterdir())) == 2
