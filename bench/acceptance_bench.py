"""Acceptance on the trained fixture: the draft's training-time alpha against what `pair` measures for the draft
as a checkpoint, as an 8-bit and as a 4-bit bundle, each paired with the teacher checkpoint; then the 4-bit draft
bundle with the teacher converted to 4 bits by plain llmexport (the target a phone runs), and the undistilled
student base for contrast. Greedy alpha and tau at d = 3 with 95% bootstrap intervals over the 54 chat-templated
prompts, and the speculative-sampling acceptance at Qwen3's recommended settings (T 0.7, top-k 20, top-p 0.8).

Usage: python bench/acceptance_bench.py [--recipe full] [--tokens 48]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from common import WORK

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from packager.convert.pipeline import ConvertRequest, convert
from packager.measure.pair import Options, pair
from packager.measure.pair.sampling import Sampling
from tests.models import llmexport_raw
from tests.trained import fixture


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", default="full")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tokens", type=int, default=48)
    args = parser.parse_args()
    found = fixture(args.recipe, seed=args.seed, log=lambda line: print(line, file=sys.stderr, flush=True))
    root = WORK / "acceptance" / found.root.name
    bundles = {}
    for bits in (8, 4):
        out = root / f"draft-{bits}"
        if not out.is_dir():
            convert(ConvertRequest(checkpoint=found.student, adapter=found.adapter, out=out, quant_bits=bits))
        bundles[bits] = out
    plain = root / "teacher-4bit-llmexport"
    if not plain.is_dir():
        llmexport_raw(found.teacher, plain)
    cases = [
        ("draft checkpoint (base + LoRA merged)", found.draft, found.teacher),
        ("draft 8-bit bundle", bundles[8], found.teacher),
        ("draft 4-bit bundle", bundles[4], found.teacher),
        ("draft 4-bit bundle, target 4-bit (plain llmexport)", bundles[4], plain),
        ("student base, no distillation", found.student, found.teacher),
    ]
    sampling = Sampling(temperature=0.7, top_k=20, top_p=0.8)
    rows = []
    for name, draft, target in cases:
        report = pair(
            draft,
            target,
            options=Options(
                new_tokens=args.tokens, repeats=1, threads=2, sampling=sampling, dtype="float32"
            ),  # bf16 matmuls are slow on this CPU
            progress=lambda line: print(line, file=sys.stderr, flush=True),
        )
        d3 = next(d for d in report.depths if d.d == 3)
        tau = d3.tokens_per_step
        sampled = report.sampled_acceptance
        rows.append(
            {
                "case": name,
                "positions": report.positions,
                "alpha": report.alpha.value,
                "alpha_low": report.alpha.low,
                "alpha_high": report.alpha.high,
                "tau3": tau.value if tau else None,
                "tau3_low": tau.low if tau else None,
                "tau3_high": tau.high if tau else None,
                "sampled": sampled.value if sampled else None,
                "sampled_low": sampled.low if sampled else None,
                "sampled_high": sampled.high if sampled else None,
            }
        )
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    m = found.metrics
    result = {
        "fixture": found.root.name,
        "training_alpha_final_epoch": m["training_alpha_final_epoch"],
        "draft_alpha_on_samples": m["draft_alpha_on_samples"],
        "base_alpha_on_samples": m["base_alpha_on_samples"],
        "teacher_held_out_top1": m["teacher_held_out_top1"],
        "rows": rows,
    }
    (WORK / "acceptance_bench.json").write_text(json.dumps(result, indent=2))
    print(
        f"fixture {found.root.name}: teacher held-out top-1 {m['teacher_held_out_top1']:.3f}; draft training alpha "
        f"(final epoch) {m['training_alpha_final_epoch']:.3f}; on the teacher's samples: draft "
        f"{m['draft_alpha_on_samples']:.3f}, student base {m['base_alpha_on_samples']:.3f}"
    )
    print(
        "| draft (target: teacher checkpoint unless named) | positions | alpha (95%) | tau d=3 (95%) "
        "| sampling acceptance T0.7/k20/p0.8 (95%) |"
    )
    print("|---|---|---|---|---|")
    for r in rows:
        tau = f"{r['tau3']:.2f} ({r['tau3_low']:.2f}-{r['tau3_high']:.2f})" if r["tau3"] else "-"
        sampled = f"{r['sampled']:.3f} ({r['sampled_low']:.3f}-{r['sampled_high']:.3f})" if r["sampled"] else "-"
        print(
            f"| {r['case']} | {r['positions']} | {r['alpha']:.3f} ({r['alpha_low']:.3f}-{r['alpha_high']:.3f}) "
            f"| {tau} | {sampled} |"
        )


if __name__ == "__main__":
    main()
