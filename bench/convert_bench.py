"""Benchmark: `packager convert` (streaming, warm and cold graph cache; and --reference) vs plain llmexport.

Builds a Qwen3-0.6B-shaped checkpoint (hidden 1024, 28 layers, 16 heads, 8 kv heads, head_dim 128,
intermediate 3072, vocab 151936, tied, random bf16 weights) and converts it with each tool, interleaved run by
run, measuring wall time and peak RSS of the whole process tree (sampled every 20 ms). It checks that the
streamed bundle is byte-identical to the reference path's. With --shape-4b it also converts a Qwen3-4B-shaped
tied checkpoint (written tensor by tensor, never whole in memory), cold and warm graph cache, to show memory
stays flat in model size (peak RSS against the 0.6B's of the same kind).
It measures the quantizer's throughput per core against a plain read of the safetensors files.

The baseline is llmexport's own command line (`llmexport.py --path ... --export mnn --quant_bit 4
--quant_block 128`), run with one change only: MNN's telemetry module is stubbed, as packager does, because
the unmodified tool would `pip install` a package into this environment and post usage logs.

With --family llama32, qwen25, smollm2 or gemma3 it converts that family instead (no --reference runs; the tests prove
the two paths byte-identical): a Llama-3.2-1B-shaped checkpoint (hidden 2048, 16 layers, 32/8 heads, head_dim 64,
intermediate 8192, vocab 128256, tied, llama3 rope, Meta's tokenizer), a Qwen2.5-0.5B-shaped one (hidden 896,
24 layers, 14/2 heads, intermediate 4864, q/k/v biases), the real SmolLM2-135M-Instruct (block 64, its default), or
a Gemma-3-270m-shaped one (hidden 640, 18 layers, 4/1 heads, head_dim 256, 5 sliding layers to 1 global, Google's
tokenizer, vocab 262144).
Reports go to bench/work/convert_bench[-FAMILY].json.

Usage: python bench/convert_bench.py [--runs 3] [--work bench/work] [--shape-4b] [--family NAME]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.families import build_gemma3, build_llama32, build_qwen25, smollm2_checkpoint  # noqa: E402
from tests.models import build_qwen3, qwen3_tokenizer_dir  # noqa: E402

BASELINE = """
import importlib.util, sys, types
stub = types.ModuleType("MNN.tools.utils.log"); stub.mnn_logger = None
sys.modules["MNN.tools.utils.log"] = stub
folder = __import__("pathlib").Path(importlib.util.find_spec("llmexport").origin).parent
script = str(folder / "llmexport.py")
sys.argv = [script] + sys.argv[1:]
sys.path.insert(0, str(folder))
# Not runpy: llmexport sets sys.argv = [] mid-run, which breaks runpy's restore of argv[0].
exec(compile(open(script).read(), script, "exec"), {"__name__": "__main__", "__file__": script})
"""
# Output folders (bench/common.py and hub_bench.py take the warm-cache bundle from out-packager).
OUT = {
    "llmexport": "out-llmexport",
    "packager warm cache": "out-packager",
    "packager cold cache": "out-packager-cold",
    "packager --reference": "out-packager-reference",
}
GRAPH_FILES = ("llm.mnn", "llm.mnn.json", "llm.mnn.weight", "llm_config.json", "tokenizer.txt")


def family_checkpoint(family: str, work: Path) -> tuple[Path, int]:
    """The checkpoint a family's runs convert, built once in `work`, and its default quant block."""
    if family == "smollm2":
        return smollm2_checkpoint(), 64
    ckpt = work / f"{family}-shaped"
    if not ckpt.exists():
        if family == "qwen3":
            build_qwen3(ckpt, hidden=1024, layers=28, heads=16, kv_heads=8, intermediate=3072)
        elif family == "llama32":
            build_llama32(ckpt, hidden=2048, layers=16, heads=32, kv_heads=8, intermediate=8192)
        elif family == "gemma3":  # gemma-3-270m: 18 layers (5 sliding to 1 global), head_dim 256, window 512
            build_gemma3(ckpt, hidden=640, layers=18, heads=4, kv_heads=1, head_dim=256, intermediate=2048, pattern=6)
        else:
            build_qwen25(ckpt, hidden=896, layers=24, heads=14, kv_heads=2, intermediate=4864)
    return ckpt, 128


