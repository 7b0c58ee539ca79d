"""`convert`: checkpoint (+ LoRA) -> the ten-file MNN bundle, built in a stage and moved into place at the end.

Planning (packager.convert.plan) checks everything it can first; the export runs the fenced converter (streamed
where it reproduces the reference bytes); assembly (packager.convert.assemble) makes, checks and records the bundle.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

from .. import resources
from ..bundle.kinds import DRAFT
from ..bundle.staging import Protected, StagedDir, check_target
from ..errors import InvalidOption, shorten
from ..infra.progress import Progress
from . import provenance
from .assemble import ConvertResult, finish
from .dflash import export as dflash_export
from .dflash import faithful as dflash_faithful
from .eagle import faithful
from .fence.launch import Runner, WorkerJob, WorkerResult, run_worker
from .inspect.checkpoint import family_fields, inspect_checkpoint
from .inspect.lora import inspect_adapter
from .plan import (
    Conversion,
    ConvertRequest,
    bundle_kind,
    engine_target,
    lookahead_plan,
    plan,
    quant_recipe,
    quantized_inputs,
    require_converter,
)
from .recipe import QuantRecipe
from .stream import run as stream
from .stream.layout import LayoutUnknown
from .stream.weightwriter import StreamingUnsupported
from .tokenizer import hf_encodings

# What callers of the pipeline name (the planning and result types live beside it).
__all__ = [
    "ConvertRequest",
    "ConvertResult",
    "bundle_kind",
    "convert",
    "convert_many",
    "lookahead_plan",
    "quant_recipe",
    "quantized_inputs",
]


def convert(request: ConvertRequest, progress: Progress = lambda _: None, runner: Runner = run_worker) -> ConvertResult:
    """Plan, export through the fenced worker, assemble, check, and move the bundle into place."""
    conversion = plan(request)
    info, adapter, head, recipe = conversion.info, conversion.adapter, conversion.head, conversion.recipe
    out = conversion.out
    draft = conversion.dflash
    protected = Protected(
        inputs=(
            info.path,
            *((adapter.path,) if adapter else ()),
            *((head.path,) if head else ()),
            *((draft.path,) if draft else ()),
        )
    )
    check_target(out, request.force, protected)
    with StagedDir(out, request.force, protected, report=progress) as stage, ThreadPoolExecutor(1) as beside:
        # A DFlash draft's graphs need nothing of the target's graph: packager's own export (dflash.export), beside,
        # first (it takes about as long as the target's conversion).
        dflash_dir, drafted, dflash_prepared = None, None, None
        if draft is not None:
            dflash_dir = stage.subdir("dflash")
            drafted = beside.submit(dflash_export.export, draft, dflash_dir, progress)
        reference, inputs = _start_beside(beside, conversion)
        # The head check's torch side needs nothing of the bundle: made while the converter runs (a core is idle
        # once the weights are written), it leaves only the MNN side for after the export.
        prepared = (
            beside.submit(faithful.prepare, head, info, recipe.bits, recipe.block, recipe.symmetric)
            if head is not None
            else None
        )
        if draft is not None:
            # its check's torch side (transformers' states, the reference), after the export: at once, the two
            # took 1.56x the memory of MNN's own exporter on a 0.6B target (bench/RESULTS.md, issue 42)
            dflash_prepared = beside.submit(dflash_faithful.prepare, draft, info, recipe)
        worker, path = _export(conversion, stage.subdir("work"), runner, progress)
        if drafted is not None:
            progress("exporting the DFlash draft (dflash.mnn, dflash_fc.mnn)")
            drafted.result()
        return finish(
            conversion,
            worker,
            path,
            stage,
            reference.result(),
            inputs.result(),
            progress,
            prepared.result() if prepared else None,
            dflash_dir,
            dflash_prepared.result() if dflash_prepared else None,
        )


def convert_many(
    requests: Sequence[ConvertRequest], progress: Progress = lambda _: None, runner: Runner = run_worker
) -> list[ConvertResult]:
    """Several quantization recipes of one checkpoint (+ adapter), engine target and spec from one load of the
    model: the worker exports every recipe in turn on llmexport's whole-model path (the `--reference` bytes, which
    the streaming path equals) and makes the tokenizer candidates once. Each bundle is staged and moved into place
    as `convert` does; one that fails leaves those before it in place."""
    if not requests:
        return []
    require_converter()
    first = requests[0]
    shared = (first.checkpoint, first.adapter, first.engine, first.spec)
    if any((r.checkpoint, r.adapter, r.engine, r.spec) != shared for r in requests):
        raise ValueError("convert_many takes one checkpoint, adapter, engine target and spec")
    if any(bundle_kind(r) is not DRAFT for r in requests):
        raise InvalidOption("several recipes at once make draft bundles only", "convert a target bundle on its own")
    info = inspect_checkpoint(first.checkpoint)
    adapter = inspect_adapter(first.adapter, info) if first.adapter else None
    chosen = [quant_recipe(r, info) for r in requests]
    outs = [r.out.absolute() for r in requests]
    if len({c.name for c in chosen}) < len(chosen) or len(set(outs)) < len(outs):
        raise ValueError("convert_many takes distinct recipes and distinct output folders")
    goal = engine_target(first)
    protected = Protected(inputs=(info.path, *((adapter.path,) if adapter else ())))
    for request, out in zip(requests, outs):
        check_target(out, request.force, protected)
    corpus = resources.tokenizer_corpus()
    conversions = [Conversion(r, info, recipe, goal, corpus, adapter) for r, recipe in zip(requests, chosen)]
    with ExitStack() as stack:
        stages = [
            stack.enter_context(StagedDir(out, r.force, protected, report=progress)) for r, out in zip(requests, outs)
        ]
        reference, inputs = _start_beside(stack.enter_context(ThreadPoolExecutor(1)), conversions[0])
        job = _whole_model_job(
            conversions[0],
            stages[0].subdir("work"),
            also=tuple({"name": c.name, **_quant_fields(c)} for c in chosen[1:]),
        )
        worker = runner(job, progress)
        results = []
        for number, (conversion, stage) in enumerate(zip(conversions, stages)):
            progress(f"recipe {conversion.recipe.name}: assembling its bundle")
            this = worker if number == 0 else replace(worker, export_dir=worker.also[conversion.recipe.name])
            results.append(finish(conversion, this, "reference", stage, reference.result(), inputs.result(), progress))
    return results


def _start_beside(
    beside: ThreadPoolExecutor, conversion: Conversion
) -> tuple[Future[list[list[int]]], Future[provenance.InputDigests]]:
    """The Hugging Face reference ids and the inputs' digests, ready by the time the converter is done."""
    info = conversion.info
    return (
        beside.submit(hf_encodings, info.path / "tokenizer.json", conversion.corpus),
        beside.submit(provenance.input_digests, info, conversion.adapter),
    )


