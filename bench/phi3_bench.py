"""Benchmark: a Phi-3.5-mini target bundle's logits against transformers', by position.

A tiny Phi-3.5-shaped checkpoint (float32, untied, fused projections, longrope with short and long factors far
apart, the real Llama 2 vocabulary with Phi-3.5's chat tokens) is converted by packager (streaming, 8-bit) and run
by MNN 3.6.1. For each prefix length the last position's logits are compared with transformers' (a full forward of
that prefix): cosine and whether the top token agrees. Up to original_max_position_embeddings (4,096) transformers
uses the short factor, which llmexport exports; past it transformers switches every position to the long factor.
No timing: the seeds are fixed, so the figures are deterministic.
Usage: python bench/phi3_bench.py [--seeds 1 2 3]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

LENGTHS = (16, 256, 1024, 2048, 3072, 4000, 4096, 4097, 4200, 5000, 6000)


def measure(seed: int, work: Path) -> dict[int, tuple[float, bool]]:
    import MNN.llm as mnn_llm
    import torch
    from transformers import AutoModelForCausalLM

    from packager.convert.pipeline import ConvertRequest, convert
    from tests.families import build_phi35

    source = build_phi35(work / f"phi-{seed}", seed=seed, dtype="float32")
    bundle = convert(ConvertRequest(checkpoint=source, out=work / f"bundle-{seed}", quant_bits=8, kind="target")).out
    tokens = np.random.default_rng(seed).integers(100, 32000, size=max(LENGTHS)).tolist()
    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32).eval()
    llm = mnn_llm.create(str(bundle / "config.json"))
    llm.set_config({"all_logits": False, "precision": "high", "memory": "normal", "thread_num": 2})
    assert llm._c_obj.load()
    found = {}
    for n in LENGTHS:
        with torch.no_grad():
            want = model(torch.tensor([tokens[:n]])).logits[0, -1].double().numpy()
        llm.reset()
        got = np.asarray(llm.forward(tokens[:n]).read(), dtype=np.float64).reshape(-1)[-want.size :]
        cosine = float(want @ got / np.linalg.norm(want) / np.linalg.norm(got))
        found[n] = (cosine, int(want.argmax()) == int(got.argmax()))
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="phi3-bench-") as temp:
        runs = {seed: measure(seed, Path(temp)) for seed in args.seeds}
    print("| prefix length | " + " | ".join(f"seed {s}: cosine / top-1" for s in args.seeds) + " |")
    print("|---|" + "---|" * len(args.seeds))
    for n in LENGTHS:
        cells = [f"{runs[s][n][0]:.4f} / {'same' if runs[s][n][1] else 'differs'}" for s in args.seeds]
        print(f"| {n:,} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
