"""`packager engines`: prove a bundle in the real MNN engines an app may ship (each from PyPI, cached)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from ..errors import ENGINES_CHECK_FAILED
from . import StderrProgress, _emit, _path, cli
from .options import json_option, option, quiet_option


@cli.group()
def engines() -> None:
    """Check bundles in real MNN engines, each installed from PyPI into its own cached environment.

    The environments live in $PACKAGER_ENGINES_DIR, else $XDG_CACHE_HOME/packager/engines, else
    ~/.cache/packager/engines; your own Python environment is never touched.

    Example: packager engines check ./bundle --versions 3.4.1,3.6.1
    """


@engines.command("check")
@click.argument("bundle", type=_path())
@option(
    "--versions",
    "versions",
    metavar="V1,V2,...",
    show_default="all",
    help="MNN releases on PyPI to check (3.0.0 3.1.0 3.2.0 3.4.0 3.4.1 3.5.0 3.6.0 3.6.1).",
)
@click.option(
    "--record", is_flag=True, help="Store the table in BUNDLE.provenance.json, where `packager card` finds it."
)
@quiet_option
@json_option
@click.pass_context
def engines_check(
    ctx: click.Context, bundle: Path, versions: str | None, record: bool, quiet: bool, as_json: bool
) -> None:
    """Load BUNDLE in each MNN version and compare next-token logits with the current engine's.

    Each engine runs in a child process of its own environment; a crash is a result ("does not load:
    SIGSEGV while ..."). Exit 0 when every checked version at or above the bundle's declared minimum
    engine loads it and agrees (cosine >= 0.99 and the same top-1 token on every prompt), 32 otherwise. For a
    target+dflash bundle each engine's row also says what it does with the draft (MNN 3.6.0 and 3.6.1 are lossless
    only on an engine's first response), and an engine past the DFlash format packager writes is refused.

    Example: packager engines check ./bundle --versions 3.4.1,3.6.1 --record
    """
    from ..measure.engines.check import check, is_dflash, requested_versions
    from ..measure.engines.record import store

    with StderrProgress(quiet) as progress:
        report = check(bundle, requested_versions(versions, is_dflash(bundle)), report=progress)
    data = report.as_dict()
    if record:
        data["recorded_in"] = str(store(report))
    _emit(data, as_json, _table)
    if report.failures():
        ctx.exit(ENGINES_CHECK_FAILED)


def _table(data: dict[str, Any]) -> str:
    lines = [
        f"bundle: {data['bundle']} (declares MNN >= {data['declared_min_engine'] or 'nothing'}; "
        f"compared with MNN {data['reference_engine']})",
        "",
        "| MNN | loads | logits agree | min cosine | top-1 | same token ids | |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in data["results"]:
        cosine = "" if r["min_cosine"] is None else f"{r['min_cosine']:.4f}"
        top1 = "" if r["top1"] is None else f"{r['top1']}/{r['prompts']}"
        same = "" if r["same_ids"] is None else f"{r['same_ids']}/{r['prompts']}"
        agree = "" if r["agrees"] is None else ("yes" if r["agrees"] else "NO")
        lines.append(
            f"| {r['version']} | {'yes' if r['loads'] else 'no'} | {agree} | {cosine} | {top1} | {same} | "
            f"{'; '.join([r['reason'], *r.get('notes', ())] if r['reason'] else r.get('notes', ()))} |"
        )
    if data.get("recorded_in"):
        lines.append(f"\nrecorded in {data['recorded_in']}")
    return "\n".join(lines)


@engines.command("ls")
@json_option
def engines_ls(as_json: bool) -> None:
    """List the engine environments packager has installed.

    Example: packager engines ls
    """
    from ..measure.engines import venvs

    found = [{"version": e.version, "path": str(e.path)} for e in venvs.installed()]
    if as_json:
        click.echo(json.dumps(found, indent=2))
        return
    click.echo(f"{venvs.root()}: {len(found)} engines")
    for entry in found:
        click.echo(f"MNN {entry['version']}  {entry['path']}")
