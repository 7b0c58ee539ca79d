"""`packager hub serve`: the local Hub-compatible server, to rehearse releases offline."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from ..errors import InvalidOption
from . import _path, cli
from .options import option, seconds


@cli.group()
def hub() -> None:
    """A local Hub-compatible server, to rehearse releases offline.

    Example: PACKAGER_HUB_TOKEN=secret packager hub serve --root ./hub-data --port 8765
    """


@hub.command("serve")
@option(
    "--root",
    metavar="DIR",
    type=_path(file_okay=False),
    default=Path("hub-data"),
    help="Where repos and objects are stored (kept across restarts).",
)
@option("--host", default="127.0.0.1", help="The address to listen on.")
@option("--port", type=int, default=8765, help="0 picks a free port.")
@click.option(
    "--token",
    "tokens",
    metavar="TOKEN",
    multiple=True,
    envvar="PACKAGER_HUB_TOKEN",
    help="A token allowed to write (repeatable; also $PACKAGER_HUB_TOKEN, space-separated). USER:TOKEN "
    "makes it USER's, who then writes only the namespace USER; a plain TOKEN is the user `local`'s, "
    "who writes every other namespace.",
)
@click.option(
    "--token-file",
    "token_files",
    metavar="FILE",
    multiple=True,
    type=_path(dir_okay=False, exists=True),
    help="A file of write tokens, one a line, TOKEN or USER:TOKEN (keeps them out of `ps`).",
)
@click.option(
    "--read-token",
    "read_tokens",
    metavar="TOKEN",
    multiple=True,
    envvar="PACKAGER_HUB_READ_TOKEN",
    help="A token allowed to read only (repeatable; also $PACKAGER_HUB_READ_TOKEN).",
)
@click.option(
    "--read-token-file",
    "read_token_files",
    metavar="FILE",
    multiple=True,
    type=_path(dir_okay=False, exists=True),
    help="A file of read-only tokens, one a line.",
)
@option(
    "--body-timeout",
    type=seconds(3600),
    metavar="SECONDS",
    default=30.0,
    help="Seconds a request body may send nothing before the request is abandoned (408).",
)
@click.option("--test-hooks", is_flag=True, help="Enable /_faults and /_stats (fault injection for tests).")
@click.option(
    "--run-jobs",
    is_flag=True,
    help="Answer the Jobs API (run_job, inspect_job, fetch_job_logs) by running each job's command on this machine, "
    "in ROOT/jobs/ID, as a write token's owner asks: rehearse release --backend hf-jobs offline.",
)
@option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print the result as JSON on stdout: once serving, one line {"url", "root", "removed"} (the port '
    "--port 0 picked is in url).",
)
def hub_serve(
    root: Path,
    host: str,
    port: int,
    tokens: tuple[str, ...],
    token_files: tuple[Path, ...],
    read_tokens: tuple[str, ...],
    read_token_files: tuple[Path, ...],
    body_timeout: float,
    test_hooks: bool,
    run_jobs: bool,
    as_json: bool,
) -> None:
    """Serve the Hub API on HOST:PORT until interrupted (plain LFS, no Xet).

    Example: PACKAGER_HUB_TOKEN=secret packager hub serve --root ./hub-data --port 8765

    Example: PACKAGER_HUB_TOKEN=secret packager hub serve --port 0 --json
    """
    import asyncio

    from ..hub.local.server import serve
    from ..hub.local.state import HubConfig

    writers = frozenset(tokens) | _tokens_from(token_files)
    if not writers:
        raise click.UsageError("give at least one write token (--token-file, $PACKAGER_HUB_TOKEN or --token)")
    config = HubConfig(
        root=root,
        write_tokens=writers,
        read_tokens=frozenset(read_tokens) | _tokens_from(read_token_files),
        test_hooks=test_hooks,
        run_jobs=run_jobs,
        body_idle_seconds=body_timeout,
    )

    def announce(url: str, removed: int) -> None:
        cleaned = f"; removed {removed} partial upload(s) a crash left" if removed else ""
        if as_json:  # one line: a script reads it as soon as the Hub serves
            click.echo(json.dumps({"ok": True, "url": url, "root": str(root), "removed": removed}))
        else:
            click.echo(f"packager hub: serving {url} (root {root}){cleaned}")
        sys.stdout.flush()

    try:
        asyncio.run(serve(config, host, port, announce))
    except OSError as exc:
        raise InvalidOption(
            f"cannot serve on {host}:{port}: {exc.strerror or exc}",
            "choose another --port (0 picks a free one) or --host",
        ) from None


def _tokens_from(files: tuple[Path, ...]) -> frozenset[str]:
    from ..errors import InvalidOption
    from ..infra.userfile import TOKEN_BYTES, read_text

    lines = (
        line.strip()
        for path in files
        for line in read_text(path, TOKEN_BYTES, what="token file", unreadable=InvalidOption).splitlines()
    )
    return frozenset(line for line in lines if line and not line.startswith("#"))
