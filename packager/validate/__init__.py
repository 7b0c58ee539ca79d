"""`validate`: every check of a bundle, all findings reported at once."""

from __future__ import annotations

from pathlib import Path

from ..checksum import MANIFEST, ManifestError, check_manifest
from ..errors import BundleError
from . import crossfile, graph
from .documents import JSON_FILES, SCHEMA_FOR, check_schema, load_json
from .files import check_files
from .findings import Collector, Finding, ValidationReport

__all__ = ["Finding", "ValidationReport", "validate"]


def validate(bundle: Path, checksums: bool = True) -> ValidationReport:
    """Syntax, schemas, completeness, cross-file consistency and (when present) the checksum manifest."""
    if not bundle.is_dir():
        raise BundleError(f"bundle folder {bundle} does not exist", "pass the folder packager convert wrote")
    out = Collector()
    usable = check_files(bundle, out)
    docs = {}
    for name in JSON_FILES:
        if name in usable:
            docs[name] = load_json(bundle / name, name, out)
            if docs[name] is not None and name in SCHEMA_FOR:
                check_schema(name, docs[name], out)
    facts = graph.read(docs["llm.mnn.json"]) if docs.get("llm.mnn.json") is not None else None
    weight_size = (bundle / "llm.mnn.weight").stat().st_size if "llm.mnn.weight" in usable else None
    crossfile.check_draft_configs(docs, out)
    crossfile.check_recommendation(docs, out)
    crossfile.check_paths(bundle, docs, out)
    crossfile.check_model_settings(docs, facts, weight_size, out)
    if facts is not None and weight_size is not None:
        crossfile.check_weight_ranges(facts, weight_size, out)
    crossfile.check_graph_copy(bundle, facts, out)
    header = crossfile.check_tokenizer(bundle / "tokenizer.txt", facts, out) if "tokenizer.txt" in usable else None
    crossfile.check_engine(docs, facts, header, out)
    if checksums and (bundle / MANIFEST).is_file():
        _check_manifest(bundle, out)
    return ValidationReport(bundle=bundle, findings=tuple(out.items), checked_files=tuple(usable))


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
