"""The measurements a card states, read in one place: the conversion's provenance and the reports (`pair --json`,
`verify --json`, `speculate --json`). Each report names the xxh3-128 of the files it measured, which must be the
bundle's own now, and its figures must be real numbers in range before they reach the card's text or its Hub
evaluation results."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from .. import resources
from ..errors import CardError, ProvenanceUnusable, shorten

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


SPECULATE_MODES = ("eagle", "lookahead", "dflash")


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
        if found["mode"] == "dflash":  # the accept rate and what one engine does with later responses
            found.update(_dflash_figures(report))
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


def _dflash_figures(report: dict[str, Any]) -> dict[str, Any]:
    block, rate, later = report["block_size"], report["accept_rate"], report["later_responses"]
    figure(block, "block_size", 2, 4096)
    if rate is not None:
        figure(rate, "accept_rate", 0, 1)
    if later is not None:
        for key in ("responses", "identical", "differing", "from_first_token"):
            figure(later[key], f"later_responses.{key}", 0, report["prompts"])
        crashed = later.get("crashed")
        later = {**later, "crashed": bool(crashed)}  # a crash is stated, its text (a path) is not
    return {"block_size": block, "accept_rate": rate, "later": later}


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


def hub_id_of(path: str) -> str | None:
    """The Hub id a Hugging Face cache path names (`.../models--ORG--NAME/snapshots/REV`), else None."""
    for part in Path(path).parts:
        if part.startswith("models--") and part.count("--") == 2 and all(part.split("--")[1:]):
            return "/".join(part.split("--")[1:])
    return None


def _recipe_name(recipe: dict[str, Any]) -> str:
    from ..convert.recipe import QuantRecipe

    return QuantRecipe(
        bits=recipe["bits"],
        block=recipe["block"],
        symmetric=recipe["symmetric"],
        algorithm=recipe["algorithm"],
        lm_bits=recipe["lm_bits"],
        lm_block=recipe["lm_block"],
    ).name


def provenance_measurements(path: Path) -> dict[str, Any]:
    """What the card may state from the provenance record at `path`; a file that is no record packager convert
    wrote (not JSON, not an object, a field missing or of another type) is one ProvenanceUnusable naming it."""
    from ..convert import provenance

    record = provenance.read(path)
    try:
        return measurements_from_provenance(record)
    except KeyError as exc:
        detail = f"no {shorten(str(exc), 60)}"
    except (TypeError, AttributeError, IndexError):
        detail = "a field holds a value of another type"
    raise ProvenanceUnusable(
        f"provenance record {shorten(str(path), 120)} is not a record packager convert wrote ({detail})"
    )


def measurements_from_provenance(record: dict[str, Any]) -> dict[str, Any]:
    """What the card may state from a conversion's provenance: tokenizer agreement and tool versions."""
    tokenizer = record["tokenizer"]
    chosen = tokenizer["agreement"][tokenizer["format"]]
    kinds = {item["text"]: item["category"] for item in resources.tokenizer_corpus_items()}
    categories: dict[str, int] = {}
    for text in chosen.get("mismatched", []):
        kind = kinds.get(text, "other")
        categories[kind] = categories.get(kind, 0) + 1
    found = {
        "tokenizer": {
            "format": tokenizer["format"],
            "matched": chosen["matched"],
            "total": chosen["total"],
            "mismatched_categories": dict(sorted(categories.items())),
        },
        "versions": record["versions"],
        "tool_version": record["tool"]["version"],
    }
    if isinstance(record.get("eagle_head"), dict):
        found["eagle_head"] = record["eagle_head"]
    if isinstance(record.get("dflash_draft"), dict):
        found["dflash_draft"] = record["dflash_draft"]
    recipe = record.get("options", {}).get("quant_recipe")
    if isinstance(recipe, dict):
        found["quant_recipe"] = {**recipe, "name": _recipe_name(recipe)}
    check = record.get("engine_check")
    if isinstance(check, dict) and check.get("results"):  # packager engines check --record
        found["engines"] = {
            "reference": check["reference_engine"],
            "prompts": check.get("prompts"),
            "results": list(check["results"]),
        }
    return found


def gather_measurements(
    bundle: Path,
    provenance: Path | None = None,
    parity: dict[str, Any] | None = None,
    pair_report: Path | None = None,
    verify_report: Path | None = None,
    speculate_reports: tuple[Path, ...] = (),
) -> dict[str, Any] | None:
    """Every measurement the card may state: the conversion's provenance (default BUNDLE.provenance.json beside
    the bundle, when present; `provenance`, when given, must be one), a verify result (or a `verify --json`
    report), a pair report and `speculate --json` reports of this bundle. None when there is none."""
    from ..convert.provenance import provenance_path

    # Named, it is read whatever it is (a device is refused, never skipped); the default only where it exists.
    record = provenance or provenance_path(bundle.absolute())
    found = provenance_measurements(record) if provenance or os.path.exists(record) else {}
    if verify_report is not None:
        parity = parity_from_report(verify_report, CardError, bundle)
    if parity:
        found["parity"] = parity
    if pair_report is not None:
        found["pairing"] = pairing_from_report(pair_report, bundle)
    if speculate_reports:
        runs = [speculation_from_report(path, bundle, CardError) for path in speculate_reports]
        if len({run["mode"] for run in runs}) < len(runs):
            raise CardError("two speculate reports measure the same mode", "give one report per mode")
        found["speculation"] = runs
    return found or None


def pairing_from_report(path: Path, bundle: Path | None = None) -> dict[str, Any]:
    """The figures of a `packager pair --json` report the card states: acceptance and tokens per step per d (they
    carry to any device), and a speedup only with where its costs were measured. Its draft must be this very
    bundle (the digests of the draft's files, compared unless `bundle` is None)."""
    report = read_report(path, "pair report", CardError)
    try:
        best = next((d for d in report["depths"] if d["d"] == report["best_d"]), None)
        sampling = report["sampling"]
        found = {
            "target": hub_id_of(report["target"]),  # a local folder's name is never stated
            "same_folder": os.path.normpath(report["draft"]) == os.path.normpath(report["target"]),
            "alpha": report["alpha"],
            "prompts": report["prompts"],
            "positions": report["positions"],
            "new_tokens": report["new_tokens"],
            "depths": [
                {"d": d["d"], "acceptance_rate": d["acceptance_rate"], "tokens_per_step": d["tokens_per_step"]}
                for d in report["depths"]
            ],
            "sampling": sampling,
            "costs_source": report["costs"]["source"],
            "device": report["costs"]["device"],
            "best_d": report["best_d"],
            "speedup": best["speedup_from_measured_tau"] if best else None,
            "recommended_d": report["recommended_draft_predict_length"],
        }
        check_pairing(found)
    except (TypeError, KeyError) as exc:
        raise CardError(f"{path} is not a `packager pair --json` report (no {exc})") from None
    except ValueError as exc:
        raise CardError(f"{path}: {exc}", "use the report `packager pair --json` wrote") from None
    files = measured_files(report, "draft_files_xxh3_128", path, "packager pair", CardError)
    if bundle is not None:
        check_same_files(path, bundle, files, CardError, "packager pair")
    return found
