"""`convert`: checkpoint (+ LoRA) -> the ten-file MNN bundle, built in a stage and moved into place at the end."""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .. import resources
from ..bundle import presets
from ..bundle.engine import (
    DEFAULT_TARGET,
    EngineRequirement,
    EngineTarget,
    UnservedEngine,
    combine,
    format_version,
    graph_requirement,
    target,
)
from ..bundle.kinds import DRAFT, EAGLE_FILES, EMBEDDINGS, KINDS, LOOKUP, TARGET, TARGET_EAGLE, BundleKind
from ..bundle.lookahead import Lookahead, read_corpus
from ..bundle.lookahead import settings as lookahead_settings
from ..bundle.staging import Protected, StagedDir, check_target
from ..bundle.tokenizer_txt import MIN_ENGINE
from ..errors import ConversionFailed, ExtraNotInstalled, InvalidOption, SpecError, shorten
from ..infra.hashing import xxh3_128_file
from ..infra.progress import Progress
from ..infra.versions import missing
from ..spec.model import ReleaseSpec
from . import provenance
from . import recipe as recipes
from .eagle import faithful
from .fence.launch import Runner, WorkerJob, WorkerResult, run_worker
from .inspect.checkpoint import CheckpointInfo, family_fields, inspect_checkpoint
from .inspect.eagle_head import HeadInfo, inspect_head
from .inspect.lora import AdapterInfo, inspect_adapter, other_base_warning
from .recipe import QuantRecipe
from .reproducible import stamp_graph_uuid, stamp_uuid
from .stream import run as stream
from .stream.layout import LayoutUnknown
from .stream.weightwriter import StreamingUnsupported
from .tokenizer import TokenizerChoice, agreement, choose, hf_encodings


@dataclass(frozen=True)
class ConvertRequest:
    checkpoint: Path
    out: Path
    adapter: Path | None = None
    spec: ReleaseSpec | None = None
    quant_bits: int | None = None
    quant_block: int | None = None
    force: bool = False
    reference: bool = False  # llmexport's whole-model path instead of the streaming one
    engine: str | None = None  # the oldest MNN the bundle must run on ("newest" or None: the default)
    # The rest of the recipe (None: the spec's [convert] value, else llmexport's default as packager sets it).
    symmetric: bool | None = None
    algorithm: str | None = None
    lm_bits: int | None = None
    lm_block: int | None = None
    kind: str | None = None  # "draft" (the default), "target" or "target+eagle" (implied by `eagle`)
    eagle: Path | None = None  # an EAGLE-3 head (SpecForge layout) exported with the target
    allow_pickle_head: bool = False  # let a pytorch_model.bin head be loaded (a pickle)
    lookahead: bool | Path | None = None  # True: MNN's lookahead; a path: with that corpus (None: the spec's)
    lookahead_length: int | None = None  # lookahead's draft_predict_length (None: the spec's, else MNN's 3)


@dataclass(frozen=True)
class ConvertResult:
    out: Path
    sizes: dict[str, int]
    digests: dict[str, str]
    engine: EngineRequirement
    tokenizer: TokenizerChoice
    quant_bits: int
    quant_block: int
    graph_uuid: str
    provenance: Path
    blocked: tuple[str, ...]
    warnings: tuple[str, ...] = ()
    path: str = "reference"  # how the weights were made: "streamed" or "reference"
    target: EngineTarget = DEFAULT_TARGET
    recipe: QuantRecipe = QuantRecipe()
    kind: BundleKind = DRAFT
    head: HeadInfo | None = None
    faithfulness: faithful.Faithfulness | None = None  # the exported head against the checkpoint's
    lookahead: Lookahead | None = None


def eagle_head(request: ConvertRequest) -> Path | None:
    settings = request.spec.convert if request.spec else None
    return request.eagle or (settings.eagle if settings is not None else None)


def bundle_kind(request: ConvertRequest) -> BundleKind:
    """The kind asked for: --eagle makes a target+eagle bundle, else --kind (default: draft)."""
    settings = request.spec.convert if request.spec else None
    name = request.kind or (settings.kind if settings is not None else None)
    if eagle_head(request) is not None:
        if name not in (None, TARGET_EAGLE.name, TARGET.name):
            raise InvalidOption(
                f"--eagle makes a {TARGET_EAGLE.name} bundle, not a {name} bundle", "drop --kind, or drop --eagle"
            )
        return TARGET_EAGLE
    if name == TARGET_EAGLE.name:
        raise InvalidOption("a target+eagle bundle needs its head", "pass --eagle HEAD_FOLDER")
    if name is None:
        return DRAFT
    if name not in KINDS:
        raise InvalidOption(f"unknown bundle kind {shorten(repr(name))}", f"use one of {', '.join(KINDS)}")
    return KINDS[name]


