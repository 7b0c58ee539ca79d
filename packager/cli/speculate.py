"""The command that measures a bundle's speculative mode in MNN itself: speculate."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import click

from . import StderrProgress, _path, cli
from .options import json_option, option, prompts_option, quiet_option, threads_option


@cli.command()
@click.argument("bundle", type=_path(exists=True, file_okay=False))
@option(
    "--mode",
    type=click.Choice(["eagle", "lookahead", "dflash"]),
    show_default="the bundle's own speculative_type",
    help="The speculative mode to run.",
)
@prompts_option("the built-in 54 conversations")
@option(
    "--tokens",
    "max_new_tokens",
    metavar="N",
    type=click.IntRange(min=8, max=4096),
    default=64,
    show_default=True,
    help="New tokens per prompt at most (generation also stops at end of text).",
)
@option(
    "--repeats",
    metavar="N",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Interleaved timing repeats (the median and spread of tokens/s come from them).",
)
@threads_option("Engine threads.", default="the bundle's thread_num, at most every core")
@option(
    "--tie-tolerance",
    type=click.FloatRange(min=0.0),
    default=0.1,
    show_default=True,
    help="Where the two part, the mode's token within this of the target's best logit (its own full "
    "forward) is a near-tie, not a loss.",
)
@json_option
@quiet_option
def speculate(
    bundle: Path,
    mode: Literal["eagle", "lookahead", "dflash"] | None,  # click's Choice holds it to these
    prompts_file: Path | None,
    max_new_tokens: int,
    repeats: int,
    threads: int | None,
    tie_tolerance: float,
    as_json: bool,
    quiet: bool,
) -> None:
    """Run BUNDLE's speculative mode with MNN's own generation strategy (eagle, lookahead or dflash) and plain
    decoding on the same chat-templated prompts, greedy, and compare: the tokens (lossless up to near-ties), the
    tokens a step accepts (95% interval over prompts, from the engine's own record) and decode tokens/s of each with
    their ratio over interleaved repeats, labelled with this CPU. Exit 83 when the tokens differ beyond near-ties,
    82 when the bundle cannot run the mode. dflash answers every prompt with a fresh engine (MNN 3.6.1 is lossless
    only on an engine's first response) and reports separately what one engine does with later responses.

    Example: packager speculate ./bundle-eagle

    Example: packager speculate ./bundle --mode lookahead --prompts prompts.txt --json
    """
    from ..measure.speculate import Request, refuse_if_lossy
    from ..measure.speculate import speculate as run_speculate
    from ..measure.speculate.summary import text
    from ..measure.workload import prompts_from_file

    with StderrProgress(quiet) as progress:
        report = run_speculate(
            Request(
                bundle=bundle,
                mode=mode,
                prompts=prompts_from_file(prompts_file) if prompts_file else None,
                max_new_tokens=max_new_tokens,
                repeats=repeats,
                threads=threads,
                tie_tolerance=tie_tolerance,
            ),
            progress=progress,
        )
    click.echo(json.dumps(report.as_dict(), indent=2) if as_json else text(report))
    refuse_if_lossy(report)
