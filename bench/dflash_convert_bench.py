"""Benchmark: `packager convert TARGET --dflash DRAFT` against MNN's own DFlash exporter, run from its 3.6.1 source
tree (`transformers/llm/export/llmexport.py --dflash_path`; no exporter on PyPI has DFlash), on the same inputs.

A 0.6B-shaped untied Qwen3 target (hidden 1024, 28 layers, 16/8 heads, rope theta 1e6, random bf16; bench/work)
and a random
DFlash draft of its shape in z-lab's layout (2 layers, block 16, target layers 1, 9, 17, 25, mask 151669). The
source tree is taken from a git clone of alibaba/MNN (--mnn-git, at tag 3.6.1) into bench/work/mnn-src-3.6.1: a
bench cache, never part of this repository. MNN's exporter imports pymnn's telemetry module, which runs
`pip install aliyun-log-python-sdk` into whatever `pip` is first on PATH: the runner here stubs that module (as
packager's converter does) and refuses any process that names pip (an audit hook), so nothing is installed.

Three cases, alternating order, fresh processes: the source-tree exporter, packager cold (graph cache emptied)
and warm; wall time of runs left alone, then one more run of each with the process tree's peak summed PSS and
RSS sampled (bench.convert_bench.measure: sampling slows what it samples). Then fidelity:
each bundle's dflash_fc.mnn + dflash.mnn run in MNN against packager's torch reference of z-lab's
DFlashDraftModel on the same inputs (packager.convert.dflash.faithful.measure: block logits cosine, top-1).
Last, the drafts the source-tree exporter loads partly random or with a made-up mask id: a misnamed tensor and
no mask_token_id, each given to both. Writes bench/work/dflash_convert_bench.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.convert_bench import measure, spread  # noqa: E402
from tests.dflashdrafts import build_draft  # noqa: E402
from tests.models import build_qwen3  # noqa: E402

TAG = "3.6.1"
EXPORT = "transformers/llm/export"
# The source tree's llmexport.py, run with pymnn's telemetry stubbed and pip refused.
SOURCE_RUNNER = """
import os, sys, types
def _no_pip(event, args):
    if event in ("os.system", "subprocess.Popen", "os.posix_spawn", "os.exec") and "pip" in repr(args):
        raise PermissionError(f"bench: {event} naming pip refused (MNN's exporter would install its telemetry)")
sys.addaudithook(_no_pip)
stub = types.ModuleType("MNN.tools.utils.log"); stub.mnn_logger = None
sys.modules["MNN.tools.utils.log"] = stub
folder = sys.argv.pop(1)
script = os.path.join(folder, "llmexport.py")
sys.argv = [script] + sys.argv[1:]
sys.path.insert(0, folder)
exec(compile(open(script).read(), script, "exec"), {"__name__": "__main__", "__file__": script})
"""


def source_tree(mnn_git: Path, work: Path) -> Path:
    """MNN's exporter at TAG, extracted from a git clone into the bench cache (once)."""
    out = work / f"mnn-src-{TAG}"
    folder = out / EXPORT
    if not (folder / "llmexport.py").is_file():
        out.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(
            ["git", f"--git-dir={mnn_git}", "archive", TAG, EXPORT], check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(out)], input=archive, check=True)
    return folder


def inputs(work: Path) -> tuple[Path, Path]:
    target = work / "qwen3-0.6b-shaped-untied-theta1e6"
    if not target.exists():  # Qwen3's rope theta, which its DFlash drafts share
        rope = {"rope_type": "default", "rope_theta": 1e6}
        build_qwen3(
            target, hidden=1024, layers=28, heads=16, kv_heads=8, intermediate=3072, tie=False, rope_parameters=rope
        )
    draft = work / "dflash-draft-0.6b-shaped"
    if not draft.exists():
        build_draft(
            draft,
            hidden=1024,
            heads=16,
            kv_heads=8,
            head_dim=128,
            intermediate=3072,
            layers=2,
            target_layers=28,
            layer_ids=[1, 9, 17, 25],
            block_size=16,
            seed=5,
        )
    return target, draft


def hostile(draft: Path, work: Path) -> dict[str, Path]:
    """Copies of the draft the source-tree exporter loads without a word: a tensor misnamed (strict=False leaves
    that weight random) and no mask_token_id (it defaults to 0, an ordinary token)."""
    from safetensors.numpy import load_file, save_file

    found = {}
    misnamed = work / "dflash-draft-misnamed"
    if not misnamed.exists():
        shutil.copytree(draft, misnamed)
        state = load_file(str(misnamed / "model.safetensors"))
        state["layers.1.mlp.down.weight"] = state.pop("layers.1.mlp.down_proj.weight")
        save_file(state, str(misnamed / "model.safetensors"))
    found["a misnamed tensor (layers.1.mlp.down_proj.weight as ...down.weight)"] = misnamed
    no_mask = work / "dflash-draft-no-mask"
    if not no_mask.exists():
        shutil.copytree(draft, no_mask)
        config = json.loads((no_mask / "config.json").read_text())
        del config["dflash_config"]["mask_token_id"]
        (no_mask / "config.json").write_text(json.dumps(config, indent=2))
    found["no mask_token_id in dflash_config"] = no_mask
    return found


