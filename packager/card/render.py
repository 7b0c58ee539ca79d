"""The model card: rendered from the release spec, the bundle's own files and measurements (Jinja2, strict)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import resources
from ..bundle import folder as mnnfolder
from ..bundle.engine import EngineRequirement, format_version, parse_version
from ..bundle.graph import GraphFacts
from ..bundle.graph import read as read_graph
from ..bundle.kinds import DRAFT, EMBEDDINGS, LOOKUP, BundleKind, kind_of
from ..errors import CardError, control_character, printable
from ..families import Family
from ..infra.hashing import xxh3_128_file
from ..infra.jsonfile import read_json
from ..spec.model import ReleaseSpec
from .evalresults import model_index
from .family import CardLicense, bundle_family, card_license, check_base_model
from .measurements import read_report

DEFAULT_TEMPLATE = "model_card.md.j2"
TARGET_TEMPLATE = "target_card.md.j2"  # target and target+eagle bundles
# The family's tags (qwen3, llama, ...) follow "draft-model", where "qwen3" stood when packager knew one family.
BASE_TAGS = ("mnn", "speculative-decoding", "draft-model")
DEVICE_TAGS = ("on-device",)


@dataclass(frozen=True)
class FileRow:
    name: str
    size: int
    purpose: str
    xxh3_128: str
    app_downloads: bool


@dataclass(frozen=True)
class Card:
    text: str
    metadata: dict[str, Any]


def human_size(size: int) -> str:
    """Decimal units with three significant digits, as the Hub shows them: 211 B, 504 KB, 1.61 MB."""
    if size < 1000:
        return f"{size} B"
    for unit in ("KB", "MB", "GB", "TB"):
        size_f = size / 1000
        if size_f < 1000 or unit == "TB":
            return f"{size_f:.3g} {unit}" if size_f < 100 else f"{size_f:.0f} {unit}"
        size = int(size_f)
    raise AssertionError


def spoken_list(items: tuple[str, ...] | list[str]) -> str:
    """Android; Android and iOS; Android, iOS and ChromeOS."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _complete(bundle: Path, kind: BundleKind) -> None:
    missing = [name for name in kind.files if not (bundle / name).is_file()]
    if missing:
        raise CardError(
            f"{bundle} is missing {', '.join(missing)} (a {kind.name} bundle holds it)",
            "the card describes a complete bundle; run packager validate",
        )


def _files(bundle: Path, kind: BundleKind = DRAFT, license: CardLicense | None = None) -> list[FileRow]:
    _complete(bundle, kind)
    purposes = kind.all_files()
    names = kind.present(bundle)
    if license is not None and license.file is not None:  # a release file, listed with its digest like the rest
        purposes = {**purposes, license.file: f"The license{f' ({license.name})' if license.name else ''}"}
        names = [*names, license.file]
    return [
        FileRow(
            name=name,
            size=(bundle / name).stat().st_size,
            purpose=purposes[name],
            xxh3_128=xxh3_128_file(bundle / name),
            app_downloads=name in kind.app_set(bundle),
        )
        for name in names
    ]


