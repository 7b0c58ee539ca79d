"""`release SPEC --jobs N` for a matrix spec: every job's release in a process pool, resumable through the journal,
the collection updated once at the end.

Jobs that would build one graph (one checkpoint, bits and block, head and engine floor; any bundle kind) form a
group: its first job runs alone and fills the graph cache, then the others of the group run, in parallel, from the
cache. One failing job does not stop the others; the result names every failed one."""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...convert.recipe import DEFAULT_BITS, DEFAULT_BLOCK
from ...errors import PackagerError
from ...spec.matrix import Job, Matrix
from . import hfjobs
from .gather import update_collection
from .hfjobs import HfJobsOptions
from .jobs import JobOutcome, MatrixResult, Target, run_job, shares, start_worker
from .journal import Journal, fingerprint, replay

# (kind, job id, text): start, line (a progress line of the job), done (its status), skipped (released before)
OnEvent = Callable[[str, str, str], None]


@dataclass(frozen=True)
class MatrixRequest:
    matrix: Matrix
    folder: Path  # the run folder: journal, bundles/<job>, summary
    target: Target = Target()
    jobs: int = 1  # processes at once
    only: tuple[str, ...] = ()  # run only these jobs (a CI matrix runs one job a runner)
    backend: str = "local"  # local (a process pool here) or hf-jobs (Hugging Face Jobs)
    hf_jobs: HfJobsOptions = HfJobsOptions()


def default_folder(matrix: Matrix) -> Path:
    return matrix.path.parent / "dist" / f"matrix-{matrix.path.stem}"


def graph_group(job: Job) -> tuple[Any, ...]:
    """What the graph a job builds depends on, of what the spec says: jobs with one group share one graph. The
    graph cache's key (packager.convert.stream.run) holds the checkpoint, the weights' bits and block, an EAGLE-3
    head, a DFlash draft's layers, the engine floor (its converter options) and what an adapter merges; not the
    bundle's kind nor a lookahead corpus, so a draft and a target of one recipe are one group (run side by side,
    both would miss the cache and build the same graph twice)."""
    c = job.spec.convert
    bits = c.quant_bits or DEFAULT_BITS
    block = DEFAULT_BLOCK if c.quant_block is None else c.quant_block
    return (job.group, bits, block, str(c.eagle), str(c.dflash), c.engine, str(c.lora))


def run(request: MatrixRequest, on_event: OnEvent = lambda kind, job, text: None) -> MatrixResult:
    matrix = request.matrix
    selected = [j for j in matrix.jobs if not request.only or j.id in request.only]
    with Journal(request.folder).held() as journal:
        states = replay(journal.read(), {j.id: fingerprint(j) for j in selected})
        outcomes: dict[str, JobOutcome] = {}
        todo = []
        for job in selected:
            state = states[job.id]
            if state.status == "released" and _still_released(job, state.facts, request.target):
                outcomes[job.id] = JobOutcome.from_facts(job.id, "skipped", state.facts)
                on_event("skipped", job.id, "")
            else:
                todo.append(job)
        if request.backend == "hf-jobs":
            submitted = {j.id: states[j.id].facts["hf_job"] for j in todo if "hf_job" in states[j.id].facts}
            for job in todo:
                if job.id not in submitted:
                    journal.append(job, "start")
            done = hfjobs.execute(
                todo,
                spec=str(matrix.path.resolve()),
                target=request.target,
                jobs=request.jobs,
                options=request.hf_jobs,
                journal=journal,
                submitted=submitted,
                on_event=on_event,
                record=lambda job, outcome: _record(journal, job, outcome),
            )
        else:
            done = _execute(todo, request, journal, on_event)
        for outcome in done:
            outcomes[outcome.job] = outcome
    ordered = tuple(outcomes[j.id] for j in selected)
    result = MatrixResult(matrix, request.folder, ordered)
    if matrix.jobs and matrix.jobs[0].release.collection is not None and not request.only:
        result = update_collection(result, request.target)
    return result


def _still_released(job: Job, facts: dict[str, Any], target: Target) -> bool:
    """The Hub, not the journal, decides: the job's tag still points at the commit the journal recorded."""
    from ...hub.client import connect
    from ...hub.remote import read_repo

    try:
        repo = read_repo(connect(target.endpoint, target.token), job.repo_id)
    except PackagerError:
        return False
    return bool(facts.get("commit")) and repo.tags.get(job.release.version) == facts.get("commit")


def schedule(todo: list[Job]) -> tuple[deque[Job], dict[tuple[Any, ...], list[Job]]]:
    """The jobs that may start now (the first of each graph group, in matrix order) and, by group, those that wait
    for their group's first to fill the graph cache."""
    groups: dict[tuple[Any, ...], list[Job]] = {}
    for job in todo:
        groups.setdefault(graph_group(job), []).append(job)
    return deque(members[0] for members in groups.values()), {key: members[1:] for key, members in groups.items()}


def _execute(todo: list[Job], request: MatrixRequest, journal: Journal, on_event: OnEvent) -> list[JobOutcome]:
    if not todo:
        return []
    ready, waiting = schedule(todo)
    workers = max(1, min(request.jobs, len(todo)))
    results: list[JobOutcome] = []
    with _pool(workers, on_event) as pool:
        running: dict[Future[JobOutcome], Job] = {}
        while ready or running:
            while ready and len(running) < workers:
                job = ready.popleft()
                journal.append(job, "start")
                running[pool.submit(run_job, job, request.folder, request.target)] = job
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                job = running.pop(future)
                outcome = _outcome(future, job)
                _record(journal, job, outcome)
                results.append(outcome)
                ready.extend(waiting.pop(graph_group(job), ()))  # the graph is cached now: the rest of its group
    return results


def _record(journal: Journal, job: Job, outcome: JobOutcome) -> None:
    journal.append(job, "failed" if not outcome.ok else "released", outcome.facts())


def _outcome(future: Future[JobOutcome], job: Job) -> JobOutcome:
    try:
        return future.result()
    except BrokenProcessPool:
        said = "its worker process died (killed, or out of memory); run the release again to retry it"
    except Exception as exc:  # the outcome could not come back (a value that does not pickle)
        said = f"{type(exc).__name__}: {exc}"
    return JobOutcome(job.id, "failed", job.repo_id, job.release.version, error=said, exit_code=1)


@contextmanager
def _pool(workers: int, on_event: OnEvent) -> Iterator[ProcessPoolExecutor]:
    """Spawned workers (no fork of a process with threads), each dying with this one; their progress pumped to
    `on_event` by a thread here. Left early (an error, Ctrl-C, SIGTERM), the workers are killed at once: what they
    left half-done is in the journal as started and runs again next time."""
    context = multiprocessing.get_context("spawn")
    events = context.Queue()
    pump = threading.Thread(target=_pump, args=(events, on_event), daemon=True)
    pump.start()
    cores = context.Queue()
    for share in shares(workers):
        cores.put(share)
    setup = (os.getpid(), events, cores)
    pool = ProcessPoolExecutor(workers, mp_context=context, initializer=start_worker, initargs=setup)
    try:
        yield pool
    except BaseException:
        for process in list((getattr(pool, "_processes", None) or {}).values()):
            process.kill()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    else:
        pool.shutdown(wait=True)
    finally:
        events.put(None)
        pump.join(timeout=10)
        events.close()


def _pump(events: Any, on_event: OnEvent) -> None:
    while True:
        try:
            item = events.get()
        except (EOFError, OSError, ValueError):
            return
        if item is None:
            return
        try:
            on_event(*item)
        except Exception:
            pass  # a progress bar that fails must not stop the run
