"""Benchmark (bench item 6, issue 43): a release matrix of 2 checkpoints (the tests' tiny Qwen3 and tiny Llama 3.2)
x 4 recipes (4 and 8 bits, each in blocks of 128 and of 64), 8 draft bundles, released to
the local Hub by the real converter and the real huggingface_hub client.

- speed: `packager release SPEC --jobs 2` against the same 8 jobs one by one, each its own `packager release` of
  its expanded plain spec (what a publisher does who releases one bundle at a time; the fair baseline: --jobs 1
  would still share the matrix's worker process and its imports). Each arm from a cold graph cache and a fresh
  Hub, the arms alternating from run to run; graph builds counted in every process (tests/counting).
- kill: the matrix killed by SIGKILL at --points seeded random points (after the k-th line of its journal, plus u
  seconds), then the same command run to its end; duplicate commits and missing releases counted from the Hub's
  own commit history and tags, not from packager's summary.
- faults: the Hub answers 429 (Retry-After: 1) to every 6th request and 503 to every 5th of the others: a third
  of all requests. Every job must land once, in one run.

Tiny checkpoints: the figures are the matrix's orchestration (processes, imports, graph builds, verify, upload),
not the converter's throughput on a real model (convert_bench.py measures that).

Usage: python bench/matrix_bench.py [--part speed|kill|faults|all] [--runs N] [--points 5] [--seed 43]
Prints a Markdown table; the raw figures go to bench/work/matrix_bench.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from common import REPO, WORK

sys.path.insert(0, str(REPO))

TOKEN = "bench-token"
ROOT = WORK / "matrix-bench"
RECIPES = (("q4b128", 4, 128), ("q4b64", 4, 64), ("q8b128", 8, 128), ("q8b64", 8, 64))
CHECKPOINTS = (("qwen", "Qwen/Qwen3-0.6B"), ("llama", "meta-llama/Llama-3.2-1B-Instruct"))
JOBS = tuple(f"{c}-{r}" for c, _ in CHECKPOINTS for r, _, _ in RECIPES)
GRAPHS = len(JOBS)  # one graph per checkpoint and recipe: the graph cache's key holds the bits and the block
COLLECTION = "Matrix bench"
BUSY = (  # a third of all requests: 1 in 6 answered 429, 1 in 5 of the rest 503
    {"method": "*", "path": "/", "status": 429, "every": 6, "times": 100_000, "retry_after": 1},
    {"method": "*", "path": "/", "status": 503, "every": 5, "times": 100_000},
)


# -- inputs ---------------------------------------------------------------------------------------------------------
def checkpoints() -> dict[str, Path]:
    """The tests' tiny checkpoints, built once into bench/work."""
    from tests.families import build_llama32
    from tests.models import build_qwen3

    found = {}
    for name, build in (("qwen", build_qwen3), ("llama", build_llama32)):
        path = ROOT / "checkpoints" / name
        if not (path / "config.json").is_file():
            shutil.rmtree(path, ignore_errors=True)
            build(path)
        found[name] = path
    return found


BASE = """[release]
repo_id = "{repo_id}"
title = "{title}"
version = "v1"
summary = "A tiny draft of the matrix benchmark."
collection = "{collection}"

[model]
base_model = "{base}"

[card]
runs_on = "Android phones (CPU)"
limitations = ["A benchmark's random model."]

[convert]
checkpoint = "{checkpoint}"
{convert}
[verify]
prompts = "prompts.txt"
mean_cosine = 0.9
"""


def write_specs(folder: Path, sources: dict[str, Path]) -> tuple[Path, dict[str, Path]]:
    """The matrix spec, and each job's plain spec as a publisher would write it (one folder each)."""
    folder.mkdir(parents=True, exist_ok=True)
    prompts = "The capital of France is\ndef fibonacci(n):\nQ: Why is the sky blue?\n"
    (folder / "prompts.txt").write_text(prompts, encoding="utf-8")
    matrix = BASE.format(
        repo_id="bench/placeholder",
        title="placeholder",
        collection=COLLECTION,
        base=CHECKPOINTS[0][1],
        checkpoint=sources["qwen"],
        convert="",
    )
    matrix += '\n[matrix]\nrepo_id = "bench/{checkpoint}-{recipe}-mnn"\ntitle = "Tiny {checkpoint} draft ({recipe})"\n'
    for name, base in CHECKPOINTS:
        matrix += f'\n[[matrix.axes.checkpoint]]\nname = "{name}"\nconvert = {{ checkpoint = "{sources[name]}" }}\n'
        matrix += f'model = {{ base_model = "{base}" }}\n'
    for name, bits, block in RECIPES:
        matrix += (
            f'\n[[matrix.axes.recipe]]\nname = "{name}"\nconvert = {{ quant_bits = {bits}, quant_block = {block} }}\n'
        )
    spec = folder / "matrix.toml"
    spec.write_text(matrix, encoding="utf-8")
    plain = {}
    for name, base in CHECKPOINTS:
        for recipe, bits, block in RECIPES:
            job = f"{name}-{recipe}"
            (folder / job).mkdir(exist_ok=True)
            (folder / job / "prompts.txt").write_text(prompts, encoding="utf-8")
            text = BASE.format(
                repo_id=f"bench/{job}-mnn",
                title=f"Tiny {name} draft ({recipe})",
                collection=COLLECTION,
                base=base,
                checkpoint=sources[name],
                convert=f"quant_bits = {bits}\nquant_block = {block}\n",
            )
            plain[job] = folder / job / "release.toml"
            plain[job].write_text(text, encoding="utf-8")
    return spec, plain


