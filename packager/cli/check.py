"""Commands that check without building: validate (bundles) and check-spec (release specs)."""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import VALIDATION_FAILED, SpecError
from . import StderrProgress, _path, chosen_format, cli, emit_report, format_option
from .options import option, quiet_option, spec_argument

DEFAULT_SPEC = Path("release.toml")


@cli.command()
@click.argument("bundles", metavar="BUNDLE...", nargs=-1, required=True, type=_path())
@option(
    "--from-files",
    "from_files",
    is_flag=True,
    old=("--files",),  # pull's --files chooses which files; here the arguments are files
    help="The arguments are files (as pre-commit passes them): validate every bundle folder they belong "
    "to; a file in no bundle folder is skipped.",
)
@format_option
@option("--json", "as_json", is_flag=True, help="Same as --format json.")
@click.option("--strict", is_flag=True, help="Fail on warnings too.")
@quiet_option
@click.pass_context
def validate(
    ctx: click.Context,
    bundles: tuple[Path, ...],
    from_files: bool,
    fmt: str | None,
    as_json: bool,
    strict: bool,
    quiet: bool,
) -> None:
    """Check bundles: JSON syntax, schemas, unknown keys, completeness, cross-file consistency, checksums.

    Every finding of every bundle is reported at once. Exit 0 when there is no error (warnings allowed unless
    --strict), 30 otherwise.

    Example: packager validate ./bundle --strict

    Example: packager validate --from-files --format github dist/draft/config.json dist/draft/llm.mnn
    """
    from ..validate.checks import check_bundles

    with StderrProgress(quiet, lines=False) as progress:  # a bar on a terminal; hooks and CI logs stay as they were
        report = check_bundles(bundles, from_files=from_files, strict=strict, progress=progress)
    emit_report(report, chosen_format(fmt, as_json))
    if not report.ok():
        ctx.exit(VALIDATION_FAILED)


@cli.command("check-spec")
@spec_argument(nargs=-1)
@format_option
@option("--json", "as_json", is_flag=True, help="Same as --format json.")
@click.pass_context
def check_spec(ctx: click.Context, specs: tuple[Path, ...], fmt: str | None, as_json: bool) -> None:
    """Check release specs without touching a Hub: schema, TODOs left by init, training figures.

    Every problem of every spec at once, with its line. Exit 0 when all pass, 17 otherwise (62 when only matrix
    specs failed: every expansion is checked, and no two jobs may publish to one repo). Without arguments,
    ./release.toml.

    Example: packager check-spec release.toml --format github
    """
    from ..validate.checks import check_specs

    if not specs and not DEFAULT_SPEC.is_file():
        raise SpecError("there is no release.toml here", "name the release specs to check")
    report = check_specs(specs or (DEFAULT_SPEC,))
    emit_report(report, chosen_format(fmt, as_json))
    if not report.ok():
        from ..errors import MATRIX_INVALID

        failed = [c for c in report.checked if any(f.severity == "error" for f in c.findings)]
        ctx.exit(MATRIX_INVALID if all(c.matrix for c in failed) else SpecError.exit_code)
