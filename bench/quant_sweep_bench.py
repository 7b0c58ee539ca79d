"""quant-sweep on the trained full fixture (draft = fx.student + fx.adapter, target = fx.teacher): the table, the
pick, and the sweep's wall time against converting (and measuring) each recipe separately.

    .venv/bin/python bench/quant_sweep_bench.py [--runs 2] [--separate] [--fixture full|small] [--out DIR]
    .venv/bin/python bench/quant_sweep_bench.py --runs 0 --conversions 3   # the conversion phase alone

Waits for the full fixture rather than building it (it is built by `make fixture`). Every sweep run starts on an
empty graph cache of its own; `--separate` converts each recipe with its own `convert --lora` (one shared cache,
empty at first, as a user's would be) and times verify + pair of the baseline recipe once. `--conversions N`
times the sweep's conversion phase alone (the LoRA merged once, every recipe from one load of the model; what
`quant-sweep` runs before measuring) against the eight separate `convert --lora`, N runs, the two interleaved
with the order reversed every other run, each on an empty graph cache of its own.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import REPO, WORK


def _trained(name: str, root: Path | None, wait: float) -> object:
    """The cached fixture; waits for it (another process may be building it) instead of building it twice."""
    from tests.trained import RECIPES, _key, build_corpus, cache_root, fixture

    folder = (root or cache_root()) / _key(RECIPES[name], build_corpus(RECIPES[name]).digest)
    deadline = time.monotonic() + wait
    while not (folder / "fixture.json").is_file():
        if time.monotonic() > deadline:
            sys.exit(f"the {name} fixture is not built yet ({folder}); run `make fixture` first")
        time.sleep(30)
    return fixture(name, root)


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def _sweep_run(fx: object, out: Path, run: int) -> dict:  # type: ignore[type-arg]
    env = {**os.environ, "PACKAGER_CACHE_DIR": tempfile.mkdtemp(prefix="qsweep-cache-")}
    json_out = out / f"sweep-{run}.json"
    load = _uptime()
    start = time.monotonic()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "packager.cli",
            "quant-sweep",
            str(fx.student),
            "--lora",  # type: ignore[attr-defined]
            str(fx.adapter),
            "--target",
            str(fx.teacher),
            "--out",
            str(out / f"run-{run}"),  # type: ignore[attr-defined]
            "--output",
            str(json_out),
            "--quiet",
        ],
        check=True,
        env=env,
        cwd=REPO,
    )
    return {
        "seconds": time.monotonic() - start,
        "uptime_before": load,
        "uptime_after": _uptime(),
        "json": str(json_out),
    }


def _separate(fx: object, out: Path, measure: bool = True) -> dict:  # type: ignore[type-arg]
    from packager.convert.recipe import default_grid
    from packager.measure.sweep import _flags

    env = {**os.environ, "PACKAGER_CACHE_DIR": tempfile.mkdtemp(prefix="qsep-cache-")}
    load, each = _uptime(), {}
    for recipe in default_grid():
        flags = []
        for key, value in _flags(recipe).items():
            flag = "--" + key.replace("_", "-")
            flags += [("--sym" if value else "--asym")] if key == "symmetric" else [flag, str(value)]
        start = time.monotonic()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "packager.cli",
                "convert",
                str(fx.student),
                "--lora",  # type: ignore[attr-defined]
                str(fx.adapter),
                "--out",
                str(out / "separate" / recipe.name),
                "--force",
                "--quiet",  # type: ignore[attr-defined]
                *flags,
            ],
            check=True,
            env=env,
            cwd=REPO,
            stdout=subprocess.DEVNULL,
        )
        each[recipe.name] = time.monotonic() - start
    if not measure:
        return {"convert_seconds": each, "convert_total": sum(each.values())}
    base = out / "separate" / "4bit-b128"
    start = time.monotonic()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "packager.cli",
            "verify",
            str(base),
            "--checkpoint",
            str(fx.draft),  # type: ignore[attr-defined]
            "--quiet",
            "--json",
        ],
        env=env,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
    )
    verify_seconds = time.monotonic() - start
    start = time.monotonic()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "packager.cli",
            "pair",
            str(base),
            str(fx.teacher),
            "--quiet",  # type: ignore[attr-defined]
            "--json",
        ],
        env=env,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
    )
    pair_seconds = time.monotonic() - start
    return {
        "convert_seconds": each,
        "convert_total": sum(each.values()),
        "verify_one": verify_seconds,
        "pair_one": pair_seconds,
        "uptime_before": load,
        "uptime_after": _uptime(),
    }


_SWEEP_CONVERSION = """
import sys, tempfile
from pathlib import Path
from packager.convert.pipeline import ConvertRequest, convert_many
from packager.convert.recipe import default_grid
from packager.measure.sweep import _flags, _merged
student, adapter, out = map(Path, sys.argv[1:4])
out.mkdir(parents=True, exist_ok=True)
with tempfile.TemporaryDirectory(prefix="merged-", dir=out) as temp:
    merged = _merged(student, adapter, Path(temp) / "merged")
    convert_many([ConvertRequest(checkpoint=merged, out=out / r.name, force=True, **_flags(r)) for r in default_grid()])