# -- the Hub --------------------------------------------------------------------------------------------------------
class Hub:
    """`packager hub serve` with its test hooks, on 127.0.0.1, in a folder of its own."""

    def __init__(self, root: Path) -> None:
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        self.root = root
        env = {**base_env(), "PACKAGER_HUB_TOKEN": TOKEN}
        command = [sys.executable, "-m", "packager.cli", "hub", "serve", "--root", str(root / "data"), "--port", "0"]
        self.process = subprocess.Popen([*command, "--test-hooks"], stdout=subprocess.PIPE, text=True, env=env)
        self.url = self.process.stdout.readline().split("serving ")[1].split(" ")[0]  # type: ignore[union-attr]

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait()

    def call(self, path: str, data: Any = None) -> Any:
        body = json.dumps(data).encode() if data is not None else None
        request = urllib.request.Request(self.url + path, data=body, method="POST" if body else "GET")
        request.add_header("Authorization", f"Bearer {TOKEN}")
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read() or b"null")

    def check(self) -> dict[str, Any]:
        """From the Hub's own records: each job's repo has one commit past its initial one, tagged v1; the
        collection holds each repo once."""
        duplicates, missing, commits = 0, [], {}
        for job in JOBS:
            repo = f"bench/{job}-mnn"
            try:
                history = self.call(f"/api/models/{repo}/commits/main")[:-1]  # the last is the initial commit
                tags = {t["name"]: t["targetCommit"] for t in self.call(f"/api/models/{repo}/refs")["tags"]}
            except urllib.error.HTTPError:
                history, tags = [], {}
            duplicates += max(0, len(history) - 1)
            if not history or tags.get("v1") != history[0]["id"]:
                missing.append(job)
            commits[job] = len(history)
        listed = self.call("/api/collections?owner=bench") or []
        items = [
            i["id"]
            for c in listed
            if c["title"] == COLLECTION
            for i in self.call(f"/api/collections/{c['slug']}")["items"]
        ]
        in_collection = sum(1 for job in JOBS if items.count(f"bench/{job}-mnn") == 1)
        return {"duplicate_commits": duplicates, "missing_releases": missing, "commits": commits,
                "collection_items": len(items), "in_collection_once": in_collection}  # fmt: skip


# -- runs -----------------------------------------------------------------------------------------------------------
def base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "PACKAGER_"))}
    env.update(
        PYTHONPATH=os.pathsep.join([str(REPO / "tests" / "counting"), str(REPO)]),  # graph builds counted
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HUB_DISABLE_PROGRESS_BARS="1",
        HF_HOME=str(ROOT / "hf-home"),
    )
    return env


def run_env(hub: Hub, cache: Path, counts: Path) -> dict[str, str]:
    return {**base_env(), "HF_ENDPOINT": hub.url, "HF_TOKEN": TOKEN, "PACKAGER_CACHE_DIR": str(cache),
            "PACKAGER_TEST_COUNTS": str(counts)}  # fmt: skip


def release(spec: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "packager.cli", "release", str(spec), "--quiet", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True)


def graph_builds(counts: Path) -> int:
    if not counts.is_file():
        return 0
    return sum(1 for line in counts.read_text(encoding="utf-8").splitlines() if line.startswith("graph build\t"))


def fresh(name: str) -> tuple[Path, Path]:
    """A cold graph cache and an empty counting log."""
    cache, counts = ROOT / "caches" / name, ROOT / "counts" / f"{name}.log"
    shutil.rmtree(cache, ignore_errors=True)
    counts.parent.mkdir(parents=True, exist_ok=True)
    counts.unlink(missing_ok=True)
    return cache, counts


def load() -> float:
    return round(os.getloadavg()[0], 2)


