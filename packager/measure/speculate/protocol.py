"""The measurement itself, run in the child: both engines on every prompt, interleaved, repeated.

Per prompt and repeat the plain and the speculative engine alternate which goes first, so a load that comes and
goes weighs on both alike; one untimed generation of each comes first (MNN sizes its buffers on first use).

DFlash (MNN 3.6.1) is lossless only on an engine's first response (DFlashGeneration keeps its draft state across
responses), so every DFlash response here comes from a fresh engine, untimed warm-up impossible; the later
responses of one engine are a separate part (`part: later`), run in a child of its own since 3.6.1 may crash there.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from .engine import Engine, Generation
from .steps import StepsUnreadable, dflash_steps, eagle_steps, first_divergence, lookahead_steps


def measure(job: dict[str, Any], stage: Callable[[str], None]) -> dict[str, Any]:
    if job.get("part") == "later":
        return _later(job, stage)
    if job["mode"] == "dflash":
        return _measure_fresh(job, stage)
    bundle, n = Path(job["bundle"]), int(job["max_new_tokens"])
    stops = frozenset(int(s) for s in job["stops"])
    stage("loading the bundle twice: plain decoding and " + job["mode"])
    plain, spec = Engine(bundle, job["plain"]), Engine(bundle, job["speculative"])
    prompts = [plain.encode(text) for text in job["prompts"]]
    plain.generate(prompts[0], n), spec.generate(prompts[0], n)
    runs: list[list[dict[str, Any]]] = [[] for _ in prompts]
    for repeat in range(int(job["repeats"])):
        stage(
            f"repeat {repeat + 1} of {job['repeats']}: {len(prompts)} prompts, each decoded plainly and with "
            f"{job['mode']}"
        )
        for index, ids in enumerate(prompts):
            order = [("plain", plain), ("speculative", spec)]
            pair = {
                name: engine.generate(ids, n) for name, engine in (order if (repeat + index) % 2 == 0 else order[::-1])
            }
            runs[index].append(pair)
    stage("comparing the tokens")
    return {"prompts": [_prompt(job, spec, plain, ids, pairs, stops) for ids, pairs in zip(prompts, runs)]}


def _measure_fresh(job: dict[str, Any], stage: Callable[[str], None]) -> dict[str, Any]:
    """As measure, but a fresh engine for every speculative response (DFlash in MNN 3.6.1)."""
    bundle, n = Path(job["bundle"]), int(job["max_new_tokens"])
    stops = frozenset(int(s) for s in job["stops"])
    stage("loading the bundle for plain decoding (dflash: a fresh engine for every response)")
    plain = Engine(bundle, job["plain"])
    prompts = [plain.encode(text) for text in job["prompts"]]
    plain.generate(prompts[0], n)

    def fresh(ids: list[int]) -> Generation:
        return Engine(bundle, job["speculative"]).generate(ids, n)

    runs: list[list[dict[str, Any]]] = [[] for _ in prompts]
    for repeat in range(int(job["repeats"])):
        stage(
            f"repeat {repeat + 1} of {job['repeats']}: {len(prompts)} prompts, each decoded plainly and with "
            f"{job['mode']} (a fresh engine each)"
        )
        for index, ids in enumerate(prompts):
            order: list[tuple[str, Callable[[], Generation]]] = [
                ("plain", lambda ids=ids: plain.generate(ids, n)),  # type: ignore[misc]
                ("speculative", lambda ids=ids: fresh(ids)),  # type: ignore[misc]
            ]
            pair = {name: call() for name, call in (order if (repeat + index) % 2 == 0 else order[::-1])}
            runs[index].append(pair)
    stage("counting the steps: each prompt again, one verification step a call")
    return {"prompts": [_prompt(job, plain, plain, ids, pairs, stops) for ids, pairs in zip(prompts, runs)]}


def _later(job: dict[str, Any], stage: Callable[[str], None]) -> dict[str, Any]:
    """Every prompt in turn on ONE speculative engine, each response compared with plain decoding's tokens."""
    bundle, n = Path(job["bundle"]), int(job["max_new_tokens"])
    stops = frozenset(int(s) for s in job["stops"])
    stage(f"one {job['mode']} engine answering every prompt in turn")
    plain, spec = Engine(bundle, job["plain"]), Engine(bundle, job["speculative"])
    answers: list[dict[str, Any]] = []
    for text, expected in zip(job["prompts"], job["plain_tokens"]):
        ids = spec.encode(text)
        run = spec.generate(ids, n)
        at = first_divergence(tuple(expected), run.generated, stops)
        if at is None:
            answers.append({"divergence": None})
            continue
        logits = plain.next_logits(ids + list(expected[:at]))
        mine = int(run.generated[at]) if at < len(run.generated) else -1
        answers.append(
            {
                "divergence": {
                    "position": at,
                    "top_logit": float(logits.max()),
                    "speculative_logit": float(logits[mine]) if 0 <= mine < len(logits) else float("-inf"),
                }
            }
        )
    return {"answers": answers}


def _prompt(
    job: dict[str, Any],
    spec: Engine,
    plain: Engine,
    ids: list[int],
    pairs: list[dict[str, Generation]],
    stops: frozenset[int],
) -> dict[str, Any]:
    first_plain, first_spec = pairs[0]["plain"], pairs[0]["speculative"]
    same = all(
        p["plain"].generated == first_plain.generated and p["speculative"].generated == first_spec.generated
        for p in pairs
    )
    out: dict[str, Any] = {
        "prompt_tokens": len(ids),
        "plain_tokens": list(first_plain.generated),
        "speculative_tokens": list(first_spec.generated),
        "repeatable": same,
        "plain_seconds": [p["plain"].decode_seconds for p in pairs],
        "speculative_seconds": [p["speculative"].decode_seconds for p in pairs],
        "plain_counts": [len(p["plain"].generated) for p in pairs],
        "speculative_counts": [len(p["speculative"].generated) for p in pairs],
    }
    out.update(_steps(job, spec, first_spec, stops, ids))
    at = first_divergence(first_plain.generated, first_spec.generated, stops)
    out["divergence"] = None if at is None else _margin(plain, ids, first_plain, first_spec, at)
    return out


def _steps(job: dict[str, Any], spec: Engine, run: Generation, stops: frozenset[int], ids: list[int]) -> dict[str, Any]:
    try:
        if job["mode"] == "dflash":
            fresh = Engine(Path(job["bundle"]), job["speculative"])
            steps = dflash_steps(*fresh.stepwise(ids, int(job["max_new_tokens"]), stops), run.generated)
        elif job["mode"] == "eagle":
            steps = eagle_steps(run.output_tokens, run.generated, int(job["depth"]))
        elif run.generate_str is None:
            raise StepsUnreadable("the engine's generate_str is not UTF-8 text")
        else:
            steps = lookahead_steps(run.generated, run.generate_str, spec.text, int(job["longest"]), stops)
    except StepsUnreadable as why:
        return {"steps": None, "steps_unreadable": str(why)}
    return {"steps": {"tokens": steps.tokens, "low": steps.low, "high": steps.high}}


def _margin(plain: Engine, ids: list[int], a: Generation, b: Generation, at: int) -> dict[str, Any]:
    """How far apart the two diverging tokens are in the plain model's own logits at that position."""
    logits = plain.next_logits(ids + list(a.generated[:at]))
    x, y = int(a.generated[at]), int(b.generated[at])
    top = float(logits.max())
    return {
        "position": at,
        "plain_token": x,
        "speculative_token": y,
        "plain_logit": float(logits[x]),
        "speculative_logit": float(logits[y]),
        "top_logit": top,
    }
