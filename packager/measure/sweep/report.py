"""The sweep's report: one row per recipe (bytes vs quality), the pick, its JSON form (what the spec takes) and text."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...convert.recipe import QuantRecipe
from ..intervals import Interval
from .measure import Quality, paired_difference

BASELINE = QuantRecipe()  # plain asymmetric 4-bit, block 128: what convert always did
SHOWN_D = 3


@dataclass(frozen=True)
class Row:
    recipe: QuantRecipe
    bundle: Path
    bytes: int
    weights: str  # "streamed" or "reference"
    quality: Quality

    def score(self) -> float:
        """Acceptance with a target; without one, top-1 agreement with the source stands in for it."""
        alpha = self.quality.alpha
        return alpha.value if alpha is not None else self.quality.top1_agreement


@dataclass(frozen=True)
class SweepReport:
    rows: tuple[Row, ...]
    chosen: Row
    best: Row
    tolerance: float
    measure: str  # what "acceptance" was: "alpha" (greedy, with a target) or "top1" (source agreement)
    checkpoint: Path
    adapter: Path | None
    target: Path | None
    seconds: tuple[tuple[str, float], ...] = ()  # wall time per phase: converting, measuring

    def versus_baseline(self, row: Row) -> Interval | None:
        base = next((r for r in self.rows if r.recipe == BASELINE), None)
        return paired_difference(row.quality, base.quality) if base is not None else None


def pick(
    rows: tuple[Row, ...], tolerance: float, checkpoint: Path, adapter: Path | None, target: Path | None
) -> SweepReport:
    """The smallest recipe whose acceptance is within `tolerance` of the best (ties: the better one)."""
    best = max(rows, key=Row.score)
    near = [r for r in rows if r.score() >= best.score() - tolerance]
    chosen = min(near, key=lambda r: (r.bytes, -r.score()))
    return SweepReport(
        rows=rows,
        chosen=chosen,
        best=best,
        tolerance=tolerance,
        measure="alpha" if best.quality.alpha is not None else "top1",
        checkpoint=checkpoint,
        adapter=adapter,
        target=target,
    )


def _interval(value: Interval | None, digits: int = 3) -> dict[str, float] | None:
    return None if value is None else {k: round(getattr(value, k), digits) for k in ("value", "low", "high")}


def as_dict(report: SweepReport) -> dict[str, Any]:
    """The JSON --json writes: the chosen recipe as [convert] keys, and the table that chose it."""
    rows = []
    for row in report.rows:
        q = row.quality
        rows.append(
            {
                "name": row.recipe.name,
                "recipe": row.recipe.record(),
                "bytes": row.bytes,
                "bundle": str(row.bundle),
                "weights": row.weights,
                "mean_kl": round(q.mean_kl, 5),
                "top1_agreement": round(q.top1_agreement, 4),
                "top1_decisive": None if q.top1_decisive is None else round(q.top1_decisive, 4),
                "decisive_positions": q.decisive_positions,
                "positions": q.positions,
                "alpha": _interval(q.alpha),
                "tau": {str(d): _interval(t) for d, t in q.tau.items()},
                "alpha_vs_baseline": _interval(report.versus_baseline(row)),
                "chosen": row is report.chosen,
            }
        )
    chosen = report.chosen.recipe
    return {
        "chosen": chosen.name,
        "convert": chosen.flags(),
        "rule": f"smallest recipe whose {report.measure} is within {report.tolerance} of the best "
        f"({report.best.recipe.name})",
        "measure": report.measure,
        "tolerance": report.tolerance,
        "checkpoint": str(report.checkpoint),
        "adapter": None if report.adapter is None else str(report.adapter),
        "target": None if report.target is None else str(report.target),
        "seconds": {phase: round(value, 1) for phase, value in report.seconds},
        "rows": rows,
    }


def _cell(value: dict[str, float] | None) -> str:
    return "-" if value is None else f"{value['value']:.3f} [{value['low']:.3f}, {value['high']:.3f}]"


def table(data: dict[str, Any]) -> str:
    """A Markdown table of bytes vs quality (from as_dict's form, so the card can render a stored sweep)."""
    lines = [
        "| recipe | bytes | mean KL | decisive top-1 | top-1 | alpha | tau d=3 | alpha - 4bit-b128 |",
        "|---|---:|---:|---:|---:|---|---|---|",
    ]
    for row in data["rows"]:
        mark = " **(chosen)**" if row["chosen"] else ""
        decisive = "-" if row["top1_decisive"] is None else f"{row['top1_decisive']:.4f}"
        lines.append(
            f"| {row['name']}{mark} | {row['bytes']:,} | {row['mean_kl']:.4f} | {decisive} | "
            f"{row['top1_agreement']:.4f} | {_cell(row['alpha'])} | {_cell(row['tau'].get(str(SHOWN_D)))} | "
            f"{_cell(row['alpha_vs_baseline'])} |"
        )
    return "\n".join(lines)


def text(data: dict[str, Any]) -> str:
    return f"{table(data)}\n\nchosen: {data['chosen']} ({data['rule']})"
