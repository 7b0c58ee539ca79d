"""The quant-sweep command: which quantization recipe for this draft, by measured acceptance."""

from __future__ import annotations

import json
from pathlib import Path

import click

from . import PackagerCommand, StderrProgress, _path, cli
from .options import (
    checkpoint_argument,
    json_option,
    lora_option,
    option,
    output_option,
    quiet_option,
    threads_option,
    warn_deprecated,
)


class SweepCommand(PackagerCommand):
    """quant-sweep's --json is the stdout flag of every command; its old spelling --json FILE (now -o FILE) still
    works where it cannot mean the flag: --json=FILE, or --json followed by a word that would otherwise be a second
    CHECKPOINT (quant-sweep CKPT --json sweep.json). `quant-sweep --json CKPT` is the flag."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, self._old_json(ctx, list(args)))

    def _old_json(self, ctx: click.Context, args: list[str]) -> list[str]:
        end = args.index("--") if "--" in args else len(args)
        taking = {name for p in self.params if isinstance(p, click.Option) and not p.is_flag for name in p.opts}
        positional, skip = [], False
        for at, word in enumerate(args[:end]):
            if skip:
                skip = False
            elif word in taking:
                skip = True
            elif not word.startswith("-") or word == "-":
                positional.append(at)
        positional += range(end + 1, len(args))
        old = [
            at
            for at, word in enumerate(args[:end])
            if word.startswith("--json=") or (word == "--json" and at + 1 in positional and len(positional) > 1)
        ]
        if not old:
            return args
        if {"-o", "--output"} & set(args[:end]) or any(w.startswith("--output=") for w in args[:end]):
            raise click.BadOptionUsage("output", "--json FILE is the old name of --output: give --output once", ctx)
        warn_deprecated(ctx, "--json", "--output")
        out = list(args)
        for at in reversed(old):
            word = out[at]
            out[at : at + (1 if "=" in word else 2)] = [
                "--output",
                word.partition("=")[2] if "=" in word else out[at + 1],
            ]
        return out


@cli.command("quant-sweep", cls=SweepCommand)
@checkpoint_argument(exists=True, file_okay=False)
@lora_option(exists=True, file_okay=False)
@click.option(
    "--target",
    metavar="CHECKPOINT",
    type=_path(exists=True, file_okay=False),
    help="Target checkpoint: adds greedy acceptance (alpha) and tau per d, the measure the pick uses.",
)
@option(
    "--recipes",
    "recipes_file",
    metavar="FILE",
    type=_path(exists=True, dir_okay=False),
    show_default="a grid around 4-bit block 128, hqq, 8-bit lm_head, and 8-bit",
    help='JSON list of recipes, e.g. [{"quant_bits": 4, "quant_block": 64, "algorithm": "hqq", "lm_bits": 8}].',
)
@option(
    "--out",
    "workdir",
    metavar="DIR",
    type=_path(),
    default=Path("quant-sweep"),
    show_default=True,
    help="Folder for the recipes' bundles (one folder each).",
)
@option(
    "--tolerance",
    type=float,
    default=0.01,
    show_default=True,
    help="Acceptance within this of the best counts as as good; the smallest such recipe is chosen.",
)
@threads_option("Threads per model.")
@output_option(
    "Write the choice (as [convert] keys) and the table here as JSON; name it in the spec's convert.quant_sweep "
    "so the card shows why.",
)
@quiet_option
@json_option
def quant_sweep(
    checkpoint: Path,
    lora: Path | None,
    target: Path | None,
    recipes_file: Path | None,
    workdir: Path,
    tolerance: float,
    threads: int | None,
    output: Path | None,
    quiet: bool,
    as_json: bool,
) -> None:
    """Convert CHECKPOINT with several quantization recipes and print bytes vs quality for each.

    Each bundle is measured against the source (mean KL, top-1 where the source is decisive) and, with
    --target, by greedy acceptance and tau per d with 95% intervals over prompts. The smallest recipe whose
    acceptance is within --tolerance of the best is marked.

    Example: packager quant-sweep ./student --lora ./adapter --target ./teacher -o sweep.json
    """
    from ..bundle.staging import write_atomic
    from ..measure.sweep import SweepRequest, read_recipes, sweep
    from ..measure.sweep.report import as_dict, text

    request = SweepRequest(
        checkpoint=checkpoint,
        workdir=workdir,
        adapter=lora,
        target=target,
        recipes=read_recipes(recipes_file) if recipes_file else None,
        tolerance=tolerance,
        threads=threads,
    )
    with StderrProgress(quiet) as progress:
        data = as_dict(sweep(request, progress=progress))
    if output is not None:
        write_atomic(output, (json.dumps(data, indent=2) + "\n").encode("utf-8"))
    click.echo(json.dumps(data, indent=2) if as_json else text(data))
