"""Gemma 3 fidelity against transformers, by position: packager's bundle, plain llmexport 0.0.5's, and the runtime
settings (MNN precision low/normal, memory low/normal).

A tiny Gemma-3-text-shaped checkpoint (three sliding-window layers at rope base 10,000, three global layers at
1,000,000; Google's real tokenizer; float32 weights, so that only the converter and the 8-bit weights differ) is
converted by packager and by llmexport; MNN's logits over 2,000 positions (one prefill) are compared with
transformers' at positions 0-32, 256-1024 and 1024-2000. A control checkpoint gives both layer kinds the local base,
so that llmexport's single rotary is right for it. The figures are deterministic (no timing): one run.

Usage: python bench/gemma3_bench.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from common import WORK

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from packager.convert.pipeline import ConvertRequest, convert
from tests.families import build_gemma3
from tests.models import llmexport_raw

RANGES = ((0, 32), (256, 1024), (1024, 2000))


def logits_by_mnn(bundle: Path, tokens: list[int], **settings: str) -> np.ndarray:
    import MNN.llm as mnn_llm

    llm = mnn_llm.create(str(bundle / "config.json"))
    extra = {} if (bundle / "tokenizer.txt").is_file() else {"tokenizer_file": "tokenizer.mtok"}
    llm.set_config({"all_logits": True, "precision": "high", "memory": "normal", "thread_num": 2, **extra, **settings})
    assert llm._c_obj.load()
    # A copy: the array read() gives lives in the engine, which goes when this returns. 2 GB.
    return np.array(llm.forward(tokens).read(), dtype=np.float32, copy=True).reshape(len(tokens), -1)


def row(name: str, expected: np.ndarray, got: np.ndarray) -> str:
    cosine, top1 = np.empty(len(expected)), np.empty(len(expected), dtype=bool)
    for first in range(0, len(expected), 256):  # float64 a slice at a time
        a, b = expected[first : first + 256].astype(np.float64), got[first : first + 256].astype(np.float64)
        cosine[first : first + 256] = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
        top1[first : first + 256] = a.argmax(1) == b.argmax(1)
    cells = [f"{cosine[a:b].mean():.4f} / {top1[a:b].mean():.2f}" for a, b in RANGES]
    return f"| {name} | " + " | ".join(cells) + f" | {cosine[1024:].min():.4f} |"


def main() -> None:
    import torch
    from transformers import AutoModelForCausalLM

    root = WORK / "gemma3"
    root.mkdir(parents=True, exist_ok=True)
    tokens = [2, *np.random.default_rng(0).integers(1000, 200000, size=1999).tolist()]
    print("| bundle | cosine / top-1 at 0-32 | 256-1024 | 1024-2000 | min cosine past 1024 |")
    print("|---|---|---|---|---|")
    for case, global_theta in (("dual", 1e6), ("one base", 1e4)):
        folder = root / case.replace(" ", "-")
        source = folder / "checkpoint"
        if not (source / "config.json").is_file():
            build_gemma3(source, seed=3, dtype="float32", global_theta=global_theta)
        ours = folder / "packager"
        if not (ours / "llm.mnn").is_file():
            convert(ConvertRequest(checkpoint=source, out=ours, quant_bits=8))
        theirs = folder / "llmexport" / "out"
        if not (theirs / "llm.mnn").is_file():
            llmexport_raw(source, theirs, bits=8)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32).eval()
        with torch.no_grad():
            expected = model(torch.tensor([tokens])).logits[0].numpy()
        print(row(f"{case}: packager 8-bit", expected, logits_by_mnn(ours, tokens)))
        print(row(f"{case}: llmexport 8-bit", expected, logits_by_mnn(theirs, tokens)))
        if case == "dual":
            for precision, memory in (("low", "normal"), ("normal", "low"), ("low", "low")):
                got = logits_by_mnn(ours, tokens, precision=precision, memory=memory)
                print(row(f"{case}: packager, precision {precision}, memory {memory}", expected, got))


if __name__ == "__main__":
    main()
