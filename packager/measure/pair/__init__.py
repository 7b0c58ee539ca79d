"""`pair`: is DRAFT a useful draft for TARGET? Compatibility first, then acceptance on chat-templated prompts
(with intervals), costs (measured here or given for the device), and the speedup per draft length d."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ...errors import InvalidOption
from ...infra.progress import Progress, Step
from ...runtime.models import Dtype, Model, all_cores, is_bundle, load
from .. import compat, workload
from ..digests import measured_digests
from ..intervals import Interval, ratio
from . import acceptance, costs, memory, targetcache
from .report import DepthReport, PairReport, depth_report
from .sampling import Sampling
from .sampling import acceptance as sampled_acceptance
from .targetcache import TargetCache, TargetRun


@dataclass(frozen=True)
class Options:
    new_tokens: int = 32
    max_d: int = acceptance.MAX_D
    repeats: int = 5
    threads: int | None = None  # None: every core this process may use
    dtype: Dtype = "stored"  # checkpoints: their stored dtype, or "float32"
    sampling: Sampling | None = None  # None: greedy only
    costs_file: Path | None = None  # device costs; None: measure on this CPU
    target_cache: bool = True  # reuse (and store) the target's continuations and argmaxes
    full: bool = False  # all the built-in conversations, whatever the target's size (else: default_prompts)

    def check(self) -> None:
        if self.new_tokens < self.max_d + 1:
            raise InvalidOption(
                f"--tokens {self.new_tokens} is too few: measuring every d up to {self.max_d} "
                f"needs at least {self.max_d + 1} tokens per prompt",
                "pass --tokens 32 or more",
            )
        if self.repeats < 1 or (self.threads is not None and self.threads < 1):
            raise InvalidOption("repeats and threads must be at least 1")


# How many of the built-in conversations pair measures by default, by the target's weights: a small pair finishes
# in about a minute on two cores (each prompt is up to --tokens decoding steps of the target); --full measures all.
DEFAULT_PROMPTS = ((0.5, 24), (2.0, 16))  # (GiB of target weights at most, prompts)
LARGE_TARGET_PROMPTS = 12
COST_STEPS_PER_REPEAT = 40  # model steps in one timing repeat at max_d 6 (costs.measure), for the estimate


def default_prompts(target_weight_bytes: int) -> int:
    """The built-in conversations measured by default for a target of this many bytes of weights."""
    return next(
        (count for gib, count in DEFAULT_PROMPTS if target_weight_bytes <= gib * memory.GIB), LARGE_TARGET_PROMPTS
    )


@dataclass(frozen=True)
class PromptResult:
    continuation: list[int]
    runs: list[int]
    sampled: np.ndarray | None  # per position: acceptance probability under speculative sampling


def runs_for(
    draft: Model, target: Model, prompt_ids: list[int], new_tokens: int, stop: tuple[int, ...] = ()
) -> tuple[list[int], list[int]]:
    """The target's greedy continuation and, for each of its positions, how many draft tokens it accepts."""
    result = measure_prompt(draft, target, prompt_ids, new_tokens, stop, None)
    return result.continuation, result.runs


def target_run(
    target: Model, prompt_ids: list[int], new_tokens: int, stop: tuple[int, ...], cache: TargetCache | None = None
) -> tuple[TargetRun, np.ndarray | None]:
    """The target's greedy continuation and teacher-forced argmaxes: from the cache, else decoded (and stored),
    with the target's logits at those positions when they were computed."""
    found = cache.get(prompt_ids) if cache is not None else None
    if found is not None:
        return found, None
    continuation = target.greedy(prompt_ids, new_tokens, stop)
    start = len(prompt_ids) - 1
    logits = target.logits_all(prompt_ids + continuation)[start : start + len(continuation)]
    run = TargetRun(tuple(continuation), tuple(int(row.argmax()) for row in logits))
    if cache is not None:
        cache.put(prompt_ids, run)
    return run, logits


