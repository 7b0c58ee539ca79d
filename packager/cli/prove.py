"""Commands that prove a bundle: verify (parity with the source) and pair (draft/target acceptance)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..errors import VERIFY_FAILED
from . import StderrProgress, _path, cli

@cli.command()
@click.argument("bundle", type=_path(exists=True, file_okay=False))
@click.option("--source", required=True, type=_path(exists=True, file_okay=False), help="The source checkpoint.")
@click.option("--prompts", "prompts_file", type=_path(exists=True, dir_okay=False),
              help="Prompts, one per line (or JSON).  [default: the built-in set]")
@click.option("--spec", "spec_path", type=_path(), help="Release spec whose [verify] table sets thresholds.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--quiet", is_flag=True, help="No progress on stderr.")
@click.pass_context
def verify(ctx: click.Context, bundle: Path, source: Path, prompts_file: Path | None, spec_path: Path | None,
           as_json: bool, quiet: bool) -> None:
    """Check that BUNDLE (MNN) behaves like its source checkpoint (transformers). Exit 50 below a threshold.

    Reports tokenizer agreement on the built-in multilingual corpus, next-token top-1 agreement, logit cosine
    and KL over every prompt position, and greedy continuation agreement.

    Example: packager verify ./bundle --source ./qwen3-draft
    """
    from .. import spec as spec_module
    from ..verify import Thresholds, prompts_from_file
    from ..verify import verify as run_verify

    thresholds = Thresholds.from_spec(spec_module.load(spec_path).verify if spec_path else None)
    report = run_verify(bundle, source, prompts_from_file(prompts_file) if prompts_file else None, thresholds,
                        progress=StderrProgress(quiet))
    data = {"ok": report.ok, "bundle": str(bundle), "source": str(source),
            "tokenizer": {"matched": report.tokenizer_matched, "total": report.tokenizer_total},
            "positions": report.positions, "top1_agreement": report.top1_agreement,
            "mean_cosine": report.mean_cosine, "min_cosine": report.min_cosine, "mean_kl": report.mean_kl,
            "greedy_agreement": report.greedy_agreement, "thresholds": thresholds.__dict__,
            "failures": list(report.failures)}
    text = "\n".join([
        f"tokenizer agreement: {report.tokenizer_matched}/{report.tokenizer_total}",
        f"top-1 agreement: {report.top1_agreement:.4f} over {report.positions} prompt positions",
        f"logit cosine: mean {report.mean_cosine:.4f}, min {report.min_cosine:.4f}; mean KL {report.mean_kl:.4f}",
        f"greedy continuation agreement: {report.greedy_agreement:.4f}",
        *(f"FAIL {f}" for f in report.failures), "verify: " + ("ok" if report.ok else "FAILED")])
    click.echo(json.dumps(data, indent=2) if as_json else text)
    if not report.ok:
        ctx.exit(VERIFY_FAILED)


@cli.command("pair")
@click.argument("draft", type=_path(exists=True, file_okay=False))
@click.argument("target", type=_path(exists=True, file_okay=False))
# At least 8: the timings need a cached context before the d + 1 tokens they verify.
@click.option("--tokens", "new_tokens", type=click.IntRange(min=8, max=4096), default=32, show_default=True,
              help="Greedy tokens per prompt.")
@click.option("--prompts", "prompts_file", type=_path(exists=True, dir_okay=False),
              help="Prompts, one per line (or JSON).  [default: the built-in set]")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--quiet", is_flag=True, help="No progress on stderr.")
def pair_command(draft: Path, target: Path, new_tokens: int, prompts_file: Path | None, as_json: bool,
                 quiet: bool) -> None:
    """Measure how well DRAFT drafts for TARGET (bundles or checkpoints): compatibility, acceptance, speedup.

    Refuses (exit 51) before measuring when vocabulary, special or stop tokens, chat template or family
    differ. Then reports alpha, the mean accepted length for d = 1..6, the measured cost of a draft step and
    of a target verification on this CPU, and the expected speedup per d.

    Example: packager pair ./draft-bundle ./target-bundle
    """
    from ..pair import pair as run_pair
    from ..verify import prompts_from_file

    report = run_pair(draft, target, prompts_from_file(prompts_file) if prompts_file else None, new_tokens,
                      progress=StderrProgress(quiet))
    data = {"draft": str(draft), "target": str(target), "prompts": report.prompts, "new_tokens": report.new_tokens,
            "tokenizer_strings_compared": report.tokenizer_strings_compared, "alpha": report.alpha,
            "draft_step_s": report.draft_step_seconds, "target_step_s": report.target_step_seconds,
            "best_d": report.best.d, "depths": [d.__dict__ for d in report.depths]}
    lines = [f"alpha (per-token greedy acceptance): {report.alpha:.4f}",
             f"draft step {report.draft_step_seconds * 1e3:.2f} ms, target step {report.target_step_seconds * 1e3:.2f} ms",
             " d  accept  tokens/step  verify ms  speedup  (formula)"]
    lines += [f"{d.d:2}  {d.acceptance_rate:6.3f}  {d.mean_accepted_length:11.3f}  {d.verify_seconds * 1e3:9.2f}"
              f"  {d.speedup_measured_alpha:7.3f}  ({d.speedup_formula:.3f})" for d in report.depths]
    lines.append(f"best d: {report.best.d} (expected speedup {report.best.speedup_measured_alpha:.3f}x on this CPU)")
    click.echo(json.dumps(data, indent=2) if as_json else "\n".join(lines))