def lookahead_plan(request: ConvertRequest, kind: BundleKind) -> Lookahead | None:
    """--lookahead, else the spec's [convert] lookahead: MNN's settings and the corpus, checked before any work."""
    settings = request.spec.convert if request.spec else None
    asked = request.lookahead if request.lookahead is not None else (settings.lookahead if settings else None)
    if not asked:
        if request.lookahead_length is not None:
            raise InvalidOption("--lookahead-length sets the draft length of lookahead", "add --lookahead")
        return None
    if kind is TARGET_EAGLE:
        raise InvalidOption(
            "a bundle has one speculative_type: lookahead cannot go with an EAGLE-3 head",
            "drop --lookahead or --eagle (convert twice for two bundles)",
        )
    spec = request.spec
    main = spec.runtime.main if spec is not None else {}
    if spec is not None and main.get("speculative_type", "lookahead") != "lookahead":
        raise SpecError(
            f"{spec.path or 'the release spec'}: runtime.main.speculative_type is "
            f"{shorten(repr(main['speculative_type']))}, but lookahead was asked for",
            "drop one of them: a bundle has one speculative_type",
        )
    corpus = read_corpus(asked, request.out) if isinstance(asked, Path) else None
    return Lookahead(corpus, lookahead_settings(main, request.lookahead_length))


def quantized_inputs(info: CheckpointInfo) -> dict[str, int]:
    """Input size of every kind of linear the converter quantizes (the block must divide each)."""
    return recipes.quantized_inputs(info.shape)


def quant_recipe(request: ConvertRequest, info: CheckpointInfo) -> QuantRecipe:
    """Flags win over the spec's [convert] values, which win over the checkpoint's defaults (its family's bits, the
    largest block of 128, 64, 32 dividing its input sizes; plain asym). A refused value is named as it was given:
    the flag, or the spec's key (then a SpecError)."""
    settings = request.spec.convert if request.spec else None
    values, from_spec = {}, set()
    for key, flag in (
        ("quant_bits", request.quant_bits),
        ("quant_block", request.quant_block),
        ("symmetric", request.symmetric),
        ("algorithm", request.algorithm),
        ("lm_bits", request.lm_bits),
        ("lm_block", request.lm_block),
    ):
        value = flag if flag is not None else (getattr(settings, key) if settings else None)
        if value is not None:
            values[key] = value
            from_spec |= {key} if flag is None else set()
    origin = recipes.Origin(frozenset(from_spec), str(request.spec.path or "the release spec") if request.spec else "")
    for key, value in recipes.defaults(info.family.default_bits, info.shape).items():
        values.setdefault(key, value)
    found = recipes.build(values, origin=origin)
    recipes.check(found, inputs=quantized_inputs(info), origin=origin, model=f"this {info.family.title} checkpoint")
    return found


def engine_target(request: ConvertRequest) -> EngineTarget:
    """--engine, else the spec's [convert] engine, else newest; a version packager cannot serve is refused."""
    settings = request.spec.convert if request.spec else None
    from_spec = request.engine is None and settings is not None and settings.engine is not None
    requested = settings.engine if from_spec else request.engine  # type: ignore[union-attr]
    try:
        return target(requested)
    except UnservedEngine as exc:
        if from_spec:
            where = request.spec.path or "the release spec"  # type: ignore[union-attr]
            raise SpecError(f"{where}: convert.engine: {shorten(str(exc))}", exc.hint) from None
        raise InvalidOption(shorten(str(exc)), exc.hint) from None


def require_converter() -> None:
    """ExtraNotInstalled, before any work, where this install lacks what converting needs (a base install)."""
    lacking = missing()
    if lacking:
        raise ExtraNotInstalled(f"converting needs {', '.join(lacking)}, which this install of packager lacks")


