"""The measurement reports a card states (`pair --json`, `verify --json`): their figures must be real numbers
in range before they reach the card's text or its Hub evaluation results."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from .convert.checkpoint import read_json

PARITY_KEYS = ("prompts", "positions", "min_cosine", "mean_cosine", "top1_agreement", "greedy_agreement", "mean_kl",
               "decisive_positions", "top1_decisive")


def figure(value: Any, what: str, low: float = -math.inf, high: float = math.inf) -> None:
    """A finite number in [low, high]; ValueError naming the field otherwise (a tampered or foreign report)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not low <= value <= high:
        raise ValueError(f"{what} is {str(value)[:40]!r}, not a number in [{low:g}, {high:g}]")


def _interval(value: Any, what: str, low: float, high: float) -> None:
    for key in ("value", "low", "high"):
        figure(value[key], f"{what}.{key}", low, high)


def check_pairing(found: dict[str, Any]) -> None:
    """The figures of a pair report the card reads (pairing_from_report's result)."""
    _interval(found["alpha"], "alpha", 0, 1)
    for key in ("prompts", "positions", "new_tokens"):
        figure(found[key], key, 0)
    for depth in found["depths"]:
        figure(depth["d"], "depths.d", 1, 64)
        if depth["acceptance_rate"] is not None:
            _interval(depth["acceptance_rate"], f"depths.{depth['d']}.acceptance_rate", 0, 1)
        if depth["tokens_per_step"] is not None:
            _interval(depth["tokens_per_step"], f"depths.{depth['d']}.tokens_per_step", 1, depth["d"] + 1)
    for key in ("best_d", "recommended_d"):
        if found[key] is not None:
            figure(found[key], key, 1, 64)
    sampling = found["sampling"]
    if sampling is not None:
        figure(sampling["temperature"], "sampling.temperature", 0)
        figure(sampling["top_k"], "sampling.top_k", 0)
        figure(sampling["top_p"], "sampling.top_p", 0, 1)
        if sampling.get("acceptance") is not None:
            _interval(sampling["acceptance"], "sampling.acceptance", 0, 1)


def parity_from_report(path: Path, error: type[Exception]) -> dict[str, Any]:
    """The figures of a passing `packager verify --json` report; a failed verification is not stated on a card."""
    report = read_json(path, error)
    try:
        found = {key: report[key] for key in PARITY_KEYS}
        failures = report["failures"]
        for key in ("prompts", "positions", "decisive_positions", "mean_kl"):
            figure(found[key], key, 0)
        for key in ("top1_agreement", "greedy_agreement"):
            figure(found[key], key, 0, 1)
        for key in ("mean_cosine", "min_cosine"):
            figure(found[key], key, -1, 1)
        if found["top1_decisive"] is not None:
            figure(found["top1_decisive"], "top1_decisive", 0, 1)
    except (TypeError, KeyError) as exc:
        raise error(f"{path} is not a `packager verify --json` report (no {exc})") from None
    except ValueError as exc:
        raise error(f"{path}: {exc}", "use the report `packager verify --json` wrote") from None
    if failures or report.get("ok") is not True:
        raise error(f"{path} is a failed verification ({'; '.join(map(str, failures))[:300] or 'not ok'})",
                    "the card states only a verification that passed; reconvert and verify again")
    return found
