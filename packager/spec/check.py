"""`check-spec`: every problem of a release spec at once (schema, placeholders, figure rules), with its line."""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from ..errors import shorten
from ..infra.userfile import SPEC_BYTES, read_at_most, say_size
from ..report import Checked
from ..report.findings import Finding
from . import model as spec

_TOML_AT = re.compile(r"\(at line (\d+), column (\d+)\)")
_HEADER = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
_KEY = re.compile(r"""^\s*((?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*')(?:\s*\.\s*(?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*'))*)\s*=""")


def check_spec(path: Path) -> Checked:
    """One spec's findings; a spec that cannot be read or parsed, or is too large to be a spec (/dev/zero, read
    no further than SPEC_BYTES), is one finding: the other specs checked with it are still reported."""
    shown = str(path)
    try:
        raw = read_at_most(path, SPEC_BYTES)
        if len(raw) > SPEC_BYTES:  # no spec at all (a device, a stray large file), whatever its bytes
            return _one(shown, f"is over {say_size(SPEC_BYTES)}: too large for a release spec")
        text = raw.decode("utf-8")
    except FileNotFoundError:
        return _one(shown, "does not exist")
    except (OSError, UnicodeDecodeError) as exc:
        return _one(shown, f"cannot be read ({shorten(str(exc))})")
    try:
        data = spec.parse(text)
    except tomllib.TOMLDecodeError as exc:
        at = _TOML_AT.search(str(exc))
        line, column = (int(at[1]), int(at[2])) if at else (None, None)
        return _one(shown, f"is not valid TOML: {shorten(str(exc))}", line, column)
    except RecursionError:
        return _one(shown, "is nested too deeply to be a release spec")
    lines = key_lines(text)
    if "matrix" in data:
        return _check_matrix(path, data, lines)
    findings = []
    for problem in spec.problems(data):
        line = locate(lines, problem.path)
        findings.append(
            Finding(shown, "", "error", f"{problem.dotted}: {problem.message}", line=line, column=1 if line else None)
        )
    findings += _missing_paths(path, data, lines)
    for (table, old), new in spec.RENAMED_KEYS.items():
        if isinstance(data.get(table), dict) and old in data[table]:
            line = locate(lines, (table, old))
            said = f"[{table}] {old} is deprecated; use [{table}] {new}"
            findings.append(Finding(shown, "", "warning", said, line=line, column=1 if line else None))
    findings.sort(key=lambda f: f.line or 0)
    return Checked("spec", shown, tuple(findings), (shown,))


# The files and folders a spec names, relative to it, that release reads. Inputs too large for git (a checkpoint,
# an adapter, a head) may be fetched by a CI step before convert runs: missing, they are a warning; the small
# files the release repository holds are an error.
FETCHED = (("convert", "checkpoint"), ("convert", "source"), ("convert", "lora"), ("convert", "eagle"))
HELD = (
    ("verify", "prompts"),
    ("convert", "quant_sweep"),
    ("convert", "lookahead"),
    ("card", "pair_report"),
    ("card", "verify_report"),
    ("card", "speculate_reports"),
)


def _missing_paths(path: Path, data: dict[str, Any], lines: dict[tuple[Any, ...], int]) -> list[Finding]:
    """A finding for each local path the spec names that is not there (a URL is no local path)."""
    found = []
    for key in (*FETCHED, *HELD):
        table = data.get(key[0])
        value = table.get(key[1]) if isinstance(table, dict) else None
        for at, item in enumerate(value if isinstance(value, list) else [value]):
            if not isinstance(item, str) or not item or "://" in item or os.path.lexists(path.parent / item):
                continue
            where = (*key, at) if isinstance(value, list) else key
            line = locate(lines, where)
            dotted = ".".join(str(part) for part in where)
            said = f"{dotted}: {shorten(item, 120)!r} does not exist (relative to the spec)"
            if key in FETCHED:
                said += "; convert and release need it there (a CI step may fetch it first)"
            severity: Literal["warning", "error"] = "warning" if key in FETCHED else "error"
            found.append(Finding(str(path), "", severity, said, line=line, column=1 if line else None))
    return found


def _check_matrix(path: Path, data: dict[str, Any], lines: dict[tuple[Any, ...], int]) -> Checked:
    """A matrix spec: the problems of its [matrix] table and of every expansion (each said once, naming its jobs),
    then the paths each job names that are missing."""
    from .matrix import expand

    shown = str(path)
    matrix, problems = expand(data, path)
    findings = [_finding(shown, lines, p.path, f"{p.dotted}: {p.message}") for p in problems]
    if matrix is not None:
        said: dict[tuple[Any, str], list[str]] = {}
        first: dict[tuple[Any, str], Finding] = {}
        for job in matrix.jobs:
            for found in _missing_paths(path, job.spec.data, lines):
                key = (found.severity, found.message)
                said.setdefault(key, []).append(job.id)
                first.setdefault(key, found)
        for key, ids in said.items():
            who = "every job" if len(ids) == len(matrix.jobs) else f"jobs {', '.join(ids)}"
            findings.append(replace(first[key], message=f"{first[key].message} (in {who})"))
    findings.sort(key=lambda f: f.line or 0)
    return Checked("spec", shown, tuple(findings), (shown,), matrix=True)


def _finding(shown: str, lines: dict[tuple[Any, ...], int], where: tuple[Any, ...], said: str) -> Finding:
    line = locate(lines, where)
    return Finding(shown, "", "error", said, line=line, column=1 if line else None)


def _one(shown: str, message: str, line: int | None = None, column: int | None = None) -> Checked:
    return Checked("spec", shown, (Finding(shown, "", "error", message, line=line, column=column),), (shown,))


def key_lines(text: str) -> dict[tuple[Any, ...], int]:
    """Line (1-based) of every table header and key, by its path: ("release", "title"), ("benchmarks", 0)."""
    where: dict[tuple[Any, ...], int] = {}
    table: tuple[Any, ...] = ()
    arrays: dict[tuple[str, ...], int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        header = _HEADER.match(line)
        if header:
            names = _parts(header[2])
            if header[1] == "[[":
                arrays[names] = arrays.get(names, -1) + 1
                table = (*names, arrays[names])
            else:
                table = names
            where.setdefault(table, number)
            continue
        key = _KEY.match(line)
        if key:
            where.setdefault((*table, *_parts(key[1])), number)
    return where


def _parts(dotted: str) -> tuple[str, ...]:
    return tuple(part.strip().strip("\"'") for part in re.split(r"\.(?=(?:[^\"']|\"[^\"]*\"|'[^']*')*$)", dotted))


def locate(lines: dict[tuple[Any, ...], int], path: tuple[Any, ...]) -> int | None:
    """The line of the longest part of `path` the file spells out (a list item is found by its key)."""
    for end in range(len(path), 0, -1):
        if tuple(path[:end]) in lines:
            return lines[tuple(path[:end])]
    return None
