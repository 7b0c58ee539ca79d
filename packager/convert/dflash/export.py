"""dflash.mnn and dflash_fc.mnn from a checked draft: packager's graphs (dflash.graph) with the checkpoint's weights
and the target's lm_head, traced to ONNX and converted by pymnn's MNNConvert in this process (the converter
worker's, inside the fence). As MNN's own exporter does, the draft graph is converted without transformer fusion
(fused attention assumes causal masking; the draft attends to everything) and at 8 bits; dflash_fc stays float
(the engine runs it in fp32: its input is several hidden states wide)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...infra.hashing import xxh3_128_file
from ...infra.progress import Progress
from ..inspect.dflash_draft import DFlashDraft
from ..reproducible import stamp_graph_uuid

DRAFT_BITS = 8
DRAFT_BLOCK = 64  # per-block scales where the block divides every input width, else per channel
DRAFT_FILES = ("dflash.mnn", "dflash_fc.mnn")
LM_HEAD_NAMES = ("lm_head.weight", "model.embed_tokens.weight")  # untied first, else the tied embedding


def target_lm_head(weight_files: tuple[Path, ...], names: tuple[str, ...] = LM_HEAD_NAMES) -> Any:
    """The target's lm_head [vocab, hidden] (float32), read from its safetensors: its own, else the embedding."""
    import torch
    from safetensors import safe_open

    for name in names:
        for file in weight_files:
            with safe_open(str(file), framework="pt") as handle:
                if name in handle.keys():  # noqa: SIM118 - safe_open has keys(), not __contains__
                    return handle.get_tensor(name).to(torch.float32)
    raise ValueError(f"the target's weights hold none of {', '.join(names)}")


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


def mnnconvert(onnx: Path, out: Path, flags: tuple[str, ...] = ()) -> None:
    import os
    import subprocess
    import sys

    args = ["MNNConvert", "-f", "ONNX", "--modelFile", str(onnx), "--MNNModel", str(out), "--bizCode", "MNN", *flags]
    done = subprocess.run(
        [sys.executable, "-c", _CONVERT, *args],
        cwd=onnx.parent,
        env={**os.environ, **_MALLOC},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        check=False,
    )
    if done.returncode != 0 or not out.is_file():
        tail = done.stderr.decode("utf-8", "replace")[-300:].strip()
        raise RuntimeError(f"MNNConvert did not convert {onnx.name} (exit {done.returncode}): {tail}")


# torch's ONNX exporter spends most of its time on the lm_head's size (its shape inference serialises every weight:
# 15 s of a 0.6B target's draft with 151,936 rows); the graph does not depend on the vocabulary's size. So the draft
# is traced with this many of the lm_head's rows, and the whole lm_head spliced in after, as external data beside
# the ONNX file (the faithful check compares the result with the reference over the whole vocabulary).
TRACED_ROWS = 11
LM_HEAD_DATA = "dflash.lm_head.bin"


