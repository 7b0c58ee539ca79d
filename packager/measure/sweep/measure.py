"""Quality of several bundles of one source at once: the source's logits and the target's greedy continuations
are computed once per prompt and every bundle is compared against them (verify's and pair's measures)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ...infra.progress import Progress, Step
from ...runtime.models import HFModel, MNNModel, Model, all_cores, load
from .. import compat, workload
from ..intervals import Interval, ratio
from ..logits import compare_positions, margins
from ..pair import Options, acceptance, fit_width, open_cache, target_run
from ..pair.targetcache import TargetCache, trim
from ..verify import MIN_DECISIVE, Thresholds, _plain

CONTINUATION = 24  # verify's default: the source's greedy continuation compared after each prompt
MAX_D = acceptance.MAX_D
NEW_TOKENS = Options().new_tokens  # pair's default, so the target cache serves both


@dataclass
class Tally:
    """One bundle's counts, kept per prompt so intervals resample prompts (as pair's do)."""

    kl: list[float] = field(default_factory=list)
    top1: list[bool] = field(default_factory=list)
    decisive: list[bool] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)  # per prompt: positions whose first draft token is accepted
    positions: list[int] = field(default_factory=list)  # per prompt: target continuation positions
    runs: list[list[int]] = field(default_factory=list)  # per prompt: pair's match runs


@dataclass(frozen=True)
class Quality:
    mean_kl: float
    top1_agreement: float
    top1_decisive: float | None
    decisive_positions: int
    positions: int
    alpha: Interval | None = None
    tau: dict[int, Interval] = field(default_factory=dict)  # d -> tokens per target step
    per_prompt_alpha: tuple[tuple[int, int], ...] = ()  # (accepted, positions) per prompt, for paired comparisons


def measure(
    bundles: dict[str, Path],
    source: Path,
    target: Path | None,
    threads: int | None = None,
    prompts: tuple[str, ...] | None = None,
    progress: Progress = lambda _: None,
) -> dict[str, Quality]:
    """Every bundle against the source (KL, top-1) and, with a target, its greedy acceptance per d."""
    items = workload.from_texts(prompts) if prompts else workload.builtin()
    progress(f"loading the source and {len(bundles)} bundles" + (" and the target" if target else ""))
    theirs = HFModel(source, threads)
    drafts = {name: MNNModel(path, threads) for name, path in bundles.items()}
    big = load(target, threads, dtype="stored") if target else None  # a checkpoint or an MNN folder
    cache = open_cache(target, Options(new_tokens=NEW_TOKENS), threads or all_cores()) if target else None
    tallies = {name: Tally() for name in bundles}
    source_facts = compat.facts(source)
    # Read once: a checkpoint's facts parse its tokenizer.json (a third of a second for Qwen's)
    target_facts = compat.facts(target) if target is not None else None
    source_stop = tuple(sorted(source_facts.stop))
    source_template = workload.chat_template(source)
    margin = Thresholds().decisive_margin
    for number, item in enumerate(items, 1):
        progress(
            Step(
                f"prompt {number}/{len(items)}: source logits once, then {len(bundles)} bundles",
                number - 1,
                len(items),
                "measuring the recipes",
            )
        )
        ids = theirs.encode(
            workload.render(source_template, item, source_facts.variables) if source_template else _plain(item)
        )
        sequence = ids + theirs.greedy(ids, CONTINUATION, source_stop)
        reference = theirs.logits_all(sequence)
        decisive = margins(reference) >= margin
        for name, model in drafts.items():
            top1, _, kl = compare_positions(model.logits_all(sequence), reference)
            tally = tallies[name]
            tally.kl += kl
            tally.top1 += top1
            tally.decisive += [t for t, d in zip(top1, decisive) if d]
        if big is not None and target_facts is not None:
            _accept(big, target_facts, item, drafts, tallies, cache)
    if cache is not None:
        trim()
    return {name: _quality(tally) for name, tally in tallies.items()}


def _accept(
    big: Model,
    facts: compat.Facts,
    item: workload.Prompt,
    drafts: dict[str, MNNModel],
    tallies: dict[str, Tally],
    cache: TargetCache | None,
) -> None:
    """The target's greedy continuation and its argmaxes once (or from pair's target cache: the same settings
    as pair's defaults, so either reuses the other's); each draft's argmaxes on the same sequence."""
    ids = big.encode(workload.render(facts.chat_template, item, facts.variables))
    run, _ = target_run(big, ids, NEW_TOKENS, tuple(sorted(facts.stop)), cache)
    sequence, start = ids + list(run.continuation), len(ids) - 1
    rows = slice(start, start + len(run.continuation))
    for name, model in drafts.items():
        proposed = fit_width(model.logits_all(sequence)[rows], big.vocab)  # never a row the target lacks
        runs = acceptance.match_runs([int(row.argmax()) for row in proposed], list(run.argmax))
        tallies[name].runs.append(runs)
        tallies[name].accepted.append(sum(1 for r in runs if r > 0))
        tallies[name].positions.append(len(runs))


def _quality(tally: Tally) -> Quality:
    alpha = ratio(tally.accepted, tally.positions) if tally.runs else None  # type: ignore[arg-type]
    tau = {}
    for d in range(1, MAX_D + 1):
        steps = [acceptance.simulate(runs, d) for runs in tally.runs]
        found = ratio([s.tokens for s in steps], [s.steps for s in steps]) if steps else None
        if found is not None:
            tau[d] = found
    decisive = len(tally.decisive)
    return Quality(
        mean_kl=float(np.mean(tally.kl)),
        top1_agreement=float(np.mean(tally.top1)),
        # As verify: too few decisive positions (flat logits) give no figure rather than a noisy one.
        top1_decisive=float(np.mean(tally.decisive)) if decisive >= MIN_DECISIVE else None,
        decisive_positions=decisive,
        positions=len(tally.top1),
        alpha=alpha,
        tau=tau,
        per_prompt_alpha=tuple(zip(tally.accepted, tally.positions)),
    )


def paired_difference(a: Quality, b: Quality, resamples: int = 1000, seed: int = 0) -> Interval | None:
    """alpha(a) - alpha(b) with a 95% interval, resampling the same prompts for both (a paired comparison)."""
    if not a.per_prompt_alpha or len(a.per_prompt_alpha) != len(b.per_prompt_alpha):
        return None
    xa, na = np.array(a.per_prompt_alpha, dtype=np.float64).T
    xb, nb = np.array(b.per_prompt_alpha, dtype=np.float64).T
    if na.sum() <= 0 or nb.sum() <= 0:
        return None
    picks = np.random.default_rng(seed).integers(0, len(xa), size=(resamples, len(xa)))
    da, db = na[picks].sum(axis=1), nb[picks].sum(axis=1)
    ok = (da > 0) & (db > 0)
    diffs = xa[picks].sum(axis=1)[ok] / da[ok] - xb[picks].sum(axis=1)[ok] / db[ok]
    low, high = np.percentile(diffs, [2.5, 97.5])
    return Interval(float(xa.sum() / na.sum() - xb.sum() / nb.sum()), float(low), float(high))
