"""The `packager` command line: flags in, library calls, results and exit codes out. The only click package."""

from __future__ import annotations

import json
import os
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import click

from .. import __version__
from ..errors import PackagerError

INTERRUPTED = 130


class PackagerGroup(click.Group):
    """Maps PackagerError to its one line and exit code, Ctrl-C to 130; tracebacks only with --debug."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except PackagerError as exc:
            if _debug(ctx):
                traceback.print_exc()
                if exc.details:
                    click.echo(exc.details, err=True)
            click.echo(f"packager: error: {exc.one_line()}", err=True)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("packager: interrupted; nothing was left half-written", err=True)
            ctx.exit(INTERRUPTED)


def _debug(ctx: click.Context) -> bool:
    return bool((ctx.obj or {}).get("debug"))


class StderrProgress:
    """Prints each long step with the time since the command started."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.start = time.monotonic()

    def __call__(self, stage: str) -> None:
        if not self.quiet:
            click.echo(f"packager: [{time.monotonic() - self.start:6.1f}s] {stage}", err=True)


@click.group(cls=PackagerGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks and tool logs on errors.")
@click.version_option(__version__, prog_name="packager")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Build, check and publish MNN draft-model bundles.

    Example: packager convert ./my-qwen3-draft --out ./bundle
    """
    ctx.obj = {"debug": debug}


def _path(**kwargs: Any) -> click.Path:
    return click.Path(path_type=Path, **kwargs)


def _emit(data: dict[str, Any], as_json: bool, text: Callable[[dict[str, Any]], str]) -> None:
    click.echo(json.dumps(data, indent=2, ensure_ascii=False) if as_json else text(data))


# The commands register themselves on `cli` when their modules are imported.
from . import build, prove, publish  # noqa: E402,F401


def main() -> None:
    # huggingface_hub reads these at import: no telemetry call and no progress bars unless the user asks.
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    cli(prog_name="packager")