def measure(cmd: list[str], cwd: Path, env: dict[str, str], sample: bool = True) -> dict[str, float]:
    """Wall time, and the peaks of the process tree's summed RSS and summed PSS. RSS counts a page shared by two
    processes (a forked copy's copy-on-write pages) twice; PSS splits it between them, so the tree's PSS is the
    memory it really holds. Without `sample`, the wall time alone: reading every process's smaps 50 times a second
    holds their memory maps' lock, which slows a tree that maps and unmaps much (measured: a cold `convert --dflash`
    22.8 s alone, 34-37 s sampled)."""
    start = time.monotonic()
    proc = psutil.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    if not sample:
        proc.wait()
        if proc.returncode != 0:
            raise SystemExit(f"{cmd[:5]} failed:\n{proc.stderr.read().decode()[-3000:]}")
        return {"wall_s": round(time.monotonic() - start, 2)}
    peak = peak_pss = 0
    while proc.poll() is None:
        try:
            tree = [p for p in [proc, *proc.children(recursive=True)] if p.is_running()]
            peak = max(peak, sum(p.memory_info().rss for p in tree))
            peak_pss = max(peak_pss, sum(_pss(p.pid) for p in tree))
        except psutil.Error:
            pass
        time.sleep(0.02)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[:5]} failed:\n{proc.stderr.read().decode()[-3000:]}")
    return {"wall_s": round(wall, 2), "peak_rss_mb": round(peak / 1e6), "peak_pss_mb": round(peak_pss / 1e6)}


