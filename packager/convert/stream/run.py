"""The streaming conversion: graph from the cache (built on a miss), weights straight from safetensors.

Produces exactly what the reference path (llmexport loading the whole model) produces, byte for byte; what
it cannot reproduce exactly (DoRA or per-module LoRA patterns, a stored dtype other than the one the config
names) raises StreamingUnsupported and the caller takes the reference path.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ... import __version__
from ...bundle.kinds import EAGLE_FILES, EMBEDDINGS
from ...infra.hashing import xxh3_128_bytes, xxh3_128_file
from ...infra.jsonfile import read_json
from ...infra.progress import Progress
from ...infra.versions import installed
from ..fence.launch import Runner, WorkerJob, WorkerResult
from ..fence.worker import BESIDE_NICE, GRAPH_STAGE
from ..inspect.checkpoint import (
    DERIVABLE_TOKENIZER_FILES,
    OPTIONAL_TOKENIZER_FILES,
    TOKENIZER_FILES,
    CheckpointInfo,
    family_fields,
)
from ..inspect.eagle_head import HeadInfo
from ..inspect.lora import _LORA_KEY, _SAVED_KEY, AdapterInfo
from ..inspect.safetensors_header import TensorRef
from ..plan import Conversion
from . import graphcache, layout, weightwriter
from .quant import QuantSpec
from .weightwriter import Lora, StreamingUnsupported

_STORED = {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}
GRAPH_VERSIONS = ("mnn", "llmexport", "torch", "transformers", "onnx", "tokenizers", "peft")


def export(conversion: Conversion, workdir: Path, runner: Runner, progress: Progress) -> WorkerResult:
    """Fill `workdir/export` with the graph files, both tokenizer candidates and the streamed weight file; an
    untied checkpoint's embeddings file streamed too; with `head`, its EAGLE-3 files, exported by llmexport
    beside the target's graph (the head is small; it is cached with the graph, keyed by its own bytes)."""
    info, adapter, head, corpus = conversion.info, conversion.adapter, conversion.head, conversion.corpus
    bits, block, fuse_c4 = conversion.recipe.bits, conversion.recipe.block, conversion.goal.fuse_c4
    refs = weightwriter.index(info.weight_files)
    dtype = _compute_dtype(info, refs, adapter)
    saved, loras = _adapter_tensors(adapter, info) if adapter else ({}, {})
    if not info.tied and adapter and ({layout.EMBED, layout.LM_HEAD} & (set(loras) | set(adapter.saved_modules))):
        raise StreamingUnsupported("the adapter changes an untied embedding or lm_head")
    classes = weightwriter.equality_classes({**refs, **saved}, unique=set(loras))
    refs, zero_biases = _split_fused(info, refs, adapter, {**saved, **loras})
    fields = _key_fields(info, bits, block, dtype, classes, corpus, fuse_c4)
    if head is not None:
        fields["eagle"] = _head_fields(head)
    if conversion.dflash is not None:  # the graph's hidden_states output: these layers' outputs (the last normed)
        fields["dflash_states"] = {"layers": list(conversion.dflash.target_layer_ids), "last": "normed"}
    entry_key = graphcache.key(fields)
    spec = QuantSpec(bits, block)
    export_dir = workdir / "export"
    export_dir.mkdir()
    weight_file = export_dir / "llm.mnn.weight"
    workers = max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)

    embeddings = export_dir / EMBEDDINGS if not info.tied else None

    def write(
        regions: tuple[layout.Region, ...],
        nice: int = 0,
        widen: threading.Event | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        tasks = weightwriter.plan(regions, refs, saved, loras, adapted=adapter is not None, zero_biases=zero_biases)
        if weightwriter.write(
            weight_file, layout.total_size(regions), tasks, spec, workers, progress, nice, widen, stop
        ):
            write_embeddings()

    def write_embeddings() -> None:
        """An untied checkpoint's embeddings file, once (beside the graph build when there is one)."""
        if embeddings is None or embeddings.exists():
            return
        progress(f"writing {EMBEDDINGS} (the untied embedding, bfloat16)")
        partial = embeddings.with_name(EMBEDDINGS + ".partial")
        weightwriter.write_embeddings(partial, saved.get(layout.EMBED) or refs[layout.EMBED])
        os.replace(partial, embeddings)

    entry = graphcache.lookup(entry_key, report=progress)
    predicted: tuple[layout.Region, ...] | None = None
    if entry is None:
        progress(
            "graph cache miss: building the graph once for this shape (llmexport, weights skipped), "
            "writing the weights meanwhile"
        )
        shape = info.shape
        predicted = layout.predict(
            shape.hidden_size,
            shape.num_layers,
            shape.num_heads,
            shape.num_kv_heads,
            shape.head_dim,
            shape.intermediate_size,
            shape.vocab_size,
            spec,
            info.tied,
            family=info.family.layout,
        )
        # The weights are written beside the graph build from the start, on one process while the converter
        # imports its libraries (a single-threaded wait the other core would spend idle) and on every core
        # once it reports the graph stage. (Two writers during the imports slowed them by a third; one costs
        # them nothing measurable and finishes a 0.6B's weights before they end: bench/RESULTS.md.)
        imported, failed = threading.Event(), threading.Event()

        def build_progress(line: str) -> None:
            if line.startswith(GRAPH_STAGE):
                imported.set()
            progress(line)

        with ThreadPoolExecutor(max_workers=1) as background:
            early = background.submit(write, predicted, BESIDE_NICE, imported, failed)
            try:
                entry = _build(conversion, workdir, runner, build_progress, dtype, classes, entry_key)
            except BaseException:
                failed.set()  # no further weight task starts; the error is what the user sees
                raise
            finally:
                imported.set()
            early.result()
    else:
        progress(f"graph cache hit ({entry_key[:12]})")
    held = graphcache.contents(entry)
    if (head is not None) != all(name in held for name in EAGLE_FILES):
        raise StreamingUnsupported("the cached graph's EAGLE-3 files do not match the request")
    for name in held:
        shutil.copyfile(entry / name, export_dir / name)
    meta = json.loads((export_dir / "meta.json").read_text(encoding="utf-8"))
    regions = layout.regions(
        json.loads((export_dir / "llm.mnn.json").read_text(encoding="utf-8")),
        spec,
        tied=info.tied,
        norm_offset=info.family.layout.norm_offset,
    )
    if predicted is None or layout.placement(predicted) != layout.placement(regions):
        if predicted is not None:
            progress("the graph lays the weights out otherwise than predicted; writing them again")
        write(regions)
    write_embeddings()
    return WorkerResult(
        export_dir=export_dir,
        tokenizers={
            fmt: export_dir / name
            for fmt, name in (("pipeline", "tokenizer.mtok"), ("text", "tokenizer-text.txt"))
            if (export_dir / name).is_file()
        },
        encodings=meta["encodings"],
        versions=meta["versions"],
        blocked=(),
        log=workdir / "worker.log",
    )


def _compute_dtype(info: CheckpointInfo, refs: dict[str, TensorRef], adapter: AdapterInfo | None) -> str:
    """The dtype llmexport quantizes in: the config's (it loads with dtype='auto'), float32 after a merge."""
    config = read_json(info.path / "config.json", StreamingUnsupported)
    named = config.get("dtype") or config.get("torch_dtype")
    stored = {_STORED.get(ref.dtype, ref.dtype) for ref in refs.values()}
    if named not in _STORED.values() or stored != {named}:
        raise StreamingUnsupported(
            f"config.json names dtype {named!r} but the weights are stored as {', '.join(sorted(stored))}"
        )
    return "float32" if adapter else str(named)


def _adapter_tensors(adapter: AdapterInfo, info: CheckpointInfo) -> tuple[dict[str, TensorRef], dict[str, Lora]]:
    config = read_json(adapter.path / "adapter_config.json", StreamingUnsupported)
    for option in ("use_dora", "rank_pattern", "alpha_pattern", "lora_bias", "fan_in_fan_out", "layers_pattern"):
        if config.get(option):
            raise StreamingUnsupported(f"the adapter uses {option}")
    scaling = weightwriter.lora_scaling(adapter.alpha, adapter.rank, bool(config.get("use_rslora")))
    refs = weightwriter.index((adapter.weight_file,))
    parts: dict[str, dict[str, TensorRef]] = {}
    saved: dict[str, TensorRef] = {}
    for key, ref in refs.items():
        match = _LORA_KEY.match(key)
        if match:
            parts.setdefault(f"{match['module']}.weight", {})[match["part"]] = ref
        elif ".lora_" in key:
            raise StreamingUnsupported(f"the adapter holds {key}")
        elif saved_match := _SAVED_KEY.match(key):
            saved[saved_match["name"] + saved_match["leaf"]] = ref
    saved.pop("lm_head.weight", None)  # only ever equal to the embedding (checked when the adapter was inspected)
    return saved, {name: Lora(p["A"], p["B"], scaling) for name, p in parts.items()}


def _key_fields(
    info: CheckpointInfo,
    bits: int,
    block: int,
    dtype: str,
    classes: tuple[tuple[str, int], ...],
    corpus: tuple[str, ...],
    fuse_c4: bool = True,
) -> dict[str, Any]:
    config = {
        k: v
        for k, v in read_json(info.path / "config.json", StreamingUnsupported).items()
        if k not in ("_name_or_path", "transformers_version")
    }
    names = (*TOKENIZER_FILES, *DERIVABLE_TOKENIZER_FILES, *OPTIONAL_TOKENIZER_FILES)
    tokenizer = {n: xxh3_128_file(info.path / n) for n in names if (info.path / n).is_file()}
    fields = {
        "config": config,
        "dtype": dtype,
        "equal_tensors": [c for _, c in classes],
        "bits": bits,
        "block": block,
        "tokenizer": tokenizer,
        "stop_ids": list(info.stop_ids),
        "packager": __version__,
        "versions": installed(GRAPH_VERSIONS),
        "corpus": xxh3_128_bytes(json.dumps(corpus, ensure_ascii=True).encode("ascii")),
    }
    if not fuse_c4:  # only then, so the default's keys (and cached entries) stay what they were
        fields["fuse_c4"] = False
    return fields


def _split_fused(
    info: CheckpointInfo, refs: dict[str, TensorRef], adapter: AdapterInfo | None, adapted: dict[str, Any]
) -> tuple[dict[str, TensorRef], frozenset[str]]:
    """The checkpoint's tensors with the graph's slices of its fused ones added (Phi-3's q, k and v are row ranges
    of qkv_proj: contiguous bytes of it), and the graph biases that are zeros (llmexport gives each split
    projection a bias of zeros; the weight file is created zero-filled, so they need no writing)."""
    shape, family_layout = info.shape, info.family.layout
    sources = family_layout.sources(shape.num_heads, shape.num_kv_heads, shape.head_dim)
    if not sources:
        return refs, frozenset()
    fused = {source for source, _, _ in sources.values()}
    if adapter is not None and any(name.split(".", 3)[-1] in fused for name in adapted):
        raise StreamingUnsupported("the adapter changes a fused projection (qkv_proj)")
    found = dict(refs)
    zeros = set()
    for index in range(shape.num_layers):
        for suffix, (source, first, rows) in sources.items():
            ref = refs.get(f"model.layers.{index}.{source}")
            if ref is None or len(ref.shape) != 2:
                raise StreamingUnsupported(f"the checkpoint has no model.layers.{index}.{source}")
            row_bytes = ref.nbytes // ref.shape[0]
            name = f"model.layers.{index}.{suffix}"
            found[name] = TensorRef(
                ref.file, ref.dtype, (rows, ref.shape[1]), ref.start + first * row_bytes, rows * row_bytes
            )
            zeros.add(name.removesuffix(".weight") + ".bias")
    return found, frozenset(zeros)


def _head_fields(head: HeadInfo) -> dict[str, Any]:
    """What of the head shapes its exported files: its config, its weights' bytes, the rope theta it gets."""
    config = read_json(head.path / "config.json", StreamingUnsupported)
    return {"config": config, "weights": xxh3_128_file(head.weights), "rope_theta": head.rope_theta}


def _build(
    conversion: Conversion,
    workdir: Path,
    runner: Runner,
    progress: Progress,
    dtype: str,
    classes: tuple[tuple[str, int], ...],
    entry_key: str,
) -> Path:
    info, adapter, head = conversion.info, conversion.adapter, conversion.head
    bits, block, fuse_c4 = conversion.recipe.bits, conversion.recipe.block, conversion.goal.fuse_c4
    graph_work = workdir / "graph"
    graph_work.mkdir()
    result = runner(
        WorkerJob(
            source=info.path,
            adapter=None,
            workdir=graph_work,
            quant_bits=bits,
            quant_block=block,
            stop_ids=info.stop_ids,
            corpus=conversion.corpus,
            graph_only=True,
            graph_dtype=dtype,
            equal_tensors=classes,
            fuse_c4=fuse_c4,
            eagle=head.path if head else None,
            eagle_rope_theta=head.rope_theta if head else None,
            eagle_rope_scaling=head.rope_scaling if head else None,
            dflash_layers=conversion.dflash.target_layer_ids if conversion.dflash else (),
            **family_fields(info),
        ),
        progress,
    )
    export = result.export_dir
    files = {
        name: export / name
        for name in ("llm.mnn", "llm.mnn.json", "llm_config.json", *(EAGLE_FILES if head is not None else ()))
    }
    files["tokenizer.mtok"] = result.tokenizers["pipeline"]
    if "text" in result.tokenizers:
        files["tokenizer-text.txt"] = result.tokenizers["text"]
    shape = info.shape
    describe = (
        f"{info.model_type} hidden {shape.hidden_size} x {shape.num_layers} layers, {dtype}, "
        f"{bits}-bit {'per-channel' if block == 0 else f'block {block}'}"
        f"{'' if info.tied else ', untied'}{'' if fuse_c4 else ', no C4 fusion'}"
        f"{', with an EAGLE-3 head' if head is not None else ''}"
        f"{f', hidden states after layers {list(conversion.dflash.target_layer_ids)}' if conversion.dflash else ''}"
    )
    meta = {"describe": describe, "encodings": result.encodings, "versions": result.versions, "adapter": bool(adapter)}
    return graphcache.store(entry_key, files, meta)
