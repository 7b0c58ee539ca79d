"""A conversion's exported files assembled into a bundle of its kind, checked, recorded and moved into place."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..bundle import presets
from ..bundle.engine import (
    DEFAULT_TARGET,
    EngineRequirement,
    EngineTarget,
    combine,
    format_version,
    graph_requirement,
)
from ..bundle.kinds import DFLASH_GRAPHS, DRAFT, EAGLE_FILES, EMBEDDINGS, LOOKUP, BundleKind
from ..bundle.lookahead import Lookahead
from ..bundle.staging import StagedDir
from ..bundle.tokenizer_txt import MIN_ENGINE
from ..errors import ConversionFailed, InvalidOption, SpecError, shorten
from ..infra.hashing import xxh3_128_file
from ..infra.progress import Progress
from ..spec.model import ReleaseSpec
from . import provenance
from .dflash import export as dflash_export
from .dflash import faithful as dflash_faithful
from .eagle import faithful
from .fence.job import WorkerResult
from .inspect.dflash_draft import DFlashDraft
from .inspect.eagle_head import HeadInfo
from .inspect.lora import other_base_warning
from .plan import Conversion
from .recipe import QuantRecipe
from .reproducible import stamp_graph_uuid, stamp_uuid
from .tokenizer import TokenizerChoice, agreement, choose


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
    dflash: DFlashDraft | None = None
    dflash_check: dflash_faithful.Faithfulness | None = None  # the exported DFlash draft against the reference


def finish(
    conversion: Conversion,
    worker: WorkerResult,
    path: str,
    stage: StagedDir,
    reference: list[list[int]],
    inputs: provenance.InputDigests,
    progress: Progress,
    prepared: faithful.Reference | None = None,
    dflash_dir: Path | None = None,
    dflash_prepared: dflash_faithful.Prepared | None = None,
) -> ConvertResult:
    """Assemble the exported files into a bundle of its kind, check it, record provenance, move it into place
    (a DFlash draft's two graphs come from `dflash_dir`, exported beside the converter)."""
    info, adapter, recipe, head, mode = (
        conversion.info,
        conversion.adapter,
        conversion.recipe,
        conversion.head,
        conversion.mode,
    )
    warnings = tuple(w for w in [other_base_warning(adapter, info) if adapter else None] if w)
    warnings += mode.warnings() if mode is not None else ()
    warnings += info.warnings
    out = conversion.out
    progress("assembling the bundle")
    built = stage.subdir("bundle")
    engine, choice, graph_uuid, weight_digest = _assemble(conversion, worker, built, reference, dflash_dir)
    checked = None
    if head is not None:
        progress("checking the exported EAGLE-3 head against the checkpoint's (MNN and torch, same inputs)")
        checked = faithful.check(built, head, info, recipe.bits, recipe.block, recipe.symmetric, prepared)
    dflash_checked = None
    if conversion.dflash is not None:
        progress("checking the exported DFlash draft against its torch reference (MNN and torch, same inputs)")
        dflash_checked = dflash_faithful.check(built, conversion.dflash, info, recipe, dflash_prepared)
    progress(f"validating the bundle ({conversion.kind.name})")
    _check_built(built, conversion.request.spec)
    names = conversion.kind.present(built)
    digests = {name: weight_digest if name == "llm.mnn.weight" else xxh3_128_file(built / name) for name in names}
    sizes = {name: (built / name).stat().st_size for name in names}
    made = provenance.Made(
        engine, choice, digests, worker.versions, graph_uuid, worker.blocked, inputs, path, checked, dflash_checked
    )
    staged_record = stage.path / "provenance.json"  # type: ignore[operator]
    provenance.write(staged_record, provenance.build(conversion, made))
    stage.commit(built)
    os.replace(staged_record, provenance.provenance_path(out))
    return ConvertResult(
        out=out,
        sizes=sizes,
        digests=digests,
        engine=engine,
        tokenizer=choice,
        quant_bits=recipe.bits,
        quant_block=recipe.block,
        graph_uuid=graph_uuid,
        provenance=provenance.provenance_path(out),
        blocked=worker.blocked,
        warnings=warnings,
        path=path,
        target=conversion.goal,
        recipe=recipe,
        kind=conversion.kind,
        head=head,
        faithfulness=checked,
        lookahead=mode,
        dflash=conversion.dflash,
        dflash_check=dflash_checked,
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
    conversion: Conversion, worker: WorkerResult, built: Path, reference: list[list[int]], dflash_dir: Path | None
) -> tuple[EngineRequirement, TokenizerChoice, str, str]:
    """The kind's files in `built`; returns their engine, the tokenizer choice, the graph uuid, the weights' digest."""
    info, goal, head, mode, corpus = (
        conversion.info,
        conversion.goal,
        conversion.head,
        conversion.mode,
        conversion.corpus,
    )
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
    if conversion.dflash is not None:
        if dflash_dir is None:
            raise ConversionFailed("the DFlash export wrote nothing")
        for name in DFLASH_GRAPHS:
            if not (dflash_dir / name).is_file():
                raise ConversionFailed(f"the DFlash export did not write {name}")
            os.replace(dflash_dir / name, built / name)
        try:  # the draft's head: the target's own lm_head, lifted out of its graph (before the graph's uuid changes)
            dflash_export.lm_head_graph(built, built, dflash_dir)
        except (dflash_export.LmHeadUnexpected, RuntimeError) as exc:
            raise ConversionFailed(f"the DFlash draft's lm_head graph could not be made: {exc}") from None
    weight_digest = xxh3_128_file(built / "llm.mnn.weight")  # the stamp does not touch the weights
    graph_uuid = stamp_uuid(built / "llm.mnn", built / "llm.mnn.json", weight_digest)
    if head is not None:  # the head's graphs carry a uuid drawn on every export too
        for graph in ("eagle.mnn", "eagle_fc.mnn"):
            stamp_graph_uuid(built / graph, xxh3_128_file(built / f"{graph}.weight"))
    # (a DFlash draft's graphs come stamped from their export: dflash.export)
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
    if conversion.dflash is not None:
        from ..bundle.modes import mode_requirement

        engine = combine(engine, *mode_requirement("dflash"))
    if mode is not None:
        from ..bundle.modes import mode_requirement

        engine = combine(engine, *mode_requirement("lookahead"))
        if mode.corpus is not None:
            (built / LOOKUP).write_bytes(mode.corpus.data)  # the bytes that were checked
    keys = mode.keys() if mode is not None else None
    spec = conversion.request.spec
    overrides = spec.runtime if spec else presets.RuntimeOverrides()
    rendered = (
        presets.render(overrides, engine, keys, family=info.family)
        if conversion.kind is DRAFT
        else presets.render_target(
            overrides, head, untied=not info.tied, mode=keys, family=info.family, dflash=_dflash_keys(conversion)
        )
    )
    for name, data in rendered.items():
        (built / name).write_bytes(data)
    return engine, choice, graph_uuid, weight_digest


def _dflash_keys(conversion: Conversion) -> dict[str, object] | None:
    draft = conversion.dflash
    return presets.dflash_keys(draft.block_size, draft.mask_token_id, draft.target_layer_ids) if draft else None
