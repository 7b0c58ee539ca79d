"""Findings: what validation reports, one per problem, with file, JSON pointer and severity."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from ..errors import shorten

Severity = Literal["error", "warning", "note"]  # a note: something not checked here, never a failure
MAX_MESSAGE = 600  # a message quotes at most a few values, each shortened to MAX_SHOWN
SHOWN = 8  # findings of one kind listed before the rest are summed up in one line


@dataclass(frozen=True)
class Finding:
    file: str
    pointer: str
    severity: Severity
    message: str
    line: int | None = None
    column: int | None = None

    @property
    def location(self) -> str:
        if self.line is not None:
            return f"{self.file}:{self.line}:{self.column}"
        return f"{self.file}{' ' + self.pointer if self.pointer else ''}"


@dataclass(frozen=True)
class ValidationReport:
    bundle: Path
    findings: tuple[Finding, ...]
    checked_files: tuple[str, ...] = field(default=())
    kind: str = "draft"  # the bundle kind its files say it is (packager.bundle.kinds.kind_of)
    subset: str | None = None  # "app": the app's files of a bundle, as `pull` takes them by default

    @property
    def errors(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity == "error")

    @property
    def warnings(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity == "warning")

    def ok(self, strict: bool = False) -> bool:
        return not self.errors and not (strict and self.warnings)


def suggest(value: str, options: Iterable[str], cutoff: float = 0.6) -> str | None:
    """The option a near miss most likely meant: same letters ignoring case and '_', else the closest."""
    import difflib

    options = list(options)
    folded = {o.lower().replace("_", ""): o for o in options}
    if value.lower().replace("_", "") in folded:
        return folded[value.lower().replace("_", "")]
    close = difflib.get_close_matches(value, options, n=1, cutoff=cutoff)
    return close[0] if close else None


def pointer(parts: Iterable[object]) -> str:
    """RFC 6901 JSON pointer of a path inside a document."""
    escaped = [str(p).replace("~", "~0").replace("/", "~1") for p in parts]
    return "".join("/" + p for p in escaped)


class Collector:
    """Accumulates findings; checks call error()/warning() and go on, so every problem is reported at once.

    Checks shorten the values they quote; as a last guard no pointer shows more than MAX_SHOWN characters and
    no message more than MAX_MESSAGE, so a 100 MB value in a config can never be echoed whole."""

    def __init__(self) -> None:
        self.items: list[Finding] = []

    def error(self, file: str, where: str, message: str, **kw: int | None) -> None:
        self._add(file, where, "error", message, **kw)

    def warning(self, file: str, where: str, message: str, **kw: int | None) -> None:
        self._add(file, where, "warning", message, **kw)

    def note(self, file: str, where: str, message: str, **kw: int | None) -> None:
        self._add(file, where, "note", message, **kw)

    def _add(self, file: str, where: str, severity: Severity, message: str, **kw: int | None) -> None:
        finding = Finding(file, shorten(where), severity, shorten(message, MAX_MESSAGE), **kw)
        self.items.append(finding)


def report_capped(out: Collector, file: str, rows: list[tuple[str, str]], what: str) -> None:
    """Errors (pointer, message) of one kind: the first SHOWN, then one line for the rest, so a damaged
    0.6B bundle (some 300 ops) gives a readable report."""
    for where, message in rows[:SHOWN]:
        out.error(file, where, message)
    if len(rows) > SHOWN:
        where, message = rows[-1]
        out.error(file, "", f"{len(rows) - SHOWN} more {what} (the last: {where}: {message})")
