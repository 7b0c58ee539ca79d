"""`packager plan`: a matrix's jobs as rows (stable id, what each builds, where it publishes), the GitHub Actions
matrix `fromJSON` takes, and chunks of it (a GitHub matrix runs at most 256 jobs)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .matrix import REVISION, Job, Matrix

GITHUB_MAX_JOBS = 256  # what one GitHub Actions matrix may hold


def builds(job: Job) -> str:
    """What the job builds, in a few words: its kind, recipe, engine floor and extras."""
    convert = job.spec.convert
    parts = [convert.kind or "draft"]
    if convert.quant_bits is not None:
        parts.append(f"{convert.quant_bits}-bit" + (f" block {convert.quant_block}" if convert.quant_block else ""))
    if convert.algorithm:
        parts.append(convert.algorithm)
    if convert.lm_bits is not None:
        parts.append(f"lm_head {convert.lm_bits}-bit")
    if convert.engine:
        parts.append(f"MNN >= {convert.engine}")
    if convert.eagle is not None:
        parts.append("+EAGLE-3")
    if convert.lookahead:
        parts.append("+lookahead")
    return ", ".join(parts)


def _shown(path: Path | None, base: Path) -> str | None:
    if path is None:
        return None
    try:
        return os.path.relpath(path, base)
    except ValueError:
        return str(path)


def row(job: Job, base: Path) -> dict[str, Any]:
    release = job.release
    return {
        "id": job.id,
        "axes": dict(job.axes),
        "checkpoint": _shown(job.spec.convert.checkpoint, base),
        "builds": builds(job),
        "repo_id": release.repo_id,
        "revision": REVISION,
        "tag": release.version,
        "title": release.title,
    }


def rows(matrix: Matrix) -> list[dict[str, Any]]:
    base = matrix.path.parent
    return [row(job, base) for job in matrix.jobs]


def github(matrix: Matrix, chunk: int | None = None, size: int = GITHUB_MAX_JOBS) -> dict[str, Any]:
    """{"include": [...]}: what `strategy.matrix: ${{ fromJSON(...) }}` takes (nothing beside include, or GitHub
    would read it as one more axis). With `chunk`, only that slice of `size` jobs (0-based)."""
    found = rows(matrix)
    if chunk is not None:
        found = found[chunk * size : (chunk + 1) * size]
    return {"include": [{**r["axes"], "job": r["id"], "repo_id": r["repo_id"], "tag": r["tag"]} for r in found]}


def chunks(matrix: Matrix, size: int = GITHUB_MAX_JOBS) -> list[int]:
    """The chunk numbers a matrix of this many jobs needs (one GitHub matrix each)."""
    return list(range((len(matrix.jobs) + size - 1) // size))
