"""`packager card`: the model card (README.md) from the release spec, the bundle's files and measurements."""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import printable
from . import _emit, _path, cli
from .options import json_option, load_spec, option, output_option, spec_option


@cli.command()
@click.argument("bundle", type=_path())
@spec_option(required=True)
@output_option("Where to write the card; - for stdout.", show_default="BUNDLE/README.md")
@click.option("--template", type=_path(exists=True, dir_okay=False), help="Your own Jinja2 template.")
@option(
    "--pair",
    "pair_report",
    type=_path(exists=True, dir_okay=False),
    show_default="the spec's [card] pair_report",
    help="A `packager pair --json` report of this draft with a target, to state on the card and as Hub "
    "evaluation results.",
)
@click.option(
    "--verify",
    "verify_report",
    type=_path(exists=True, dir_okay=False),
    help="A passing `packager verify --json` report, to state its KL and top-1 agreement likewise.",
)
@option(
    "--provenance",
    type=_path(exists=True, dir_okay=False),
    show_default="BUNDLE.provenance.json if present",
    help="Conversion provenance with measurements.",
)
@option(
    "--speculate",
    "speculate_reports",
    multiple=True,
    type=_path(exists=True, dir_okay=False),
    show_default="the spec's [card] speculate_reports",
    help="A lossless `packager speculate --json` report of this bundle (one per mode; repeatable), to state "
    "MNN's own tokens per step and speed-up.",
)
@json_option
def card(
    bundle: Path,
    spec_path: Path,
    output: Path | None,
    template: Path | None,
    pair_report: Path | None,
    verify_report: Path | None,
    provenance: Path | None,
    speculate_reports: tuple[Path, ...],
    as_json: bool,
) -> None:
    """Render the model card (README.md) from the release spec, the bundle's files and measurements.

    Example: packager card ./bundle --spec examples/release.toml

    Example: packager card ./bundle --spec release.toml --pair pair.json --verify verify.json -o -

    Example: packager card ./bundle-eagle --spec release.toml --speculate eagle.json --speculate lookahead.json
    """
    from ..bundle.staging import write_atomic
    from ..card.family import ship_license
    from ..card.measurements import gather_measurements
    from ..card.render import render
    from ..release.signing import plan, with_card_facts

    if as_json and output == Path("-"):
        raise click.UsageError("-o - prints the card on stdout, where --json prints its result: give one")
    spec = load_spec(spec_path)
    missing_license = ship_license(bundle, spec) if output != Path("-") else None  # stdout: the bundle is left as is
    measurements = gather_measurements(
        bundle,
        provenance=provenance,
        verify_report=verify_report or spec.need("card").verify_report,
        pair_report=pair_report or spec.need("card").pair_report,
        speculate_reports=speculate_reports or spec.need("card").speculate_reports,
    )
    measurements = with_card_facts(spec, measurements, plan(spec))  # a signed release's card says who signs
    rendered = render(bundle, spec, template=template, measurements=measurements)
    if output == Path("-"):
        click.echo(rendered.text, nl=False)
        return
    target = output or bundle / "README.md"
    write_atomic(target, rendered.text.encode("utf-8"))
    written = {"ok": True, "card": str(target), "warnings": [missing_license] if missing_license else []}
    _emit(written, as_json, lambda d: f"wrote {d['card']}")
    if missing_license:
        click.echo(f"warning: {printable(missing_license)}", err=True)
