"""Commands that prove a bundle: verify (parity with the source) and pair (draft/target acceptance)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..errors import VERIFY_FAILED
from . import StderrProgress, _path, cli
from .options import (
    checkpoint_option,
    dtype_option,
    json_option,
    load_spec,
    option,
    prompts_option,
    quiet_option,
    spec_option,
    threads_option,
)

if TYPE_CHECKING:
    from ..runtime.models import Dtype


@cli.command()
@click.argument("bundle", type=_path(exists=True, file_okay=False))
@checkpoint_option(
    "The source checkpoint the bundle was converted from.",
    old=("--source",),
    required=True,
    exists=True,
    file_okay=False,
)
@prompts_option("--spec's [verify] prompts, else the built-in 54 conversations")
@spec_option("Release spec whose [verify] table sets thresholds (and prompts).")
@dtype_option(
    "The source computes in its stored dtype (bf16 for most checkpoints) or in float32 (twice the memory).",
    old=("--source-dtype",),
)
@json_option
@quiet_option
@click.pass_context
def verify(
    ctx: click.Context,
    bundle: Path,
    checkpoint: Path,
    prompts_file: Path | None,
    spec_path: Path | None,
    dtype: Dtype,  # click's Choice holds it to these
    as_json: bool,
    quiet: bool,
) -> None:
    """Check that BUNDLE (MNN) behaves like its source checkpoint (transformers). Exit 50 below a threshold.

    Compares the next-token distributions at every position of the built-in chat-templated workload (54
    prompts across prose, code, Q&A, chat and several languages) plus the source's greedy continuation of
    each (at least 1,000 positions), and tokenizer agreement on the multilingual corpus. The gate: mean KL,
    top-1 agreement where the source's choice is decisive (its top-1 leads by >= 1 nat), and mean logit
    cosine; top-1 over all positions and greedy agreement are reported, and gated only if the spec's
    [verify] sets them.

    The source runs first (its continuations decoded in batches of prompts, its logits kept in a temporary
    file: about 14 MB a prompt), then the bundle, so the two are never in memory together.

    Example: packager verify ./bundle --checkpoint ./qwen3-draft
    """
    from ..measure.digests import measured_digests
    from ..measure.verify import Thresholds
    from ..measure.verify import verify as run_verify
    from ..measure.workload import prompts_from_file, spec_prompts

    spec = load_spec(spec_path) if spec_path else None
    thresholds = Thresholds.from_spec(spec.verify if spec else None)
    prompts = prompts_from_file(prompts_file) if prompts_file else spec_prompts(spec)  # --prompts wins
    with StderrProgress(quiet) as progress:
        report = run_verify(
            bundle,
            checkpoint,
            prompts,
            thresholds,
            progress=progress,
            dtype=dtype,
        )
    data = {  # "source" and "source_dtype" are the report's published keys (the card reads them)
        "ok": report.ok,
        "bundle": str(bundle),
        "source": str(checkpoint),
        "source_dtype": dtype,
        "tokenizer": {"matched": report.tokenizer_matched, "total": report.tokenizer_total},
        "prompts": report.prompts,
        "positions": report.positions,
        "decisive_positions": report.decisive_positions,
        "top1_decisive": report.top1_decisive,
        "top1_agreement": report.top1_agreement,
        "mean_kl": report.mean_kl,
        "p99_kl": report.p99_kl,
        "mean_cosine": report.mean_cosine,
        "min_cosine": report.min_cosine,
        "greedy_agreement": report.greedy_agreement,
        "thresholds": thresholds.__dict__,
        "failures": list(report.failures),
        "notes": list(report.notes),
        "files_xxh3_128": measured_digests(bundle),
    }  # what was measured: a card states it for these files only
    decisive = "n/a" if report.top1_decisive is None else f"{report.top1_decisive:.4f}"
    text = "\n".join(
        [
            f"tokenizer agreement: {report.tokenizer_matched}/{report.tokenizer_total}",
            f"positions: {report.positions} over {report.prompts} prompts ({report.decisive_positions} decisive)",
            f"mean KL: {report.mean_kl:.4f} nats (99th percentile {report.p99_kl:.4f})",
            f"top-1 agreement: {decisive} where decisive, {report.top1_agreement:.4f} over all positions",
            f"logit cosine: mean {report.mean_cosine:.4f}, min {report.min_cosine:.4f}",
            f"greedy continuation agreement: {report.greedy_agreement:.4f}",
            *(f"note: {n}" for n in report.notes),
            *(f"FAIL {f}" for f in report.failures),
            "verify: " + ("ok" if report.ok else "FAILED"),
        ]
    )
    click.echo(json.dumps(data, indent=2) if as_json else text)
    if not report.ok:
        ctx.exit(VERIFY_FAILED)


@cli.command("pair")
@click.argument("draft", type=_path(exists=True, file_okay=False))
@click.argument("target", type=_path(exists=True, file_okay=False))
@option(
    "--tokens",
    "new_tokens",
    metavar="N",
    type=int,
    default=32,
    show_default=True,
    help="Greedy target tokens per prompt at most (generation stops at end of text); at least 7.",
)
@prompts_option(
    "24 of the built-in 54 conversations for a target of up to 0.5 GiB of weights, 16 up to 2 GiB, else 12; all 54 "
    "with --full"
)
@click.option(
    "--full",
    is_flag=True,
    help="Measure all 54 built-in conversations (the default measures fewer, by the target's size).",
)
@threads_option("Threads for both runtimes.")
@option(
    "--repeats",
    metavar="N",
    type=click.IntRange(min=1),
    default=5,
    show_default=True,
    help="Interleaved timing repeats (the median and spread come from them).",
)
@dtype_option("Checkpoints: compute in their stored dtype (bf16: half the memory) or in float32.")
@click.option(
    "--costs",
    "costs_file",
    metavar="FILE",
    type=_path(exists=True, dir_okay=False),
    help="JSON costs measured on the device (draft_step_seconds, target_step_seconds, verify_seconds "
    "per d, optional draft_catchup_seconds): the speedup and the recommended d come from them "
    "instead of this CPU.",
)
@click.option(
    "--temperature", type=float, metavar="T", help="Also report acceptance under speculative sampling at this T."
)
@option("--top-k", type=int, metavar="K", default=0, help="With --temperature: top-k (0: off).")
@option("--top-p", type=float, metavar="P", default=1.0, help="With --temperature: top-p (1: off).")
@click.option(
    "--no-target-cache",
    is_flag=True,
    help="Decode the target again instead of reusing its cached continuations (and store none).",
)
@json_option
@quiet_option
def pair_command(
    draft: Path,
    target: Path,
    new_tokens: int,
    prompts_file: Path | None,
    threads: int | None,
    repeats: int,
    dtype: Dtype,
    costs_file: Path | None,
    temperature: float | None,
    top_k: int,
    top_p: float,
    no_target_cache: bool,
    full: bool,
    as_json: bool,
    quiet: bool,
) -> None:
    """Measure how well DRAFT drafts for TARGET (checkpoints or MNN model folders): compatibility, acceptance, speedup.

    Refuses (exit 51) before measuring when vocabulary, special or stop tokens, chat template or family
    differ, and (exit 52) when the two would not fit in memory. Then reports alpha and tokens per step for
    d = 1..6 with 95% intervals over chat-templated prompts, the costs of a draft step, a target step and a
    verification (this CPU, or the device's with --costs), and the speedup per d with its spread.

    The target's greedy continuations and argmaxes are cached, content-addressed by its files' digests, the
    prompts and the settings: a second draft against the same target decodes nothing of it (packager cache ls).

    Example: packager pair ./draft-bundle ./target-4bit --costs phone-costs.json
    """
    from ..errors import InvalidOption
    from ..measure.pair import Options
    from ..measure.pair import pair as run_pair
    from ..measure.pair.report import as_dict, text
    from ..measure.pair.sampling import Sampling
    from ..measure.workload import prompts_from_file

    if temperature is None and (top_k or top_p != 1.0):
        raise InvalidOption(
            "--top-k and --top-p need --temperature",
            "add --temperature (the bundle card's Sampling line gives the family's advice)",
        )
    if full and prompts_file:
        raise InvalidOption("--full measures the built-in conversations: it goes without --prompts")
    sampling = Sampling(temperature, top_k, top_p) if temperature is not None else None
    options = Options(
        new_tokens=new_tokens,
        repeats=repeats,
        threads=threads,
        dtype=dtype,
        sampling=sampling,
        costs_file=costs_file,
        target_cache=not no_target_cache,
        full=full,
    )
    with StderrProgress(quiet) as progress:
        report = run_pair(
            draft,
            target,
            prompts_from_file(prompts_file) if prompts_file else None,
            options,
            progress=progress,
        )
    click.echo(json.dumps(as_dict(report), indent=2) if as_json else text(report))
