"""The DFlash draft's graphs: dflash.mnn and dflash_fc.mnn from a checked draft (packager's graphs, dflash.graph, with
the checkpoint's weights, traced to ONNX and converted by pymnn's MNNConvert), and dflash_lmhead.mnn, the target's
own lm_head as a graph of its own (lm_head_graph).

As MNN's own exporter does, the draft graph is converted without transformer fusion (fused attention assumes
causal masking; the draft attends to everything) and at 8 bits; dflash_fc stays float (the engine runs it in fp32:
its input is several hidden states wide). The draft graph ends at its final norm: MNN 3.6.1 reads `hidden_states`
from it when the config names dflash_lmhead, and turns them into logits with that graph. z-lab's drafts share the
target's lm_head, so the lm_head graph is the target graph's own lm_head op and its bytes in llm.mnn.weight, copied:
nothing of a vocabulary-sized head is traced, converted or quantized again (a 0.6B target's head alone took most
of the draft's export time), and the draft scores with the very head the target verifies with.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...bundle.kinds import DFLASH_GRAPHS, DFLASH_LMHEAD
from ...infra.hashing import xxh3_128_file
from ...infra.progress import Progress
from ..inspect.dflash_draft import DFlashDraft
from ..reproducible import stamp_graph_uuid

DRAFT_BITS = 8
DRAFT_BLOCK = 64  # per-block scales where the block divides every input width, else per channel
DRAFT_FILES = DFLASH_GRAPHS


def block_for(draft: DFlashDraft) -> int:
    widths = (draft.hidden_size, draft.intermediate_size, draft.num_heads * draft.head_dim)
    return DRAFT_BLOCK if all(w % DRAFT_BLOCK == 0 for w in widths) else 0


# pymnn's converter in a child working in the graph's own folder: MNN's converter keeps a graph's weights in a
# temporary file with a fixed name in the current folder (`.__convert_external_data.bin`), so two conversions in
# one folder at once overwrite each other's weights (measured: two `convert --dflash` at once, one draft 100% off
# its checkpoint's, refused by the faithful check), and a user's current folder is no place for it. The child
# imports only the converter's extension (no telemetry) and its prints go nowhere.
_CONVERT = "import sys, _tools; sys.exit(0 if _tools.mnnconvert(sys.argv[1:]) is not False else 1)"
# glibc gives blocks this large back to the system when freed and faults them in again when asked for the next
# one: the converter of a 0.6B target's draft (its 622 MB float lm_head) spent most of its time in the kernel.
# Kept in the heap instead (measured, 3 pairs: 5.7-10.0 s -> 4.0-4.8 s, system time 3.4-7.4 s -> 1.7-2.5 s, the
# same peak memory and the same graph).
_MALLOC = {
    "MALLOC_MMAP_THRESHOLD_": str(1 << 32),
    "MALLOC_TRIM_THRESHOLD_": str(1 << 32),
    "MALLOC_TOP_PAD_": str(1 << 28),
}


def mnnconvert(model: Path, out: Path, flags: tuple[str, ...] = (), fmt: str = "ONNX") -> None:
    import os
    import subprocess
    import sys

    args = ["MNNConvert", "-f", fmt, "--modelFile", str(model), "--MNNModel", str(out), "--bizCode", "MNN", *flags]
    done = subprocess.run(
        [sys.executable, "-c", _CONVERT, *args],
        cwd=model.parent,
        env={**os.environ, **_MALLOC},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        check=False,
    )
    if done.returncode != 0 or not out.is_file():
        tail = done.stderr.decode("utf-8", "replace")[-300:].strip()
        raise RuntimeError(f"MNNConvert did not convert {model.name} (exit {done.returncode}): {tail}")


def cache_key(draft: DFlashDraft) -> str:
    """The graph cache's key of the draft's two graphs: the draft's own bytes and facts, how they are made (bits,
    block) and the versions that make them."""
    import dataclasses
    import json

    from ... import __version__
    from ...infra.versions import installed
    from ..stream import graphcache

    facts = {k: v for k, v in dataclasses.asdict(draft).items() if k not in ("path", "weights")}
    return graphcache.key(
        {
            "dflash_draft": xxh3_128_file(draft.weights),
            "facts": json.loads(json.dumps(facts, default=str)),
            "made": {"bits": DRAFT_BITS, "block": block_for(draft), "outputs": "hidden_states"},
            "packager": __version__,
            "versions": installed(("mnn", "torch", "onnx")),
        }
    )


def export(draft: DFlashDraft, dst: Path, progress: Progress = lambda _: None) -> None:
    """The draft's two graphs into `dst`, from the graph cache when an entry of the same draft is there, else
    exported and stored in it (their ONNX files in dst/onnx-dflash, left for the caller's work folder)."""
    import shutil

    from ..stream import graphcache

    entry_key = cache_key(draft)
    cached = graphcache.lookup(entry_key, progress)
    if cached is not None:
        progress(f"graph cache hit for the DFlash draft ({entry_key[:12]})")
        for name in DRAFT_FILES:
            shutil.copyfile(cached / name, dst / name)
        return
    _export(draft, dst)
    graphcache.store(
        entry_key,
        {name: dst / name for name in DRAFT_FILES},
        {"describe": f"DFlash draft {draft.path.name} ({draft.num_layers} layers, block {draft.block_size})"},
    )


def _export(draft: DFlashDraft, dst: Path) -> None:
    from . import graph

    onnx = dst / "onnx-dflash"
    onnx.mkdir(parents=True, exist_ok=True)
    main, fc = graph.load(draft)
    main_onnx, fc_onnx = graph.export_onnx(main, fc, draft, onnx)
    del main, fc
    mnnconvert(fc_onnx, dst / "dflash_fc.mnn")
    block = block_for(draft)
    quant = ("--weightQuantBits", str(DRAFT_BITS), *(("--weightQuantBlock", str(block)) if block else ()))
    mnnconvert(main_onnx, dst / "dflash.mnn", quant)
    # MNNConvert draws a uuid into each graph (their weights are inside): one made from the content instead
    digest = xxh3_128_file(draft.weights)
    for name in DRAFT_FILES:
        stamp_graph_uuid(dst / name, digest)


class LmHeadUnexpected(ValueError):
    """The target graph's lm_head is not the one op chain lm_head_graph knows how to lift out."""


def lm_head_graph(target: Path, dst: Path, work: Path) -> None:
    """dflash_lmhead.mnn (+ .weight) in `dst` from the target's graph in `target` (llm.mnn.json, llm.mnn.weight): the
    ops of its lm_head (llmexport's reshape, layout change, the quantized 1x1 convolution and back) with a
    `hidden_states` input [1, n, hidden] and a `logits` output, written as MNN's JSON in `work` and converted; the
    convolution's bytes copied from llm.mnn.weight to the new graph's own weight file (MNN loads X.mnn's external
    weights from X.mnn.weight)."""
    import json

    from ...bundle.graph import read

    dump = json.loads((target / "llm.mnn.json").read_text(encoding="utf-8"))
    head = read(dump).lm_head
    ops = dump.get("oplists") or []
    if head is None or "lm_head" not in head.name or not head.bits or len(head.external) < 3:
        raise LmHeadUnexpected("the target graph has no quantized lm_head with external weights")
    chain = [op for op in ops if str(op.get("name", "")).startswith(head.name)]
    convs = [op for op in chain if op.get("type") == "Convolution"]
    produced = {t for op in chain for t in op.get("outputIndexes", [])}
    entries = [t for op in chain for t in op.get("inputIndexes", []) if t not in produced]
    if len(convs) != 1 or len(entries) != 1 or len(chain) > 8:
        raise LmHeadUnexpected(f"the target graph's {head.name} is not one convolution in one chain of ops")
    names = dump["tensorName"]
    tensors, index = ["hidden_states"], {entries[0]: 0}
    lifted: list[dict[str, Any]] = [
        {
            "type": "Input",
            "main_type": "Input",
            "name": "hidden_states",
            "inputIndexes": [],
            "outputIndexes": [0],
            "main": {"dims": [1, -1, head.in_features], "dtype": "DT_FLOAT", "dformat": "NCHW"},
            "defaultDimentionFormat": "NHWC",
        }
    ]
    for position, op in enumerate(chain):
        op = json.loads(json.dumps(op))
        op["inputIndexes"] = [index[t] for t in op["inputIndexes"]]
        outputs = []
        for t in op["outputIndexes"]:
            index[t] = len(tensors)
            outputs.append(len(tensors))
            tensors.append("logits" if position == len(chain) - 1 else names[t])
        op["outputIndexes"] = outputs
        if op.get("type") == "Convolution":
            op["main"]["external"] = [0, *op["main"]["external"][1:]]
        lifted.append(op)
    graph = {key: dump[key] for key in ("bizCode", "preferForwardType", "sourceType", "usage") if key in dump}
    graph.update({"oplists": lifted, "outputName": ["logits"], "tensorName": tensors, "tensorNumber": 0})
    graph["mnn_uuid"] = "00000000-0000-0000-0000-000000000000"  # stamped below with one made from the content
    spec = work / "dflash_lmhead.json"
    spec.write_text(json.dumps(graph), encoding="utf-8")
    length = sum(head.external[1:])
    weights = dst / f"{DFLASH_LMHEAD}.weight"
    _copy_bytes(target / "llm.mnn.weight", head.external[0], length, weights)
    mnnconvert(spec, dst / DFLASH_LMHEAD, fmt="JSON")
    stamp_graph_uuid(dst / DFLASH_LMHEAD, xxh3_128_file(weights))


def _copy_bytes(source: Path, start: int, length: int, out: Path) -> None:
    """`length` bytes of `source` from `start` into a new file `out` (nothing written when `source` is shorter): by
    the kernel where the file system can, else through a buffer."""
    import os

    from ...infra.fdio import copy_range

    if os.stat(source).st_size < start + length:
        raise LmHeadUnexpected(f"{source.name} ends before the lm_head's bytes do")
    with open(out, "wb") as dst:
        if copy_range(source, start, length, dst):
            return
        with open(source, "rb") as src:
            src.seek(start)
            left = length
            while left:
                chunk = src.read(min(left, 1 << 24))
                if not chunk:
                    raise LmHeadUnexpected(f"{source.name} ends before the lm_head's bytes do")
                dst.write(chunk)
                left -= len(chunk)
