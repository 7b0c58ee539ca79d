"""What a draft step, a target step and a verification of d + 1 tokens cost: measured here (interleaved over d
within each repeat, so load drift hits every d alike; median and spread) or read from a file measured on the
phone (`--costs`). Only the phone's figures may choose the app's draft length."""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path

from ..errors import InvalidOption, from_os_error, shorten
from .models import Model

COSTS_HINT = ('write {"draft_step_seconds": 0.012, "target_step_seconds": 0.05, "verify_seconds": {"1": 0.06, '
              '"2": 0.065, ...}} with a figure for every d, measured on the device')


@dataclass(frozen=True)
class Spread:
    median: float
    low: float  # the smallest of the repeats
    high: float  # the largest

    @classmethod
    def of(cls, samples: list[float]) -> Spread:
        return cls(statistics.median(samples), min(samples), max(samples))

    @classmethod
    def exact(cls, value: float) -> Spread:
        return cls(value, value, value)


@dataclass(frozen=True)
class Costs:
    source: str  # where the figures come from: "this CPU (<model>, N threads)" or "--costs FILE"
    device: bool  # measured on the device that runs the app (from --costs)
    draft_step: Spread
    target_step: Spread
    verify: dict[int, Spread]
    # Per repeat, for the speedup's spread: (draft step, target step, {d: verify}).
    repeats: tuple[tuple[float, float, dict[int, float]], ...]


def measure(draft: Model, target: Model, context: list[int], probe: list[int], max_d: int, repeats: int,
            source: str) -> Costs:
    """Each repeat times a draft step, a target step and every verification once, in that order."""
    rows = []
    for _ in range(repeats):
        draft_step = draft.time_forward(context, probe[:1], 1)
        target_step = target.time_forward(context, probe[:1], 1)
        rows.append((draft_step, target_step, {d: target.time_forward(context, probe[:d + 1], 1)
                                               for d in range(1, max_d + 1)}))
    return Costs(source=source, device=False, draft_step=Spread.of([r[0] for r in rows]),
                 target_step=Spread.of([r[1] for r in rows]),
                 verify={d: Spread.of([r[2][d] for r in rows]) for d in range(1, max_d + 1)}, repeats=tuple(rows))


def read(path: Path, max_d: int) -> Costs:
    """Device costs from a JSON file: one figure each, in seconds, a verification for every d."""
    where = f"--costs {shorten(str(path), 120)}"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise from_os_error(exc, "cannot read --costs") from None
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise InvalidOption(f"{where} is not a JSON file", COSTS_HINT) from None
    try:
        draft, target = _seconds(data["draft_step_seconds"]), _seconds(data["target_step_seconds"])
        verify = {d: _seconds(data["verify_seconds"][str(d)] if isinstance(data["verify_seconds"], dict)
                              else data["verify_seconds"][d - 1]) for d in range(1, max_d + 1)}
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise InvalidOption(f"{where} lacks a positive figure ({shorten(str(exc), 60)})", COSTS_HINT) from None
    return Costs(source=f"--costs {path.name}", device=True, draft_step=Spread.exact(draft),
                 target_step=Spread.exact(target), verify={d: Spread.exact(v) for d, v in verify.items()},
                 repeats=((draft, target, verify),))


def _seconds(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"not a positive number of seconds: {shorten(value, 40)}")
    return float(value)


def host(threads: int) -> str:
    """Where CPU costs were measured: the CPU's model name and the thread count."""
    name = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.lower().startswith(("model name", "hardware")) and ":" in line:
                name = " ".join(line.split(":", 1)[1].split())
                break
    except OSError:
        pass
    return f"this CPU ({name}, {threads} thread{'s' if threads != 1 else ''})"