def convert(request: ConvertRequest, progress: Progress = lambda _: None, runner: Runner = run_worker) -> ConvertResult:
    """Inspect, export through the fenced worker, assemble, check, and move the bundle into place."""
    require_converter()
    kind = bundle_kind(request)
    mode = lookahead_plan(request, kind)
    goal = engine_target(request)
    info = inspect_checkpoint(request.checkpoint, allow_untied=kind is not DRAFT, engine=goal.version)
    adapter: AdapterInfo | None = inspect_adapter(request.adapter, info) if request.adapter else None
    head_path = eagle_head(request)
    head = inspect_head(head_path, info, request.allow_pickle_head) if head_path is not None else None
    recipe = quant_recipe(request, info)
    if head is not None and recipe.algorithm != "plain":
        raise InvalidOption(
            f"--eagle takes plain quantization only ({recipe.algorithm} was asked for)",
            "the exported head is checked against the checkpoint's with round-to-nearest weights; drop --algorithm",
        )
    readable = [f for f in info.family.tokenizer_formats if MIN_ENGINE[f] <= goal.version]  # type: ignore[index]
    if not goal.default and not readable:
        raise InvalidOption(
            f"--engine {goal.requested} reads no tokenizer format that is right for {info.family.title} "
            f"(it needs the PIPELINE format, first read by MNN 3.5.0)",
            "build for MNN 3.5.0 or later",
        )
    out = request.out.absolute()
    protected = Protected(inputs=(info.path, *((adapter.path,) if adapter else ()), *((head.path,) if head else ())))
    check_target(out, request.force, protected)
    corpus = resources.tokenizer_corpus()
    with StagedDir(out, request.force, protected, report=progress) as stage, ThreadPoolExecutor(1) as beside:
        reference, inputs = _start_beside(beside, info, adapter, corpus)
        # The head check's torch side needs nothing of the bundle: made while the converter runs (a core is idle
        # once the weights are written), it leaves only the MNN side for after the export.
        prepared = (
            beside.submit(faithful.prepare, head, info, recipe.bits, recipe.block, recipe.symmetric)
            if head is not None
            else None
        )
        worker, path = _export(
            request, info, adapter, recipe, stage.subdir("work"), corpus, runner, progress, goal, head
        )
        return _finish(
            request,
            info,
            adapter,
            recipe,
            goal,
            worker,
            path,
            stage,
            corpus,
            reference.result(),
            progress,
            inputs.result(),
            kind,
            head,
            mode,
            prepared.result() if prepared else None,
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
    with ExitStack() as stack:
        stages = [
            stack.enter_context(StagedDir(out, r.force, protected, report=progress)) for r, out in zip(requests, outs)
        ]
        reference, inputs = _start_beside(stack.enter_context(ThreadPoolExecutor(1)), info, adapter, corpus)
        job = _whole_model_job(
            info,
            adapter,
            chosen[0],
            stages[0].subdir("work"),
            corpus,
            goal,
            also=tuple({"name": c.name, **_quant_fields(c)} for c in chosen[1:]),
        )
        worker = runner(job, progress)
        results = []
        for number, (request, recipe, stage) in enumerate(zip(requests, chosen, stages)):
            progress(f"recipe {recipe.name}: assembling its bundle")
            this = worker if number == 0 else replace(worker, export_dir=worker.also[recipe.name])
            results.append(
                _finish(
                    request,
                    info,
                    adapter,
                    recipe,
                    goal,
                    this,
                    "reference",
                    stage,
                    corpus,
                    reference.result(),
                    progress,
                    inputs.result(),
                )
            )
    return results


def _start_beside(
    beside: ThreadPoolExecutor, info: CheckpointInfo, adapter: AdapterInfo | None, corpus: tuple[str, ...]
) -> tuple[Future[list[list[int]]], Future[provenance.InputDigests]]:
    """The Hugging Face reference ids and the inputs' digests, ready by the time the converter is done."""
    return (
        beside.submit(hf_encodings, info.path / "tokenizer.json", corpus),
        beside.submit(provenance.input_digests, info, adapter),
    )


def _finish(
    request: ConvertRequest,
    info: CheckpointInfo,
    adapter: AdapterInfo | None,
    recipe: QuantRecipe,
    goal: EngineTarget,
    worker: WorkerResult,
    path: str,
    stage: StagedDir,
    corpus: tuple[str, ...],
    reference: list[list[int]],
    progress: Progress,
    inputs: provenance.InputDigests,
    kind: BundleKind = DRAFT,
    head: HeadInfo | None = None,
    mode: Lookahead | None = None,
    prepared: faithful.Reference | None = None,
) -> ConvertResult:
    """Assemble the exported files into a bundle of its kind, check it, record provenance, move it into place."""
    warnings = tuple(w for w in [other_base_warning(adapter, info) if adapter else None] if w)
    warnings += mode.warnings() if mode is not None else ()
    if info.exact_positions is not None:
        warnings += (
            f"the bundle computes what transformers does up to {info.exact_positions:,} positions "
            "(original_max_position_embeddings), not past them: llmexport exports longrope's short factor, and "
            "past them transformers switches every position to the long factor, which a graph with fixed rope "
            "frequencies cannot do; keep prompt and output within that many tokens",
        )
    bits, block = recipe.bits, recipe.block
    out = request.out.absolute()
    progress("assembling the bundle")
    built = stage.subdir("bundle")
    engine, choice, graph_uuid, weight_digest = _assemble(
        worker, info, request, built, corpus, goal, reference, kind, head, mode
    )
    checked = None
    if head is not None:
        progress("checking the exported EAGLE-3 head against the checkpoint's (MNN and torch, same inputs)")
        checked = faithful.check(built, head, info, recipe.bits, recipe.block, recipe.symmetric, prepared)
    progress(f"validating the bundle ({kind.name})")
    _check_built(built, request.spec)
    names = kind.present(built)
    digests = {name: weight_digest if name == "llm.mnn.weight" else xxh3_128_file(built / name) for name in names}
    sizes = {name: (built / name).stat().st_size for name in names}
    record = provenance.build(
        info=info,
        adapter=adapter,
        bits=bits,
        block=block,
        engine=engine,
        tokenizer=choice,
        digests=digests,
        versions=worker.versions,
        graph_uuid=graph_uuid,
        blocked=worker.blocked,
        spec=request.spec,
        path=path,
        target=goal,
        recipe=recipe,
        inputs=inputs,
        kind=kind.name,
        head=head,
        faithfulness=checked,
        lookahead=mode.record() if mode else None,
    )
    staged_record = stage.path / "provenance.json"  # type: ignore[operator]
    provenance.write(staged_record, record)
    stage.commit(built)
    os.replace(staged_record, provenance.provenance_path(out))
    return ConvertResult(
        out=out,
        sizes=sizes,
        digests=digests,
        engine=engine,
        tokenizer=choice,
        quant_bits=bits,
        quant_block=block,
        graph_uuid=graph_uuid,
        provenance=provenance.provenance_path(out),
        blocked=worker.blocked,
        warnings=warnings,
        path=path,
        target=goal,
        recipe=recipe,
        kind=kind,
        head=head,
        faithfulness=checked,
        lookahead=mode,
    )


def _export(
    request: ConvertRequest,
    info: CheckpointInfo,
    adapter: AdapterInfo | None,
    recipe: QuantRecipe,
    workdir: Path,
    corpus: tuple[str, ...],
    runner: Runner,
    progress: Progress,
    goal: EngineTarget,
    head: HeadInfo | None = None,
) -> tuple[WorkerResult, str]:
    """The streaming path when it can reproduce the reference bytes, else llmexport loading the whole model."""
    bits, block = recipe.bits, recipe.block
    if not request.reference and not recipe.streamable:
        progress(
            f"the streaming writer reproduces plain asymmetric quantization only; {recipe.name} is made by "
            "llmexport loading the whole model"
        )
    if not request.reference and recipe.streamable:
        try:
            return stream.export(
                info, adapter, bits, block, workdir, corpus, runner, progress, fuse_c4=goal.fuse_c4, head=head
            ), "streamed"
        except (StreamingUnsupported, LayoutUnknown) as exc:
            progress(f"streaming does not cover this checkpoint ({shorten(str(exc))}); loading the whole model instead")
            shutil.rmtree(workdir)
            workdir.mkdir()
    job = replace(
        _whole_model_job(info, adapter, recipe, workdir, corpus, goal),
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


def _whole_model_job(
    info: CheckpointInfo,
    adapter: AdapterInfo | None,
    recipe: QuantRecipe,
    workdir: Path,
    corpus: tuple[str, ...],
    goal: EngineTarget,
    also: tuple[dict[str, Any], ...] = (),
) -> WorkerJob:
    return WorkerJob(
        source=info.path,
        adapter=adapter.path if adapter else None,
        workdir=workdir,
        stop_ids=info.stop_ids,
        corpus=corpus,
        fuse_c4=goal.fuse_c4,
        also=also,
        **family_fields(info),
        **_quant_fields(recipe),
    )


def _check_built(built: Path, spec: ReleaseSpec | None) -> None:
    """Never move into place a bundle our own validate would reject."""
    from ..validate import validate

    report = validate(built, checksums=False)
    if not report.errors:
        return
    first = report.errors[0]
    what = f"({len(report.errors)} errors, first: {first.location}: {shorten(first.message)})"
    if spec is not None and first.file in presets.RENDERED:
        raise SpecError(
            f"the runtime settings of {spec.path} give a bundle that fails validation {what}",
            "fix the spec's [runtime.*] values; nothing was written",
        )
    raise ConversionFailed(
        f"the converter produced a bundle that fails validation {what}",
        "nothing was written; please report this with the --debug output",
    )


def _built_how(goal: EngineTarget) -> str:
    fusion = "C4 attention fusion kept" if goal.fuse_c4 else f"converter option {' '.join(goal.converter_flags)}"
    return f"{fusion}, tokenizer formats MNN {format_version(goal.version)} reads"


def _assemble(
    worker: WorkerResult,
    info: CheckpointInfo,
    request: ConvertRequest,
    built: Path,
    corpus: tuple[str, ...],
    goal: EngineTarget,
    reference: list[list[int]],
    kind: BundleKind = DRAFT,
    head: HeadInfo | None = None,
    mode: Lookahead | None = None,
) -> tuple[EngineRequirement, TokenizerChoice, str, str]:
    """The kind's files in `built`; returns their engine, the tokenizer choice, the graph uuid, the weights' digest."""
    export = worker.export_dir
    moved = [
        "llm.mnn",
        "llm.mnn.json",
        "llm.mnn.weight",
        "llm_config.json",
        *(() if info.tied else (EMBEDDINGS,)),
        *(EAGLE_FILES if head is not None else ()),
    ]
    for name in moved:
        if not (export / name).is_file():
            raise ConversionFailed(f"the converter did not write {name}")
        os.replace(export / name, built / name)
    weight_digest = xxh3_128_file(built / "llm.mnn.weight")  # the stamp does not touch the weights
    graph_uuid = stamp_uuid(built / "llm.mnn", built / "llm.mnn.json", weight_digest)
    if head is not None:  # the head's graphs carry a uuid drawn on every export too
        for graph in ("eagle.mnn", "eagle_fc.mnn"):
            stamp_graph_uuid(built / graph, xxh3_128_file(built / f"{graph}.weight"))
    graph_engine = graph_requirement(built / "llm.mnn.json")
    agreements = tuple(
        agreement(fmt, worker.encodings[fmt], reference, corpus)
        for fmt in ("text", "pipeline")
        if fmt in worker.encodings
    )
    if not goal.default and graph_engine.version > goal.version:
        raise ConversionFailed(
            f"the converter made a graph for MNN {graph_engine.text} although MNN {goal.text} "
            f"was asked for ({'; '.join(graph_engine.reasons)})"
        )
    # The default keeps every format the graph's engine reads; an --engine target only those it reads.
    try:
        choice = choose(agreements, graph_engine.version if goal.default else goal.version)
    except ValueError:
        raise InvalidOption(
            f"MNN {goal.text} reads no tokenizer format that is right for {info.family.title} "
            f"({', '.join(a.format for a in agreements)} only, first read by MNN 3.5.0)",
            "build for MNN 3.5.0 or later (--engine)",
        ) from None
    shutil.copyfile(worker.tokenizers[choice.format], built / "tokenizer.txt")
    tokenizer_engine = EngineRequirement(
        MIN_ENGINE[choice.format],
        (
            ("tokenizer.txt is in the PIPELINE format (type 4), first read by MNN 3.5.0",)
            if choice.format == "pipeline"
            else ()
        ),
    )
    engine = combine(graph_engine, tokenizer_engine)
    if not goal.default:
        engine = EngineRequirement(
            engine.version,
            (*engine.reasons, f"built for MNN {goal.text} and later (--engine {goal.requested}; {_built_how(goal)})"),
        )
    if mode is not None:
        from ..bundle.modes import mode_requirement

        engine = combine(engine, *mode_requirement("lookahead"))
        if mode.corpus is not None:
            (built / LOOKUP).write_bytes(mode.corpus.data)  # the bytes that were checked
    keys = mode.keys() if mode is not None else None
    overrides = request.spec.runtime if request.spec else presets.RuntimeOverrides()
    rendered = (
        presets.render(overrides, engine, keys, family=info.family)
        if kind is DRAFT
        else presets.render_target(overrides, head, untied=not info.tied, mode=keys, family=info.family)
    )
    for name, data in rendered.items():
        (built / name).write_bytes(data)
    return engine, choice, graph_uuid, weight_digest
