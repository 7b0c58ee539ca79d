"""Load a bundle in each requested MNN engine (a child process in that engine's environment) and compare
its next-token logits with the current engine's (the MNN packager's converter ships with)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from ...bundle.engine import PYPI_ENGINES, format_version, parse_version
from ...errors import BundleError, InvalidOption, RuntimeCrashed, shorten
from ...infra.progress import Progress as Report
from ...infra.versions import installed
from . import venvs

PROBE = Path(__file__).with_name("probe.py")
# Prompts of the check: English, code, Chinese and accented Latin (where the text and PIPELINE tokenizers
# differ), each ending mid-sentence so the next token is a real prediction.
PROMPTS = (
    "The capital of France is",
    "def fibonacci(n):\n    return",
    "今天天气很好，我们去",
    "Grüße aus München, café naïve résumé and",
)
MIN_COSINE = 0.99
# A generous guard against an engine that hangs (not a timing assertion: a healthy probe takes seconds).
CHILD_LIMIT_S = 900


@dataclass(frozen=True)
class EngineResult:
    version: str
    loads: bool
    reason: str  # why it does not load ("" when it loads)
    agrees: bool | None  # logits agree with the current engine's (None when it does not load)
    min_cosine: float | None
    top1: int | None  # prompts whose next-token argmax equals the current engine's
    prompts: int
    same_ids: int | None  # prompts its tokenizer encodes to the current engine's ids
    notes: tuple[str, ...] = ()  # what this engine does with the bundle's speculative mode (DFlash)

    @property
    def verdict(self) -> str:
        if not self.loads:
            return f"does not load: {self.reason}"
        return "loads, logits agree" if self.agrees else "loads, logits DISAGREE"


@dataclass(frozen=True)
class CheckReport:
    bundle: Path
    declared: str | None  # the bundle's min_mnn_engine.version
    reference: str  # the current engine's version
    results: tuple[EngineResult, ...]

    def failures(self) -> list[EngineResult]:
        """Engines at or above the declared minimum where the bundle does not load or disagrees."""
        floor = parse_version(self.declared) if self.declared else (0, 0, 0)
        return [r for r in self.results if parse_version(r.version) >= floor and not (r.loads and r.agrees)]

    def as_dict(self) -> dict[str, Any]:
        return {
            "bundle": str(self.bundle),
            "declared_min_engine": self.declared,
            "reference_engine": self.reference,
            "prompts": list(PROMPTS),
            "min_cosine": MIN_COSINE,
            "results": [{**asdict(r), "verdict": r.verdict} for r in self.results],
        }


# MNN's DFlash mode by engine release: none before 3.6.0; 3.6.0 and 3.6.1 keep the draft's state across responses
# (DFlashGeneration's mInitialized is never reset; fixed on MNN's main branch in dd48baa63, 2026-06-29, after
# neither release); after 3.6.1, commit bc85588f2 (2026-08-11) takes the lm_head out of dflash.mnn and requires
# dflash_shared_lmhead_input, a format packager does not write.
DFLASH_FIRST = (3, 6, 0)
DFLASH_DEFECT = ((3, 6, 0), (3, 6, 1))
DFLASH_LAST_WRITTEN = (3, 6, 1)
DFLASH_DEFECT_NOTE = (
    "dflash: lossless only on an engine's first response (MNN {v} keeps the draft's state across responses; fixed "
    "after this release in MNN's dd48baa63): reload the engine for every response"
)


def dflash_notes(version: str) -> tuple[str, ...]:
    """What MNN `version` does with a target+dflash bundle, beyond loading it."""
    found = parse_version(version)
    if found < DFLASH_FIRST:
        return (f"dflash: MNN {version} has no DFlash mode and decodes plainly, without the draft",)
    if found in DFLASH_DEFECT:
        return (DFLASH_DEFECT_NOTE.format(v=version),)
    return ()


def is_dflash(bundle: Path) -> bool:
    try:
        config = json.loads((bundle / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and config.get("speculative_type") == "dflash"


def requested_versions(text: str | None, dflash: bool = False) -> tuple[str, ...]:
    """`--versions 3.4.1,3.6.1` (or all of PyPI's); each must be an MNN release on PyPI. For a DFlash bundle, an
    engine past the DFlash format packager writes is refused with that reason."""
    if text is None or text.strip().lower() == "all":
        return PYPI_ENGINES
    chosen = []
    for item in (p.strip() for p in text.split(",")):
        if dflash and _past_dflash_format(item):
            raise InvalidOption(
                f"--versions: MNN {shorten(item)!s} reads DFlash drafts in another format than this bundle's (after "
                "3.6.1, MNN's commit bc85588f2 takes the lm_head out of dflash.mnn and requires "
                "dflash_shared_lmhead_input), which packager does not write yet",
                f"check with {format_version(DFLASH_LAST_WRITTEN)} or older",
            )
        if item not in PYPI_ENGINES:
            raise InvalidOption(
                f"--versions: {shorten(item)!s} is not an MNN release on PyPI",
                f"choose from {', '.join(PYPI_ENGINES)} (or all)",
            )
        if item not in chosen:
            chosen.append(item)
    return tuple(sorted(chosen, key=parse_version))


def _past_dflash_format(item: str) -> bool:
    try:
        return parse_version(item) > DFLASH_LAST_WRITTEN
    except ValueError:
        return False


def declared_engine(bundle: Path) -> str | None:
    try:
        runtime = json.loads((bundle / "runtime_config.json").read_text(encoding="utf-8"))
        version = runtime["min_mnn_engine"]["version"]
        parse_version(version)
        return str(version)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def check(bundle: Path, versions: Sequence[str], report: Report = lambda _: None) -> CheckReport:
    bundle = bundle.absolute()
    if not (bundle / "config.json").is_file():
        raise BundleError(f"{bundle} holds no config.json", "pass a bundle folder made by packager convert")
    reference_version = installed(("mnn",))["mnn"]
    report(f"loading the bundle in the current engine (MNN {reference_version})")
    reference = run_probe(Path(sys.executable), bundle, None)
    if not reference.get("loads"):
        raise RuntimeCrashed(
            f"the current engine (MNN {reference_version}) cannot run {bundle}: {reference.get('reason')}"
        )
    ids, logits = reference["ids"], reference["logits"]
    if not np.isfinite(logits).all() or (logits.std(axis=1) == 0).any():
        raise BundleError(
            f"the current engine (MNN {reference_version}) runs {bundle} but its next-token logits "
            "are constant or not finite (damaged weights?), so there is nothing to compare",
            "run packager validate on the bundle",
        )
    results = []
    dflash = is_dflash(bundle)
    for version in versions:
        engine = venvs.ensure(version, report)
        report(f"loading the bundle in MNN {version}")
        result = compare(version, run_probe(engine.python, bundle, ids), ids, logits)
        results.append(replace(result, notes=dflash_notes(version)) if dflash else result)
    return CheckReport(bundle, declared_engine(bundle), reference_version, tuple(results))


def compare(version: str, found: dict[str, Any], ids: list[list[int]], logits: np.ndarray) -> EngineResult:
    if not found.get("loads"):
        return EngineResult(version, False, str(found.get("reason")), None, None, None, len(PROMPTS), None)
    theirs = found["logits"]
    if theirs.shape != logits.shape:
        return EngineResult(version, True, "", False, None, 0, len(PROMPTS), None)
    cosines = [float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) or 1.0)) for a, b in zip(theirs, logits)]
    top1 = int(sum(int(a.argmax() == b.argmax()) for a, b in zip(theirs, logits)))
    finite = bool(np.isfinite(theirs).all())
    agrees = finite and min(cosines) >= MIN_COSINE and top1 == len(PROMPTS)
    same = sum(int(a == b) for a, b in zip(found["ids"], ids))
    return EngineResult(version, True, "", agrees, round(min(cosines), 6) if finite else None, top1, len(PROMPTS), same)


def run_probe(python: Path, bundle: Path, ids: list[list[int]] | None) -> dict[str, Any]:
    """One probe in a child process; a crash or a hang is a result ("does not load: SIGSEGV at ...")."""
    with tempfile.TemporaryDirectory(prefix="packager-engine-probe-") as work:
        out = Path(work)
        request = out / "request.json"
        request.write_text(
            json.dumps({"bundle": str(bundle), "prompts": list(PROMPTS), "ids": ids, "out": str(out)}), encoding="utf-8"
        )
        with open(out / "log", "wb") as log:
            process = subprocess.Popen(
                [str(python), "-I", str(PROBE), str(request)],
                cwd=work,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=_child_env(),
            )
            try:
                code = process.wait(timeout=CHILD_LIMIT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                return {"loads": False, "reason": f"no answer within {CHILD_LIMIT_S} s while {_stage(out)} (killed)"}
            except BaseException:
                process.kill()
                process.wait()
                raise
        result_file = out / "result.json"
        if code != 0 or not result_file.is_file():
            return {"loads": False, "reason": f"{_ended(code)} while {_stage(out)}"}
        try:
            result = json.loads(result_file.read_text(encoding="utf-8"))
            if result.get("loads"):
                result["logits"] = np.load(out / "logits.npy").astype(np.float64)
        except (OSError, ValueError) as exc:
            return {"loads": False, "reason": f"unreadable probe result ({shorten(str(exc))})"}
        return result


def _child_env() -> dict[str, str]:
    """Only what an interpreter needs; the child runs isolated (-I) and never reaches the network."""
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env.update({"OMP_NUM_THREADS": "1", "DO_NOT_TRACK": "1", "PIP_NO_INDEX": "1"})
    return env


_STAGES = {
    "import": "importing MNN",
    "create": "reading config.json",
    "load": "loading llm.mnn and its weights",
    "tokenize": "tokenizing with tokenizer.txt",
    "write": "writing its result",
}


def _stage(out: Path) -> str:
    try:
        stage = (out / "stage").read_text(encoding="utf-8").strip()
    except OSError:
        return "start-up"
    if stage.startswith("forward "):
        return f"running the graph (prompt {int(stage.split()[1]) + 1})"
    return _STAGES.get(stage, "start-up")


def _ended(code: int) -> str:
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"
