"""The journal of a matrix release: one JSON line per event (a job started, released or failed), appended and
synced before the run goes on, so a run killed at any point (SIGKILL included) is replayed by the next one.

The journal only saves work: a job it says is released is skipped once the Hub confirms its tag still points at
the recorded commit; a job started and never finished runs again, and its upload, sending only what the Hub does
not hold, makes no second commit. A torn last line (the kill came mid-write) is ignored. A record of an older
version of a job's spec (another fingerprint) does not count."""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ... import __version__
from ...errors import MatrixBusy, from_os_error
from ...infra.hashing import xxh3_128_bytes
from ...spec.matrix import Job

JOURNAL = "journal.jsonl"
LOCK = "journal.lock"
Event = Literal["start", "submitted", "released", "failed"]  # submitted: to Hugging Face Jobs (its id)


def fingerprint(job: Job) -> str:
    """What makes a job the same job: its expanded spec and packager's version."""
    text = json.dumps([__version__, job.id, job.spec.data], sort_keys=True, default=str, ensure_ascii=True)
    return xxh3_128_bytes(text.encode("ascii"))


@dataclass(frozen=True)
class Record:
    job: str
    event: Event
    fingerprint: str
    facts: dict[str, Any] = field(default_factory=dict)  # released: repo_id, commit, tag, size, fidelity; failed: error


@dataclass(frozen=True)
class JobState:
    status: Literal["pending", "started", "released", "failed"]
    facts: dict[str, Any] = field(default_factory=dict)
    attempts: int = 0  # how many runs started it


def parse(lines: Iterable[str]) -> list[Record]:
    """The records of a journal's lines; a line that is not a whole record (a torn write) is skipped."""
    found = []
    for line in lines:
        try:
            data = json.loads(line)
            found.append(Record(data["job"], data["event"], data["fingerprint"], data.get("facts") or {}))
        except (ValueError, KeyError, TypeError):
            continue
    return found


def replay(records: Iterable[Record], fingerprints: dict[str, str]) -> dict[str, JobState]:
    """Each job's state after the records, in order (the last outcome wins); records of jobs not in the matrix, or
    of another fingerprint of a job, are ignored."""
    states = {job: JobState("pending") for job in fingerprints}
    for record in records:
        if fingerprints.get(record.job) != record.fingerprint:
            continue
        before = states[record.job]
        if record.event == "start":
            states[record.job] = JobState("started", {}, before.attempts + 1)
        elif record.event == "submitted":
            states[record.job] = JobState("started", record.facts, before.attempts)
        elif record.event in ("released", "failed"):
            states[record.job] = JobState(record.event, record.facts, before.attempts)
    return states


class Journal:
    """The journal file of one matrix run folder, held by one run at a time."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.path = folder / JOURNAL

    def read(self) -> list[Record]:
        try:
            with self.path.open(encoding="utf-8", errors="replace") as handle:
                return parse(handle)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise from_os_error(exc, "reading the matrix journal") from None

    def append(self, job: Job, event: Event, facts: dict[str, Any] | None = None) -> None:
        """One line, written whole with one write and synced: a kill leaves it there or leaves a torn tail."""
        line = json.dumps(
            {"job": job.id, "event": event, "fingerprint": fingerprint(job), "facts": facts or {}}, sort_keys=True
        )
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                if os.fstat(fd).st_size and not self._ends_whole(fd):
                    os.write(fd, b"\n")  # a torn line of a killed run stays a line of its own
                os.write(fd, (line + "\n").encode("utf-8"))
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise from_os_error(exc, "writing the matrix journal") from None

    def _ends_whole(self, fd: int) -> bool:
        return os.pread(fd, 1, os.fstat(fd).st_size - 1) == b"\n"

    @contextmanager
    def held(self) -> Iterator[Journal]:
        """The run folder for this run alone: a second run of the same matrix at once is refused."""
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            handle = open(self.folder / LOCK, "a+")
        except OSError as exc:
            raise from_os_error(exc, "making the matrix run folder") from None
        try:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise MatrixBusy(f"another packager release is running this matrix in {self.folder}") from None
            yield self
        finally:
            handle.close()
