"""Calibration of `verify`'s defaults on trained models, over several training seeds.

For each trained fixture (tests/trained.py: the full recipe, and the small recipe trained from seeds 0, 1, 2):
the teacher converted to 8-bit and 4-bit bundles and the LoRA-distilled draft converted to 4 bits are verified
against their sources; two mistakes a publisher makes are verified too and must fail: the draft's bundle checked
against the student base (converted without --lora, or the wrong source named) and the teacher's bundle checked
against the draft. Prints every figure the gate could use and whether today's defaults separate the faithful bundles
from the mistakes, with the margins on both sides.

Usage: python bench/verify_calibration.py [--fixtures full:0,small:0,small:1,small:2]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from common import WORK

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from packager.convert.pipeline import ConvertRequest, convert
from packager.measure.verify import Thresholds, verify
from tests.trained import fixture


def _bundle(root: Path, name: str, checkpoint: Path, adapter: Path | None, bits: int) -> Path:
    out = root / name
    if not out.is_dir():
        convert(ConvertRequest(checkpoint=checkpoint, adapter=adapter, out=out, quant_bits=bits))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fixtures", default="full:0,small:0,small:1,small:2")
    args = parser.parse_args()
    rows = []
    for spec in args.fixtures.split(","):
        recipe, seed = spec.split(":")
        found = fixture(recipe, seed=int(seed), log=lambda line: print(line, file=sys.stderr, flush=True))
        root = WORK / "verify-calibration" / found.root.name
        cases = []
        for bits in (8, 4):
            teacher = _bundle(root, f"teacher-{bits}", found.teacher, None, bits)
            cases.append((f"teacher {bits}-bit", teacher, found.teacher, True))
        draft = _bundle(root, "draft-4", found.student, found.adapter, 4)
        cases.append(("draft 4-bit", draft, found.draft, True))
        cases += [
            ("draft 4-bit vs its base (LoRA forgotten)", root / "draft-4", found.student, False),
            ("teacher 4-bit vs the draft (wrong source)", root / "teacher-4", found.draft, False),
        ]
        for name, bundle, source, faithful in cases:
            report = verify(bundle, source)
            row = {
                "fixture": f"{recipe} seed {seed}",
                "case": name,
                "faithful": faithful,
                "ok": report.ok,
                "positions": report.positions,
                "decisive": report.decisive_positions,
                "mean_kl": report.mean_kl,
                "p99_kl": report.p99_kl,
                "top1_decisive": report.top1_decisive,
                "top1_all": report.top1_agreement,
                "greedy": report.greedy_agreement,
                "mean_cosine": report.mean_cosine,
                "failures": list(report.failures),
            }
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    name = args.fixtures.replace(",", "_").replace(":", "")
    (WORK / f"verify_calibration-{name}.json").write_text(json.dumps(rows, indent=2))
    defaults = Thresholds()
    print(
        f"defaults: max mean KL {defaults.max_mean_kl}, decisive top-1 >= {defaults.top1_decisive} "
        f"(margin {defaults.decisive_margin} nats)"
    )
    print(
        "| fixture | case | positions (decisive) | mean KL | p99 KL | decisive top-1 | top-1 all | greedy | verdict |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        decisive = "n/a" if r["top1_decisive"] is None else f"{r['top1_decisive']:.4f}"
        verdict = ("pass" if r["ok"] else "FAIL") + ("" if r["ok"] == r["faithful"] else " (WRONG)")
        print(
            f"| {r['fixture']} | {r['case']} | {r['positions']} ({r['decisive']}) | {r['mean_kl']:.4f} | "
            f"{r['p99_kl']:.4f} | {decisive} | {r['top1_all']:.4f} | {r['greedy']:.3f} | {verdict} |"
        )
    faithful = [r for r in rows if r["faithful"]]
    wrong = [r for r in rows if not r["faithful"]]
    print(
        f"faithful: worst mean KL {max(r['mean_kl'] for r in faithful):.4f}, worst decisive top-1 "
        f"{min((r['top1_decisive'] or 1.0) for r in faithful):.4f}; mistakes: smallest mean KL "
        f"{min(r['mean_kl'] for r in wrong):.4f}; misjudged: "
        f"{sum(1 for r in rows if r['ok'] != r['faithful'])} of {len(rows)}"
    )


if __name__ == "__main__":
    main()
