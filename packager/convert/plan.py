"""A conversion planned before any work: the request, what inspection found, the recipe, the engine and the bundle
kind, checked together and carried by one `Conversion` through export and assembly."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .. import resources
from ..bundle.engine import EngineTarget, UnservedEngine, parse_version, target
from ..bundle.kinds import DRAFT, KINDS, TARGET, TARGET_DFLASH, TARGET_EAGLE, BundleKind
from ..bundle.lookahead import Lookahead, read_corpus
from ..bundle.lookahead import settings as lookahead_settings
from ..bundle.modes import MIN_ENGINE as MODE_ENGINES
from ..bundle.tokenizer_txt import MIN_ENGINE
from ..errors import DFlashTargetRefused, ExtraNotInstalled, InvalidOption, SpecError, shorten
from ..infra.versions import missing
from ..spec.model import ReleaseSpec
from . import recipe as recipes
from .inspect.checkpoint import CheckpointInfo, inspect_checkpoint
from .inspect.dflash_draft import DFlashDraft, inspect_dflash
from .inspect.eagle_head import HeadInfo, inspect_head
from .inspect.lora import AdapterInfo, inspect_adapter
from .recipe import QuantRecipe


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
    dflash: Path | None = None  # a DFlash draft (z-lab's DFlashDraftModel layout) exported with the target


def eagle_head(request: ConvertRequest) -> Path | None:
    settings = request.spec.convert if request.spec else None
    return request.eagle or (settings.eagle if settings is not None else None)


def dflash_draft(request: ConvertRequest) -> Path | None:
    settings = request.spec.convert if request.spec else None
    return request.dflash or (settings.dflash if settings is not None else None)


def bundle_kind(request: ConvertRequest) -> BundleKind:
    """The kind asked for: --eagle makes a target+eagle bundle, --dflash a target+dflash one, else --kind (default:
    draft)."""
    settings = request.spec.convert if request.spec else None
    name = request.kind or (settings.kind if settings is not None else None)
    if dflash_draft(request) is not None:
        if eagle_head(request) is not None:
            raise InvalidOption(
                "a bundle has one speculative_type: an EAGLE-3 head cannot go with a DFlash draft",
                "drop --eagle or --dflash (convert twice for two bundles)",
            )
        if name not in (None, TARGET_DFLASH.name, TARGET.name):
            raise InvalidOption(
                f"--dflash makes a {TARGET_DFLASH.name} bundle, not a {name} bundle", "drop --kind, or drop --dflash"
            )
        return TARGET_DFLASH
    if name == TARGET_DFLASH.name:
        raise InvalidOption("a target+dflash bundle needs its draft", "pass --dflash DRAFT_FOLDER")
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
    if kind in (TARGET_EAGLE, TARGET_DFLASH):
        draft = "an EAGLE-3 head" if kind is TARGET_EAGLE else "a DFlash draft"
        raise InvalidOption(
            f"a bundle has one speculative_type: lookahead cannot go with {draft}",
            f"drop --lookahead or --{'eagle' if kind is TARGET_EAGLE else 'dflash'} (convert twice for two bundles)",
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


@dataclass(frozen=True)
class Conversion:
    """One conversion's state, from planning to the result: what export and assembly read instead of a list of
    loose arguments."""

    request: ConvertRequest
    info: CheckpointInfo
    recipe: QuantRecipe
    goal: EngineTarget
    corpus: tuple[str, ...]
    adapter: AdapterInfo | None = None
    kind: BundleKind = DRAFT
    head: HeadInfo | None = None
    mode: Lookahead | None = None
    dflash: DFlashDraft | None = None

    @property
    def out(self) -> Path:
        return self.request.out.absolute()


def plan(request: ConvertRequest) -> Conversion:
    """Everything checked that can be before the converter starts: kind, lookahead, engine, the checkpoint, adapter
    and head, the recipe and a tokenizer format the engine reads."""
    require_converter()
    kind = bundle_kind(request)
    mode = lookahead_plan(request, kind)
    goal = engine_target(request)
    info = inspect_checkpoint(request.checkpoint, allow_untied=kind is not DRAFT, engine=goal.version)
    adapter: AdapterInfo | None = inspect_adapter(request.adapter, info) if request.adapter else None
    head_path = eagle_head(request)
    head = inspect_head(head_path, info, request.allow_pickle_head) if head_path is not None else None
    draft_path = dflash_draft(request)
    draft = None
    if draft_path is not None:
        check_dflash_target(info, goal, adapter is not None)
        draft = inspect_dflash(draft_path, info)
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
    return Conversion(request, info, recipe, goal, resources.tokenizer_corpus(), adapter, kind, head, mode, draft)


# The DFlash format packager writes: MNN 3.6.x's (speculative_decoding/dflash.cpp at 3.6.0 and 3.6.1 alike), whose
# dflash.mnn carries the lm_head and outputs logits. MNN after 3.6.1 (commit bc85588f2) reads another: no lm_head
# in dflash.mnn and dflash_shared_lmhead_input, which no PyPI release runs yet and packager does not write.
DFLASH_FORMAT = "MNN 3.6.x's (dflash.mnn with the lm_head, logits out)"


def check_dflash_target(info: CheckpointInfo, goal: EngineTarget, adapted: bool) -> None:
    """Refuse, in one line, a target packager cannot pair with a DFlash draft: a family without a DFlash export,
    an adapter (a draft is trained against one model), or an engine older than MNN's first DFlash mode."""
    if not info.family.dflash:
        raise DFlashTargetRefused(
            f"{info.family.title} has no DFlash export in packager (a DFlash draft is exported with Qwen3 and "
            "Llama 3.1 targets, the families with published DFlash drafts)"
        )
    if adapted:
        raise DFlashTargetRefused(
            "--dflash takes a target without --adapter: a DFlash draft is trained against one model's hidden states",
            "merge the adapter into the target first, and pass a draft trained against the merged model",
        )
    first = MODE_ENGINES["dflash"]
    if goal.version < parse_version(first):
        raise DFlashTargetRefused(
            f"--engine {goal.requested}: MNN {goal.text} has no DFlash mode (first in MNN {first}); packager writes "
            f"{DFLASH_FORMAT} format",
            f"pass --engine {first} or later",
        )
