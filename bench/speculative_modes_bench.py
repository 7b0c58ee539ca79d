"""Benchmark: which speculative mode pays, on one target and one workload, side by side.

The target is the trained EAGLE-3 fixture's (tests/trained_eagle.py: an 8-layer Qwen3, untied, trained on the
stdlib text), 4-bit. On the built-in 54 chat conversations, greedy:
- EAGLE-3: the target with its trained head (packager convert --eagle), run by MNN's own EagleGeneration
  (packager speculate);
- lookahead over the prompt's own n-grams (packager speculate --mode lookahead on the same bundle);
- lookahead with a corpus: the target converted with --lookahead over the text it was trained on (the best a
  corpus can do: it is the model's own domain);
- a draft model in packager's loop (MNN has no draft-model mode): the target's own layers 0 and 4 (the 2-layer
  core it was grown from, after the growth training) as an MNN folder drafting d = 3 tokens, the loop run inside
  one MNN child against the target alone, rounds interleaved (bench/mnn_loop_bench.py's method).
Each line: tokens per step (95% interval where counted) and the speedup over the same engine decoding plainly,
median and min-max over repeats. Everything at --threads (default 1).

Usage: python bench/speculative_modes_bench.py [--repeats 5] [--tokens 64] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

from common import WORK

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from packager.convert.pipeline import ConvertRequest, convert
from packager.families.qwen3 import QWEN3
from packager.measure import workload
from packager.measure.intervals import ratio
from packager.measure.speculate import Request, speculate
from packager.runtime.child import MNNModel
from tests import trained
from tests.trained_eagle import RECIPE, fixture

STOP = (151645, 151643)


def draft_from_core(target: Path, out: Path) -> Path:
    """A 2-layer checkpoint: the target's embeddings, final norm, lm_head and its layers 0 and 4."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config, Qwen3ForCausalLM

    if out.is_dir():
        return out
    big = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32)
    config = Qwen3Config(**{**big.config.to_dict(), "num_hidden_layers": 2, "layer_types": None})
    small = Qwen3ForCausalLM(config)
    state = {k: v for k, v in big.state_dict().items() if not k.startswith("model.layers.")}
    for new, old in enumerate(RECIPE.core_places):
        prefix = f"model.layers.{old}."
        state.update(
            {f"model.layers.{new}.{k[len(prefix) :]}": v for k, v in big.state_dict().items() if k.startswith(prefix)}
        )
    small.load_state_dict(state)
    small.to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
    for item in target.iterdir():
        if item.suffix != ".safetensors" and item.name not in ("config.json", "model.safetensors.index.json"):
            (out / item.name).write_bytes(item.read_bytes())
    return out


def bundles(work: Path) -> dict[str, Path]:
    found = fixture(log=lambda line: print(line, file=sys.stderr, flush=True))
    corpus = work / "corpus.txt"
    if not corpus.is_file():
        docs = trained._stdlib_documents(RECIPE.target.corpus_chars)
        corpus.write_text("\n\n".join(text for _, _, text in docs), encoding="utf-8")
    made = {
        "eagle": work / "target-eagle",
        "lookahead": work / "target-lookahead",
        "target": work / "target",
        "draft": work / "draft",
    }
    requests = {
        "eagle": ConvertRequest(checkpoint=found.target, out=made["eagle"], eagle=found.head),
        "lookahead": ConvertRequest(checkpoint=found.target, out=made["lookahead"], kind="target", lookahead=corpus),
        "target": ConvertRequest(checkpoint=found.target, out=made["target"], kind="target"),
        "draft": ConvertRequest(
            checkpoint=draft_from_core(found.target, work / "draft-checkpoint"), out=made["draft"], kind="target"
        ),
    }
    for name, request in requests.items():
        if not made[name].is_dir():
            print(f"converting {name}", file=sys.stderr, flush=True)
            convert(request)
    return {**made, "checkpoint": found.target}