def arm(name: str, run: int, sources: dict[str, Path]) -> dict[str, Any]:
    folder = ROOT / "runs" / f"{name}-{run}"
    shutil.rmtree(folder, ignore_errors=True)
    spec, plain = write_specs(folder, sources)
    cache, counts = fresh(f"{name}-{run}")
    hub = Hub(ROOT / "hubs" / f"{name}-{run}")
    try:
        env = run_env(hub, cache, counts)
        start_load, start = load(), time.perf_counter()
        if name == "matrix":
            results = [release(spec, env, "--jobs", "2")]
        else:
            results = [release(plain[job], env) for job in JOBS]
        seconds = time.perf_counter() - start
        failed = [r.stderr.strip().splitlines()[-1:] for r in results if r.returncode != 0]
        check = hub.check()
    finally:
        hub.stop()
    return {"arm": name, "run": run, "seconds": round(seconds, 2), "graph_builds": graph_builds(counts),
            "load_start": start_load, "load_end": load(), "failed": failed, **check}  # fmt: skip


def speed(runs: int, sources: dict[str, Path]) -> list[dict[str, Any]]:
    rows = []
    for run in range(runs):
        order = ("matrix", "one-by-one") if run % 2 == 0 else ("one-by-one", "matrix")
        for name in order:
            rows.append(arm(name, run, sources))
            print(json.dumps(rows[-1]), flush=True)
    return rows


def kill(points: int, seed: int, sources: dict[str, Path]) -> list[dict[str, Any]]:
    """SIGKILL after the k-th journal line (of 2 a job: start, outcome) plus u seconds, then the rerun to its end.
    One graph cache for all the points (cold at the first)."""
    rng = random.Random(seed)
    cache, counts = fresh("kill")
    rows = []
    for point in range(points):
        lines, extra = rng.randint(1, 2 * len(JOBS) - 1), round(rng.uniform(0.0, 2.0), 2)
        folder = ROOT / "runs" / f"kill-{point}"
        shutil.rmtree(folder, ignore_errors=True)
        spec, _ = write_specs(folder, sources)
        journal = folder / "dist" / "matrix-matrix" / "journal.jsonl"
        hub = Hub(ROOT / "hubs" / f"kill-{point}")
        try:
            env = run_env(hub, cache, counts)
            command = [sys.executable, "-m", "packager.cli", "release", str(spec), "--jobs", "2", "--quiet"]
            process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            start = time.perf_counter()
            while process.poll() is None and _lines(journal) < lines:
                time.sleep(0.05)
            time.sleep(extra)
            ended_first = process.poll() is not None
            process.send_signal(signal.SIGKILL)
            process.wait()
            at = round(time.perf_counter() - start, 2)
            released_before = _lines(journal, '"event": "released"')
            rerun = release(spec, env, "--jobs", "2", "--json")
            summary = _summary(rerun)
            statuses = [j["status"] for j in summary["jobs"]]
            check = hub.check()
        finally:
            hub.stop()
        rows.append({"point": point, "after_journal_lines": lines, "plus_seconds": extra, "killed_at_s": at,
                     "run_ended_before_the_kill": ended_first, "released_before_kill": released_before,
                     "rerun_exit": rerun.returncode, "rerun_skipped": statuses.count("skipped"),
                     "rerun_released": statuses.count("released"), "rerun_unchanged": statuses.count("unchanged"),
                     **check})  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
    rows.append({"graph_builds_all_points": graph_builds(counts)})
    return rows


