"""`validate`: every check of a bundle, all findings reported at once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..bundle import graph
from ..bundle.checksum import MANIFEST, check_manifest, read_manifest
from ..bundle.kinds import CARD, DRAFT, BundleKind, kind_of
from ..errors import BundleError, ManifestError, PackagerError, shorten
from ..report.findings import Collector, Finding, ValidationReport
from . import crossfile, speculative, weights
from .documents import JSON_FILES, SCHEMA_FOR, check_schema, load_json
from .files import check_files, open_folder

__all__ = ["Finding", "ValidationReport", "validate"]


def validate(bundle: Path, checksums: bool = True) -> ValidationReport:
    """Syntax, schemas, completeness, cross-file consistency, sampled weights and (when present) the checksum
    manifest; an app's files as `pull` takes them (see _app_subset) are checked as such. A path that is no readable
    folder raises (one line); everything else is a finding."""
    present = open_folder(bundle)
    out = Collector()
    kind = kind_of(bundle)
    subset = checksums and _app_subset(bundle, present, kind)
    usable = check_files(bundle, present, out, kind, app=subset)
    docs = _documents(bundle, usable, out)
    facts = _graph(docs.get("llm.mnn.json"), out)
    weight_size = (
        _guard(out, "llm.mnn.weight", lambda: (bundle / "llm.mnn.weight").stat().st_size)
        if "llm.mnn.weight" in usable
        else None
    )
    crossfile.check_draft_configs(docs, out)
    crossfile.check_recommendation(docs, out)
    crossfile.check_paths(bundle, docs, out)
    crossfile.check_model_settings(docs, facts, weight_size, out)
    if facts is not None and weight_size is not None:
        crossfile.check_weight_ranges(facts, weight_size, out)
        _guard(out, "llm.mnn.weight", lambda: weights.check(bundle / "llm.mnn.weight", facts, weight_size, out))
    if "llm.mnn" in usable:
        _guard(out, "llm.mnn", lambda: crossfile.check_graph_copy(bundle, facts, out))
    header = (
        _guard(
            out,
            "tokenizer.txt",
            lambda: crossfile.check_tokenizer(bundle / "tokenizer.txt", facts, out, docs.get("llm_config.json")),
        )
        if "tokenizer.txt" in usable
        else None
    )
    crossfile.check_engine(docs, facts, header, out)
    speculative.check(bundle, kind, docs, facts, usable, out)  # a draft may run lookahead too
    llm = docs.get("llm_config.json")
    if kind is DRAFT and isinstance(llm, dict) and "tie_embeddings" not in llm:
        out.error(
            "llm_config.json",
            "",
            "'tie_embeddings' is a required property of a draft bundle (it has no "
            "embeddings file, so its embeddings must be tied to lm_head)",
        )
    if checksums and MANIFEST in present and present[MANIFEST].is_file(follow_symlinks=False):
        _guard(out, MANIFEST, lambda: _check_manifest(bundle, out))
    if subset and "llm.mnn.json" not in usable:
        out.note(
            "llm.mnn.json",
            "",
            "not among the app files: the checks of the graph against llm_config.json, the weights and the "
            "tokenizer did not run here; validate the whole release (packager pull --files all) for them",
        )
    return ValidationReport(
        bundle=bundle,
        findings=tuple(out.items),
        checked_files=tuple(usable),
        kind=kind.name,
        subset="app" if subset else None,
    )


def _app_subset(bundle: Path, present: dict[str, Any], kind: BundleKind) -> bool:
    """Whether the folder holds an app's files, as `packager pull` takes them by default: its manifest lists every
    app file of the kind and none of the kind's reference files nor the card (a release's manifest lists them all).
    The folder is then checked against that manifest and the kind's app files."""
    entry = present.get(MANIFEST)
    if entry is None or not entry.is_file(follow_symlinks=False):
        return False
    try:
        listed = set(read_manifest(bundle / MANIFEST))
    except (PackagerError, OSError):
        return False  # the manifest check says what is wrong with it
    reference = set(kind.files) - set(kind.app_files)
    return set(kind.app_files) <= listed and not listed & (reference | {CARD})


def _documents(bundle: Path, usable: list[str], out: Collector) -> dict[str, Any]:
    docs = {}
    for name in JSON_FILES:
        if name in usable:
            docs[name] = load_json(bundle / name, name, out)
            if docs[name] is not None and name in SCHEMA_FOR:
                check_schema(name, docs[name], out)
    return docs


def _graph(dump: Any, out: Collector) -> graph.GraphFacts | None:
    if dump is None:
        return None
    try:
        return graph.read(dump)
    except (TypeError, ValueError, AttributeError) as exc:  # a hand-edited dump: a field of the wrong shape
        out.error(
            "llm.mnn.json",
            "",
            f"is not a graph dump MNN wrote ({type(exc).__name__}: {shorten(str(exc))}); the graph checks were skipped",
        )
        return None


def _guard(out: Collector, name: str, check: Callable[[], Any]) -> Any:
    """Run a check that reads a file; an OS error (unreadable, I/O error) becomes a finding on that file."""
    try:
        return check()
    except OSError as exc:
        out.error(name, "", f"cannot be read: {exc.strerror or type(exc).__name__}")
        return None


def _check_manifest(bundle: Path, out: Collector) -> None:
    try:
        result = check_manifest(bundle)
    except (ManifestError, BundleError) as exc:
        out.error(MANIFEST, "", exc.message)
        return
    for name in result.mismatched:
        out.error(MANIFEST, "", f"{name}: checksum does not match (the file changed after the manifest was written)")
    for name in result.missing:
        out.error(MANIFEST, "", f"{name}: listed but missing")
    for name in result.extra:
        out.error(MANIFEST, "", f"{name}: present but not listed")
