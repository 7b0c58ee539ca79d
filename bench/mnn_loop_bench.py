"""Benchmark: `pair`'s speedup estimate against a real greedy speculative loop with both models in MNN.

On the trained fixture (tests/trained.py, full recipe): the teacher converted to a 4-bit bundle is the target,
the LoRA-distilled student converted to a 4-bit bundle (packager convert --lora) is the draft. `pair` measures
acceptance and the step costs and estimates the speedup per d. Then the real loop (MNNRuntime.decode: the draft
and the target in one MNN child process, the target's cache rolled back with erase_history) decodes the same
chat-templated prompts alone (d = 0) and at every d, interleaved within each round (the order rotates from round
to round, so load drift hits every d alike). Per round, real speedup = decode time alone / decode time at d;
reported as median and min-max over the rounds, next to the estimate, and the loop's own tokens per step next to
pair's. MNN's one-token steps and its batched verification differ at near-ties (tests/test_trained.py checks the
loop is lossless up to them), so a few prompts may end with other tokens at some d: the bench counts them.

Usage: python bench/mnn_loop_bench.py [--rounds 5] [--prompts 54] [--tokens 48] [--threads 1] [--repeats 15]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
from pathlib import Path

from common import WORK

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from packager.convert.pipeline import ConvertRequest, convert
from packager.families.qwen3 import QWEN3
from packager.measure import workload
from packager.measure.pair import Options, pair
from packager.measure.pair.acceptance import MAX_D
from packager.runtime.child import MNNModel
from tests.trained import fixture

STOP = (151645, 151643)


def bundles(recipe: str) -> tuple[Path, Path, Path]:
    found = fixture(recipe, log=lambda line: print(line, file=sys.stderr, flush=True))
    root = WORK / "loop" / found.root.name
    target, draft = root / "teacher-4bit", root / "draft-4bit"
    if not target.is_dir():
        convert(ConvertRequest(checkpoint=found.teacher, out=target))
    if not draft.is_dir():
        convert(ConvertRequest(checkpoint=found.student, adapter=found.adapter, out=draft))
    return found.teacher, target, draft


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", default="full")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--prompts", type=int, default=54, help="the first N built-in prompts (54: pair's own workload)"
    )
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=15, help="pair's cost repeats (one sample per d each)")
    args = parser.parse_args()
    teacher, target_path, draft_path = bundles(args.recipe)
    report = pair(
        draft_path, target_path, options=Options(new_tokens=args.tokens, repeats=args.repeats, threads=args.threads)
    )
    target = MNNModel(target_path, args.threads)
    template = workload.chat_template(teacher)
    prompts = [
        target.encode(workload.render(template, item, QWEN3.template_variables))
        for item in workload.builtin()[: args.prompts]
    ]
    depths = list(range(MAX_D + 1))
    seconds: dict[int, list[float]] = {d: [] for d in depths}
    steps: dict[int, list[int]] = {d: [] for d in depths}
    made: dict[int, list[int]] = {d: [] for d in depths}  # tokens emitted per round
    differing: dict[int, int] = dict.fromkeys(depths, 0)  # most prompts whose tokens differ from d = 0's
    reference: list[list[int]] | None = None
    for round_ in range(args.rounds):
        order = depths[round_ % len(depths) :] + depths[: round_ % len(depths)]
        for d in order:
            total, outputs, taken = 0.0, [], []
            for ids in prompts:
                tokens, accepted, spent = target.decode(draft_path if d else None, ids, args.tokens, d, STOP)
                total += spent
                outputs.append(tokens)
                taken += accepted
            if reference is None and d == 0:
                reference = outputs
            if reference is not None:
                differing[d] = max(differing[d], sum(a != b for a, b in zip(outputs, reference)))
            seconds[d].append(total)
            steps[d].append(len(taken))
            made[d].append(sum(len(t) for t in outputs))
        print(
            f"round {round_ + 1}/{args.rounds}: " + ", ".join(f"d={d} {seconds[d][-1]:.2f}s" for d in depths),
            file=sys.stderr,
            flush=True,
        )
    assert reference is not None
    produced = sum(len(t) for t in reference)
    rows = []
    for depth in report.depths:
        d = depth.d
        real = [alone / spec for alone, spec in zip(seconds[0], seconds[d])]
        estimate = depth.speedup_from_measured_tau.median if depth.speedup_from_measured_tau else None
        median = statistics.median(real)
        rows.append(
            {
                "d": d,
                "estimate": estimate,
                "real_median": median,
                "real_min": min(real),
                "real_max": max(real),
                "estimate_over_real": estimate / median if estimate else None,
                "pair_tokens_per_step": depth.tokens_per_step.value if depth.tokens_per_step else None,
                "loop_tokens_per_step": statistics.median(m / k for m, k in zip(made[d], steps[d])),
                "prompts_differing_from_d0": differing[d],
            }
        )
    result = {
        "recipe": args.recipe,
        "rounds": args.rounds,
        "repeats": args.repeats,
        "prompts": len(prompts),
        "tokens": args.tokens,
        "threads": args.threads,
        "produced_tokens": produced,
        "alpha": report.alpha.value,
        "costs": report.costs.source,
        "load": os.getloadavg(),
        "cpu": platform.processor() or "?",
        "rows": rows,
    }
    (WORK / "mnn_loop_bench.json").write_text(json.dumps(result, indent=2))
    print(
        f"alpha {report.alpha.value:.3f} ({report.alpha.low:.3f}-{report.alpha.high:.3f}); {len(prompts)} prompts, "
        f"{produced} tokens, {args.rounds} rounds, {args.threads} thread(s), load {os.getloadavg()[0]:.1f}"
    )
    print("| d | estimate | real (median, min-max) | estimate / real | tau pair | tau loop | prompts differing |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        est = f"{r['estimate']:.2f}x" if r["estimate"] else "-"
        ratio = f"{r['estimate_over_real']:.2f}" if r["estimate_over_real"] else "-"
        tau = f"{r['pair_tokens_per_step']:.2f}" if r["pair_tokens_per_step"] else "-"
        print(
            f"| {r['d']} | {est} | {r['real_median']:.2f}x ({r['real_min']:.2f}-{r['real_max']:.2f}) | {ratio} "
            f"| {tau} | {r['loop_tokens_per_step']:.2f} | {r['prompts_differing_from_d0']} |"
        )


if __name__ == "__main__":
    main()
