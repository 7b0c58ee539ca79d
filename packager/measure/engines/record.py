"""The compatibility table in the bundle's provenance (BUNDLE.provenance.json), where the card reads it."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from ...bundle.engine import parse_version
from ...errors import BundleError
from .check import MIN_COSINE, PROMPTS, CheckReport


def store(report: CheckReport) -> Path:
    """Merge the report's rows into the provenance (a version checked again replaces its row)."""
    from ...convert import provenance
    from ...convert.provenance import provenance_path

    path = provenance_path(report.bundle)
    if not path.is_file():
        raise BundleError(
            f"--record: {path} does not exist",
            "record only bundles made by packager convert (the provenance sits beside the bundle)",
        )
    record = provenance.read(path, BundleError)
    previous = {row["version"]: row for row in (record.get("engine_check") or {}).get("results", [])}
    previous.update({r.version: {**asdict(r), "verdict": r.verdict} for r in report.results})
    record["engine_check"] = {
        "reference_engine": report.reference,
        "declared_min_engine": report.declared,
        "prompts": len(PROMPTS),
        "min_cosine": MIN_COSINE,
        "results": sorted(previous.values(), key=lambda row: parse_version(row["version"])),
    }
    provenance.write(path, record)
    return path