def _pss(pid: int) -> int:
    """A process's proportional set size in bytes (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as rollup:
            for line in rollup:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def spread(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3), "max": round(max(values), 3)}


def write_4b_shaped(out: Path) -> Path:
    """A Qwen3-4B-shaped tied checkpoint (hidden 2560, 36 layers, 32/8 heads, intermediate 9728), random bf16,
    written one tensor at a time."""
    return write_shaped(out, hidden=2560, layers=36, heads=32, kv=8, inter=9728, tied=True)


def write_8b_shaped(out: Path) -> Path:
    """A Qwen3-8B-shaped untied checkpoint (hidden 4096, 36 layers, 32/8 heads, intermediate 12288, its own
    lm_head), random bf16, written one tensor at a time (16.4 GB)."""
    return write_shaped(out, hidden=4096, layers=36, heads=32, kv=8, inter=12288, tied=False)


def write_shaped(out: Path, *, hidden: int, layers: int, heads: int, kv: int, inter: int, tied: bool) -> Path:
    """A dense Qwen3 checkpoint of this shape (head_dim 128, the Qwen3 vocabulary), random bf16 weights of scale
    0.02 (norms around 1), written one tensor at a time so memory stays flat; kept if already there."""
    if (out / "model.safetensors").exists():
        return out
    out.mkdir(parents=True)
    vocab, head = 151936, 128
    shapes = {"model.embed_tokens.weight": (vocab, hidden), "model.norm.weight": (hidden,)}
    if not tied:
        shapes["lm_head.weight"] = (vocab, hidden)
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes.update(
            {
                p + "input_layernorm.weight": (hidden,),
                p + "post_attention_layernorm.weight": (hidden,),
                p + "self_attn.q_proj.weight": (heads * head, hidden),
                p + "self_attn.k_proj.weight": (kv * head, hidden),
                p + "self_attn.v_proj.weight": (kv * head, hidden),
                p + "self_attn.o_proj.weight": (hidden, heads * head),
                p + "self_attn.q_norm.weight": (head,),
                p + "self_attn.k_norm.weight": (head,),
                p + "mlp.gate_proj.weight": (inter, hidden),
                p + "mlp.up_proj.weight": (inter, hidden),
                p + "mlp.down_proj.weight": (hidden, inter),
            }
        )
    header, offset = {}, 0
    for name, shape in shapes.items():
        size = int(np.prod(shape)) * 2
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    rng = np.random.default_rng(0)
    with open(out / "model.safetensors", "wb") as handle:
        handle.write(len(raw).to_bytes(8, "little") + raw)
        for name, shape in shapes.items():
            rows = shape[0]
            step = max(1, (1 << 22) // (int(np.prod(shape)) // rows))
            for start in range(0, rows, step):
                part = rng.standard_normal((min(step, rows - start), *shape[1:]), dtype=np.float32) * 0.02
                if name.endswith("norm.weight"):
                    part = 1.0 + part
                handle.write((part.view(np.uint32) >> 16).astype(np.uint16).tobytes())
    config = {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "head_dim": head,
        "intermediate_size": inter,
        "vocab_size": vocab,
        "tie_word_embeddings": tied,
        "dtype": "bfloat16",
        "max_position_embeddings": 40960,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000,
        "hidden_act": "silu",
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "initializer_range": 0.02,
        "use_cache": True,
    }
    (out / "config.json").write_text(json.dumps(config))
    for item in qwen3_tokenizer_dir().iterdir():
        shutil.copy(item, out / item.name)
    return out


def quant_throughput(ckpt: Path) -> dict[str, float]:
    """MB/s of source weights: plain read of the safetensors vs quantizing them on one core (in this process)."""
    from packager.convert.stream.quant import QuantSpec, quantize
    from packager.convert.stream.weightwriter import _as_float32, _read, index

    refs = index(tuple(sorted(ckpt.glob("*.safetensors"))))
    total = sum(r.nbytes for r in refs.values())
    start = time.perf_counter()
    for ref in refs.values():
        _read(ref)
    read_s = time.perf_counter() - start
    start = time.perf_counter()
    for _name, ref in refs.items():
        if len(ref.shape) == 2:
            quantize(_read(ref), "bfloat16", QuantSpec(4, 128), lambda x: _as_float32(x, "BF16"))
    quant_s = time.perf_counter() - start
    return {
        "source_mb": round(total / 1e6),
        "plain_read_mb_s": round(total / 1e6 / read_s),
        "quantize_mb_s_per_core": round(total / 1e6 / quant_s),
    }


def shape_4b(work: Path, env: dict[str, str], small: dict[str, list[dict[str, float]]], runs: int) -> dict[str, object]:
    """Peak RSS of a 4B-shaped conversion, cold and warm cache, against the 0.6B's of the same kind."""
    big = write_4b_shaped(work / "qwen3-4b-shaped")
    cmd = [
        sys.executable,
        "-m",
        "packager.cli",
        "convert",
        str(big),
        "--quiet",
        "--force",
        "--out",
        str(work / "out-4b"),
    ]
    found: dict[str, list[dict[str, float]]] = {"packager cold cache": [], "packager warm cache": []}
    for run in range(runs):
        run_env = {**env, "PACKAGER_CACHE_DIR": str(work / "cold-cache-4b")}
        shutil.rmtree(run_env["PACKAGER_CACHE_DIR"], ignore_errors=True)
        for name in found:  # the cold run fills the cache the warm run uses
            found[name].append(measure(cmd, work, run_env))
            print("4B-shaped", name, run, found[name][-1], flush=True)
    return {
        name: {
            "runs": found[name],
            "peak_rss_ratio_to_0.6b": round(
                max(r["peak_rss_mb"] for r in found[name]) / max(r["peak_rss_mb"] for r in small[name]), 3
            ),
        }
        for name in found
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--work", type=Path, default=REPO / "bench" / "work")
    parser.add_argument("--shape-4b", action="store_true", help="also convert a 4B-shaped checkpoint (8 GB)")
    parser.add_argument("--family", choices=("qwen3", "llama32", "qwen25", "smollm2", "gemma3"), default="qwen3")
    args = parser.parse_args()
    family = args.family
    work = args.work.resolve() if family == "qwen3" else args.work.resolve() / f"family-{family}"
    work.mkdir(parents=True, exist_ok=True)
    ckpt, block = family_checkpoint(family, work)
    cache = work / "graph-cache"
    env = {**os.environ, "PACKAGER_CACHE_DIR": str(cache)}
    # The same recipe on both sides (a family's own default may differ: SmolLM2 converts at 8 bits unless told).
    recipe = [] if family == "qwen3" else ["--quant-bits", "4", "--quant-block", str(block)]
    packager = [sys.executable, "-m", "packager.cli", "convert", str(ckpt), "--quiet", "--force", *recipe, "--out"]
    commands = {
        "llmexport": lambda out: [
            sys.executable,
            "-c",
            BASELINE,
            "--path",
            str(ckpt),
            "--export",
            "mnn",
            "--quant_bit",
            "4",
            "--quant_block",
            str(block),
            "--dst_path",
            str(out),
        ],
        "packager warm cache": lambda out: [*packager, str(out)],
        "packager cold cache": lambda out: [*packager, str(out)],
        "packager --reference": lambda out: [*packager, str(out), "--reference"],
    }
    if family != "qwen3":
        del commands["packager --reference"]
    load_before = [round(x, 2) for x in os.getloadavg()]  # the load conditions go into the report
    results: dict[str, list[dict[str, float]]] = {name: [] for name in commands}
    subprocess.run([*packager, str(work / "warmup")], env=env, check=True)  # fills the cache for the warm runs
    for run in range(args.runs):
        order = list(commands) if run % 2 == 0 else list(reversed(commands))
        for name in order:
            out = work / OUT[name]
            shutil.rmtree(out, ignore_errors=True)
            cwd = work / "cwd"
            shutil.rmtree(cwd, ignore_errors=True)
            cwd.mkdir()
            run_env = dict(env)
            if name == "packager cold cache":
                run_env["PACKAGER_CACHE_DIR"] = str(work / f"cold-cache-{run}")
                shutil.rmtree(run_env["PACKAGER_CACHE_DIR"], ignore_errors=True)
            results[name].append(measure(commands[name](out), cwd, run_env))
            print(name, run, results[name][-1], flush=True)
    base = [r["wall_s"] for r in results["llmexport"]]
    base_rss = max(r["peak_rss_mb"] for r in results["llmexport"])
    report: dict[str, object] = {
        "runs": results,
        "cpu_count": os.cpu_count(),
        "load_average_before": load_before,
        "load_average_after_0.6b": [round(x, 2) for x in os.getloadavg()],
    }
    for name in commands:
        if name == "llmexport":
            continue
        walls = [r["wall_s"] for r in results[name]]
        report[name] = {
            "time_ratio_per_run": spread([w / b for w, b in zip(walls, base)]),
            "peak_rss_ratio": round(max(r["peak_rss_mb"] for r in results[name]) / base_rss, 3),
        }
    if family == "qwen3":
        streamed, reference = work / OUT["packager warm cache"], work / OUT["packager --reference"]
        report["streamed_equals_reference"] = {
            n: (streamed / n).read_bytes() == (reference / n).read_bytes() for n in GRAPH_FILES
        }
        report["quantizer"] = quant_throughput(ckpt)
    else:  # the weights llmexport wrote are the ones packager streamed (same recipe)
        report["family"] = family
        report["weights_equal_llmexports"] = (work / OUT["packager warm cache"] / "llm.mnn.weight").read_bytes() == (
            work / OUT["llmexport"] / "llm.mnn.weight"
        ).read_bytes()
    if args.shape_4b:
        report["shape_4b"] = shape_4b(work, env, results, max(1, args.runs - 1))
    report["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    name = "convert_bench.json" if family == "qwen3" else f"convert_bench-{family}.json"
    (work / name).write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
