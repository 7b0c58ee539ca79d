"""What CI reads: the findings of several checked things (bundle folders, release specs) in one report."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # importing packager.validate loads numpy: --help stays light without it
    from .findings import Finding

Kind = Literal["bundle", "spec"]
FORMATS = ("text", "json", "github", "junit")
FOLDER = "."  # the file name of a finding about a bundle folder as a whole


@dataclass(frozen=True)
class Checked:
    """One bundle folder or release spec, as the user named it, and what checking it found."""

    kind: Kind
    path: str
    findings: tuple[Finding, ...]
    files: tuple[str, ...] = ()  # what was checked, relative to `path` for a bundle
    bundle_kind: str | None = None  # draft, target or target+eagle (bundles only)
    subset: str | None = None  # "app": only the files an app runs, as `pull` takes them by default
    matrix: bool = False  # a matrix release spec ([matrix]): check-spec's failure is its own exit code

    def where(self, file: str) -> str:
        """The path of one of its files as the user would type it (findings of a spec name the spec)."""
        if self.kind == "spec" or file == FOLDER:
            return self.path
        return os.path.join(self.path, file)

    def counts(self) -> tuple[int, int]:
        """Errors and warnings (a note is neither)."""
        errors = sum(f.severity == "error" for f in self.findings)
        return errors, sum(f.severity == "warning" for f in self.findings)

    def ok(self, strict: bool) -> bool:
        errors, warnings = self.counts()
        return not errors and not (strict and warnings)

    def fails(self, finding: Finding, strict: bool) -> bool:
        """Whether this finding makes the run fail (errors; warnings too under --strict)."""
        return finding.severity == "error" or (strict and finding.severity == "warning")


@dataclass(frozen=True)
class Report:
    tool: str  # e.g. "packager validate"
    checked: tuple[Checked, ...]
    strict: bool = False
    skipped: tuple[str, ...] = ()  # files given that belong to nothing checked

    def ok(self) -> bool:
        return all(c.ok(self.strict) for c in self.checked)


# Lone surrogates (undecodable bytes of a file name) and control characters would break the output's encoding
# or forge lines in a log; they are shown as \xNN. A tab stays.
_UNSAFE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff\ufffe\uffff]")
_UNSAFE_BUT_LINES = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff\ufffe\uffff]")


def clean(text: str, keep_lines: bool = False) -> str:
    """`text` safe to print on one line (with keep_lines: CR and LF stay, for a format that escapes them)."""
    return (_UNSAFE_BUT_LINES if keep_lines else _UNSAFE).sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:  # surrogateescape's stand-in for the byte code - 0xDC00
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
