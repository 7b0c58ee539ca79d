"""A matrix release spec: a release spec with a `[matrix]` table (schemas/matrix.schema.json) whose axes expand it
into plain per-bundle release specs, one per job, each checked as a release.toml is."""

from __future__ import annotations

import copy
import itertools
import os
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import resources
from ..errors import MatrixInvalid, shorten
from . import model
from .rules import SpecProblem, message

MAX_JOBS = 1024  # a matrix is a publisher's dozens of bundles; more is a typo in an axis
REVISION = "main"  # a release commits to main and tags it with [release] version


@dataclass(frozen=True)
class Job:
    """One bundle of the matrix: its stable id (its value names joined in axis order) and its plain spec."""

    id: str
    axes: tuple[tuple[str, str], ...]  # (axis, value name), in the matrix's axis order
    spec: model.ReleaseSpec

    @property
    def release(self) -> model.Release:
        release: model.Release = self.spec.need("release")
        return release

    @property
    def repo_id(self) -> str:
        return self.release.repo_id

    @property
    def target(self) -> str:
        """Where it publishes: the repo, the revision it commits to and the tag."""
        return f"{self.repo_id}@{REVISION} (tag {self.release.version})"

    @property
    def group(self) -> str:
        """The jobs of one group share a checkpoint (and so its graph): the first builds it, the others reuse it."""
        checkpoint = self.spec.convert.checkpoint
        return os.path.normpath(checkpoint) if checkpoint is not None else f"bundle:{self.id}"


@dataclass(frozen=True)
class Matrix:
    path: Path
    axes: tuple[tuple[str, tuple[str, ...]], ...]  # each axis and its value names
    jobs: tuple[Job, ...]
    excluded: int  # combinations the excludes left out

    def job(self, job_id: str) -> Job:
        return next(j for j in self.jobs if j.id == job_id)


def is_matrix(data: dict[str, Any]) -> bool:
    return "matrix" in data


def load(path: Path) -> Matrix:
    """A matrix spec expanded into its jobs; any problem is one MatrixInvalid line (check-spec names them all)."""
    data = model.read(path)
    if not is_matrix(data):
        raise MatrixInvalid(f"{path} has no [matrix] table", "add one, or release it with packager release alone")
    matrix, found = expand(data, path)
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise MatrixInvalid(f"{path}: {found[0].dotted}: {found[0].message}{more}")
    assert matrix is not None
    return matrix


def expand(data: dict[str, Any], path: Path) -> tuple[Matrix | None, list[SpecProblem]]:
    """The matrix and every problem of it: the [matrix] table's own (schema, templates, excludes), then each
    expansion's as a release spec (said once for all the jobs that share it), then two jobs with one repo."""
    table = data["matrix"]
    validator = resources.validator("matrix")
    errors = sorted(validator.iter_errors(table), key=lambda e: (list(map(str, e.absolute_path)), e.message))
    found = [SpecProblem(("matrix", *e.absolute_path), message(e)) for e in errors]
    if found:
        return None, found
    axes = tuple((axis, tuple(v["name"] for v in values)) for axis, values in table["axes"].items())
    found += _name_problems(axes) + _template_problems(table, axes) + _exclude_problems(table, axes)
    if found:
        return None, found
    combos = [tuple(zip((a for a, _ in axes), names)) for names in itertools.product(*(n for _, n in axes))]
    kept = [c for c in combos if not _excluded(c, table.get("exclude", ()))]
    if not kept:
        return None, [SpecProblem(("matrix", "exclude"), "leaves out every combination: the matrix has no job")]
    if len(kept) > MAX_JOBS:
        return None, [SpecProblem(("matrix", "axes"), f"expands to {len(kept)} jobs, more than {MAX_JOBS}")]
    base = {k: v for k, v in data.items() if k != "matrix"}
    jobs: list[tuple[str, tuple[tuple[str, str], ...], dict[str, Any]]] = []
    by_problem: dict[tuple[tuple[str | int, ...], str], list[str]] = {}
    for combo in kept:
        values = {axis: next(v for v in table["axes"][axis] if v["name"] == name) for axis, name in combo}
        job_data = _job_data(base, table, combo, values)
        job_id = "-".join(name for _, name in combo)
        for problem in model.problems(job_data):
            by_problem.setdefault((problem.path, problem.message), []).append(job_id)
        jobs.append((job_id, combo, job_data))
    for (where, said), ids in by_problem.items():
        who = "every job" if len(ids) == len(jobs) else f"job{'s' if len(ids) > 1 else ''} {_names(ids)}"
        found.append(SpecProblem(where, f"{said} (in {who})"))
    if found:
        return None, found
    built = tuple(Job(job_id, combo, model.from_dict(d, path)) for job_id, combo, d in jobs)
    found += _clashes(built)
    if found:
        return None, found
    return Matrix(path, axes, built, len(combos) - len(kept)), []


