"""Proof that a refactoring leaves every bundle byte for byte as it was: each family and bundle kind converted from
the tests' tiny checkpoints, every file's sha256 recorded.

The checkpoints are built once into INPUTS (seeded; kept, so two runs convert the very same files) and each run
converts into the same output folders with a fresh graph cache, so nothing of an earlier run is reused.
Usage:
  python bench/family_identity.py record before.json   # on the commit before the change
  python bench/family_identity.py record after.json    # on the commit after it
  python bench/family_identity.py compare before.json after.json
Run `record` from another checkout by putting it first on PYTHONPATH (the worker inherits it).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.append(str(Path(__file__).resolve().parents[1]))  # after PYTHONPATH: `record` may run another checkout

WORK = Path(os.environ.get("FAMILY_IDENTITY_DIR", Path(tempfile.gettempdir()) / "family-identity"))
INPUTS = WORK / "inputs"
OUTPUTS = WORK / "outputs"


def _input(name: str, build: Callable[[Path], Path]) -> Path:
    out = INPUTS / name
    if not (out / ".complete").exists():
        shutil.rmtree(out, ignore_errors=True)
        build(out)
        (out / ".complete").write_text("", encoding="utf-8")
    return out


def inputs() -> dict[str, Path]:
    from tests.families import build_gemma3, build_llama32, build_phi35, build_qwen25, smollm2_checkpoint
    from tests.models import build_eagle_head, build_lora, build_qwen3

    qwen3 = _input("qwen3", build_qwen3)
    target8 = _input("qwen3-8l", lambda d: build_qwen3(d, layers=8, seed=11, tie=False))
    return {
        "qwen3": qwen3,
        "lora": _input("lora", lambda d: build_lora(qwen3, d)),
        "qwen3-8l": target8,
        "head": _input("head", lambda d: build_eagle_head(target8, d, seed=12, draft_vocab=2048)),
        "qwen25": _input("qwen25", build_qwen25),
        "llama32": _input("llama32", build_llama32),
        "smollm2": smollm2_checkpoint(),
        "gemma3": _input("gemma3", build_gemma3),
        "phi35": _input("phi35", build_phi35),
    }


# case name -> (checkpoint input, ConvertRequest options; inputs named by a string "@name")
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "qwen3-draft": ("qwen3", {}),
    "qwen3-draft-reference": ("qwen3", {"reference": True}),
    "qwen3-lora-draft8": ("qwen3", {"adapter": "@lora", "quant_bits": 8}),
    "qwen3-target": ("qwen3-8l", {"kind": "target"}),
    "qwen3-target-eagle": ("qwen3-8l", {"eagle": "@head"}),
    "qwen3-target-lookahead": ("qwen3-8l", {"kind": "target", "lookahead": True}),
    "qwen25-draft": ("qwen25", {}),
    "llama32-draft8": ("llama32", {"quant_bits": 8}),
    "llama32-draft8-reference": ("llama32", {"quant_bits": 8, "reference": True}),
    "smollm2-draft": ("smollm2", {}),
    "gemma3-draft": ("gemma3", {}),
    "gemma3-draft-reference": ("gemma3", {"reference": True}),
    "gemma3-target": ("gemma3", {"kind": "target", "quant_bits": 8}),
    "phi3-target": ("phi35", {"kind": "target"}),
    "phi3-target-reference": ("phi35", {"kind": "target", "reference": True}),
}
# convert_many: two recipes of one checkpoint from one load (the worker's `also` recipes).
MANY = ("qwen3-sweep", "qwen3", ({"quant_bits": 4, "quant_block": 64}, {"quant_bits": 8, "quant_block": 128}))


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _digests(folder: Path) -> dict[str, str]:
    return {p.name: _sha256(p) for p in sorted(folder.iterdir()) if p.is_file() and p.name != ".complete"}


def record(path: Path, only: list[str]) -> None:
    import packager
    from packager.convert.pipeline import ConvertRequest, convert, convert_many

    print(f"packager from {Path(packager.__file__).parent}", flush=True)
    found = inputs()
    os.environ["PACKAGER_CACHE_DIR"] = tempfile.mkdtemp(prefix="family-identity-cache-")
    shutil.rmtree(OUTPUTS, ignore_errors=True)
    OUTPUTS.mkdir(parents=True)
    report: dict[str, Any] = {
        "inputs": {name: _digests(folder) for name, folder in sorted(found.items())},
        "bundles": {},
        "seconds": {},
    }
    for case, (source, options) in CASES.items():
        if only and case not in only:
            continue
        given = {k: found[v[1:]] if isinstance(v, str) and v.startswith("@") else v for k, v in options.items()}
        start = time.perf_counter()
        result = convert(ConvertRequest(checkpoint=found[source], out=OUTPUTS / case, **given))
        report["seconds"][case] = round(time.perf_counter() - start, 1)
        report["bundles"][case] = {**_digests(result.out), "(provenance)": _sha256(result.provenance)}
        print(f"{case}: {report['seconds'][case]} s", flush=True)
    name, source, recipes = MANY
    if not only or name in only:
        start = time.perf_counter()
        requests = [
            ConvertRequest(checkpoint=found[source], out=OUTPUTS / f"{name}-{n}", **r) for n, r in enumerate(recipes)
        ]
        for number, result in enumerate(convert_many(requests)):
            report["bundles"][f"{name}-{number}"] = {**_digests(result.out), "(provenance)": _sha256(result.provenance)}
        report["seconds"][name] = round(time.perf_counter() - start, 1)
        print(f"{name}: {report['seconds'][name]} s", flush=True)
    shutil.rmtree(os.environ["PACKAGER_CACHE_DIR"], ignore_errors=True)
    path.write_text(json.dumps(report, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def compare(before: Path, after: Path) -> int:
    a = json.loads(before.read_text(encoding="utf-8"))
    b = json.loads(after.read_text(encoding="utf-8"))
    problems = []
    if a["inputs"] != b["inputs"]:
        problems.append("the inputs differ: the runs did not convert the same checkpoints")
    for case in sorted(set(a["bundles"]) | set(b["bundles"])):
        x, y = a["bundles"].get(case), b["bundles"].get(case)
        if x is None or y is None:
            problems.append(f"{case}: only in {'after' if x is None else 'before'}")
            continue
        for name in sorted(set(x) | set(y)):
            if x.get(name) != y.get(name):
                problems.append(f"{case}/{name}: {x.get(name)} != {y.get(name)}")
    files = sum(len(v) for v in a["bundles"].values())
    print(f"{len(a['bundles'])} bundles, {files} file digests compared")
    print("\n".join(problems) if problems else "every file identical")
    return 1 if problems else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    rec = commands.add_parser("record")
    rec.add_argument("out", type=Path)
    rec.add_argument("--only", nargs="*", default=[])
    cmp = commands.add_parser("compare")
    cmp.add_argument("before", type=Path)
    cmp.add_argument("after", type=Path)
    args = parser.parse_args()
    if args.command == "record":
        record(args.out, args.only)
        return 0
    return compare(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())
