"""Benchmark: the compatibility table of issue 14, every MNN release on PyPI x {default, oldest-engine} bundle.

Converts the 0.6B-shaped checkpoint of convert_bench.py (made if missing) three times: the default (newest
engine: C4-fused attention, PIPELINE tokenizer), `--engine 3.5.0` (no C4 fusion, PIPELINE) and `--engine
3.4.0` (the oldest engine packager builds for: no C4 fusion, the text tokenizer), then runs `packager engines
check` on each against all eight PyPI versions and writes what each choice costs: graph and tokenizer sizes,
tokenizer agreement with the HF tokenizer, and how the older bundles' logits in each engine compare with
the default bundle's in the current engine (same token ids).
The engine environments go to $PACKAGER_ENGINES_DIR (default here: bench/work/engines, reused by reruns).

Usage: python bench/engines_bench.py [--work bench/work] [--tiny]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.models import build_qwen3  # noqa: E402

BUNDLES = {"default (newest)": None, "--engine 3.5.0": "3.5.0", "--engine 3.4.0": "3.4.0"}


def convert(ckpt: Path, out: Path, engine: str | None) -> dict:
    command = [
        sys.executable,
        "-m",
        "packager.cli",
        "convert",
        str(ckpt),
        "--out",
        str(out),
        "--force",
        "--quiet",
        "--json",
        *(["--engine", engine] if engine else []),
    ]
    return json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)


def check(bundle: Path) -> dict:
    command = [
        sys.executable,
        "-m",
        "packager.cli",
        "engines",
        "check",
        str(bundle),
        "--versions",
        "all",
        "--record",
        "--json",
    ]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode not in (0, 32):
        raise SystemExit(done.stderr)
    return json.loads(done.stdout)


def against_default(report: dict) -> dict:
    """Each older-engine bundle in each engine that loads it vs the default bundle in the current engine."""
    from packager.measure.engines import venvs
    from packager.measure.engines.check import compare, run_probe

    default = Path(report["bundles"]["default (newest)"]["path"])
    reference = run_probe(Path(sys.executable), default, None)
    found: dict = {}
    for label, bundle in report["bundles"].items():
        if label.startswith("default"):
            continue
        for row in bundle["check"]["results"]:
            if row["loads"]:
                probe = run_probe(venvs.ensure(row["version"]).python, Path(bundle["path"]), reference["ids"])
                result = compare(row["version"], probe, reference["ids"], reference["logits"])
                found.setdefault(label, {})[row["version"]] = {
                    "min_cosine": result.min_cosine,
                    "top1": result.top1,
                    "prompts": result.prompts,
                }
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--work", type=Path, default=REPO / "bench" / "work")
    parser.add_argument("--tiny", action="store_true", help="the tests' tiny checkpoint instead (fast)")
    args = parser.parse_args()
    work = args.work.absolute()
    os.environ.setdefault("PACKAGER_ENGINES_DIR", str(work / "engines"))
    os.environ.setdefault("PACKAGER_CACHE_DIR", str(work / "graph-cache"))  # convert_bench.py's graph cache
    if args.tiny:
        ckpt = work / "tiny-qwen3"
        if not ckpt.exists():
            build_qwen3(ckpt)
    else:
        ckpt = work / "qwen3-0.6b-shaped"
        if not ckpt.exists():
            build_qwen3(ckpt, hidden=1024, layers=28, heads=16, kv_heads=8, intermediate=3072)
    report = {"checkpoint": ckpt.name, "bundles": {}}
    for label, engine in BUNDLES.items():
        out = work / f"engines-{'default' if engine is None else engine}{'-tiny' if args.tiny else ''}"
        summary = convert(ckpt, out, engine)
        table = check(out)
        report["bundles"][label] = {"summary": summary, "check": table, "path": str(out)}
    report["against_default"] = against_default(report)
    (work / f"engines_bench{'-tiny' if args.tiny else ''}.json").write_text(json.dumps(report, indent=2))
    print(markdown(report))


def markdown(report: dict) -> str:
    labels = list(report["bundles"])
    lines = [f"| MNN | {' | '.join(labels)} |", f"|---|{'---|' * len(labels)}"]
    rows = {label: {r["version"]: r for r in b["check"]["results"]} for label, b in report["bundles"].items()}
    for version in rows[labels[0]]:
        cells = []
        for label in labels:
            r = rows[label][version]
            cells.append(
                f"loads, agrees (cos {r['min_cosine']:.4f}, top-1 {r['top1']}/{r['prompts']}, ids "
                f"{r['same_ids']}/{r['prompts']})"
                if r["loads"] and r["agrees"]
                else r["verdict"]
            )
        lines.append(f"| {version} | {' | '.join(cells)} |")
    lines += [
        "",
        "| bundle | declares | llm.mnn | tokenizer.txt | format | HF agreement (text / pipeline) | total |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, b in report["bundles"].items():
        s = b["summary"]
        agree = s["tokenizer"]["agreement"]
        lines.append(
            f"| {label} | {s['min_mnn_engine']} | {s['files']['llm.mnn']:,} B | "
            f"{s['files']['tokenizer.txt']:,} B | {s['tokenizer']['format']} | "
            f"{agree['text']} / {agree['pipeline']} | {sum(s['files'].values()):,} B |"
        )
    lines += [
        "",
        "Against the default bundle in the current engine (same token ids):",
        "",
        "| bundle | MNN | min cosine | top-1 |",
        "|---|---|---|---|",
    ]
    for label, rows in report["against_default"].items():
        for version, r in rows.items():
            lines.append(f"| {label} | {version} | {r['min_cosine']:.4f} | {r['top1']}/{r['prompts']} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