def _summary(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """`release --json`'s summary, or none (the run failed before its jobs: its stderr says why)."""
    try:
        data = json.loads(result.stdout)
    except ValueError:
        data = None
    return data if isinstance(data, dict) and "jobs" in data else {"jobs": [], "collection_error": None}


def _lines(journal: Path, containing: str = "") -> int:
    try:
        text = journal.read_text(encoding="utf-8")
    except FileNotFoundError:
        return 0
    return sum(1 for line in text.splitlines() if line.endswith("}") and containing in line)


def faults(sources: dict[str, Path]) -> dict[str, Any]:
    folder = ROOT / "runs" / "faults"
    shutil.rmtree(folder, ignore_errors=True)
    spec, _ = write_specs(folder, sources)
    cache, counts = fresh("faults")
    hub = Hub(ROOT / "hubs" / "faults")
    try:
        hub.call("/_faults", {"rules": list(BUSY)})
        env = run_env(hub, cache, counts)
        start = time.perf_counter()
        result = release(spec, env, "--jobs", "2", "--json")
        seconds = round(time.perf_counter() - start, 2)
        left = hub.call("/_stats")["faults_left"]
        hub.call("/_faults", {"rules": []})  # the checks read a quiet Hub
        summary = _summary(result)
        check = hub.check()
    finally:
        hub.stop()
    failed = {j["job"]: j["error"] for j in summary["jobs"] if j["status"] == "failed"}
    row = {"seconds": seconds, "exit": result.returncode, "faults_answered": 2 * 100_000 - left, "failed": failed,
           "collection_error": summary.get("collection_error"), "graph_builds": graph_builds(counts),
           **check}  # fmt: skip
    if result.returncode != 0 and not summary["jobs"]:
        row["stderr"] = result.stderr[-2000:] + result.stdout[-2000:]
    print(json.dumps(row), flush=True)
    return row


# -- the table ------------------------------------------------------------------------------------------------------
def markdown(rows: list[dict[str, Any]], columns: dict[str, str]) -> list[str]:
    """A Markdown table of `rows`: one column per key of `columns` (key -> heading); a list cell is its length."""
    out = ["| " + " | ".join(columns.values()) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        cells = [len(row[k]) if isinstance(row[k], (list, dict)) else row[k] for k in columns]
        out.append("| " + " | ".join(str(c) for c in cells) + " |")
    return out


SPEED = {"run": "run", "arm": "arm", "seconds": "seconds", "graph_builds": "graph builds", "load_start": "load start",
         "load_end": "load end", "duplicate_commits": "duplicate commits", "missing_releases": "missing"}  # fmt: skip
KILL = {"point": "point", "after_journal_lines": "after journal lines", "plus_seconds": "+ s",
        "killed_at_s": "killed at s", "run_ended_before_the_kill": "run had ended", "released_before_kill":
        "released before", "rerun_exit": "rerun exit", "rerun_skipped": "skipped", "rerun_released": "released",
        "rerun_unchanged": "unchanged", "duplicate_commits": "duplicate commits", "missing_releases": "missing",
        "in_collection_once": "in collection once"}  # fmt: skip
FAULTS = {"seconds": "seconds", "exit": "exit", "faults_answered": "faults answered", "failed": "failed jobs",
          "duplicate_commits": "duplicate commits", "missing_releases": "missing",
          "in_collection_once": "in collection once", "graph_builds": "graph builds"}  # fmt: skip


def table(result: dict[str, Any]) -> str:
    out = []
    if result.get("speed"):
        ratios = result["ratios"]
        out += markdown(result["speed"], SPEED)
        spread = f"median {statistics.median(ratios):.2f} (min {min(ratios):.2f}, max {max(ratios):.2f})"
        out += ["", f"matrix / one-by-one: {spread} over {len(ratios)} runs; goal <= 0.6; graphs per arm {GRAPHS}", ""]
    if result.get("kill"):
        out += markdown(result["kill"][:-1], KILL)
        builds = result["kill"][-1]["graph_builds_all_points"]
        out += ["", f"graph builds over all kill points (one cache, cold at the first): {builds}", ""]
    if result.get("faults"):
        out += markdown([result["faults"]], FAULTS)
        out += [f"{job}: {error}" for job, error in result["faults"]["failed"].items()]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--part", choices=("speed", "kill", "faults", "all"), default="all")
    parser.add_argument("--runs", type=int, default=3, help="speed: runs of both arms")
    parser.add_argument("--points", type=int, default=5, help="kill: random kill points")
    parser.add_argument("--seed", type=int, default=43, help="kill: the points' seed")
    args = parser.parse_args()
    sources = checkpoints()
    result: dict[str, Any] = {"seed": args.seed, "load_at_start": list(os.getloadavg()), "cores": os.cpu_count()}
    if args.part in ("speed", "all"):
        result["speed"] = speed(args.runs, sources)
        by_run: dict[int, dict[str, float]] = {}
        for row in result["speed"]:
            by_run.setdefault(row["run"], {})[row["arm"]] = row["seconds"]
        result["ratios"] = [round(r["matrix"] / r["one-by-one"], 3) for r in by_run.values()]
    if args.part in ("kill", "all"):
        result["kill"] = kill(args.points, args.seed, sources)
    if args.part in ("faults", "all"):
        result["faults"] = faults(sources)
    result["load_at_end"] = list(os.getloadavg())
    out = WORK / f"matrix_bench_{args.part}.json"
    out.write_text(json.dumps(result, indent=2), encoding="utf-8")
    print(f"\nload average at start {result['load_at_start']}, at end {result['load_at_end']}\n")
    print(table(result))
    for name in ("hubs", "caches", "runs"):  # every bundle and the Hub's copies of them (GBs); the figures are kept
        shutil.rmtree(ROOT / name, ignore_errors=True)


if __name__ == "__main__":
    main()
