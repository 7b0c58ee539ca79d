"""The oldest MNN engine a bundle runs on, derived from its files."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Version = tuple[int, int, int]


def parse_version(text: str) -> Version:
    parts = [int(p) for p in text.split(".")]
    if len(parts) != 3:
        raise ValueError(f"version {text!r} is not MAJOR.MINOR.PATCH")
    return parts[0], parts[1], parts[2]


def format_version(version: Version) -> str:
    return ".".join(str(p) for p in version)


@dataclass(frozen=True)
class EngineRequirement:
    version: Version
    reasons: tuple[str, ...]

    @property
    def text(self) -> str:
        return format_version(self.version)


BASELINE = parse_version("3.0.0")
C4_FUSION = parse_version("3.6.1")


def has_c4_attention(ops: list[Any]) -> bool:
    """Whether any attention op writes C4-packed output (AttentionParam.output_c4, FuseTransformerC4)."""
    return any(op.get("type") == "Attention" and isinstance(op.get("main"), dict)
               and op["main"].get("output_c4") is True for op in ops)


def graph_requirement(graph_json: Path) -> EngineRequirement:
    """What the graph needs: FuseTransformerC4 output (AttentionParam.output_c4) first runs in MNN 3.6.1."""
    graph = json.loads(graph_json.read_text(encoding="utf-8"))
    if has_c4_attention(graph.get("oplists", [])):
        return EngineRequirement(C4_FUSION, ("the graph uses C4-fused attention (AttentionParam.output_c4), "
                                             "first run by MNN 3.6.1",))
    return EngineRequirement(BASELINE, ())


def combine(*requirements: EngineRequirement) -> EngineRequirement:
    version = max(r.version for r in requirements)
    return EngineRequirement(version, tuple(reason for r in requirements for reason in r.reasons))
