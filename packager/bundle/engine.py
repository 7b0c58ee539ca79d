"""The oldest MNN engine a bundle runs on, derived from its files."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Version = tuple[int, int, int]


def parse_version(text: str) -> Version:
    pieces = text.split(".")
    if len(pieces) != 3 or not all(p.isascii() and p.isdigit() and len(p) <= 6 for p in pieces):
        raise ValueError(f"version {text!r} is not MAJOR.MINOR.PATCH")
    return int(pieces[0]), int(pieces[1]), int(pieces[2])


def format_version(version: Version) -> str:
    return ".".join(str(p) for p in version)


@dataclass(frozen=True)
class EngineRequirement:
    version: Version
    reasons: tuple[str, ...]

    @property
    def text(self) -> str:
        return format_version(self.version)


C4_FUSION = parse_version("3.6.1")
# The MNN releases on PyPI, oldest first: the engines `packager engines check` can install and run.
PYPI_ENGINES = ("3.0.0", "3.1.0", "3.2.0", "3.4.0", "3.4.1", "3.5.0", "3.6.0", "3.6.1")
NEWEST = parse_version(PYPI_ENGINES[-1])  # the engine of packager's converter (pip mnn 3.6.1)
# The oldest engine packager builds for, measured (bench/RESULTS.md "Engines"): the 3.0.0, 3.1.0 and 3.2.0
# wheels have no LLM runtime (no _mnncengine.llm), so no bundle can be proven to load in anything older.
OLDEST = parse_version("3.4.0")
WHY_OLDEST = (
    "MNN's 3.0.0, 3.1.0 and 3.2.0 Python wheels have no LLM runtime, so no bundle can be proven to "
    "load in an engine older than 3.4.0"
)


def has_c4_attention(ops: list[Any]) -> bool:
    """Whether any attention op writes C4-packed output (AttentionParam.output_c4, FuseTransformerC4)."""
    return any(
        op.get("type") == "Attention" and isinstance(op.get("main"), dict) and op["main"].get("output_c4") is True
        for op in ops
    )


def graph_requirement(graph_json: Path) -> EngineRequirement:
    """What the graph needs: FuseTransformerC4 output (AttentionParam.output_c4) first runs in MNN 3.6.1."""
    graph = json.loads(graph_json.read_text(encoding="utf-8"))
    if has_c4_attention(graph.get("oplists", [])):
        return EngineRequirement(
            C4_FUSION, ("the graph uses C4-fused attention (AttentionParam.output_c4), first run by MNN 3.6.1",)
        )
    return EngineRequirement(
        OLDEST,
        (f"graphs without C4 fusion load from MNN {format_version(OLDEST)} on (packager engines check; {WHY_OLDEST})",),
    )


def combine(*requirements: EngineRequirement) -> EngineRequirement:
    version = max(r.version for r in requirements)
    return EngineRequirement(version, tuple(reason for r in requirements for reason in r.reasons))


@dataclass(frozen=True)
class EngineTarget:
    """The oldest engine a bundle must run on (`convert --engine`), and what packager does for it."""

    requested: str  # "newest" (the default: today's output) or MAJOR.MINOR.PATCH
    version: Version

    @property
    def default(self) -> bool:
        return self.requested == "newest"

    @property
    def text(self) -> str:
        return format_version(self.version)

    @property
    def fuse_c4(self) -> bool:
        """MNNConvert's FuseTransformerC4 pass writes attention (output_c4) that only 3.6.1 and later run."""
        return self.version >= C4_FUSION

    @property
    def converter_flags(self) -> tuple[str, ...]:
        return () if self.fuse_c4 else (NO_C4_FUSION,)


# MNNConvert's switch for the FuseTransformerC4 pass (tools/converter/source/common/cli.cpp, MNN 3.6.1).
NO_C4_FUSION = "--transformerFuseC4=0"
DEFAULT_TARGET = EngineTarget("newest", NEWEST)


class UnservedEngine(ValueError):
    """A requested engine packager cannot build for; the message says why, the hint what to pass."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


def target(requested: str | None) -> EngineTarget:
    """The target for `--engine VALUE`: "newest" (or nothing) is the default; refusals say why."""
    if requested is None or requested.strip().lower() == "newest":
        return DEFAULT_TARGET
    text = requested.strip()
    supported = f"one of {', '.join(v for v in PYPI_ENGINES if parse_version(v) >= OLDEST)} or newest"
    try:
        version = parse_version(text)
    except ValueError:
        raise UnservedEngine(
            f"--engine {text!r} is not an MNN version (MAJOR.MINOR.PATCH)", f"pass {supported}"
        ) from None
    if version > NEWEST:
        raise UnservedEngine(
            f"--engine {text}: packager's converter is MNN {format_version(NEWEST)}, it cannot "
            f"know what MNN {text} reads",
            "pass newest (a bundle for MNN 3.6.1 and later)",
        )
    if version < OLDEST:
        raise UnservedEngine(
            f"--engine {text}: MNN {text} is older than the oldest engine packager builds for "
            f"({format_version(OLDEST)}: {WHY_OLDEST})",
            f"pass {supported}",
        )
    return EngineTarget(text, version)