def measure_prompt(
    draft: Model,
    target: Model,
    prompt_ids: list[int],
    new_tokens: int,
    stop: tuple[int, ...],
    sampling: Sampling | None,
    cache: TargetCache | None = None,
) -> PromptResult:
    run, target_logits = target_run(target, prompt_ids, new_tokens, stop, cache)
    continuation = list(run.continuation)
    sequence, start = prompt_ids + continuation, len(prompt_ids) - 1
    rows = slice(start, start + len(continuation))
    draft_logits = fit_width(draft.logits_all(sequence)[rows], target.vocab)
    # Both argmaxes from one teacher-forced pass each: the same computation on both sides, so a model paired
    # with itself agrees everywhere (a KV-cached step and a full pass can differ at a near-tie of the logits).
    runs = acceptance.match_runs([int(row.argmax()) for row in draft_logits], list(run.argmax))
    sampled = None
    if sampling is not None:
        target_logits = target.logits_all(sequence)[rows] if target_logits is None else target_logits
        sampled = sampled_acceptance(sampling, target_logits, draft_logits)
    return PromptResult(continuation, runs, sampled)


def fit_width(logits: np.ndarray, width: int) -> np.ndarray:
    """The draft's logits over the target's vocabulary: rows the target lacks are never proposed (dropped), ids the
    draft lacks can never be proposed by it (-inf)."""
    if logits.shape[-1] == width:
        return logits
    if logits.shape[-1] > width:
        return logits[..., :width]
    padded = np.full((*logits.shape[:-1], width), -np.inf, dtype=logits.dtype)
    padded[..., : logits.shape[-1]] = logits
    return padded


def open_cache(target_path: Path, options: Options, threads: int) -> TargetCache | None:
    """The target cache for these settings, or None when the options turn it off."""
    if not options.target_cache:
        return None
    bundle = is_bundle(target_path)
    settings = {
        "new_tokens": options.new_tokens,
        "threads": threads,
        "kind": "mnn" if bundle else "checkpoint",
        "dtype": None if bundle else options.dtype,
    }
    return TargetCache(targetcache.identity(target_path, bundle, settings), str(target_path.resolve()))


def _load_both(
    draft_path: Path, target_path: Path, options: Options, threads: int, progress: Progress
) -> tuple[Model, Model, int]:
    """The draft, the target and the target's bytes of weights."""
    estimates = [
        memory.estimate(p, mnn=is_bundle(p), as_float32=options.dtype == "float32") for p in (target_path, draft_path)
    ]
    memory.check(estimates)  # both stay loaded while the costs are timed
    progress(f"loading the target ({estimates[0].weight_bytes / memory.GIB:.2f} GiB of weights, {threads} threads)")
    target = load(target_path, threads, options.dtype)
    progress(f"loading the draft ({estimates[1].weight_bytes / memory.GIB:.2f} GiB of weights)")
    return load(draft_path, threads, options.dtype), target, estimates[0].weight_bytes