"""


def _conversions(fx: object, out: Path, runs: int) -> dict:  # type: ignore[type-arg]
    """The sweep's conversion phase against separate conversions, interleaved."""
    found: dict[str, list[float]] = {"sweep": [], "separate": []}
    for run in range(runs):
        for name in ("sweep", "separate") if run % 2 == 0 else ("separate", "sweep"):
            start = time.monotonic()
            if name == "sweep":
                env = {**os.environ, "PACKAGER_CACHE_DIR": tempfile.mkdtemp(prefix="qsweep-cache-")}
                subprocess.run(
                    [
                        sys.executable,
                        "-c",
                        _SWEEP_CONVERSION,
                        str(fx.student),
                        str(fx.adapter),  # type: ignore[attr-defined]
                        str(out / "phase"),
                    ],
                    check=True,
                    env=env,
                    cwd=REPO,
                )
            else:
                _separate(fx, out, measure=False)
            found[name].append(time.monotonic() - start)
            print(name, run, round(found[name][-1], 1), _uptime(), flush=True)
    ratios = [a / b for a, b in zip(found["sweep"], found["separate"])]
    return {**found, "ratios": ratios}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--separate", action="store_true")
    parser.add_argument("--conversions", type=int, default=0, help="runs of the conversion-phase comparison")
    parser.add_argument("--wait", type=float, default=1800, help="seconds to wait for the fixture")
    parser.add_argument("--fixture", choices=("full", "small"), default="full")
    parser.add_argument("--fixture-root", type=Path, help="the fixture cache  [default: tests.trained's]")
    parser.add_argument("--out", type=Path, default=WORK / "quant-sweep")
    args = parser.parse_args()
    fx = _trained(args.fixture, args.fixture_root, args.wait)
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict = {"fixture": str(fx.root), "sweeps": []}  # type: ignore[attr-defined,type-arg]
    for run in range(args.runs):
        results["sweeps"].append(_sweep_run(fx, args.out, run))
        print(json.dumps(results["sweeps"][-1]), flush=True)
    if args.separate:
        results["separate"] = _separate(fx, args.out)
        print(json.dumps(results["separate"]), flush=True)
    if args.conversions:
        results["conversions"] = _conversions(fx, args.out, args.conversions)
        print(json.dumps(results["conversions"]), flush=True)
    (args.out / "bench.json").write_text(json.dumps(results, indent=2))
    if results["sweeps"]:
        from packager.measure.sweep.report import text

        print(text(json.loads(Path(results["sweeps"][0]["json"]).read_text())))


if __name__ == "__main__":
    main()
