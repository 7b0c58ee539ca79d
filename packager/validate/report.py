"""Text and JSON renderings of a validation report."""

from __future__ import annotations

import json
from dataclasses import asdict

from .findings import ValidationReport


def as_text(report: ValidationReport, strict: bool) -> str:
    lines = [f"{f.severity.upper():7} {f.location}: {f.message}" for f in report.findings]
    verdict = "ok" if report.ok(strict) else "FAILED"
    lines.append(f"{report.bundle}: {verdict} ({len(report.errors)} errors, {len(report.warnings)} warnings)")
    return "\n".join(lines)


def as_json(report: ValidationReport, strict: bool) -> str:
    return json.dumps({"bundle": str(report.bundle), "ok": report.ok(strict), "strict": strict,
                       "errors": len(report.errors), "warnings": len(report.warnings),
                       "findings": [asdict(f) for f in report.findings]}, indent=2, ensure_ascii=False)