def pair(
    draft_path: Path,
    target_path: Path,
    prompts: tuple[str, ...] | None = None,
    options: Options = Options(),
    progress: Progress = lambda _: None,
) -> PairReport:
    options.check()
    device_costs = costs.read(options.costs_file, options.max_d) if options.costs_file else None
    draft_facts, target_facts = compat.facts(draft_path), compat.facts(target_path)
    compat.check_files(draft_facts, target_facts)  # refused here, before any model is loaded
    draft_files = measured_digests(draft_path)  # the files about to be loaded: a card states the figures for them
    threads = options.threads or all_cores()
    draft, target, target_bytes = _load_both(draft_path, target_path, options, threads, progress)
    compared = compat.check_tokenizers(draft, target, draft_facts, target_facts)
    if prompts:
        items = workload.from_texts(prompts)
    else:
        items = workload.builtin()
        if not options.full:
            items = workload.spread(items, default_prompts(target_bytes))
    template, stop = target_facts.chat_template, tuple(sorted(target_facts.stop))
    if options.target_cache:
        progress("digesting the target's files (its cache is content-addressed)")
    cache = open_cache(target_path, options, threads)
    progress(f"measuring acceptance on {len(items)} chat-templated prompts x up to {options.new_tokens} tokens")
    results: list[PromptResult] = []
    longest: list[int] = []
    progress(Step(f"  0/{len(items)} prompts", 0, len(items), "measuring acceptance"))  # counted from its start
    for number, item in enumerate(items, 1):
        started = time.perf_counter()
        ids = target.encode(workload.render(template, item, target_facts.variables))
        results.append(measure_prompt(draft, target, ids, options.new_tokens, stop, options.sampling, cache))
        longest = max(longest, ids + results[-1].continuation, key=len)
        if number == 1:
            progress(_estimate(len(items), options, device_costs is None, time.perf_counter() - started))
        progress(  # every prompt: a line each when stderr is no terminal, never minutes of silence
            Step(
                f"  {number}/{len(items)} prompts ({cache.hits if cache else 0} of the target's from its cache)",
                number,
                len(items),
                "measuring acceptance",
            )
        )
    if cache is not None:
        targetcache.trim()
        if cache.write_error:
            progress(f"the target cache was not written ({cache.write_error}); the next run decodes the target again")
    if device_costs is None:
        progress(f"timing draft step, target step and verifications, interleaved, {options.repeats} repeats")
        where = costs.host(threads)
        cut = len(longest) - options.max_d - 2
        found = costs.measure(
            draft,
            target,
            longest[:cut],
            longest[cut:],
            options.max_d,
            options.repeats,
            where,
            lambda done: progress(Step(f"  {done}/{options.repeats} repeats", done, options.repeats, "timing steps")),
        )
    else:
        found = device_costs
    return replace(
        _report(draft_path, target_path, options, threads, compared, results, found, cache.hits if cache else 0),
        draft_files=draft_files,
    )


def _estimate(prompts: int, options: Options, timed: bool, first: float) -> str:
    """What pair is about to do and how long it should take here, from the first prompt's measured time (its
    target decoding steps and the two teacher-forced passes; a step of the timing repeats costs about as much as one
    of those)."""
    step = first / (options.new_tokens + 2)
    seconds = first * prompts + (options.repeats * COST_STEPS_PER_REPEAT * step if timed else 0.0)
    then = f", then {options.repeats} timing repeats" if timed else ""
    return (
        f"pair: {prompts} prompts x up to {options.new_tokens} tokens on the target and the draft{then}; "
        f"about {seconds:.0f} s on this machine (the first prompt took {first:.1f} s)"
    )


def _report(
    draft_path: Path,
    target_path: Path,
    options: Options,
    threads: int,
    compared: int,
    results: list[PromptResult],
    found: costs.Costs,
    cached: int = 0,
) -> PairReport:
    alpha = ratio([sum(1 for r in p.runs if r > 0) for p in results], [len(p.runs) for p in results])
    sampled = None
    if options.sampling is not None:
        sampled = ratio(
            [float(p.sampled.sum()) for p in results if p.sampled is not None], [len(p.runs) for p in results]
        )
    depths = tuple(
        depth_report(d, [p.runs for p in results], alpha, sampled, found) for d in range(1, options.max_d + 1)
    )
    gaining = {d.d: s.median for d in depths if (s := d.speedup_from_measured_tau) is not None and s.low > 1.0}
    best = max(gaining, key=gaining.__getitem__) if gaining else None
    return PairReport(
        draft=draft_path,
        target=target_path,
        prompts=len(results),
        positions=sum(len(p.runs) for p in results),
        new_tokens=options.new_tokens,
        threads=threads,
        dtype=options.dtype,
        tokenizer_strings_compared=compared,
        alpha=alpha or Interval(0.0, 0.0, 0.0),
        sampling=options.sampling,
        sampled_acceptance=sampled,
        costs=found,
        depths=depths,
        best_d=best,
        target_cached=cached,
    )


__all__ = ["DepthReport", "Options", "PairReport", "pair", "runs_for"]