def parameter_count(bundle: Path, graph: GraphFacts) -> int:
    """The model's parameters as the bundle holds them: every linear layer of the graph (lm_head, which a tied
    bundle also uses as its embedding table, once), the float32 norm weights, and an untied embeddings file."""
    count = sum(lin.in_features * lin.out_features for lin in graph.linears)
    count += sum(length // 4 for _, _, length in graph.norms)
    embeddings = bundle / EMBEDDINGS
    return count + (embeddings.stat().st_size // 2 if embeddings.is_file() else 0)  # bfloat16


def parameters_text(count: int) -> str:
    """596M, 1.72B, 135M, 48.1K: three significant digits, as model names give sizes."""
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if count >= size:
            return f"{count / size:.3g}{unit}"
    return str(count)


def machine(source: str) -> str:
    """Where a speed was measured, as a card reader must read it: packager's `this CPU (MODEL, N threads)` is the
    CPU of whatever machine ran the measurement, not a phone."""
    if source.startswith("this CPU (") and source.endswith(")"):
        return f"a machine's CPU ({source[len('this CPU (') : -1]}), not a phone"
    return source


def _name_target(measurements: dict[str, Any], spec: ReleaseSpec) -> dict[str, Any]:
    """The pair figures with the target named by its Hub id (the spec's pair_target, else what the report's path
    says, else none: never a local folder), and whether draft and target are the same model."""
    pairing = measurements.get("pairing")
    if pairing is None:
        return measurements
    target = spec.need("card").pair_target or pairing["target"]
    own = {spec.need("model").base_model.lower(), spec.need("release").repo_id.lower()}
    same = pairing.get("same_folder", False) or (target is not None and target.lower() in own)
    return {**measurements, "pairing": {**pairing, "target": target, "same_model": same}}


def _graph(bundle: Path) -> GraphFacts:
    try:
        return read_graph(_json(bundle, "llm.mnn.json"))
    except (TypeError, ValueError, AttributeError):  # a hand-edited dump: a field of the wrong shape
        raise CardError("llm.mnn.json is not a graph dump MNN wrote", "run packager validate on the bundle") from None


def _json(bundle: Path, name: str) -> dict[str, Any]:
    return read_json(bundle / name, CardError)


def metadata(spec: ReleaseSpec, bits: int, family: Family, license: CardLicense) -> dict[str, Any]:
    """Hub front matter: license, base model and its relation, library, pipeline and tags (the family's among
    them)."""
    release, model = spec.need("release"), spec.need("model")
    relation = release.base_model_relation or ("finetune" if spec.training else "quantized")
    tags = list(dict.fromkeys([*BASE_TAGS, *family.tags, *DEVICE_TAGS, f"{bits}-bit", *release.tags]))
    return {
        "license": license.spdx,
        "base_model": [model.base_model],
        "base_model_relation": relation,
        "library_name": "mnn",
        "pipeline_tag": "text-generation",
        "tags": tags,
    }


def _engine(runtime: dict[str, Any]) -> EngineRequirement:
    declared = runtime.get("min_mnn_engine") or {}
    version = parse_version(declared["version"]) if "version" in declared else (3, 0, 0)
    return EngineRequirement(version, tuple(declared.get("because", ())))


def family_facts(bundle: Path, spec: ReleaseSpec, kind: BundleKind) -> tuple[Family, CardLicense]:
    """The bundle's family (from llm_config.json) and the license the card states; a spec that contradicts the
    family (another license, another family's base model) is refused."""
    _complete(bundle, kind)
    family = bundle_family(bundle, _json(bundle, "llm_config.json"))
    license = card_license(spec, family, bundle)
    check_base_model(spec, family)
    return family, license


def render(
    bundle: Path, spec: ReleaseSpec, template: Path | None = None, measurements: dict[str, Any] | None = None
) -> Card:
    """Render the card; a missing fact fails with its name (StrictUndefined), never a placeholder."""

    kind = kind_of(bundle)
    source = _template_source(template, DEFAULT_TEMPLATE if kind is DRAFT else TARGET_TEMPLATE)  # read first
    if kind is not DRAFT:
        return _render_target(bundle, spec, kind, source, measurements or {})
    family, license = family_facts(bundle, spec, kind)
    files = _files(bundle, license=license)
    llm_config = _json(bundle, "llm_config.json")
    try:
        tie = mnnfolder.tied_embedding(llm_config.get("tie_embeddings"))
    except mnnfolder.FolderConflict as exc:
        raise CardError(str(exc), "run packager validate on the bundle") from None
    if tie is None:
        raise CardError(
            "llm_config.json has no tie_embeddings: the card states the quantization it declares",
            "run packager validate on the bundle",
        )
    bits, block = tie.bits, tie.block
    measurements = _name_target(measurements or {}, spec)
    runtime = _json(bundle, "runtime_config.json")
    meta = metadata(spec, bits, family, license)
    lookahead = _lookahead(bundle, _json(bundle, "config.json"))
    meta["tags"] += ["lookahead"] if lookahead else []
    index = model_index(
        spec.need("release").repo_id, measurements, runtime.get("recommended", {}).get("draft_predict_length")
    )
    if index is not None:
        meta["model-index"] = index
    context = {
        "spec": spec,
        "release": spec.need("release"),
        "model": spec.need("model"),
        "card": spec.need("card"),
        "training": spec.training,
        "pairing": spec.pairing,
        "benchmarks": spec.benchmarks,
        "credits": spec.credits,
        "files": files,
        "total_size": sum(f.size for f in files),
        "file_count": len(files),
        "app_files": [f for f in files if f.app_downloads],
        "bits": bits,
        "block": block,
        "app_size": sum(f.size for f in files if f.app_downloads),
        "app": spec.need("card").app,
        "draft_config_text": (bundle / "config_cpu.json").read_text(encoding="utf-8").strip(),
        "draft_config": _json(bundle, "config_cpu.json"),
        "opencl_config": _json(bundle, "config_opencl.json"),
        "opencl_config_text": (bundle / "config_opencl.json").read_text(encoding="utf-8").strip(),
        "parameters": parameters_text(parameter_count(bundle, _graph(bundle))),
        "recommended": runtime.get("recommended", {}),
        "engine": _engine(runtime),
        "format_version": format_version,
        "llm_config": llm_config,
        "measurements": measurements,
        "lookahead": lookahead,
        "quant_sweep": _sweep(spec, measurements.get("quant_recipe")),
        "front_matter": _front_matter(meta),
        "family": family,
        "license": license,
        "license_note": license.note(),
    }
    return _finish(source, context, meta)


def _template_source(template: Path | None, default: str) -> str:
    """The user's --template (UTF-8, at most TEMPLATE_BYTES: a device or a sparse file is read no further), else
    packager's own."""
    from ..infra.userfile import TEMPLATE_BYTES, read_text

    if template is None:
        return resources.template(default)
    return read_text(template, TEMPLATE_BYTES, what="card template", unreadable=CardError)


def _finish(source: str, context: dict[str, Any], meta: dict[str, Any]) -> Card:
    """Render `source` strictly (a missing fact fails with its name) and check its front matter."""
    import jinja2

    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)
    env.filters["size"] = human_size
    env.filters["signed_percent"] = lambda value: f"{value:+.0f}%"
    env.filters["num"] = lambda value: f"{value:g}"
    env.filters["spoken_list"] = spoken_list
    env.filters["machine"] = machine
    try:
        text = re.sub(r"\n{3,}", "\n\n", env.from_string(source).render(**context))
    except jinja2.UndefinedError as exc:
        raise CardError(f"the card template needs a value that is missing: {exc.message}") from None
    except jinja2.TemplateError as exc:
        raise CardError(f"the card template is broken: {exc}") from None
    bad = control_character(text)
    if bad is not None:  # the spec's text is checked when it is loaded: this came from a template or a report
        line = text.count("\n", 0, text.index(bad)) + 1
        raise CardError(
            f"the card would hold the control character {printable(bad)} (line {line}); card text is plain text",
            "remove it from the template or the report it comes from",
        )
    check_front_matter(text, meta)
    return Card(text=text, metadata=meta)


def _render_target(
    bundle: Path, spec: ReleaseSpec, kind: BundleKind, source: str, measurements: dict[str, Any]
) -> Card:
    """The card of a target or target+eagle bundle: what MNN runs, the head's facts, MNN's own speed-up."""
    from ..bundle.engine import combine, graph_requirement
    from ..bundle.modes import mode_requirement

    family, license = family_facts(bundle, spec, kind)
    files = _files(bundle, kind, license)
    config = _json(bundle, "config.json")
    graph = _graph(bundle)
    lm = graph.lm_head
    bits, block = (lm.bits, lm.block) if lm is not None and lm.bits else (4, 128)
    mode = config.get("speculative_type")
    engine = combine(graph_requirement(bundle / "llm.mnn.json"), *mode_requirement(mode))
    meta = metadata(spec, bits, family, license)
    meta["tags"] = [t for t in meta["tags"] if t != "draft-model"] + (["eagle3"] if mode == "eagle" else [])
    meta["tags"] += ["lookahead"] if mode == "lookahead" else []
    meta["tags"] += ["dflash"] if mode == "dflash" else []
    context = {
        "release": spec.need("release"),
        "model": spec.need("model"),
        "card": spec.need("card"),
        "kind": kind.name,
        "eagle": mode == "eagle",
        "head": measurements.get("eagle_head"),
        "dflash": _dflash(config, measurements) if mode == "dflash" else None,
        "untied": "tie_embeddings" not in _json(bundle, "llm_config.json"),
        "parameters": parameters_text(parameter_count(bundle, graph)),
        "files": files,
        "total_size": sum(f.size for f in files),
        "file_count": len(files),
        "bits": bits,
        "block": block,
        "engine": engine,
        "config": config,
        "config_text": (bundle / "config.json").read_text("utf-8").strip(),
        "measurements": measurements,
        "lookahead": _lookahead(bundle, config),
        "front_matter": _front_matter(meta),
        "family": family,
        "license": license,
        "license_note": license.note(),
    }
    return _finish(source, context, meta)


def _dflash(config: dict[str, Any], measurements: dict[str, Any]) -> dict[str, Any]:
    """What the card says of a DFlash draft: its keys as MNN reads them, the conversion's check of the exported
    draft, and MNN's own measurement of it (a dflash speculate report), if any."""
    runs = [r for r in measurements.get("speculation", []) if r.get("mode") == "dflash"]
    return {
        "block_size": config.get("dflash_block_size"),
        "mask_token_id": config.get("dflash_mask_token_id"),
        "layers": config.get("dflash_target_layer_ids") or [],
        "draft": measurements.get("dflash_draft"),
        "run": runs[0] if runs else None,
    }


def _lookahead(bundle: Path, config: dict[str, Any]) -> dict[str, Any] | None:
    """What the card says of lookahead: the draft length, and the corpus the bundle carries (name, size)."""
    if config.get("speculative_type") != "lookahead":
        return None
    path = bundle / LOOKUP
    carried = config.get("lookup_file", LOOKUP) == LOOKUP and path.is_file()
    return {
        "length": config.get("draft_predict_length", 3),
        "corpus": {"name": LOOKUP, "size": path.stat().st_size} if carried else None,
    }


def _sweep(spec: ReleaseSpec, recipe: dict[str, Any] | None) -> dict[str, Any] | None:
    """The quant-sweep JSON the spec names (convert.quant_sweep): its table, rule and choice, for the card."""
    path = spec.convert.quant_sweep
    if path is None:
        return None
    from ..measure.sweep.report import table

    data = read_report(path, "quant sweep (convert.quant_sweep)", CardError)
    try:
        found = {"chosen": data["chosen"], "rule": data["rule"], "table": table(data), "target": data.get("target")}
    except (ValueError, KeyError, TypeError) as exc:
        raise CardError(f"cannot read the quant sweep {path} named by convert.quant_sweep ({exc})") from None
    if recipe is not None and recipe["name"] != found["chosen"]:
        raise CardError(
            f"the bundle was made with {recipe['name']} but the sweep {path.name} chose {found['chosen']}",
            "set the spec's [convert] recipe keys to the sweep's \"convert\" values and convert again",
        )
    return found


def _front_matter(meta: dict[str, Any]) -> str:
    from huggingface_hub import ModelCardData

    return ModelCardData(**meta).to_yaml()


def check_front_matter(text: str, expected: dict[str, Any]) -> None:
    """Parse the card's YAML header with huggingface_hub's card classes (offline) and compare it."""
    from huggingface_hub import ModelCard

    try:
        data = ModelCard(text, ignore_metadata_errors=False).data.to_dict()
    except Exception as exc:
        raise CardError(f"the card's front matter does not parse: {exc}") from None
    wrong = sorted(k for k, v in expected.items() if data.get(k) != v)
    if wrong:
        raise CardError(f"the card's front matter has wrong or missing {', '.join(wrong)}")
