"""Benchmark: an 8B-shaped untied target through `packager convert --kind target` and `packager pair` (issue 19).

Does a Qwen3-8B-shaped untied target pair on this machine, or does pair's memory check refuse it? The
checkpoint (hidden 4096, 36 layers, 32/8 heads, intermediate 12288, its own lm_head, random bf16, 16.4 GB;
bench/work/qwen3-8b-shaped) is converted to a 4-bit target bundle by `packager convert --kind target` (streamed:
the untied lm_head quantized and embeddings_bf16.bin written from the safetensors), with the graph cache empty;
wall time and peak RSS of the process tree. The bundle is stored as an app stores it (its runtime files and the
embeddings file, no llm.mnn.json). Then `packager pair` with the 0.6B-shaped 4-bit draft bundle against it:
pair's own memory estimate against what is available, wall time, peak RSS of the whole tree (MNN children
included) and the target step pair measures. `--prompts N` takes the first user turn of the first N built-in
conversations (default: all 54, as pair has them) and `--tokens` the target tokens per prompt (default 32).

Usage: python bench/pair_8b_bench.py [--prompts 8] [--tokens 32] [--repeats 5]
Writes bench/work/pair_8b_bench.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from common import REPO, WORK, tree_peak
from convert_bench import write_8b_shaped, write_shaped

sys.path.insert(0, str(REPO))

from packager.bundle.kinds import TARGET
from packager.measure.pair import memory


def convert(checkpoint: Path, out: Path, *extra: str) -> dict[str, float]:
    """`packager convert` with an empty graph cache; wall time and the peak RSS of its tree."""
    cache = Path(tempfile.mkdtemp(prefix="pair-8b-cache-"))
    try:
        began = time.perf_counter()
        proc = psutil.Popen(
            [
                sys.executable,
                "-m",
                "packager.cli",
                "convert",
                str(checkpoint),
                "--out",
                str(out),
                "--force",
                "--json",
                *extra,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=REPO,
            env={**os.environ, "PACKAGER_CACHE_DIR": str(cache)},
        )
        peak = tree_peak(proc)
        wall = time.perf_counter() - began
        out_text = proc.stdout.read() if proc.stdout else b""
        if proc.returncode != 0:
            raise SystemExit(f"convert {checkpoint.name} failed ({proc.returncode})")
        summary = json.loads(out_text)
        return {
            "wall_s": round(wall, 1),
            "peak_rss_mb": round(peak / 1e6),
            "weights": summary.get("weights"),
            "sizes_mb": {k: round(v / 1e6, 1) for k, v in summary.get("files", {}).items()}
            if isinstance(summary.get("files"), dict)
            else None,
        }
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def app_folder(bundle: Path) -> Path:
    """The files an app downloads to run the target (config, graph, weights, tokenizer, embeddings)."""
    folder = bundle.with_name(bundle.name + "-app")
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    for name in TARGET.app_set(bundle):
        os.link(bundle / name, folder / name)
    return folder


def prompts_file(count: int) -> Path:
    data = json.loads((REPO / "packager" / "data" / "pair_prompts.json").read_text(encoding="utf-8"))
    path = WORK / f"pair-8b-prompts-{count}.json"
    turns = [next(m["content"] for m in p["messages"] if m["role"] == "user") for p in data["prompts"][:count]]
    path.write_text(json.dumps(turns), encoding="utf-8")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=54)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    result: dict[str, object] = {}
    began = time.perf_counter()
    checkpoint = write_8b_shaped(WORK / "qwen3-8b-shaped")
    result["checkpoint_written_s"] = round(time.perf_counter() - began, 1)
    target = WORK / "target-8b-4bit"
    result["convert_target"] = convert(checkpoint, target, "--kind", "target")
    print("convert", result["convert_target"], flush=True)
    draft = WORK / "draft-0.6b-4bit"
    if not (draft / "llm.mnn.weight").is_file():
        small = write_shaped(
            WORK / "qwen3-0.6b-shaped-tied", hidden=1024, layers=28, heads=16, kv=8, inter=3072, tied=True
        )
        convert(small, draft)
    app = app_folder(target)
    estimates = [memory.estimate(app, mnn=True), memory.estimate(draft, mnn=True)]
    result["memory_check"] = {
        "target_gib": round(estimates[0].total / memory.GIB, 2),
        "draft_gib": round(estimates[1].total / memory.GIB, 2),
        "available_gib": round(memory.available() / memory.GIB, 2),
    }
    cache = Path(tempfile.mkdtemp(prefix="pair-8b-target-cache-"))
    command = [
        sys.executable,
        "-m",
        "packager.cli",
        "pair",
        str(draft),
        str(app),
        "--json",
        "--quiet",
        "--tokens",
        str(args.tokens),
        "--repeats",
        str(args.repeats),
    ]
    if args.prompts != 54:
        command += ["--prompts", str(prompts_file(args.prompts))]
    try:
        began = time.perf_counter()
        proc = psutil.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=REPO,
            env={**os.environ, "PACKAGER_CACHE_DIR": str(cache)},
        )
        peak = tree_peak(proc)
        wall = time.perf_counter() - began
        out, err = proc.communicate()
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    if proc.returncode != 0:
        result["pair"] = {"exit": proc.returncode, "stderr": err.decode()[-1500:], "wall_s": round(wall, 1)}
    else:
        report = json.loads(out)
        result["pair"] = {
            "exit": 0,
            "wall_s": round(wall, 1),
            "peak_rss_mb": round(peak / 1e6),
            "prompts": args.prompts,
            "tokens": args.tokens,
            "repeats": args.repeats,
            "positions": report["positions"],
            "target_step_ms": round(report["costs"]["target_step_s"]["median"] * 1e3, 1),
            "draft_step_ms": round(report["costs"]["draft_step_s"]["median"] * 1e3, 2),
            "alpha": report["alpha"]["value"],
        }
    result["load_average_at_end"] = os.getloadavg()
    (WORK / "pair_8b_bench.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