def splice_lm_head(path: Path, lm_head: Any) -> bool:
    """Put the whole `lm_head` [vocab, hidden] into the ONNX draft at `path`, traced with its first TRACED_ROWS rows:
    the one initializer that holds those rows transposed becomes all of them (external data beside the file), and
    the logits' vocabulary dimension follows. False (the file untouched) if no single initializer is those rows."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    traced = lm_head[:TRACED_ROWS].t().contiguous().numpy()
    found = [
        i
        for i in model.graph.initializer
        if list(i.dims) == list(traced.shape) and np.array_equal(numpy_helper.to_array(i), traced)
    ]
    if len(found) != 1:
        return False
    (init,) = found
    whole = lm_head.t().contiguous().numpy()
    whole.tofile(path.parent / LM_HEAD_DATA)
    init.ClearField("raw_data")
    del init.dims[:]
    init.dims.extend(whole.shape)
    init.data_location = onnx.TensorProto.EXTERNAL
    del init.external_data[:]
    for key, value in (("location", LM_HEAD_DATA), ("offset", "0"), ("length", str(whole.nbytes))):
        entry = init.external_data.add()
        entry.key, entry.value = key, value
    for output in model.graph.output:
        for dim in output.type.tensor_type.shape.dim:
            if dim.HasField("dim_value") and dim.dim_value == TRACED_ROWS:
                dim.dim_value = whole.shape[1]
    onnx.save(model, str(path))
    return True


def cache_key(draft: DFlashDraft, weight_files: tuple[Path, ...]) -> str:
    """The graph cache's key of the draft's two graphs: the draft's own bytes and facts, the bytes of the target's
    lm_head they carry, how they are made (bits, block, traced rows) and the versions that make them."""
    import dataclasses
    import json

    from ... import __version__
    from ...infra.hashing import xxh3_128_bytes
    from ...infra.versions import installed
    from ..stream import graphcache
    from ..stream.weightwriter import index

    refs = index(weight_files)
    ref = next(refs[name] for name in LM_HEAD_NAMES if name in refs)
    with open(ref.file, "rb") as handle:
        handle.seek(ref.start)
        lm_head = xxh3_128_bytes(handle.read(ref.nbytes))
    facts = {k: v for k, v in dataclasses.asdict(draft).items() if k not in ("path", "weights")}
    return graphcache.key(
        {
            "dflash_draft": xxh3_128_file(draft.weights),
            "facts": json.loads(json.dumps(facts, default=str)),
            "lm_head": [ref.dtype, list(ref.shape), lm_head],
            "made": {"bits": DRAFT_BITS, "block": block_for(draft), "traced_rows": TRACED_ROWS},
            "packager": __version__,
            "versions": installed(("mnn", "torch", "onnx")),
        }
    )


def export(draft: DFlashDraft, weight_files: tuple[Path, ...], dst: Path, progress: Progress = lambda _: None) -> None:
    """Both graphs into `dst`, from the graph cache when an entry of the same draft and lm_head is there, else
    exported and stored in it (their ONNX files in dst/onnx-dflash, left for the caller's work folder)."""
    import shutil

    from ..stream import graphcache

    entry_key = cache_key(draft, weight_files)
    cached = graphcache.lookup(entry_key, progress)
    if cached is not None:
        progress(f"graph cache hit for the DFlash draft ({entry_key[:12]})")
        for name in DRAFT_FILES:
            shutil.copyfile(cached / name, dst / name)
        return
    _export(draft, weight_files, dst)
    graphcache.store(
        entry_key,
        {name: dst / name for name in DRAFT_FILES},
        {"describe": f"DFlash draft {draft.path.name} ({draft.num_layers} layers, block {draft.block_size})"},
    )


def _export(draft: DFlashDraft, weight_files: tuple[Path, ...], dst: Path) -> None:
    from . import graph

    lm_head = target_lm_head(weight_files)
    onnx = dst / "onnx-dflash"
    onnx.mkdir(parents=True, exist_ok=True)
    main, fc = graph.load(draft, lm_head[:TRACED_ROWS])
    main_onnx, fc_onnx = graph.export_onnx(main, fc, draft, onnx)
    if not splice_lm_head(main_onnx, lm_head):  # traced otherwise than expected: trace it whole
        main, fc = graph.load(draft, lm_head)
        main_onnx, fc_onnx = graph.export_onnx(main, fc, draft, onnx)
    del main, fc, lm_head
    mnnconvert(fc_onnx, dst / "dflash_fc.mnn")
    block = block_for(draft)
    quant = ("--weightQuantBits", str(DRAFT_BITS), *(("--weightQuantBlock", str(block)) if block else ()))
    mnnconvert(main_onnx, dst / "dflash.mnn", quant)
    # MNNConvert draws a uuid into each graph (their weights are inside): one made from the content instead, here
    # beside the target's conversion rather than after it (a 0.6B target's dflash.mnn is 211 MB to read and write)
    digest = xxh3_128_file(draft.weights)
    for name in DRAFT_FILES:
        stamp_graph_uuid(dst / name, digest)
