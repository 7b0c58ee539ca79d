"""packager speculate's dflash mode without an engine: how the steps of MNN 3.6.1's DFlashGeneration are read from
the engine run one step a call, how the later responses of one engine (3.6.1's multi-response defect) and the
accept rate are summarized, and which bundles are refused before any engine starts (one line, exit 82). The
engine itself runs in tests/test_trained_dflash.py."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from packager.errors import SpeculationUnavailable
from packager.measure.speculate import Request, speculate
from packager.measure.speculate.steps import StepsUnreadable, dflash_steps
from packager.measure.speculate.summary import summarize, text


def test_dflash_steps_are_the_calls_that_each_ran_one_verification() -> None:
    # the prefill's token, then steps of 2, 1 and 3 tokens
    steps = dflash_steps([5, 1, 2, 3, 4, 5, 6], [3, 4, 7], [5, 1, 2, 3, 4, 5, 6])
    assert (steps.tokens, steps.low, steps.high) == (6, 3, 3)


def test_a_step_by_step_run_that_parts_counts_only_the_steps_before_it() -> None:
    # parts at token 5: the steps ending at 3 and 4 are kept (3 tokens after the prefill's), the one to 7 is not
    steps = dflash_steps([5, 1, 2, 3, 4, 9, 9], [3, 4, 7], [5, 1, 2, 3, 4, 5, 6])
    assert (steps.tokens, steps.low) == (3, 2)


@pytest.mark.parametrize(
    "stepwise, bounds, generated",
    [
        ([5], [], [5]),  # a stop as the prefill's token: no step
        ([5, 9, 9], [3], [5, 1, 2]),  # parts inside the first step
    ],
)
def test_steps_that_cannot_be_read_are_unreadable_not_guessed(
    stepwise: list[int], bounds: list[int], generated: list[int]
) -> None:
    with pytest.raises(StepsUnreadable):
        dflash_steps(stepwise, bounds, generated)


def _raw(steps: dict[str, int] | None) -> dict[str, Any]:
    return {
        "prompt_tokens": 4,
        "plain_tokens": [1, 2, 3, 4],
        "speculative_tokens": [1, 2, 3, 4],
        "repeatable": True,
        "plain_seconds": [1.0],
        "speculative_seconds": [2.0],
        "plain_counts": [4],
        "speculative_counts": [4],
        "steps": steps,
        "divergence": None,
    }


def _report(later: dict[str, Any]) -> Any:
    request = SimpleNamespace(tie_tolerance=0.1, max_new_tokens=16, repeats=1)
    raw = {"prompts": [_raw({"tokens": 6, "low": 3, "high": 3}), _raw({"tokens": 6, "low": 2, "high": 2})]}
    raw["later"] = later
    return summarize(raw, "dflash", request, "this CPU", {"bundle": "b", "block": 4})


def test_later_responses_of_one_engine_are_measured_apart_and_stated() -> None:
    differ = {"position": 0, "top_logit": 5.0, "speculative_logit": 1.0}
    tie = {"position": 3, "top_logit": 5.0, "speculative_logit": 4.95}
    report = _report({"answers": [{"divergence": None}, {"divergence": differ}, {"divergence": tie}]})
    later = report.later_responses
    assert (later.responses, later.identical, later.differing, later.from_first_token) == (2, 1, 1, 1)
    assert later.first_response_identical and not report.mismatches  # the first responses (fresh engines) decide
    assert report.accept_rate == pytest.approx(12 / (5 * 4)) and report.block_size == 4
    shown = text(report)
    assert "later responses on one engine: 1 of 2 identical to plain decoding, 1 differ (1 from their first" in shown
    assert "reload the engine for every response" in shown and "slower than plain decoding here (0.50x)" in shown
    assert json.loads(json.dumps(report.as_dict()))["later_responses"]["differing"] == 1


def test_an_engine_that_crashes_on_a_later_response_is_a_finding() -> None:
    report = _report({"crashed": "MNN's generation failed on b: the engine was killed by SIGSEGV"})
    assert report.later_responses.crashed and "the engine crashed (MNN's generation" in text(report)


def _bundle(folder: Path, **config: Any) -> Path:
    folder.mkdir()
    base = {
        "speculative_type": "dflash",
        "hidden_states": True,
        "dflash_model": "dflash.mnn",
        "dflash_fc": "dflash_fc.mnn",
        "dflash_block_size": 4,
        "dflash_mask_token_id": 151669,
    }
    (folder / "config.json").write_text(json.dumps({**base, **config}), encoding="utf-8")
    for name in ("dflash.mnn", "dflash_fc.mnn"):
        (folder / name).write_bytes(b"x")
    return folder


@pytest.mark.parametrize(
    "config, remove, said",
    [
        ({"dflash_fc": "../outside.mnn"}, None, "names a DFlash file outside the bundle folder"),
        ({}, "dflash_fc.mnn", "holds no DFlash draft MNN can run (dflash_fc.mnn missing)"),
        ({"hidden_states": False}, None, "holds no DFlash draft MNN can run (not configured)"),
        ({"dflash_block_size": 1}, None, "gives no usable dflash_block_size and dflash_mask_token_id"),
        ({"dflash_mask_token_id": None}, None, "gives no usable dflash_block_size and dflash_mask_token_id"),
    ],
)
def test_a_bundle_dflash_cannot_run_is_refused_before_any_engine(
    tmp_path: Path, config: dict[str, Any], remove: str | None, said: str
) -> None:
    bundle = _bundle(tmp_path / "b", **config)
    if remove:
        (bundle / remove).unlink()
    with pytest.raises(SpeculationUnavailable) as error:
        speculate(Request(bundle=bundle, mode="dflash"))
    assert error.value.exit_code == 82 and said in error.value.message