def fidelity(bundle: Path, target: Path, draft: Path) -> dict[str, float]:
    from packager.convert.dflash.faithful import measure as faithful
    from packager.convert.inspect.checkpoint import inspect_checkpoint
    from packager.convert.inspect.dflash_draft import inspect_dflash
    from packager.convert.recipe import QuantRecipe

    info = inspect_checkpoint(target, allow_untied=True)
    found = faithful(bundle, inspect_dflash(draft, info), info, QuantRecipe(bits=4, block=128))
    return {
        "positions": found.positions,
        "min_cosine": round(found.min_cosine, 5),
        "top1_agreement": round(found.top1_agreement, 4),
        "context_error": found.context_error,
        "target_state_error": round(found.state_error, 5),  # the target graph's states against transformers'
        "target_state_margin": round(found.state_margin, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--checks-only", action="store_true", help="fidelity and the hostile drafts on the last run's bundles"
    )
    parser.add_argument("--work", type=Path, default=REPO / "bench" / "work")
    parser.add_argument(
        "--mnn-git", type=Path, default=Path(os.environ.get("MNN_GIT", "/work/.mirror/alibaba+MNN/repo"))
    )
    args = parser.parse_args()
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    exporter = source_tree(args.mnn_git, work)
    target, draft = inputs(work)
    cache = work / "graph-cache-dflash"
    env = {**os.environ, "PACKAGER_CACHE_DIR": str(cache), "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": ""}
    source = [sys.executable, "-c", SOURCE_RUNNER, str(exporter), "--path", str(target), "--dflash_path"]
    source_args = ["--export", "mnn", "--quant_bit", "4", "--quant_block", "128", "--dst_path"]
    packager = [sys.executable, "-m", "packager.cli", "convert", str(target), "--quiet", "--force", "--dflash"]
    outs = {"source": work / "out-dflash-source", "cold": work / "out-dflash-cold", "warm": work / "out-dflash-warm"}
    cases = {
        f"MNN {TAG} source-tree llmexport --dflash_path": (
            [*source, str(draft), *source_args, str(outs["source"])],
            None,
        ),
        "packager convert --dflash, cold cache": ([*packager, str(draft), "--out", str(outs["cold"])], True),
        "packager convert --dflash, warm cache": ([*packager, str(draft), "--out", str(outs["warm"])], False),
    }
    timing = work / "dflash_convert_bench_timing.json"
    if not args.checks_only:
        timing.write_text(json.dumps(time_them(cases, cache, outs, work, env, args.runs), indent=2))
    summary = json.loads(timing.read_text()) if timing.is_file() else {}
    summary.update(checks(source, source_args, packager, outs, target, draft, work, env))
    (work / "dflash_convert_bench.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, indent=2))


def time_them(cases: dict, cache: Path, outs: dict, work: Path, env: dict, runs: int) -> dict:  # type: ignore[type-arg]
    """`runs` alternating runs of each case timed alone, then one more of each with its memory sampled (the sampler
    slows what it samples: bench.convert_bench.measure)."""
    load_before = [round(x, 2) for x in os.getloadavg()]
    results: dict[str, list[dict[str, float]]] = {name: [] for name in cases}
    memory: dict[str, dict[str, float]] = {}
    for run in range(runs + 1):
        # the source tree first on even runs and last on odd ones; warm always after the cold run it reuses
        names = list(cases) if run % 2 == 0 else [*list(cases)[1:], next(iter(cases))]
        for name in names:
            cmd, cold = cases[name]
            if cold:
                shutil.rmtree(cache, ignore_errors=True)
            if cold is None:
                shutil.rmtree(outs["source"], ignore_errors=True)
            sampled = run == runs
            print(f"run {run + 1}{' (memory sampled)' if sampled else ''}: {name}", file=sys.stderr, flush=True)
            if sampled:
                memory[name] = measure(cmd, work, env)
            else:
                results[name].append(measure(cmd, work, env, sample=False))
    base = results[next(iter(cases))]
    summary: dict[str, object] = {
        "load_before": load_before,
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "runs": results,
        "memory sampled": memory,
    }
    first = memory[next(iter(cases))]
    for name in list(cases)[1:]:
        summary[f"{name}: time ratio"] = spread([r["wall_s"] / b["wall_s"] for r, b in zip(results[name], base)])
        summary[f"{name}: PSS ratio"] = round(memory[name]["peak_pss_mb"] / first["peak_pss_mb"], 3)
    return summary


def checks(  # type: ignore[type-arg]
    source: list, source_args: list, packager: list, outs: dict, target: Path, draft: Path, work: Path, env: dict
) -> dict:
    """Fidelity of both bundles' drafts, then the hostile drafts given to both."""
    summary: dict[str, object] = {}
    summary["fidelity"] = {
        "source tree": fidelity(outs["source"], target, draft),
        "packager": fidelity(outs["cold"], target, draft),
    }
    refusals = {}
    for what, bad in hostile(draft, work).items():
        src_out = work / "out-dflash-source-hostile"
        shutil.rmtree(src_out, ignore_errors=True)
        src = subprocess.run([*source, str(bad), *source_args, str(src_out)], cwd=work, env=env, capture_output=True)
        pk = subprocess.run(
            [*packager, str(bad), "--out", str(work / "out-dflash-hostile")], cwd=work, env=env, capture_output=True
        )
        refusals[what] = {
            "source tree exit": src.returncode,
            "source tree wrote dflash.mnn": (src_out / "dflash.mnn").is_file(),
            "source tree mask id": json.loads((src_out / "config.json").read_text()).get("dflash_mask_token_id")
            if (src_out / "config.json").is_file()
            else None,
            "packager exit": pk.returncode,
            "packager said": pk.stderr.decode("utf-8", "replace").strip().splitlines()[-1:],
        }
    summary["hostile drafts"] = refusals
    return summary


if __name__ == "__main__":
    main()