def _names(ids: list[str], most: int = 4) -> str:
    shown = ", ".join(ids[:most])
    return shown + (f" and {len(ids) - most} more" if len(ids) > most else "")


def _name_problems(axes: tuple[tuple[str, tuple[str, ...]], ...]) -> list[SpecProblem]:
    found = []
    for axis, names in axes:
        for name in sorted({n for n in names if names.count(n) > 1}):
            found.append(SpecProblem(("matrix", "axes", axis), f"names the value {name!r} twice"))
    return found


def _fields(template: str) -> list[str] | None:
    """The {axis} fields of a template; None if it is no template string.format reads."""
    try:
        return [name for _, name, spec, conv in string.Formatter().parse(template) if name is not None]
    except ValueError:
        return None


def _template_problems(table: dict[str, Any], axes: tuple[tuple[str, tuple[str, ...]], ...]) -> list[SpecProblem]:
    known = {axis for axis, _ in axes}
    found = []
    for key in ("repo_id", "title", "summary"):
        if key not in table:
            continue
        names = _fields(table[key])
        if names is None:
            found.append(SpecProblem(("matrix", key), f"{shorten(repr(table[key]), 80)} has an unmatched {{ or }}"))
            continue
        for name in names:
            if name not in known:
                said = f"{{{name}}} names no axis (the axes: {', '.join(sorted(known))})"
                found.append(SpecProblem(("matrix", key), said))
    return found


def _exclude_problems(table: dict[str, Any], axes: tuple[tuple[str, tuple[str, ...]], ...]) -> list[SpecProblem]:
    values = dict(axes)
    found = []
    for at, entry in enumerate(table.get("exclude", ())):
        for axis, name in entry.items():
            if axis not in values:
                found.append(SpecProblem(("matrix", "exclude", at, axis), "is no axis of the matrix"))
            elif name not in values[axis]:
                said = f"{name!r} is no value of the axis {axis} ({', '.join(values[axis])})"
                found.append(SpecProblem(("matrix", "exclude", at, axis), said))
    return found


def _excluded(combo: tuple[tuple[str, str], ...], excludes: Any) -> bool:
    chosen = dict(combo)
    return any(all(chosen.get(axis) == name for axis, name in entry.items()) for entry in excludes)


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _job_data(
    base: dict[str, Any], table: dict[str, Any], combo: tuple[tuple[str, str], ...], values: dict[str, Any]
) -> dict[str, Any]:
    data = copy.deepcopy(base)
    for axis, _ in combo:
        data = _merge(data, {k: v for k, v in values[axis].items() if k != "name"})
    names = dict(combo)
    release = dict(data.get("release", {}))
    release["repo_id"] = table["repo_id"].format_map(names)
    release["title"] = table["title"].format_map(names)
    if "summary" in table:
        release["summary"] = table["summary"].format_map(names)
    data["release"] = release
    return data


def _clashes(jobs: tuple[Job, ...]) -> list[SpecProblem]:
    """Two jobs committing to one repo's main branch would overwrite each other's release."""
    by_repo: dict[str, list[str]] = {}
    for job in jobs:
        by_repo.setdefault(job.repo_id.lower(), []).append(job.id)
    return [
        SpecProblem(("matrix", "repo_id"), f"jobs {_names(ids)} all publish to {repo}@{REVISION}: one repo per job")
        for repo, ids in by_repo.items()
        if len(ids) > 1
    ]
