"""Commands of a matrix release spec: plan (its jobs)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from . import cli
from .options import json_option, option, spec_argument


@cli.command()
@spec_argument()
@json_option
@option(
    "--chunk",
    metavar="N",
    type=click.IntRange(min=0),
    help="With --json: only the Nth slice of --chunk-size jobs (0-based), for CI matrices that hold at most 256.",
)
@option("--chunk-size", metavar="K", type=click.IntRange(1, 256), default=256, help="Jobs per chunk.")
@option("--chunks", "list_chunks", is_flag=True, help="Print the chunk numbers as a JSON list (for a CI matrix).")
def plan(spec_path: Path, as_json: bool, chunk: int | None, chunk_size: int, list_chunks: bool) -> None:
    """Print the jobs a matrix release spec expands to: each one's stable id, what it builds and where it publishes.

    --json prints {"include": [...]} on one line, what GitHub Actions' fromJSON takes as a job matrix. Nothing is
    built or sent. A matrix that cannot expand exits 62 naming its first problem (check-spec names them all).

    Example: packager plan matrix.toml

    Example: packager plan matrix.toml --json --chunk 0
    """
    from ..spec import matrix as matrix_spec
    from ..spec import plan as planning

    matrix = matrix_spec.load(spec_path)
    if list_chunks:
        click.echo(json.dumps(planning.chunks(matrix, chunk_size)))
    elif as_json:
        click.echo(json.dumps(planning.github(matrix, chunk, chunk_size), separators=(",", ":")))
    else:
        click.echo(table(planning.rows(matrix), matrix.excluded))


def table(rows: list[dict[str, object]], excluded: int) -> str:
    heads = ("job", "builds", "checkpoint", "publishes to")
    cells = [
        (str(r["id"]), str(r["builds"]), str(r["checkpoint"] or "-"), f"{r['repo_id']}@{r['revision']} tag {r['tag']}")
        for r in rows
    ]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(heads)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(heads, widths)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(cell, widths)).rstrip() for cell in cells]
    left = f", {excluded} excluded" if excluded else ""
    lines.append(f"{len(rows)} job{'s' if len(rows) != 1 else ''}{left}")
    return "\n".join(lines)
