"""`release SPEC --backend hf-jobs`: each job of the matrix submitted as a Hugging Face Job through huggingface_hub's
Jobs API (run_job, fetch_job_logs, wait_for_job), running `packager release SPEC --job ID` there; its log lines
streamed here under its id, its result read from the JSON summary it prints, gathered as a local run's are.

A job the journal says was submitted and not finished is followed again on a rerun, never submitted twice. The
local Hub answers these endpoints (`hub serve --run-jobs`) by running the command on this machine, so the path is
rehearsed offline; on the Hub, the image must hold packager and the job must see the spec's files (a volume)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from ...errors import PackagerError
from ...spec.matrix import Job
from .jobs import JobOutcome, Status, Target
from .journal import Journal, fingerprint

DEFAULT_IMAGE = "ghcr.io/astral-sh/uv:python3.12-bookworm"
TERMINAL = ("COMPLETED", "ERROR", "CANCELED", "DELETED")


@dataclass(frozen=True)
class HfJobsOptions:
    flavor: str = "cpu-upgrade"
    image: str = DEFAULT_IMAGE
    timeout: int = 6 * 3600  # seconds a job may run on the Hub
    poll: float = 5.0  # seconds between status checks once its log ends (bounded by timeout)


def command(job: Job, spec: str) -> list[str]:
    """What the Hugging Face Job runs: this one job of the matrix, its summary on stdout."""
    return ["python", "-m", "packager.cli", "release", spec, "--job", job.id, "--out", ".", "--json", "--quiet"]


def execute(
    todo: list[Job],
    *,
    spec: str,
    target: Target,
    jobs: int,
    options: HfJobsOptions,
    journal: Journal,
    submitted: dict[str, str],
    on_event: Callable[[str, str, str], None],
    record: Callable[[Job, JobOutcome], None],
) -> list[JobOutcome]:
    """Every job of `todo` as a Hugging Face Job, `jobs` followed at once; `submitted` maps a job to the Hub job a
    killed run left (followed, not submitted again)."""
    from ...hub.client import connect

    hub = connect(target.endpoint, target.token)
    lock = threading.Lock()

    def one(job: Job) -> JobOutcome:
        start = time.monotonic()
        on_event("start", job.id, "")
        try:
            found = submitted.get(job.id) or _earlier(hub, job) or _submit(hub, job, spec, options, journal, lock)
            outcome = _follow(hub, job, found, options, on_event)
        except PackagerError as exc:
            outcome = _failed(job, exc.one_line(), exc.exit_code)
        except Exception as exc:  # the Jobs API's own errors (HTTP, timeouts): this job fails, not the run
            outcome = _failed(job, f"{type(exc).__name__}: {exc}", 1)
        outcome = replace(outcome, seconds=round(time.monotonic() - start, 3))
        with lock:
            record(job, outcome)
        on_event("done", job.id, outcome.status)
        return outcome

    with ThreadPoolExecutor(max(1, jobs)) as pool:
        return list(pool.map(one, todo))


def _labels(job: Job) -> dict[str, str]:
    """A Hub job's labels: which matrix job it runs, and which version of its spec (the journal's fingerprint)."""
    return {"packager-matrix-job": job.id, "packager-matrix-spec": fingerprint(job)[:16]}


def _earlier(hub: Any, job: Job) -> str | None:
    """A Hub job of this very job that a killed run submitted but could not record, running or finished well: it
    is followed, never submitted twice (two uploads racing to one repo)."""
    namespace = hub.api.whoami()["name"]  # given: list_jobs alone asks whoami without the client's token
    for found in hub.api.list_jobs(labels=_labels(job), namespace=namespace):
        if _stage(found) not in ("ERROR", "CANCELED", "DELETED"):
            return str(found.id)
    return None


def _submit(hub: Any, job: Job, spec: str, options: HfJobsOptions, journal: Journal, lock: threading.Lock) -> str:
    secrets = {"HF_TOKEN": hub.token} if hub.token else None
    info = hub.api.run_job(
        image=options.image,
        command=command(job, spec),
        env={"HF_ENDPOINT": hub.endpoint, "HF_HUB_DISABLE_TELEMETRY": "1"},
        secrets=secrets,
        flavor=options.flavor,
        timeout=options.timeout,
        labels=_labels(job),
    )
    with lock:
        journal.append(job, "submitted", {"hf_job": info.id})
    return str(info.id)


def _follow(
    hub: Any, job: Job, hf_job: str, options: HfJobsOptions, on_event: Callable[[str, str, str], None]
) -> JobOutcome:
    lines = []
    for line in hub.api.fetch_job_logs(job_id=hf_job, follow=True):
        lines.append(line)
        on_event("log", job.id, line)
    final = hub.api.wait_for_job(hf_job, timeout=options.timeout, poll_interval=options.poll)
    if not lines:  # logs that ended before the job did: what it printed, once it is over
        lines = list(hub.api.fetch_job_logs(job_id=hf_job))
    return outcome_from_log(job, lines, _stage(final), final.status.message)


def _stage(info: Any) -> str:
    stage = info.status.stage
    return str(getattr(stage, "value", stage))


def outcome_from_log(job: Job, lines: list[str], stage: str, message: str | None) -> JobOutcome:
    """The job's outcome from the summary `release --json` printed as its last document; without one, the job's
    stage and last line say why it failed."""
    starts = [i for i, line in enumerate(lines) if line == "{"]
    for start in reversed(starts):
        try:
            data = json.loads("\n".join(lines[start : _end(lines, start) + 1]))
            found = next(j for j in data["jobs"] if j["job"] == job.id)
        except (ValueError, KeyError, TypeError, StopIteration):
            continue
        status: Status = "unchanged" if found["status"] == "skipped" else found["status"]
        return JobOutcome.from_facts(job.id, status, found)
    last = next((line for line in reversed(lines) if line.strip()), "")
    said = f"the Hugging Face Job ended {stage}" + (f" ({message})" if message else "") + (f": {last}" if last else "")
    return _failed(job, said, 1)


def _end(lines: list[str], start: int) -> int:
    return next((i for i in range(start, len(lines)) if lines[i] == "}"), len(lines) - 1)


def _failed(job: Job, said: str, code: int) -> JobOutcome:
    return JobOutcome(job.id, "failed", job.repo_id, job.release.version, error=said, exit_code=code)
