"""Progress on stderr as people expect it: on a terminal a tqdm bar per stage (a counted stage fills its bar, any
other shows the time it has taken so far); elsewhere (a pipe, a file, CI) one line per step with the time since the
command started; nothing at all with --quiet. The library only reports (packager/infra/progress.py); this draws.

On a terminal no line is ever cut: a stage's text wider than the terminal is wrapped between words (its last line
carries the elapsed time). A stage reported while a counted bar is still filling (work beside it, as convert's
graph beside its weights) is written above that bar, which stays the one bar of its stage."""

from __future__ import annotations

import os
import sys
import textwrap
import threading
import time
from types import TracebackType
from typing import Any

import click

from ..errors import printable
from ..infra.progress import Step

TICK = 0.5  # seconds between redraws of a stage's elapsed time while the stage reports nothing
ELAPSED = " [0:00:00]"  # the most an uncounted stage's bar adds to its text (an hour)


def stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed stderr
        return False


class StderrProgress:
    """The progress callback the commands hand to the library. Use it as a context (`with StderrProgress(quiet) as
    progress:`) around the library call, so that the last bar is closed before the result is printed. `bars=False`
    keeps the lines on a terminal too (pull draws its own byte bars); `lines=False` draws the bar on a terminal but
    prints nothing elsewhere (validate and sign, whose output in hooks and CI logs had no progress lines)."""

    def __init__(self, quiet: bool, bars: bool = True, lines: bool = True) -> None:
        self.bars = bars and not quiet and stderr_is_terminal()
        self.quiet = quiet or (not self.bars and not lines)
        self.start = time.monotonic()
        self._bar: Any = None
        self._label: str | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    def __call__(self, stage: str) -> None:
        if self.quiet:
            return
        if not self.bars:  # escaped like the error lines: a stage may name a path
            click.echo(f"packager: [{time.monotonic() - self.start:6.1f}s] {printable(stage)}", err=True)
            return
        with self._lock:
            if not isinstance(stage, Step):
                self._line(printable(stage.strip()))
                return
            if self._bar is None or self._label != stage.label or self._bar.total != stage.total:
                self._open(stage.label, stage.total, stage.done)
            self._bar.n = stage.done
            self._bar.refresh()

    def __enter__(self) -> StderrProgress:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.close(finished=kind is None)

    def close(self, finished: bool = True) -> None:
        """Leave the last bar on its line (complete, if the stage ended rather than failed) and stop redrawing."""
        self._stop.set()
        with self._lock:
            self._end(finished)

    def _line(self, text: str) -> None:
        """An uncounted stage: its own bar showing its time, its text wrapped between words to the terminal's
        width; written above a counted bar that is still filling, which stays."""
        lines = textwrap.wrap(text, max(20, _columns() - len(ELAPSED) - 1), break_on_hyphens=False) or [""]
        if self._bar is not None and self._bar.total and self._bar.n < self._bar.total:
            for line in lines:
                self._bar.write(line, file=sys.stderr)
            return
        self._end(finished=True)  # a new stage began: the last one is over
        for line in lines[:-1]:
            click.echo(line, err=True)
        self._open(lines[-1], None)

    def _open(self, label: str, total: int | None, done: int = 0) -> None:
        """A new bar. A counted bar first shown part-way (its stage began before it reported a count) starts its
        rate from there: its ETA is unknown until the count moves, never the nonsense of a whole stage's work done
        in no time."""
        from tqdm import tqdm

        self._end(finished=True)  # a new stage began: the last one is over
        counted = "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}]"
        self._bar = tqdm(
            total=total,
            desc=label,
            bar_format=counted if total else "{desc} [{elapsed}]",
            file=sys.stderr,
            leave=True,
            initial=done if total else 0,
            **_shape(),
        )
        self._label = label if total else None
        if self._ticker is None:
            self._ticker = threading.Thread(target=self._tick, name="packager-progress", daemon=True)
            self._ticker.start()

    def _end(self, finished: bool) -> None:
        if self._bar is None:
            return
        if finished and self._bar.total:
            self._bar.n = self._bar.total
        self._bar.close()
        self._bar, self._label = None, None

    def _tick(self) -> None:
        while not self._stop.wait(TICK):
            with self._lock:
                if self._bar is not None:
                    self._bar.refresh()


def _columns() -> int:
    """The terminal's width now (80 where it reports none)."""
    try:
        columns = os.get_terminal_size(sys.stderr.fileno()).columns
    except (OSError, ValueError, AttributeError):
        columns = 0
    return columns if columns > 0 else 80


def _shape() -> dict[str, Any]:
    """The terminal's size, followed as it changes; 80 x 24 where the terminal reports none (some
    containers' ptys say 0 x 0, which would leave no room for a bar)."""
    try:
        sized = min(os.get_terminal_size(sys.stderr.fileno())) > 0
    except (OSError, ValueError, AttributeError):
        sized = False
    return {"dynamic_ncols": True} if sized else {"ncols": 80, "nrows": 24}
