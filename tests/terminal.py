"""A terminal as the progress drawing sees it, without one: stderr replaced by a stream that says it is a tty (80
columns, as when a terminal reports no size), and what stayed on its lines once drawn."""

from __future__ import annotations

import io
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@contextmanager
def fake_terminal() -> Iterator[FakeTerminal]:
    """sys.stderr is the fake terminal inside the block (set in the test itself: pytest's capture puts its own
    stream back between a fixture's setup and the test)."""
    screen, before = FakeTerminal(), sys.stderr
    sys.stderr = screen
    try:
        yield screen
    finally:
        sys.stderr = before


def finished_lines(drawn: str) -> list[str]:
    """The lines left on the screen: for each line ended by a newline, its last redraw (after any carriage return)."""
    lines = []
    for line in drawn.split("\n"):
        frames = [frame.rstrip() for frame in line.split("\r") if frame.strip()]
        if frames:
            lines.append(frames[-1])
    return lines


def words(text: str) -> list[str]:
    return re.findall(r"\S+", text)
