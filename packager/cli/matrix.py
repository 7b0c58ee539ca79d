"""Commands of a matrix release spec: plan (its jobs); release's matrix run (its bars and summary)."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Any

import click

from ..errors import printable
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


# release's options a matrix takes, in the order publish.release passes them (matrix_release's `common`)
COMMON: tuple[str, ...] = ("jobs", "only", "backend", "flavor", "gather_from", "folder", "endpoint", "private")
COMMON += ("token", "as_json", "output", "quiet")


class MatrixBars:
    """On a terminal, an overall bar (jobs finished) and one bar per running job showing its current stage; quiet
    elsewhere (a CI log gets the summary only)."""

    def __init__(self, total: int, quiet: bool) -> None:
        from .progress import stderr_is_terminal

        self.on = not quiet and stderr_is_terminal()
        self.quiet = quiet
        self.bars: dict[str, Any] = {}
        self.free: list[int] = []
        self.lock = threading.Lock()
        self.overall: Any = None
        if self.on:
            from tqdm import tqdm

            self.overall = tqdm(total=total, desc="matrix", unit="job", file=sys.stderr, position=0, leave=True)

    def __call__(self, kind: str, job: str, text: str) -> None:
        if not self.on:
            if kind == "log" and not self.quiet:  # a Hugging Face Job's log line, under its job's id
                click.echo(f"[{job}] {printable(text)}", err=True)
            return
        from tqdm import tqdm

        with self.lock:
            if kind == "start":
                position = self.free.pop(0) if self.free else len(self.bars) + 1
                self.bars[job] = tqdm(
                    total=None, desc=job, bar_format="{desc} [{elapsed}]{postfix}", file=sys.stderr,
                    position=position, leave=False,
                )  # fmt: skip
                self.bars[job].position_ = position
            elif kind == "line" and job in self.bars:
                self.bars[job].set_postfix_str(printable(text)[:60])
            elif kind == "log":
                tqdm.write(f"[{job}] {printable(text)}", file=sys.stderr)
            elif kind in ("done", "skipped"):
                bar = self.bars.pop(job, None)
                if bar is not None:
                    self.free.append(bar.position_)
                    bar.close()
                self.overall.update(1)
                self.overall.set_postfix_str(f"{job} {text or 'released earlier'}")

    def close(self) -> None:
        with self.lock:
            for bar in self.bars.values():
                bar.close()
            if self.overall is not None:
                self.overall.close()


def matrix_options(command: Any) -> Any:
    """release's options for a matrix spec: how many jobs at once, which jobs, and where they run."""
    for decorator in reversed(
        (
            option(
                "--jobs", "-j", metavar="N", type=click.IntRange(1, 64), default=1, help="A matrix: N jobs at once."
            ),
            option("--job", "only", metavar="ID", multiple=True, help="A matrix: release only this job (repeatable)."),
            option(
                "--backend",
                type=click.Choice(["local", "hf-jobs"]),
                default="local",
                help="A matrix: run its jobs here (a process pool) or as Hugging Face Jobs on --endpoint.",
            ),
            option("--flavor", default="cpu-upgrade", help="With --backend hf-jobs: the Jobs hardware flavor."),
            option(
                "--gather",
                "gather_from",
                metavar="DIR",
                type=click.Path(path_type=Path, file_okay=False, exists=True),
                help="A matrix whose jobs ran elsewhere (a CI job each): read their summary.json files under DIR, "
                "update the collection once, write the matrix's summary.",
            ),
        )
    ):
        command = decorator(command)
    return command


def matrix_release(ctx: click.Context, spec_path: Path, bundle: Path | None, dry_run: bool, *common: Any) -> bool:
    """Whether SPEC is a matrix, released here if so (`release`'s options that a matrix cannot take refused).
    `common`: jobs, only, backend, flavor, gather_from, folder, endpoint, private, token, as_json, output, quiet."""
    from ..errors import InvalidOption, SpecError
    from ..spec.model import read

    try:
        data = read(spec_path)
    except SpecError:
        data = {}  # not read as a matrix: the single release says what is wrong with it, as before
    names = COMMON
    options = dict(zip(names, common))
    if "matrix" not in data:
        if options["jobs"] != 1 or options["only"] or options["backend"] != "local" or options["gather_from"]:
            raise InvalidOption(
                "--jobs, --job, --backend and --gather are for a matrix spec ([matrix])",
                "release this spec without them",
            )
        return False
    if bundle is not None or dry_run:
        raise InvalidOption(
            f"{'--bundle' if bundle is not None else '--dry-run'} is for a single release, and {spec_path} is a matrix",
            "packager plan SPEC shows what a matrix would release",
        )
    release_matrix(ctx, spec_path, **options)
    return True


def release_matrix(
    ctx: click.Context,
    spec_path: Path,
    *,
    jobs: int,
    only: tuple[str, ...],
    backend: str,
    flavor: str,
    gather_from: Path | None,
    folder: Path | None,
    endpoint: str | None,
    private: bool,
    token: str | None,
    as_json: bool,
    output: Path | None,
    quiet: bool,
) -> None:
    """`release SPEC` of a matrix spec: every job, `jobs` at a time; the summary beside the journal."""
    from ..bundle.staging import write_atomic
    from ..errors import InvalidOption, MatrixJobsFailed
    from ..release.matrix import gather
    from ..release.matrix.hfjobs import HfJobsOptions
    from ..release.matrix.jobs import Target
    from ..release.matrix.run import MatrixRequest, default_folder, run
    from ..spec import matrix as matrix_spec

    matrix = matrix_spec.load(spec_path)
    unknown = [name for name in only if name not in {j.id for j in matrix.jobs}]
    if unknown:
        raise InvalidOption(f"--job {unknown[0]} is no job of the matrix", "packager plan SPEC lists them")
    target, remote = Target(endpoint, token, private), HfJobsOptions(flavor=flavor)
    request = MatrixRequest(matrix, folder or default_folder(matrix), target, jobs, only, backend, remote)
    if gather_from is not None:
        result = gather.gathered(matrix, request.folder, target, gather_from)
    else:
        bars = MatrixBars(len(only) or len(matrix.jobs), quiet)
        try:
            result = run(request, bars)
        finally:
            bars.close()
    data = gather.summary(result, endpoint)
    request.folder.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data, indent=2) + "\n"
    write_atomic(request.folder / "summary.json", text.encode("utf-8"))
    write_atomic(request.folder / "summary.md", gather.markdown(data).encode("utf-8"))
    if output is not None:
        write_atomic(output, text.encode("utf-8"))
    click.echo(text.rstrip() if as_json else gather.markdown(data).rstrip())
    if result.failed:
        error = MatrixJobsFailed(f"{len(result.failed)} of {len(result.outcomes)} jobs failed: " + "; ".join(
            f"{o.job}: {o.error}" for o in result.failed))  # fmt: skip
        click.echo(f"packager: error: {printable(error.one_line())}", err=True)
        ctx.exit(error.exit_code)
    if result.collection_error is not None:
        raise result.collection_error
