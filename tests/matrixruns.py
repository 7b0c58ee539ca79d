"""Helpers of the matrix release tests: a run's journal watched, a release checked on the Hub's own records, and
the graph builds a test caused (tests/counting)."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
from pathlib import Path

from tests.localhub import LocalHub, history

WATCH_TICKS = 6000  # of 0.1 s each (the process's own wait, not a sleep): ten minutes at most


def released_in_journal(folder: Path, run: subprocess.Popen[str]) -> list[str]:
    """Wait (on the process itself) until the run's journal records a released job; fail if the run ends first."""
    journal = folder / "journal.jsonl"
    for _ in range(WATCH_TICKS):
        if journal.is_file():
            done = journal_events(folder, "released")
            if done:
                return done
        try:
            run.wait(timeout=0.1)
        except subprocess.TimeoutExpired:
            continue
        raise AssertionError(f"the run ended ({run.returncode}) before releasing a job: {run.stderr.read()}")  # type: ignore[union-attr]
    raise AssertionError("no job was released in ten minutes")


def journal_events(folder: Path, event: str) -> list[str]:
    """The jobs of each whole `event` line of the run's journal, in order (a torn last line is not one)."""
    found = []
    for line in (folder / "journal.jsonl").read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record["event"] == event:
            found.append(record["job"])
    return found


def landed_once(hub: LocalHub, repo: str, tag: str = "v1") -> str:
    """The one commit a release made to `repo` (the Hub's history past its initial commit), which `tag` names."""
    commits = history(hub, repo)
    assert len(commits) == 1, f"{repo}: {len(commits)} commits: {[c['title'] for c in commits]}"
    tags = hub.api(f"/api/models/{repo}/refs")["tags"]
    assert [(t["name"], t["targetCommit"]) for t in tags] == [(tag, commits[0]["id"])]
    return commits[0]["id"]


def graph_builds() -> int:
    """The graph builds (the fenced llmexport worker started) of the running test so far, in every process."""
    counts = importlib.import_module("packager_test_counts")  # tests/counting, on sys.path (tests/conftest.py)
    log, test = os.environ.get(counts.VARIABLE, ""), os.environ.get(counts.NODEID, "")
    if not log or not os.path.isfile(log):
        return 0
    with open(log, encoding="utf-8") as handle:
        rows = [line.rstrip("\n").split("\t") for line in handle]
    return sum(1 for row in rows if len(row) == 3 and row[0] == "graph build" and row[2] == test)