def _export(conversion: Conversion, workdir: Path, runner: Runner, progress: Progress) -> tuple[WorkerResult, str]:
    """The streaming path when it can reproduce the reference bytes, else llmexport loading the whole model."""
    recipe, head = conversion.recipe, conversion.head
    if not conversion.request.reference and not recipe.streamable:
        progress(
            f"the streaming writer reproduces plain asymmetric quantization only; {recipe.name} is made by "
            "llmexport loading the whole model"
        )
    if not conversion.request.reference and recipe.streamable:
        try:
            return stream.export(conversion, workdir, runner, progress), "streamed"
        except (StreamingUnsupported, LayoutUnknown) as exc:
            progress(f"streaming does not cover this checkpoint ({shorten(str(exc))}); loading the whole model instead")
            shutil.rmtree(workdir)
            workdir.mkdir()
    job = replace(
        _whole_model_job(conversion, workdir),
        eagle=head.path if head else None,
        eagle_rope_theta=head.rope_theta if head else None,
        eagle_rope_scaling=head.rope_scaling if head else None,
    )
    return runner(job, progress), "reference"


def _quant_fields(recipe: QuantRecipe) -> dict[str, Any]:
    return {
        "quant_bits": recipe.bits,
        "quant_block": recipe.block,
        "symmetric": recipe.symmetric,
        "hqq": recipe.algorithm == "hqq",
        "lm_bits": recipe.lm[0],
        "lm_block": recipe.lm[1],
    }


def _whole_model_job(conversion: Conversion, workdir: Path, also: tuple[dict[str, Any], ...] = ()) -> WorkerJob:
    info, adapter = conversion.info, conversion.adapter
    return WorkerJob(
        source=info.path,
        adapter=adapter.path if adapter else None,
        workdir=workdir,
        stop_ids=info.stop_ids,
        corpus=conversion.corpus,
        fuse_c4=conversion.goal.fuse_c4,
        also=also,
        dflash_layers=conversion.dflash.target_layer_ids if conversion.dflash else (),
        **family_fields(info),
        **_quant_fields(conversion.recipe),
    )
