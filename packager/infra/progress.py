"""How a stage reports progress: a callback taking one line (the CLI prints it, a test collects it, a quiet run
drops it). The library never prints.

A stage that counts (prompts, files, megabytes) reports a Step: still the line itself, so a callback that prints or
collects lines takes it like any other, but it also says how far the stage is, which the CLI draws as a bar on a
terminal."""

from __future__ import annotations

from collections.abc import Callable

Progress = Callable[[str], None]


class Step(str):
    """A progress line of a counted stage: `done` of `total`, under the stage's short `label`."""

    done: int
    total: int
    label: str

    def __new__(cls, text: str, done: int, total: int, label: str) -> Step:
        step = super().__new__(cls, text)
        step.done, step.total, step.label = done, total, label
        return step
