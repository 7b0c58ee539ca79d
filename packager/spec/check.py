"""`check-spec`: every problem of a release spec at once (schema, placeholders, figure rules), with its line."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from ..errors import InputTooLarge, shorten
from ..infra.userfile import SPEC_BYTES, read_at_most, say_size
from ..report import Checked
from ..report.findings import Finding
from . import model as spec

_TOML_AT = re.compile(r"\(at line (\d+), column (\d+)\)")
_HEADER = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
_KEY = re.compile(r"""^\s*((?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*')(?:\s*\.\s*(?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*'))*)\s*=""")


def check_spec(path: Path) -> Checked:
    """One spec's findings; a spec that cannot be read or parsed is one finding, one too large to be a spec
    (/dev/zero) an InputTooLarge."""
    shown = str(path)
    try:
        raw = read_at_most(path, SPEC_BYTES)
        text = raw.decode("utf-8")
    except FileNotFoundError:
        return _one(shown, "does not exist")
    except (OSError, UnicodeDecodeError) as exc:
        return _one(shown, f"cannot be read ({shorten(str(exc))})")
    if len(raw) > SPEC_BYTES:  # no spec at all (a device, a stray large file): an input error, not a finding
        raise InputTooLarge(
            f"release spec {shorten(shown, 120)} is over {say_size(SPEC_BYTES)}: too large for a release spec"
        )
    try:
        data = spec.parse(text)
    except tomllib.TOMLDecodeError as exc:
        at = _TOML_AT.search(str(exc))
        line, column = (int(at[1]), int(at[2])) if at else (None, None)
        return _one(shown, f"is not valid TOML: {shorten(str(exc))}", line, column)
    except RecursionError:
        return _one(shown, "is nested too deeply to be a release spec")
    lines = key_lines(text)
    findings = []
    for problem in spec.problems(data):
        line = locate(lines, problem.path)
        findings.append(
            Finding(shown, "", "error", f"{problem.dotted}: {problem.message}", line=line, column=1 if line else None)
        )
    for (table, old), new in spec.RENAMED_KEYS.items():
        if isinstance(data.get(table), dict) and old in data[table]:
            line = locate(lines, (table, old))
            said = f"[{table}] {old} is deprecated; use [{table}] {new}"
            findings.append(Finding(shown, "", "warning", said, line=line, column=1 if line else None))
    findings.sort(key=lambda f: f.line or 0)
    return Checked("spec", shown, tuple(findings), (shown,))


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
