"""`packager cache`: the graph cache of the streaming converter."""

from __future__ import annotations

import json
import time

import click

from . import cli


@cli.group()
def cache() -> None:
    """Inspect or empty the graph cache (graphs built once per model shape and quantization).

    It lives in $PACKAGER_CACHE_DIR, else $XDG_CACHE_HOME/packager/graphs, else ~/.cache/packager/graphs.

    Example: packager cache ls
    """


@cache.command("ls")
@click.option("--json", "as_json", is_flag=True, help="Print the entries as JSON.")
def cache_ls(as_json: bool) -> None:
    """List the cache's entries, most recently used first.

    Example: packager cache ls --json
    """
    from ..convert import graphcache

    found = graphcache.entries()
    if as_json:
        click.echo(json.dumps([{"key": e.key, "bytes": e.size, "last_used": e.last_used, "describe": e.describe}
                               for e in found], indent=2))
        return
    click.echo(f"{graphcache.root()}: {len(found)} entries, {sum(e.size for e in found) / 1e6:.1f} MB")
    for entry in found:
        used = time.strftime("%Y-%m-%d %H:%M", time.localtime(entry.last_used))
        click.echo(f"{entry.key[:12]}  {entry.size / 1e6:7.1f} MB  {used}  {entry.describe}")


@cache.command("clear")
def cache_clear() -> None:
    """Remove every entry; the next conversion of each shape builds its graph again.

    Example: packager cache clear
    """
    from ..convert import graphcache

    click.echo(f"removed {graphcache.clear()} entries from {graphcache.root()}")
