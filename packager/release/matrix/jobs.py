"""One job of a matrix, run in a pool worker: the whole single-bundle release of its plain spec, its outcome as
plain facts (what the journal records and the summary shows), its progress lines sent to the parent."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from ...errors import PackagerError
from ...spec.matrix import Job, Matrix

Status = Literal["released", "unchanged", "failed", "skipped"]
_events: Any = None  # the parent's queue, in a worker (set by `start_worker`)


@dataclass(frozen=True)
class Target:
    """Where and how the jobs release (the same for every job of a run)."""

    endpoint: str | None = None
    token: str | None = field(default=None, repr=False)
    private: bool = False


@dataclass(frozen=True)
class JobOutcome:
    job: str
    status: Status  # released (a commit), unchanged (no commit needed), failed, skipped (released by an earlier run)
    repo_id: str
    tag: str
    commit: str | None = None
    size: int | None = None  # the bundle's bytes
    fidelity: dict[str, float] | None = None  # verify's top-1 and greedy agreement, mean KL
    acceptance: float | None = None  # a pair report's alpha, when the spec names one
    seconds: float = 0.0
    error: str | None = None
    exit_code: int = 0

    @property
    def ok(self) -> bool:
        return self.status != "failed"

    def facts(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in ("job", "status", "seconds")}

    @classmethod
    def from_facts(cls, job: str, status: Status, facts: dict[str, Any]) -> JobOutcome:
        names = set(cls.__dataclass_fields__) - {"job", "status"}
        return cls(job, status, **{k: v for k, v in facts.items() if k in names})


@dataclass(frozen=True)
class MatrixResult:
    matrix: Matrix
    folder: Path
    outcomes: tuple[JobOutcome, ...]  # in the matrix's job order
    collection: str | None = None  # what the collection stage did (None: the spec names no collection)
    collection_error: PackagerError | None = None

    @property
    def failed(self) -> tuple[JobOutcome, ...]:
        return tuple(o for o in self.outcomes if not o.ok)

    @property
    def ok(self) -> bool:
        return not self.failed and self.collection_error is None


def start_worker(parent: int, events: Any, cores: Any) -> None:
    """A pool worker's first act: die with the parent (a killed run leaves no orphan converting or uploading),
    send progress to it, and take its share of the cores (a queue of disjoint sets, one per worker): the
    converter's writers, torch and MNN size their threads by the cores a process may use, so N workers on N
    shares do not each start a thread per core of the machine and crowd each other out."""
    global _events
    from ...infra.lifeline import die_with

    die_with(parent)
    _events = events
    try:
        share = cores.get(timeout=5)
        if share:
            os.sched_setaffinity(0, share)
    except Exception:
        pass  # no share (a platform without affinity, or more workers than shares): the machine's cores


def shares(workers: int) -> list[set[int]]:
    """The cores this process may use, split into `workers` disjoint sets (fewer cores than workers: none)."""
    try:
        cores = sorted(os.sched_getaffinity(0))
    except AttributeError:
        return []
    if workers <= 1 or len(cores) < workers:
        return []
    return [set(cores[i::workers]) for i in range(workers)]


def send(kind: str, job: str, text: str = "") -> None:
    if _events is not None:
        try:
            _events.put((kind, job, text))
        except (OSError, ValueError):
            pass  # the parent is gone or closed its end: progress is not worth failing a job for


def run_job(job: Job, folder: Path, target: Target) -> JobOutcome:
    """Release one job into `folder`/bundles/<id>; never raises for the job's own failure."""
    from ..run import ReleaseRequest, run

    start = time.monotonic()
    release = job.release
    send("start", job.id)
    spec = replace(job.spec, release=replace(release, collection=None))  # the collection: once, at the end
    outcome = JobOutcome(job.id, "failed", release.repo_id, release.version)
    try:
        result = run(
            ReleaseRequest(
                spec=spec,
                out=folder / "bundles" / job.id,
                endpoint=target.endpoint,
                private=target.private,
                token=target.token,
            ),
            progress=lambda line: send("line", job.id, str(line)),
        )
        if result.error is not None:
            outcome = replace(outcome, error=result.error.one_line(), exit_code=result.error.exit_code)
        else:
            committed = result.upload is not None and result.upload.committed
            outcome = replace(
                outcome,
                status="released" if committed else "unchanged",
                commit=result.commit,
                size=_size(result.bundle),
                fidelity=_fidelity(result.parity),
                acceptance=_acceptance(job),
            )
    except PackagerError as exc:  # refused before its first stage
        outcome = replace(outcome, error=exc.one_line(), exit_code=exc.exit_code)
    except Exception as exc:  # a bug in one job must not take the others down; its line says what it was
        outcome = replace(outcome, error=f"{type(exc).__name__}: {exc}", exit_code=1)
    outcome = replace(outcome, seconds=round(time.monotonic() - start, 3))
    send("done", job.id, outcome.status)
    return outcome


def _size(bundle: Path | None) -> int | None:
    if bundle is None or not bundle.is_dir():
        return None
    return sum(os.path.getsize(p) for p in bundle.iterdir() if p.is_file())


def _fidelity(parity: dict[str, Any] | None) -> dict[str, float] | None:
    if not parity:
        return None
    keys = ("top1_agreement", "greedy_agreement", "mean_kl")
    return {k: round(float(parity[k]), 4) for k in keys if isinstance(parity.get(k), (int, float))}


def _acceptance(job: Job) -> float | None:
    card = job.spec.card
    if card is None or card.pair_report is None:
        return None
    from ...card.measurements import pairing_from_report

    try:
        alpha = pairing_from_report(card.pair_report)["alpha"]
    except PackagerError:
        return None
    return float(alpha) if isinstance(alpha, (int, float)) else None
