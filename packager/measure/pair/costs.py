"""What a draft step, a target step and a verification of d + 1 tokens cost: measured here or read from a file
measured on the phone (`--costs`). Only the phone's figures may choose the app's draft length.

Measured here, each cost is taken the way the speculative loop (packager.runtime.speculative) pays it: a step on a
KV cache, reading its logits and picking the argmax included; the draft's steps and the target's verification
alternate, so each finds the other's weights in the CPU's caches as the loop does; the rejected positions are
rolled back with `keep`. Also the draft's catch-up: after a full acceptance the draft has not yet seen its own
last proposal and takes it with the target's bonus token in one two-token forward. The depths are interleaved
within each repeat, in an order that rotates, so load drift hits every d alike; median and spread over repeats.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ...errors import FileSystemError, InvalidOption, shorten
from ...infra.userfile import COSTS_BYTES, read_bytes
from ...runtime.models import Model

COSTS_HINT = (
    'write {"draft_step_seconds": 0.012, "target_step_seconds": 0.05, "verify_seconds": {"1": 0.06, '
    '"2": 0.065, ...}} with a figure for every d, measured on the device (optional: '
    '"draft_catchup_seconds", a two-token draft forward)'
)


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
    # Per repeat, for the speedup's spread: (draft step, target step, {d: verify}, draft catch-up).
    repeats: tuple[tuple[float, float, dict[int, float], float], ...]
    draft_catchup: Spread  # the draft's two-token forward after a full acceptance


def measure(
    draft: Model,
    target: Model,
    context: list[int],
    probe: list[int],
    max_d: int,
    repeats: int,
    source: str,
    progress: Callable[[int], None] = lambda _: None,
) -> Costs:
    """Each repeat: three target steps on one cache (the baseline's pattern), then for every d (in rotating order)
    d draft steps, the verification of d + 1 tokens and the draft's catch-up, both caches rolled back to
    `context` after each. `probe` needs max_d + 2 tokens. `progress` gets the repeats done (0 first)."""
    if len(probe) < max_d + 2:
        raise ValueError(f"costs need {max_d + 2} probe tokens, got {len(probe)}")
    rows = []
    depths = list(range(1, max_d + 1))
    progress(0)
    for repeat in range(repeats):
        base = target.start(context)
        target_step = statistics.median(target.timed_step(probe[i : i + 1], False) for i in range(3))
        draft.start(context)
        target.keep(base)
        steps: list[float] = []
        catchups: list[float] = []
        verify: dict[int, float] = {}
        for d in depths[repeat % max_d :] + depths[: repeat % max_d]:
            steps += [draft.timed_step(probe[i : i + 1], False) for i in range(d)]
            verify[d] = target.timed_step(probe[: d + 1], True)
            catchups.append(draft.timed_step(probe[d : d + 2], False))
            target.keep(base)
            draft.keep(base)
        rows.append((statistics.median(steps), target_step, verify, statistics.median(catchups)))
        progress(repeat + 1)
    return Costs(
        source=source,
        device=False,
        draft_step=Spread.of([r[0] for r in rows]),
        target_step=Spread.of([r[1] for r in rows]),
        verify={d: Spread.of([r[2][d] for r in rows]) for d in depths},
        repeats=tuple(rows),
        draft_catchup=Spread.of([r[3] for r in rows]),
    )


def read(path: Path, max_d: int) -> Costs:
    """Device costs from a JSON file: one figure each, in seconds, a verification for every d."""
    where = f"--costs {shorten(str(path), 120)}"
    raw = read_bytes(path, COSTS_BYTES, what="--costs file", unreadable=FileSystemError)  # the OS's reason
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise InvalidOption(f"{where} is not a JSON file", COSTS_HINT) from None
    try:
        draft, target = _seconds(data["draft_step_seconds"]), _seconds(data["target_step_seconds"])
        verify = {
            d: _seconds(
                data["verify_seconds"][str(d)]
                if isinstance(data["verify_seconds"], dict)
                else data["verify_seconds"][d - 1]
            )
            for d in range(1, max_d + 1)
        }
        # Without it, a catch-up costs one draft step: the textbook model, which ignores it.
        catchup = _seconds(data.get("draft_catchup_seconds", draft))
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
        raise InvalidOption(f"{where} lacks a positive figure ({shorten(str(exc), 60)})", COSTS_HINT) from None
    return Costs(
        source=f"--costs {path.name}",
        device=True,
        draft_step=Spread.exact(draft),
        target_step=Spread.exact(target),
        verify={d: Spread.exact(v) for d, v in verify.items()},
        repeats=((draft, target, verify, catchup),),
        draft_catchup=Spread.exact(catchup),
    )


def _seconds(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
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
