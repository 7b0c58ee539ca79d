"""The local Hub's Jobs endpoints, through huggingface_hub's own Jobs API (run_job, fetch_job_logs, inspect_job,
wait_for_job): each job's command runs here in a folder of its own, with its environment and secrets and none of
the server's Hub variables; off unless the Hub is started with --run-jobs. No conversion."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from packager.release.matrix.hfjobs import command, outcome_from_log
from packager.spec import matrix as matrix_spec
from tests.localhub import READ_TOKEN, WRITE_TOKEN, LocalHub, hub, jobs_hub, online
from tests.specs import matrix_spec as write_matrix

pytestmark = pytest.mark.hub

SCRIPT = (
    "import os, sys; print('hello', os.environ.get('GREETING'), os.environ.get('SECRET')); "
    "print('server token seen:', 'PACKAGER_HUB_TOKEN' in os.environ or 'HF_TOKEN' in os.environ); "
    "print('in', os.path.basename(os.getcwd())); print('to stderr', file=sys.stderr); sys.exit(int(sys.argv[1]))"
)


def _api(hub: LocalHub, token: str = WRITE_TOKEN) -> Any:
    from huggingface_hub import HfApi

    return HfApi(endpoint=hub.url, token=token)


@pytest.mark.parametrize("code", [0, 3])
def test_a_job_runs_its_command_here_and_huggingface_hub_follows_it(
    jobs_hub: LocalHub, online: None, code: int
) -> None:
    api = _api(jobs_hub)
    job = api.run_job(
        image="python:3.12",
        command=["python", "-c", SCRIPT, str(code)],
        env={"GREETING": "hi"},
        secrets={"SECRET": "s3"},
        flavor="cpu-upgrade",
        labels={"packager-matrix-job": "a-q4"},
    )
    logs = list(api.fetch_job_logs(job_id=job.id, follow=True))
    assert logs == ["hello hi s3", "server token seen: False", f"in {job.id}", "to stderr"]
    final = api.wait_for_job(job.id, timeout=60, poll_interval=0.1)
    assert final.status.stage == ("COMPLETED" if code == 0 else "ERROR")
    assert final.status.message == (None if code == 0 else "the command exited with 3")
    info = api.inspect_job(job_id=job.id)
    assert info.flavor == "cpu-upgrade" and info.labels["packager-matrix-job"] == "a-q4"
    assert info.secrets == {"SECRET": "******"} and info.environment == {"GREETING": "hi"}
    assert (jobs_hub.root / "jobs" / job.id).is_dir()
    assert list(api.fetch_job_logs(job_id=job.id)) == logs  # once over, the whole log at once
    mine = api.whoami()["name"]  # list_jobs asks whoami without the client's token: name the namespace
    assert [j.id for j in api.list_jobs(labels={"packager-matrix-job": "a-q4"}, namespace=mine)] == [job.id]
    assert list(api.list_jobs(labels={"packager-matrix-job": "a-q8"}, namespace=mine)) == []


def test_jobs_are_off_unless_asked_and_need_a_write_token(hub: LocalHub, jobs_hub: LocalHub, online: None) -> None:
    from huggingface_hub.errors import HfHubHTTPError

    with pytest.raises(HfHubHTTPError, match="404") as off:
        _api(hub).run_job(image="python:3.12", command=["python", "-c", "print(1)"])
    assert "hub serve --run-jobs" in str(off.value)
    with pytest.raises(HfHubHTTPError, match="403"):
        _api(jobs_hub, READ_TOKEN).run_job(image="python:3.12", command=["python", "-c", "print(1)"], namespace="me")
    status, _, body = jobs_hub.raw("POST", "/api/jobs/me", b'{"command": "echo hi"}')
    assert status == 400 and b"command must be a non-empty list of strings" in body
    with pytest.raises(HfHubHTTPError, match="404"):
        _api(jobs_hub).inspect_job(job_id="0" * 24)


def test_a_jobs_outcome_is_read_from_the_summary_it_printed(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    matrix = matrix_spec.load(write_matrix(tmp_path, checkpoints={"a": tmp_path / "a"}))
    job = matrix.jobs[0]
    assert command(job, "/s/m.toml") == [
        "python", "-m", "packager.cli", "release", "/s/m.toml", "--job", "a-q4", "--out", ".", "--json", "--quiet",
    ]  # fmt: skip
    summary = ['{', '  "jobs": [{"job": "a-q4", "status": "released", "repo_id": "me/tiny-a-q4-mnn", "tag": "v1",',
               '            "commit": "c0ffee", "size": 5, "fidelity": null, "acceptance": null, "error": null,',
               '            "exit_code": 0}]', '}']  # fmt: skip
    outcome = outcome_from_log(job, ["building", *summary, "packager: warning: x"], "COMPLETED", None)
    assert (outcome.status, outcome.commit, outcome.size) == ("released", "c0ffee", 5)
    failed = outcome_from_log(job, ["Traceback", "MemoryError"], "ERROR", "the command exited with 1")
    assert failed.status == "failed" and failed.error == (
        "the Hugging Face Job ended ERROR (the command exited with 1): MemoryError"
    )
    assert sys.executable  # the local Hub runs python with its own interpreter
