"""A matrix released to the local Hub by the real converter, two processes at once: 2 checkpoints (the tiny Qwen3 and
the tiny Llama) x 2 recipes x 2 kinds, plus one job of a broken checkpoint, killed by SIGKILL mid-run and run again,
lands every release exactly once (the Hub's own history and tags), the failing job failing alone, with one summary
and one collection of all 8; and the same matrix runs as Hugging Face Jobs through the local Hub's Jobs endpoints. The
recipes are those whose graphs the session's graph cache holds once built (tests/specs.py CACHED_RECIPES)."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from packager.errors import MATRIX_JOBS_FAILED
from tests.localhub import LocalHub, hub, jobs_hub
from tests.matrixruns import graph_builds, journal_events, landed_once, released_in_journal
from tests.specs import CACHED_RECIPES, matrix_spec

pytestmark = [pytest.mark.converter, pytest.mark.hub]

LENIENT = ("mean_cosine = 0.9",)  # the tiny random checkpoints at 4 bits are not the point here
KINDS = ("draft", "target")


# The matrix: the tiny Qwen3 and the tiny Llama x 4 and 8 bits x draft and target, in the matrix's order.
JOBS = [f"{c}-{r}-{k}" for c in ("qwen", "llama") for r in ("q4", "q8") for k in KINDS]


def _matrix(folder: Path, checkpoints: dict[str, Path], collection: str) -> Path:
    return matrix_spec(
        folder,
        checkpoints=checkpoints,
        recipes=CACHED_RECIPES,
        kinds=KINDS,
        repo_id="me/tiny-{checkpoint}-{recipe}-{kind}-mnn",
        base="Qwen/Qwen3-0.6B",
        verify=LENIENT,
        collection=collection,
        bases={"llama": "meta-llama/Llama-3.2-1B-Instruct"},
    )


def _release(hub: LocalHub, spec: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return hub.cli("release", str(spec), "--json", *args, timeout=900)


def _statuses(result: subprocess.CompletedProcess[str]) -> dict[str, str]:
    return {job["job"]: job["status"] for job in json.loads(result.stdout)["jobs"]}


def test_a_2x2x2_matrix_killed_mid_run_lands_every_release_once_and_a_failing_job_fails_alone(
    hub: LocalHub, tiny_checkpoint: Path, llama_checkpoint: Path, tmp_path: Path
) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{}", encoding="utf-8")
    spec = _matrix(tmp_path, {"qwen": tiny_checkpoint, "llama": llama_checkpoint, "broken": broken}, "Tiny bundles")
    with spec.open("a", encoding="utf-8") as out:  # one job of the broken checkpoint: it fails at once
        out.write('[[matrix.exclude]]\ncheckpoint = "broken"\nrecipe = "q8"\n\n')
        out.write('[[matrix.exclude]]\ncheckpoint = "broken"\nkind = "target"\n')
    jobs = JOBS
    repos = {job: f"me/tiny-{job}-mnn" for job in jobs}
    folder = tmp_path / "dist" / "matrix-release"
    run = subprocess.Popen(
        [sys.executable, "-m", "packager.cli", "release", str(spec), "--jobs", "2", "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=hub.env(),
    )
    try:
        released_in_journal(folder, run)  # a job is released, the other worker's is on its way
        run.send_signal(signal.SIGKILL)
    finally:
        run.communicate(timeout=60)
    before = set(journal_events(folder, "released"))
    assert before and len(before) < len(jobs)  # killed mid-run: some released, not all
    again = _release(hub, spec, "--jobs", "2")
    assert again.returncode == MATRIX_JOBS_FAILED, again.stderr
    lines = [line for line in again.stderr.splitlines() if line.startswith("packager: error:")]
    assert len(lines) == 1 and "1 of 9 jobs failed: broken-q4-draft:" in lines[0]
    assert "Traceback" not in again.stderr
    status = _statuses(again)
    assert list(status) == [*jobs, "broken-q4-draft"]  # the matrix's order
    assert {j for j, s in status.items() if s == "skipped"} == before  # what the killed run released is not redone
    assert status.pop("broken-q4-draft") == "failed"
    # the rest released now; "unchanged" if the kill came after its commit landed and before the journal said so
    assert {s for j, s in status.items() if j not in before} <= {"released", "unchanged"}
    commits = {job: landed_once(hub, repo) for job, repo in repos.items()}  # no duplicate commit, nothing missing
    data = json.loads(again.stdout)
    assert data["failed"] == ["broken-q4-draft"] and data["collection_error"] is None
    assert {row["job"]: row["commit"] for row in data["jobs"]} == {**commits, "broken-q4-draft": None}
    assert [row["axes"]["kind"] for row in data["jobs"]] == [j.split("-")[-1] for j in [*jobs, "broken-q4-draft"]]
    assert json.loads((folder / "summary.json").read_text(encoding="utf-8")) == data
    table = (folder / "summary.md").read_text(encoding="utf-8")
    assert table.startswith("## Release matrix: 9 jobs, 1 failed")
    for job, repo in repos.items():
        assert f"| {job} | {repo}@v1 ({commits[job][:12]}) |" in table
    assert "| broken-q4-draft | me/tiny-broken-q4-draft-mnn@v1 | - | - | - | FAILED: " in table
    slug = data["collection"].split("(")[1].split(")")[0]
    items = hub.api(f"/api/collections/{slug}")["items"]
    assert sorted(i["id"] for i in items) == sorted(repos.values())  # the released ones, once each
    notes = {i["id"]: i["note"]["text"].split(":")[0] for i in items}
    assert notes == {repo: " × ".join(job.split("-")) for job, repo in repos.items()}  # each its row of the matrix
    assert graph_builds() <= 4 + 1  # one per checkpoint and recipe at most, and one the kill may have cut short


def test_a_2x2x2_matrix_runs_as_hugging_face_jobs_through_the_local_hubs_jobs_endpoints(
    jobs_hub: LocalHub, tiny_checkpoint: Path, llama_checkpoint: Path, tmp_path: Path
) -> None:
    """The issue's matrix (2 checkpoints x 2 recipes x 2 kinds) as 8 Hugging Face Jobs: each runs in its own folder
    and streams its log by its id, each release lands once; a rerun submits nothing, and a run that lost its journal
    adopts the jobs the Hub already ran."""
    spec = _matrix(tmp_path, {"qwen": tiny_checkpoint, "llama": llama_checkpoint}, "Tiny jobs")
    jobs = JOBS
    repos = [f"me/tiny-{job}-mnn" for job in jobs]
    result = _release(jobs_hub, spec, "--backend", "hf-jobs", "--jobs", "2", "--flavor", "cpu-basic")
    assert result.returncode == 0, result.stderr
    assert _statuses(result) == dict.fromkeys(jobs, "released")
    assert all(f"[{job}] " in result.stderr for job in jobs)  # each job's log, by its id
    ran = sorted((jobs_hub.root / "jobs").iterdir())
    assert len(ran) == 8 and all((folder / "journal.jsonl").is_file() for folder in ran)  # each in its own folder
    for repo in repos:
        landed_once(jobs_hub, repo)
    data = json.loads(result.stdout)
    table = (tmp_path / "dist" / "matrix-release" / "summary.md").read_text(encoding="utf-8")
    assert all(f"| {job} | me/tiny-{job}-mnn@v1 (" in table for job in jobs)
    slug = data["collection"].split("(")[1].split(")")[0]
    listed = [item["id"] for item in jobs_hub.api(f"/api/collections/{slug}")["items"]]
    assert sorted(listed) == sorted(repos)  # the collection shows all 8, once each
    journal = (tmp_path / "dist" / "matrix-release" / "journal.jsonl").read_text(encoding="utf-8")
    assert journal.count('"event": "submitted"') == 8
    again = _release(jobs_hub, spec, "--backend", "hf-jobs")
    assert set(_statuses(again).values()) == {"skipped"}
    assert len(list((jobs_hub.root / "jobs").iterdir())) == 8  # nothing submitted again
    shutil.rmtree(tmp_path / "dist")  # a run killed before it recorded what it submitted: the Hub's jobs say it
    adopted = _release(jobs_hub, spec, "--backend", "hf-jobs", "--jobs", "2")
    assert adopted.returncode == 0, adopted.stderr
    assert set(_statuses(adopted).values()) == {"released"}
    assert len(list((jobs_hub.root / "jobs").iterdir())) == 8
    for repo in repos:
        landed_once(jobs_hub, repo)
