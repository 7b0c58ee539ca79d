"""The measurement reports a card states (`pair --json`, `verify --json`, `speculate --json`): each names the
xxh3-128 of the files it measured, which must be the bundle's own now, and its figures must be real numbers in
range before they reach the card's text or its Hub evaluation results."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

PARITY_KEYS = (
    "prompts",
    "positions",
    "min_cosine",
    "mean_cosine",
    "top1_agreement",
    "greedy_agreement",
    "mean_kl",
    "decisive_positions",
    "top1_decisive",
)


def figure(value: Any, what: str, low: float = -math.inf, high: float = math.inf) -> None:
    """A finite number in [low, high]; ValueError naming the field otherwise (a tampered or foreign report)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not low <= value <= high
    ):
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


def read_report(path: Path, what: str, error: type[Any]) -> Any:
    """A report's JSON, read through userfile: never more than REPORT_BYTES, whatever the file claims to be
    (/dev/zero, a FIFO's writer, a sparse file), else one line (InputTooLarge, exit 26)."""
    from ..errors import InputTooLarge
    from ..infra.jsonfile import read_json
    from ..infra.userfile import REPORT_BYTES

    return read_json(path, error, REPORT_BYTES, what, too_large=InputTooLarge)


def measured_files(report: dict[str, Any], key: str, path: Path, command: str, error: type[Any]) -> dict[str, Any]:
    """The digests a report names (`key`); a report without them (an older packager's) cannot be tied to a bundle."""
    files = report.get(key)
    if not isinstance(files, dict) or not files:
        raise error(
            f"{path} names no files it measured (no {key}: made by an older packager, or not by {command})",
            f"run {command} --json on this bundle again",
        )
    return files


def parity_from_report(path: Path, error: type[Exception], bundle: Path | None = None) -> dict[str, Any]:
    """The figures of a passing `packager verify --json` report of this very bundle (its files' digests must be
    the bundle's now; not compared when `bundle` is None); a failed verification is not stated on a card."""
    report = read_report(path, "verify report", error)
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
    files = measured_files(report, "files_xxh3_128", path, "packager verify", error)
    if bundle is not None:
        check_same_files(path, bundle, files, error, "packager verify")
    if failures or report.get("ok") is not True:
        raise error(
            f"{path} is a failed verification ({'; '.join(map(str, failures))[:300] or 'not ok'})",
            "the card states only a verification that passed; reconvert and verify again",
        )
    return found


SPECULATE_MODES = ("eagle", "lookahead")


def speculation_from_report(path: Path, bundle: Path | None, error: type[Exception]) -> dict[str, Any]:
    """The figures of a lossless `packager speculate --json` report of this very bundle (its files' digests must
    be the bundle's now; not compared when `bundle` is None): tokens per step, decode speeds and the speedup,
    with where they were measured."""
    report = read_report(path, "speculate report", error)
    try:
        found = {
            key: report[key]
            for key in (
                "mode",
                "prompts",
                "max_new_tokens",
                "repeats",
                "measured_on",
                "engine",
                "near_ties",
                "steps_counted",
                "tie_tolerance",
            )
        }
        found.update(
            accepted=report["accepted_per_step"],
            plain=report["plain_tokens_per_second"],
            speculative=report["speculative_tokens_per_second"],
            speedup=report["speedup"],
        )
        files, lossless = report["files_xxh3_128"], report["lossless"]
        _check_speculation(found)
        if not isinstance(files, dict) or not files:
            raise ValueError("files_xxh3_128 names no file")
    except (TypeError, KeyError) as exc:
        raise error(f"{path} is not a `packager speculate --json` report (no {exc})") from None
    except ValueError as exc:
        raise error(f"{path}: {exc}", "use the report `packager speculate --json` wrote") from None
    if lossless is not True:
        raise error(
            f"{path} records a {found['mode']} run that was not lossless",
            "the card states only a lossless run; fix the bundle and run packager speculate again",
        )
    if bundle is not None:
        check_same_files(path, bundle, files, error, "packager speculate")
    return found


def _check_speculation(found: dict[str, Any]) -> None:
    if found["mode"] not in SPECULATE_MODES:
        raise ValueError(f"mode is {str(found['mode'])[:40]!r}, not one of {', '.join(SPECULATE_MODES)}")
    for key in ("prompts", "max_new_tokens", "repeats"):
        figure(found[key], key, 1)
    for key in ("near_ties", "steps_counted"):
        figure(found[key], key, 0, found["prompts"])
    figure(found["tie_tolerance"], "tie_tolerance", 0)
    if found["accepted"] is not None:
        _interval(found["accepted"], "accepted_per_step", 1, 64)
    for key in ("plain", "speculative", "speedup"):
        for part in ("median", "low", "high"):
            figure(found[key][part], f"{key}.{part}", 0)
    for key in ("measured_on", "engine"):
        if not isinstance(found[key], str) or not 0 < len(found[key]) <= 200 or any(c in found[key] for c in "|<\n"):
            raise ValueError(f"{key} is not one short line of text")


def check_same_files(path: Path, bundle: Path, files: dict[str, Any], error: type[Exception], command: str) -> None:
    """Every file the report measured is the bundle's file now, and it measured every file the bundle runs on."""
    from ..bundle.kinds import ALL_NAMES, kind_of
    from ..infra.hashing import xxh3_128_file

    for name, digest in files.items():
        if name not in ALL_NAMES:
            raise error(
                f"{path} names {str(name)[:60]!r}, which is no bundle file",
                f"it measured other files (a checkpoint?); run {command} on this bundle",
            )
        current = xxh3_128_file(bundle / name) if (bundle / name).is_file() else None
        if current != digest:
            raise error(
                f"{path} measured another bundle: {name} {'differs' if current else 'is missing'} here",
                f"run {command} on this bundle again",
            )
    unmeasured = [name for name in kind_of(bundle).app_set(bundle) if (bundle / name).is_file() and name not in files]
    if unmeasured:
        raise error(
            f"{path} measured another bundle: it names no digest of {', '.join(unmeasured[:3])}",
            f"run {command} on this bundle again",
        )
