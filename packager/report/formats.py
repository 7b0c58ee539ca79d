"""The report formats: text for people, JSON for scripts, GitHub workflow commands and JUnit XML for CI."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from . import Report, clean
from .github import render as github
from .junit import render as junit


def render(report: Report, fmt: str) -> str:
    return {"text": text, "json": as_json, "github": github, "junit": junit}[fmt](report)


def text(report: Report) -> str:
    """Each thing checked: its findings (located inside it), then its verdict; files in nothing checked last."""
    lines = []
    for checked in report.checked:
        lines += [clean(f"{f.severity.upper():7} {f.location}: {f.message}") for f in checked.findings]
        errors, warnings = checked.counts()
        verdict = "ok" if checked.ok(report.strict) else "FAILED"
        kind = f"; a {checked.bundle_kind} bundle" if checked.bundle_kind else ""
        kind = f"; the app files of a {checked.bundle_kind} bundle" if checked.subset == "app" else kind
        lines.append(clean(f"{checked.path}: {verdict} ({errors} errors, {warnings} warnings{kind})"))
    if report.skipped:
        lines.append(f"skipped {len(report.skipped)} file(s) that belong to no {_noun(report)}")
    if not report.checked:
        lines.append(f"nothing to check: no {_noun(report)} among the files given")
    return "\n".join(lines)


def _noun(report: Report) -> str:
    return "release spec" if report.tool.endswith("check-spec") else "bundle folder"


def as_json(report: Report) -> str:
    """Totals, one entry per thing checked, and every finding with the path a CI annotates."""
    totals = [c.counts() for c in report.checked]
    bundles = [c.path for c in report.checked if c.kind == "bundle"]
    data: dict[str, Any] = {
        "tool": report.tool,
        "ok": report.ok(),
        "strict": report.strict,
        "errors": sum(e for e, _ in totals),
        "warnings": sum(w for _, w in totals),
        # `validate BUNDLE --json` before several bundles could be checked at once: kept for one bundle.
        "bundle": bundles[0] if len(report.checked) == 1 and bundles else None,
        "checked": [
            {
                "kind": c.kind,
                "path": c.path,
                "ok": c.ok(report.strict),
                "errors": e,
                "warnings": w,
                "files": list(c.files),
                **({"bundle_kind": c.bundle_kind} if c.bundle_kind else {}),
                **({"subset": c.subset} if c.subset else {}),
            }
            for c, (e, w) in zip(report.checked, totals)
        ],
        "skipped": list(report.skipped),
        "findings": [
            {**asdict(f), "path": c.where(f.file), "subject": c.path} for c in report.checked for f in c.findings
        ],
    }
    return json.dumps(data, indent=2, ensure_ascii=True)