def mnn_mode(bundle: Path, mode: str, args: argparse.Namespace) -> dict[str, object]:
    report = speculate(
        Request(
            bundle=bundle,
            mode=mode,
            max_new_tokens=args.tokens,
            repeats=args.repeats,  # type: ignore[arg-type]
            threads=args.threads,
        ),
        progress=lambda line: print(line, file=sys.stderr, flush=True),
    )
    a = report.accepted_per_step
    return {
        "tokens_per_step": None if a is None else [a.value, a.low, a.high],
        "counted": report.steps_counted,
        "speedup": [report.speedup.median, report.speedup.low, report.speedup.high],
        "plain_tps": report.plain_tokens_per_second.median,
        "mode_tps": report.speculative_tokens_per_second.median,
        "near_ties": sum(p.verdict == "near-tie" for p in report.per_prompt),
        "mismatches": len(report.mismatches),
    }


def draft_loop(made: dict[str, Path], args: argparse.Namespace, d: int = 3) -> dict[str, object]:
    target = MNNModel(made["target"], args.threads)
    template = workload.chat_template(made["target"])  # the bundle's own (llm_config.json), as speculate renders
    prompts = [target.encode(workload.render(template, item, QWEN3.template_variables)) for item in workload.builtin()]
    alone, with_draft, emitted, steps, differing = [], [], [0] * len(prompts), [0] * len(prompts), 0
    try:
        for round_ in range(args.repeats):
            print(f"draft loop: round {round_ + 1} of {args.repeats}", file=sys.stderr, flush=True)
            totals = {0: 0.0, d: 0.0}
            for index, ids in enumerate(prompts):
                order = (0, d) if (round_ + index) % 2 == 0 else (d, 0)
                outs = {}
                for depth in order:
                    tokens, accepted, spent = target.decode(
                        made["draft"] if depth else None, ids, args.tokens, depth, STOP
                    )
                    totals[depth] += spent
                    outs[depth] = tokens
                    if depth and round_ == 0:
                        emitted[index], steps[index] = len(tokens), len(accepted)
                differing += round_ == 0 and outs[0] != outs[d]
            alone.append(totals[0])
            with_draft.append(totals[d])
    finally:
        target.close()
    speedups = [a / b for a, b in zip(alone, with_draft)]
    tau = ratio([float(e) for e in emitted], [float(s) for s in steps])
    return {
        "tokens_per_step": None if tau is None else [tau.value, tau.low, tau.high],
        "counted": len(prompts),
        "speedup": [statistics.median(speedups), min(speedups), max(speedups)],
        "d": d,
        "prompts_differing": differing,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    work = WORK / "modes"
    work.mkdir(parents=True, exist_ok=True)
    made = bundles(work)
    plan = {
        "EAGLE-3 (MNN eagle)": lambda: mnn_mode(made["eagle"], "eagle", args),
        "lookahead, prompt n-grams (MNN)": lambda: mnn_mode(made["eagle"], "lookahead", args),
        "lookahead, training-text corpus (MNN)": lambda: mnn_mode(made["lookahead"], "lookahead", args),
        "draft model d=3 (packager's loop)": lambda: draft_loop(made, args),
    }
    rows = {}
    for name, measure in plan.items():
        rows[name] = measure()
        print(f"{name}: {json.dumps(rows[name])}", file=sys.stderr, flush=True)
    result = {
        "repeats": args.repeats,
        "tokens": args.tokens,
        "threads": args.threads,
        "load": os.getloadavg(),
        "rows": rows,
    }
    (WORK / "speculative_modes_bench.json").write_text(json.dumps(result, indent=2))
    print(
        f"54 prompts, up to {args.tokens} tokens, {args.repeats} repeats, {args.threads} thread(s), "
        f"load {os.getloadavg()[0]:.1f}"
    )
    print("| mode | tokens per step (95% interval) | speedup (median, min-max) | output |")
    print("|---|---|---|---|")
    for name, row in rows.items():
        tau = row["tokens_per_step"]
        tau_text = "-" if tau is None else f"{tau[0]:.2f} ({tau[1]:.2f}-{tau[2]:.2f})"  # type: ignore[index]
        s = row["speedup"]
        out = (
            f"{row['mismatches']} mismatches, {row['near_ties']} near-ties"
            if "mismatches" in row
            else f"{row['prompts_differing']} prompts differ from the target alone"
        )
        print(f"| {name} | {tau_text} | {s[0]:.2f}x ({s[1]:.2f}-{s[2]:.2f}) | {out} |")  # type: ignore[index]


if __name__ == "__main__":
    main()
