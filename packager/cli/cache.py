"""`packager cache`: the graph cache of the streaming converter and the target cache of pair and quant-sweep."""

from __future__ import annotations

import json
import time
from collections import Counter

import click

from . import cli
from .options import json_option


@cli.group()
def cache() -> None:
    """Inspect or empty packager's caches: graphs (built once per model shape and quantization) and targets (a
    target's greedy continuations and argmaxes, per prompt, for pair and quant-sweep).

    Both live side by side, as graphs/ and targets/, in $PACKAGER_CACHE_DIR, else $XDG_CACHE_HOME/packager, else
    ~/.cache/packager. Graph entries an older packager kept directly in $PACKAGER_CACHE_DIR move into
    $PACKAGER_CACHE_DIR/graphs the first time packager uses the cache (its targets/ was already in place).

    Example: packager cache ls
    """


@cache.command("ls")
@json_option
def cache_ls(as_json: bool) -> None:
    """List both caches' entries, most recently used first (target entries grouped by target).

    Example: packager cache ls --json
    """
    from ..convert.stream import graphcache
    from ..measure.pair import targetcache

    graphs, targets = graphcache.entries(), targetcache.entries()
    if as_json:
        click.echo(
            json.dumps(
                {
                    "graphs": [
                        {"key": e.key, "bytes": e.size, "last_used": e.last_used, "describe": e.describe}
                        for e in graphs
                    ],
                    "targets": [
                        {"key": e.key, "bytes": e.size, "last_used": e.last_used, "target": e.describe} for e in targets
                    ],
                },
                indent=2,
            )
        )
        return
    click.echo(f"{graphcache.root()}: {len(graphs)} graph entries, {sum(e.size for e in graphs) / 1e6:.1f} MB")
    for entry in graphs:
        used = time.strftime("%Y-%m-%d %H:%M", time.localtime(entry.last_used))
        click.echo(f"{entry.key[:12]}  {entry.size / 1e6:7.1f} MB  {used}  {entry.describe}")
    click.echo(f"{targetcache.root()}: {len(targets)} target prompts, {sum(e.size for e in targets) / 1e6:.1f} MB")
    for target, count in Counter(e.describe for e in targets).most_common():
        click.echo(f"{count:6} prompts  {target}")


@cache.command("clear")
@json_option
def cache_clear(as_json: bool) -> None:
    """Remove every entry of both caches; the next conversion of each shape builds its graph again, and the next
    pair decodes its target again.

    Example: packager cache clear --json
    """
    from ..convert.stream import graphcache
    from ..measure.pair import targetcache

    removed = {
        name: {"root": str(module.root()), "removed": module.clear()}
        for name, module in (("graphs", graphcache), ("targets", targetcache))
    }
    if as_json:
        click.echo(json.dumps({"ok": True, **removed}, indent=2))
        return
    for each in removed.values():
        click.echo(f"removed {each['removed']} entries from {each['root']}")
