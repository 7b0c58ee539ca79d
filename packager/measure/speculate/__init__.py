"""packager speculate: a bundle's speculative mode run by MNN's own generation strategy against its plain
decoding, on the same chat prompts, greedy: are the tokens the same, how many does a step accept, how much
faster does it decode."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

from ...bundle.modes import DFLASH_KEYS, EAGLE_KEYS, graph_io
from ...errors import InvalidOption, SpeculationNotLossless, SpeculationUnavailable, shorten
from .. import workload
from ..compat import facts
from ..pair.costs import host
from . import files
from .child import run
from .summary import Report, summarize

Mode = Literal["eagle", "lookahead", "dflash"]
MODES = ("eagle", "lookahead", "dflash")
_VALIDATE = "run packager validate on the bundle"


@dataclass(frozen=True)
class Request:
    bundle: Path
    mode: Mode | None = None  # None: the bundle's own speculative_type
    prompts: tuple[str, ...] | None = None  # user turns; None: the built-in 54 conversations
    max_new_tokens: int = 64
    repeats: int = 3
    threads: int | None = None  # None: the bundle's thread_num, at most the cores this process may use
    # A divergent token this close to the target's best logit is a near-tie. Measured on the trained EAGLE
    # fixture (4-bit): MNN's plain decode step leaves the full-forward argmax by up to 0.073, lookahead's batched
    # verification by up to 0.053; a sampler or a graph that computes something else is off by whole logits.
    tie_tolerance: float = 0.1


def speculate(request: Request, progress: Callable[[str], None] = lambda _: None) -> Report:
    config = _config(request.bundle)
    dump = _graph_dump(request.bundle)
    mode = _mode(request, config, dump)
    if request.max_new_tokens < 8 or request.repeats < 1 or (request.threads or 1) < 1:
        raise InvalidOption("--tokens must be at least 8, --repeats and --threads at least 1")
    read = files.check(request.bundle, config, mode, dump)  # each file MNN reads, before anything else reads it
    info = facts(request.bundle)
    prompts = workload.from_texts(request.prompts) if request.prompts else workload.builtin()
    texts = [workload.render(info.chat_template, prompt, info.variables) for prompt in prompts]
    cores = len(os.sched_getaffinity(0))
    threads = request.threads or min(_int(config.get("thread_num")) or cores, cores)
    job = {
        "bundle": str(request.bundle),
        "mode": mode,
        "prompts": texts,
        "max_new_tokens": request.max_new_tokens,
        "repeats": request.repeats,
        "stops": sorted(info.stop),
        **_overrides(mode, config, threads),
    }
    raw = run(job, progress)
    if mode == "dflash":
        raw["later"] = _later_responses(job, raw, progress)
    return summarize(raw, mode, request, host(threads), job, _digests(request.bundle, read))


def _later_responses(job: dict[str, Any], raw: dict[str, Any], progress: Callable[[str], None]) -> dict[str, Any]:
    """MNN 3.6.1 keeps DFlash's draft state from one response to the next (fixed on MNN's main branch in
    dd48baa63, in no release yet): every prompt answered in turn by one engine, in a child of its own, since the
    engine may crash there; a crash is a finding, not an error."""
    from ...errors import RuntimeCrashed

    later = {**job, "part": "later", "plain_tokens": [p["plain_tokens"] for p in raw["prompts"]]}
    try:
        return run(later, progress)
    except RuntimeCrashed as crash:
        return {"crashed": crash.message}


def refuse_if_lossy(report: Report) -> None:
    """SpeculationNotLossless (exit 83) naming the first prompt whose tokens differ beyond a near-tie."""
    if report.mismatches:
        first = report.mismatches[0]
        raise SpeculationNotLossless(
            f"{report.mode} emitted other tokens than plain decoding on {len(report.mismatches)} of {report.prompts} "
            f"prompts (first: prompt {first.index + 1} at token {first.position}, {first.gap:.3f} below the target's "
            "best logit)"
        )


def _digests(bundle: Path, read: tuple[str, ...] = ()) -> dict[str, str]:
    """xxh3-128 of the files an app downloads to run the bundle (its kind's, plus a lookup corpus) and of every
    other file the engine read."""
    from ...bundle.kinds import kind_of
    from ...infra.hashing import xxh3_128_file

    names = {name for name in kind_of(bundle).app_set(bundle) if (bundle / name).is_file()} | set(read)
    return {name: xxh3_128_file(bundle / name) for name in sorted(names)}


def _config(bundle: Path) -> dict[str, Any]:
    from ...infra.jsonfile import read_json

    path = bundle / "config.json"
    try:
        data = read_json(path, SpeculationUnavailable)  # at most MAX_JSON_BYTES, UTF-8, valid JSON: else one line
    except RecursionError:
        raise SpeculationUnavailable(f"{shorten(str(path), 120)} is nested too deeply", _VALIDATE) from None
    if not isinstance(data, dict):
        raise SpeculationUnavailable(f"{shorten(str(path), 120)} is not a JSON object", _VALIDATE)
    return data


def _mode(request: Request, config: dict[str, Any], dump: Any = None) -> Mode:
    own = config.get("speculative_type") or ""
    mode = request.mode or own
    if mode not in MODES:
        said = (
            f"is configured for speculative_type {shorten(own, 40)!r}"
            if own
            else "is configured for no speculative mode"
        )
        raise SpeculationUnavailable(
            f"{shorten(str(request.bundle), 120)} {said}; packager speculate runs "
            f"{', '.join(MODES[:-1])} and {MODES[-1]} (upstream MNN ignores draftmodel)"
        )
    if mode == "eagle":
        names = [config.get(key, default) for key, default in EAGLE_KEYS.items()]
        if not all(isinstance(n, str) and n and "/" not in n and "\\" not in n and n not in (".", "..") for n in names):
            raise SpeculationUnavailable(
                f"{shorten(str(request.bundle), 120)}'s config.json names an EAGLE file outside the bundle folder",
                _VALIDATE,
            )
        missing = [name for name in names if not (request.bundle / name).is_file()]
        if own != "eagle" or missing or config.get("hidden_states") is not True:
            raise SpeculationUnavailable(
                f"{shorten(str(request.bundle), 120)} holds no EAGLE-3 head MNN can run "
                f"({', '.join(map(str, missing)) + ' missing' if missing else 'not configured'})",
                "convert the target with --eagle HEAD, then run packager validate",
            )
    if mode == "dflash":
        _check_dflash(request.bundle, config, own)
    if not _can_speculate(request.bundle, dump):
        raise SpeculationUnavailable(
            f"{shorten(str(request.bundle), 120)}'s graph has no logits_index input with "
            f"dims, so MNN would decode plainly under any speculative mode",
            "re-export with llmexport 0.0.5+ or packager convert",
        )
    return cast(Mode, mode)  # one of MODES: checked above


def _check_dflash(bundle: Path, config: dict[str, Any], own: str) -> None:
    """A bundle MNN's DFlashGeneration can run: its two graphs named inside the folder and present, the target's
    hidden_states output on, a block of at least two positions (the engine's defaults, block 16 and mask id 0, are
    never a draft's by chance)."""
    names = [config.get(key, default) for key, default in DFLASH_KEYS.items()]
    if not all(isinstance(n, str) and n and "/" not in n and "\\" not in n and n not in (".", "..") for n in names):
        raise SpeculationUnavailable(
            f"{shorten(str(bundle), 120)}'s config.json names a DFlash file outside the bundle folder", _VALIDATE
        )
    missing = [name for name in names if not (bundle / name).is_file()]
    block, mask = config.get("dflash_block_size"), config.get("dflash_mask_token_id")
    if own != "dflash" or missing or config.get("hidden_states") is not True:
        raise SpeculationUnavailable(
            f"{shorten(str(bundle), 120)} holds no DFlash draft MNN can run "
            f"({', '.join(map(str, missing)) + ' missing' if missing else 'not configured'})",
            "convert the target with --dflash DRAFT, then run packager validate",
        )
    if (_int(block) or 0) < 2 or not isinstance(mask, int) or isinstance(mask, bool) or mask < 0:
        raise SpeculationUnavailable(
            f"{shorten(str(bundle), 120)}'s config.json gives no usable dflash_block_size and dflash_mask_token_id",
            _VALIDATE,
        )


def _graph_dump(bundle: Path) -> Any:
    """llm.mnn.json, parsed; None where the bundle has none (an app's folder may not) or it is damaged (validate
    reports it; the engine reads llm.mnn)."""
    from ...convert.inspect.checkpoint import read_json

    path = bundle / "llm.mnn.json"
    if not path.is_file():
        return None
    try:
        return read_json(path, SpeculationUnavailable)
    except (SpeculationUnavailable, RecursionError):
        return None


def _can_speculate(bundle: Path, dump: Any = None) -> bool:
    """MNN's canSpecDecode, from llm.mnn.json where the bundle has it (else MNN is trusted, and a mode that never
    drafts shows as one token a step)."""
    if dump is None:
        return True
    try:
        inputs, _ = graph_io(dump)
    except (AttributeError, TypeError):
        return True
    return bool(inputs.get("logits_index"))


def _overrides(mode: str, config: dict[str, Any], threads: int) -> dict[str, Any]:
    """The two engines' settings: the bundle's own, greedy, the same threads; plain decoding without the
    speculative mode (and without the hidden-state output only EAGLE reads)."""
    common = {"sampler_type": "greedy", "thread_num": threads, "reuse_kv": False}
    speculative = {
        **common,
        "speculative_type": mode,
        **({"hidden_states": False} if mode not in ("eagle", "dflash") else {}),
    }
    return {
        "plain": {**common, "speculative_type": "", "hidden_states": False},
        "speculative": speculative,
        "depth": _int(config.get("eagle_depth")) or 3,
        "longest": (_int(config.get("draft_predict_length")) or 3) + 1,
        "block": _int(config.get("dflash_block_size")) or 16,
    }


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
