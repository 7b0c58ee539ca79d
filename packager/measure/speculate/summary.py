"""The child's raw runs turned into what a publisher reads: losslessness, accepted tokens per step with a 95%
interval over prompts, decode tokens/s of both and their ratio with the spread over repeats."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Any

from ...errors import RuntimeCrashed, shorten
from ...infra.versions import installed
from ..intervals import Interval, ratio


@dataclass(frozen=True)
class PromptResult:
    index: int
    verdict: str  # "identical", "near-tie" or "mismatch"
    compared: int  # tokens compared (up to the first divergence, or the shorter generation)
    position: int | None = None  # the first divergence
    gap: float = 0.0  # how far the speculative token's logit is below the best, in the plain model's forward
    steps: tuple[int, int] | None = None  # fewest and most steps the engine's record allows
    tokens: int = 0  # tokens those steps emitted


@dataclass(frozen=True)
class Spread:
    median: float
    low: float
    high: float


@dataclass(frozen=True)
class LaterResponses:
    """One engine answering the prompts in turn (DFlash: MNN 3.6.1 keeps draft state across responses)."""

    responses: int  # responses after the engine's first
    identical: int  # identical to plain decoding, up to near-ties
    differing: int
    from_first_token: int  # of the differing, how many differ from their first token
    first_response_identical: bool
    crashed: str | None = None  # the engine crashed on a later response: the child's one line


@dataclass(frozen=True)
class Report:
    bundle: str
    mode: str
    prompts: int
    max_new_tokens: int
    repeats: int
    measured_on: str
    engine: str
    per_prompt: tuple[PromptResult, ...]
    accepted_per_step: Interval | None  # counting the most steps the record allows (exact where it is)
    accepted_per_step_if_fewest: Interval | None
    steps_counted: int  # prompts whose steps the engine's record gives
    plain_tokens_per_second: Spread
    speculative_tokens_per_second: Spread
    speedup: Spread  # per repeat: speculative over plain tokens/s
    tie_tolerance: float
    notes: tuple[str, ...]
    files_xxh3_128: dict[str, str]  # the files the engine read, so a card can tell the report is this bundle's
    block_size: int | None = None  # dflash: tokens a step drafts and verifies
    accept_rate: float | None = None  # dflash: tokens accepted over tokens verified (MNN's own statistic)
    later_responses: LaterResponses | None = None  # dflash: the responses after an engine's first

    @property
    def mismatches(self) -> tuple[PromptResult, ...]:
        return tuple(p for p in self.per_prompt if p.verdict == "mismatch")

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["lossless"] = not self.mismatches
        data["near_ties"] = sum(p.verdict == "near-tie" for p in self.per_prompt)
        return data


def summarize(
    raw: dict[str, Any], mode: str, request: Any, where: str, job: dict[str, Any], files: dict[str, str] | None = None
) -> Report:
    prompts = raw["prompts"]
    per_prompt = tuple(_prompt(i, p, request.tie_tolerance) for i, p in enumerate(prompts))
    counted = [p for p in per_prompt if p.steps is not None]
    notes = []
    if not all(p["repeatable"] for p in prompts):
        notes.append("some prompts decoded differently from one repeat to the next (the first repeat is compared)")
    unread = {p.get("steps_unreadable") for p in prompts} - {None}
    if unread:
        notes.append(f"steps not countable on {len(prompts) - len(counted)} prompts: {'; '.join(sorted(unread))}")
    if any(p.steps and p.steps[0] != p.steps[1] for p in counted):
        notes.append(
            "on some prompts the engine's record allows more than one step count: the interval counts the "
            "most steps (fewest accepted per step)"
        )
    plain, spec = _rates(prompts, "plain", job["bundle"]), _rates(prompts, "speculative", job["bundle"])
    fresh = mode == "dflash"
    block = int(job["block"]) if fresh else None
    steps = sum(p.steps[1] for p in counted if p.steps)
    if fresh:
        notes.append(
            "dflash ran a fresh engine for every response (MNN 3.6.1 is lossless only on an engine's first), so "
            "its decode includes the engine's first use, where plain decoding's engine was warmed"
        )
    speedup = _spread([s / p for s, p in zip(spec, plain)])
    if speedup.median < 1.0:
        notes.append(
            f"{mode} decodes slower than plain decoding here ({speedup.median:.2f}x): on a target this small the "
            "draft's own forward costs more than the target steps it saves"
        )
    return Report(
        bundle=job["bundle"],
        mode=mode,
        prompts=len(prompts),
        max_new_tokens=request.max_new_tokens,
        repeats=request.repeats,
        measured_on=where,
        engine=f"MNN {installed().get('mnn', '?')}",
        per_prompt=per_prompt,
        accepted_per_step=ratio([p.tokens for p in counted], [p.steps[1] for p in counted])  # type: ignore[index]
        if counted
        else None,
        accepted_per_step_if_fewest=ratio([p.tokens for p in counted], [p.steps[0] for p in counted])  # type: ignore[index]
        if counted
        else None,
        steps_counted=len(counted),
        plain_tokens_per_second=_spread(plain),
        speculative_tokens_per_second=_spread(spec),
        speedup=speedup,
        tie_tolerance=request.tie_tolerance,
        notes=tuple(notes),
        files_xxh3_128=dict(files or {}),
        block_size=block,
        accept_rate=sum(p.tokens for p in counted) / (steps * block) if fresh and block and steps else None,
        later_responses=_later(raw.get("later"), per_prompt, request.tie_tolerance) if fresh else None,
    )


def _later(raw: dict[str, Any] | None, first: tuple[PromptResult, ...], tolerance: float) -> LaterResponses | None:
    if raw is None:
        return None
    same_first = bool(first) and first[0].verdict != "mismatch"
    if "crashed" in raw:
        return LaterResponses(len(first) - 1, 0, 0, 0, same_first, crashed=str(raw["crashed"]))
    answers = raw["answers"]
    verdicts = [_verdict(a["divergence"], tolerance) for a in answers]
    later = verdicts[1:]
    differing = [a for a, v in zip(answers[1:], later) if v == "mismatch"]
    return LaterResponses(
        responses=len(later),
        identical=sum(v != "mismatch" for v in later),
        differing=len(differing),
        from_first_token=sum(a["divergence"]["position"] == 0 for a in differing),
        first_response_identical=bool(verdicts) and verdicts[0] != "mismatch",
    )


def _verdict(divergence: dict[str, Any] | None, tolerance: float) -> str:
    if divergence is None:
        return "identical"
    gap = max(divergence["top_logit"] - divergence["speculative_logit"], 0.0)
    return "near-tie" if gap <= tolerance else "mismatch"


def _prompt(index: int, raw: dict[str, Any], tolerance: float) -> PromptResult:
    steps = raw.get("steps")
    counted = {"steps": (steps["low"], steps["high"]), "tokens": steps["tokens"]} if steps else {}
    divergence = raw["divergence"]
    if divergence is None:
        compared = min(len(raw["plain_tokens"]), len(raw["speculative_tokens"]))
        return PromptResult(index, "identical", compared, **counted)
    # Lossless means the mode emitted the target's greedy token: the plain model's full forward ranks it first,
    # up to arithmetic (MNN's single-token decode step itself leaves that argmax at near-ties).
    gap = max(divergence["top_logit"] - divergence["speculative_logit"], 0.0)
    verdict = "near-tie" if gap <= tolerance else "mismatch"
    return PromptResult(index, verdict, divergence["position"], divergence["position"], gap, **counted)


def _rates(prompts: list[dict[str, Any]], which: str, bundle: str = "") -> list[float]:
    """Tokens per second of each repeat, over all prompts (sum of tokens over sum of decode time); an engine that
    decoded nothing (it ran on damaged weights, or failed without a word) is RuntimeCrashed."""
    repeats = len(prompts[0][f"{which}_seconds"])
    tokens = [sum(p[f"{which}_counts"][r] for p in prompts) for r in range(repeats)]
    seconds = [sum(p[f"{which}_seconds"][r] for p in prompts) for r in range(repeats)]
    if not all(tokens) or not all(seconds):
        raise RuntimeCrashed(
            f"MNN decoded no tokens from {shorten(bundle, 120)} "
            f"({'plain decoding' if which == 'plain' else which}) on "
            f"{'any prompt' if not any(tokens) else 'every prompt of a repeat'}"
        )
    return [count / time for count, time in zip(tokens, seconds)]


def _spread(values: list[float]) -> Spread:
    return Spread(statistics.median(values), min(values), max(values))


def text(report: Report) -> str:
    ties = sum(p.verdict == "near-tie" for p in report.per_prompt)
    compared = sum(p.compared for p in report.per_prompt)
    lines = [
        f"{report.mode} in {report.engine}, measured on {report.measured_on}",
        f"prompts: {report.prompts}, up to {report.max_new_tokens} new tokens, greedy, {report.repeats} repeats",
        f"tokens: {'lossless' if not report.mismatches else 'NOT lossless'} ({compared} compared; "
        f"{ties} near-tie divergence(s): the target's argmax within {report.tie_tolerance}, "
        f"{len(report.mismatches)} mismatch(es))",
    ]
    if report.accepted_per_step is not None:
        a = report.accepted_per_step
        lines.append(
            f"accepted tokens per step: {a.value:.2f} (95% interval {a.low:.2f}-{a.high:.2f}, "
            f"{report.steps_counted} prompts)"
        )
    else:
        lines.append("accepted tokens per step: not countable from the engine's record")
    if report.accept_rate is not None:
        lines.append(f"accept rate: {report.accept_rate:.1%} of the {report.block_size}-token blocks verified")
    later = report.later_responses
    if later is not None and later.crashed:
        lines.append(f"later responses on one engine: the engine crashed ({later.crashed})")
    elif later is not None:
        lines.append(
            f"later responses on one engine: {later.identical} of {later.responses} identical to plain decoding, "
            f"{later.differing} differ ({later.from_first_token} from their first token); the engine's first "
            f"response {'matched' if later.first_response_identical else 'did NOT match'}"
        )
    if later is not None and (later.crashed or later.differing):
        lines.append(
            f"note: {report.engine} is lossless only on an engine's first response: reload the engine for every "
            "response (MNN's fix, dd48baa63 on its main branch, is in no release yet)"
        )
    p, s, x = report.plain_tokens_per_second, report.speculative_tokens_per_second, report.speedup
    lines += [
        f"decode tokens/s: plain {p.median:.1f} ({p.low:.1f}-{p.high:.1f}), {report.mode} {s.median:.1f} "
        f"({s.low:.1f}-{s.high:.1f})",
        f"speedup: {x.median:.2f}x (repeats {x.low:.2f}-{x.high:.2f})",
        *(f"note: {n}" for n in report.notes),
    ]
    return "\n".join(lines)
