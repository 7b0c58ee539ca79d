"""Helpers of the matrix release tests: a run's journal watched."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

WATCH_TICKS = 6000  # of 0.1 s each (the process's own wait, not a sleep): ten minutes at most


def released_in_journal(folder: Path, run: subprocess.Popen[str]) -> list[str]:
    """Wait (on the process itself) until the run's journal records a released job; fail if the run ends first."""
    journal = folder / "journal.jsonl"
    for _ in range(WATCH_TICKS):
        if journal.is_file():
            lines = journal.read_text(encoding="utf-8").splitlines()
            done = [json.loads(line)["job"] for line in lines if '"event": "released"' in line]
            if done:
                return done
        try:
            run.wait(timeout=0.1)
        except subprocess.TimeoutExpired:
            continue
        raise AssertionError(f"the run ended ({run.returncode}) before releasing a job: {run.stderr.read()}")  # type: ignore[union-attr]
    raise AssertionError("no job was released in ten minutes")
