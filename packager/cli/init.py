"""`packager init`: a release repository for a new draft, started from its checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..errors import printable
from . import _path, cli
from .options import checkpoint_option, json_option, lora_option, option


@cli.command()
@click.argument("folder", metavar="DIR", type=_path())
@checkpoint_option("The draft's checkpoint: its facts go into release.toml.", old=("--from",))
@lora_option("The peft LoRA adapter merged into the checkpoint.")
@option(
    "--repo-id",
    metavar="NAMESPACE/NAME",
    show_default="a TODO in release.toml",
    help="The Hub repo to release to, namespace/name.",
)
@option(
    "--hook-repo",
    metavar="GIT_URL",
    show_default="where pip installed packager from, if a git URL; else hooks that run the packager on PATH",
    help="packager's https git URL for .pre-commit-config.yaml (with --hook-rev).",
)
@option(
    "--hook-rev",
    metavar="COMMIT",
    show_default="the commit pip installed",
    help="A full commit id of --hook-repo (a branch or tag can be moved; refused).",
)
@option(
    "--packager-source",
    metavar="GIT_URL@COMMIT|WHEEL",
    show_default="where pip installed packager from, if a git URL with a commit; else a TODO the CI jobs stop on",
    help="What the CI files install packager from: git+URL@<full commit id>, or the path of a "
    "mnn_packager-*.whl inside DIR.",
)
@option(
    "--matrix",
    is_flag=True,
    help="The GitHub workflow for a release matrix ([matrix] in release.toml): a plan job, the jobs in matrices "
    "of at most 256, a gather job that updates the collection once.",
)
@json_option
def init(
    folder: Path,
    checkpoint: Path | None,
    lora: Path | None,
    repo_id: str | None,
    hook_repo: str | None,
    hook_rev: str | None,
    packager_source: str | None,
    matrix: bool,
    as_json: bool,
) -> None:
    """Start a release repository for a new draft in DIR.

    Writes release.toml (what the checkpoint and adapter state filled in, what only you know as TODO values
    the schema refuses), a Makefile (check, validate, card, dry-run, release), .pre-commit-config.yaml,
    .github/workflows/release.yml, .gitlab-ci.yml and, where DIR has none, a .gitignore for dist/. Never
    overwrites a file; refuses a DIR inside the checkpoint or the adapter. The CI files install packager from
    an exact source (a git commit or a wheel), never a bare package name.

    Example: packager init ./my-draft-release --checkpoint ./qwen3-draft --lora ./adapter --repo-id me/qwen3-draft-mnn

    Example: packager init ./my-draft-release --checkpoint ./qwen3-draft --json
    """
    from ..release.init.scaffold import InitRequest
    from ..release.init.scaffold import init as run_init

    adapter = lora
    if adapter is not None and checkpoint is None:
        raise click.UsageError("--lora needs --checkpoint (the checkpoint the adapter was trained on)")
    if repo_id is not None:
        from ..errors import InvalidOption
        from ..hub.names import repo_id_problem

        if (problem := repo_id_problem(repo_id)) is not None:
            raise InvalidOption(f"--repo-id: {problem}", "give the Hub repo as namespace/name")
    result = run_init(
        InitRequest(
            folder=folder,
            checkpoint=checkpoint,
            adapter=adapter,
            repo_id=repo_id,
            hook_repo=hook_repo,
            hook_rev=hook_rev,
            packager_source=packager_source,
            matrix=matrix,
        )
    )
    if as_json:
        click.echo(
            json.dumps(
                {
                    "ok": True,
                    "folder": str(result.folder),
                    "written": list(result.written),
                    "kept": list(result.kept),
                    "ci_source": result.ci_source,  # null: a TODO in the CI files
                    "todos": list(result.todos),  # release.toml's fields still to fill in
                },
                indent=2,
                ensure_ascii=False,
            )
        )
        return
    for name in result.written:
        click.echo(f"wrote {printable(result.folder / name)}")
    for name in result.kept:
        click.echo(
            f"kept {printable(result.folder / name)} as it was (add /dist/ to it: the built bundle stays out of git)"
        )
    if result.ci_source is None:
        click.echo(
            "left for you in the CI files: PACKAGER_REQUIREMENT, what CI installs packager from (packager's "
            "git URL pinned to a commit; or rerun init in a fresh folder with --packager-source)"
        )
    if result.todos:
        click.echo(
            f"left for you in release.toml: {', '.join(result.todos)} "
            f"(packager check-spec {printable(result.folder / 'release.toml')} names what is still open)"
        )
