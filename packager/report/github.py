"""GitHub Actions workflow commands: `::error file=F,line=L,col=C,title=T::message`, one line per finding.

A command is one line that starts with `::`. Its message escapes `%`, CR and LF, its properties also `:` and
`,` (the rules of GitHub's own toolkit, `escapeData` / `escapeProperty`), so no value a bundle or spec holds
can end the line early, start a second command or add a property.
"""

from __future__ import annotations

from . import FOLDER, Checked, Report, clean
from .findings import Finding


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def command(name: str, message: str, **properties: object) -> str:
    props = ",".join(
        f"{key}={escape_property(clean(str(value), keep_lines=True))}"
        for key, value in properties.items()
        if value is not None
    )
    return f"::{name}{' ' + props if props else ''}::{escape_data(clean(message, keep_lines=True))}"


def annotation(checked: Checked, finding: Finding) -> str:
    level = {"error": "error", "warning": "warning"}.get(finding.severity, "notice")
    what = "release spec" if checked.kind == "spec" else "bundle folder" if finding.file == FOLDER else finding.file
    title = what + (f" {finding.pointer}" if finding.pointer else "")
    return command(
        level,
        finding.message,
        file=checked.where(finding.file),
        line=finding.line,
        col=finding.column,
        title=f"packager: {title}",
    )


def render(report: Report) -> str:
    lines = [annotation(c, f) for c in report.checked for f in c.findings]
    failed = [c.path for c in report.checked if not c.ok(report.strict)]
    summary = f"{report.tool}: {len(report.checked)} checked, " + (
        f"{len(failed)} failed: {', '.join(failed)}" if failed else "all ok"
    )
    lines.append(clean(summary))  # a plain log line, not a command
    return "\n".join(lines)
