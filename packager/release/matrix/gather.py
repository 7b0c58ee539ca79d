"""The one result of a matrix: its summary (JSON and Markdown: job -> repo@revision, size, fidelity, acceptance,
status), and its collection, updated once at the end with each job's row as the repo's note there."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from ... import __version__
from ...errors import PackagerError
from ...spec.matrix import REVISION, Matrix
from ...spec.plan import builds
from .jobs import JobOutcome, MatrixResult, Target

SUMMARY_VERSION = 1
MAX_NOTE = 500  # the Hub's limit on a collection item's note
STATUS = {"unchanged": "released (no commit: the Hub held it)", "skipped": "released by an earlier run"}


def summary(result: MatrixResult, endpoint: str | None = None) -> dict[str, Any]:
    """Stable keys, every one always present (null where a job did not get that far)."""
    matrix = result.matrix
    return {
        "matrix_summary_version": SUMMARY_VERSION,
        "packager_version": __version__,
        "spec": str(matrix.path),
        "ok": result.ok,
        "endpoint": endpoint,
        "jobs": [_job(result, o) for o in result.outcomes],
        "failed": [o.job for o in result.failed],
        "collection": result.collection,
        "collection_error": result.collection_error.one_line() if result.collection_error else None,
    }


def _job(result: MatrixResult, outcome: JobOutcome) -> dict[str, Any]:
    job = result.matrix.job(outcome.job)
    return {
        "job": outcome.job,
        "axes": dict(job.axes),
        "builds": builds(job),
        "status": outcome.status,
        "repo_id": outcome.repo_id,
        "revision": REVISION,
        "tag": outcome.tag,
        "commit": outcome.commit,
        "size": outcome.size,
        "fidelity": outcome.fidelity,
        "acceptance": outcome.acceptance,
        "seconds": outcome.seconds,
        "error": outcome.error,
        "exit_code": outcome.exit_code,
    }


def _size(size: int | None) -> str:
    if size is None:
        return "-"
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:,} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000  # type: ignore[assignment]
    return "-"


def _fidelity(fidelity: dict[str, float] | None) -> str:
    if not fidelity:
        return "-"
    parts = []
    if "top1_agreement" in fidelity:
        parts.append(f"top-1 {fidelity['top1_agreement']:.3f}")
    if "mean_kl" in fidelity:
        parts.append(f"KL {fidelity['mean_kl']:.4f}")
    return ", ".join(parts) or "-"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(data: dict[str, Any]) -> str:
    """The summary as a Markdown table (a CI run's step summary, the collection's story)."""
    lines = [
        f"## Release matrix: {len(data['jobs'])} jobs, {len(data['failed'])} failed",
        "",
        "| job | repo@revision | size | fidelity | acceptance | status |",
        "|---|---|---|---|---|---|",
    ]
    for job in data["jobs"]:
        where = f"{job['repo_id']}@{job['tag']}" + (f" ({job['commit'][:12]})" if job["commit"] else "")
        acceptance = "-" if job["acceptance"] is None else f"{job['acceptance']:.3f}"
        status = STATUS.get(job["status"], job["status"]) if job["status"] != "failed" else f"FAILED: {job['error']}"
        cells = (job["job"], where, _size(job["size"]), _fidelity(job["fidelity"]), acceptance, status)
        lines.append("| " + " | ".join(_cell(str(c)) for c in cells) + " |")
    if data["collection"]:
        lines += ["", f"Collection: {data['collection']}"]
    if data["collection_error"]:
        lines += ["", f"Collection NOT updated: {data['collection_error']}"]
    return "\n".join(lines) + "\n"


def note(result: MatrixResult, outcome: JobOutcome) -> str:
    """A repo's note in the collection: its row of the matrix (axes, recipe, size, fidelity)."""
    job = result.matrix.job(outcome.job)
    axes = " × ".join(name for _, name in job.axes)
    said = f"{axes}: {builds(job)}, {_size(outcome.size)}"
    if outcome.fidelity:
        said += f", {_fidelity(outcome.fidelity)}"
    if outcome.acceptance is not None:
        said += f", acceptance {outcome.acceptance:.3f}"
    return said[:MAX_NOTE]


def update_collection(result: MatrixResult, target: Target) -> MatrixResult:
    """Every released job's repo into the spec's collection, each with its row as the note: once, at the end."""
    from ...hub.client import connect
    from ...hub.collection import CollectionRequest, place

    release = result.matrix.jobs[0].release
    assert release.collection is not None
    released = [o for o in result.outcomes if o.ok]
    if not released:
        return result
    try:
        hub = connect(target.endpoint, target.token)
        added = 0
        slug = None
        for outcome in released:
            request = CollectionRequest(release.collection, release.owner, note(result, outcome))
            placed = place(hub, request, outcome.repo_id, target.private, time.sleep)
            added += placed.added
            slug = placed.slug
    except PackagerError as exc:
        return replace(result, collection_error=exc)
    said = f"collection {release.collection!r} ({slug}): {len(released)} repos, {added} added, notes set"
    return replace(result, collection=said)


def gathered(matrix: Matrix, folder: Path, target: Target, summaries: Path) -> MatrixResult:
    """`release SPEC --gather DIR`: the jobs' summaries as one result, then the collection updated once."""
    result = from_summaries(MatrixResult(matrix, folder, ()), summaries)
    return update_collection(result, target) if matrix.jobs[0].release.collection is not None else result


def from_summaries(result: MatrixResult, summaries: Path) -> MatrixResult:
    """The matrix's result from the summaries its jobs wrote elsewhere (a CI job each, gathered as artifacts under
    `summaries`): a job with no summary failed (its CI job did not finish)."""
    from ...errors import MatrixInvalid
    from ...infra.jsonfile import read_json

    found: dict[str, dict[str, Any]] = {}
    for path in sorted(summaries.rglob("summary.json")):
        data = read_json(path, MatrixInvalid, what="a matrix job's summary")
        for row in data.get("jobs", []) if isinstance(data, dict) else []:
            if isinstance(row, dict) and isinstance(row.get("job"), str):
                found[row["job"]] = row
    outcomes = []
    for job in result.matrix.jobs:
        row = found.get(job.id)
        if row is None or row.get("status") not in ("released", "unchanged", "skipped", "failed"):
            said = f"no summary of it under {summaries}: its job did not finish"
            outcomes.append(JobOutcome(job.id, "failed", job.repo_id, job.release.version, error=said, exit_code=1))
        else:
            outcomes.append(JobOutcome.from_facts(job.id, row["status"], row))
    return replace(result, outcomes=tuple(outcomes))
