"""How packager speculate reads MNN's own record of a generation: EAGLE's step counter at the end of
output_tokens, lookahead's steps from the segmentation its generate_str allows, and where two greedy
generations part; and how a run is judged (identical, near-tie, mismatch) and summarized."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from packager.errors import SpeculationNotLossless
from packager.measure.speculate import refuse_if_lossy
from packager.measure.speculate.steps import StepsUnreadable, eagle_steps, first_divergence, lookahead_steps
from packager.measure.speculate.summary import summarize

TEXT = {1: "a", 2: "b", 3: "c", 4: "ab", 5: "", 9: "<stop>"}


def test_eagle_steps_come_from_the_counter_after_the_generated_tokens() -> None:
    steps = eagle_steps([7, 1, 2, 3, 4, 5, 6, 3], [7, 1, 2, 3, 4, 5, 6], depth=3)
    assert (steps.tokens, steps.low, steps.high, steps.exact) == (6, 3, 3, True)


@pytest.mark.parametrize(
    "output, generated",
    [
        ([7, 1, 2], [7, 1, 2]),  # no counter
        ([7, 1, 2, 9], [7, 1, 3]),  # the tokens are not the generated ones
        ([7, 1, 2, 0], [7, 1, 2]),  # zero steps
        ([7, 1, 2, 3], [7, 1, 2]),  # more steps than accepted tokens
        ([7, 1, 2, 3, 4, 5, 6, 7, 8, 9, 1], [7, 1, 2, 3, 4, 5, 6, 7, 8, 9]),  # 9 tokens in 1 step at depth 3
    ],
)
def test_an_eagle_record_of_another_shape_is_unreadable_not_guessed(output: list[int], generated: list[int]) -> None:
    with pytest.raises(StepsUnreadable):
        eagle_steps(output, generated, depth=3)


def test_lookahead_steps_are_the_segments_whose_first_tokens_spell_generate_str() -> None:
    # steps [1 2 3] [3] [1 2]: generate_str holds the texts of 1, 3 and 1
    steps = lookahead_steps([1, 2, 3, 3, 1, 2], "aca", TEXT.__getitem__, longest=4)
    assert (steps.tokens, steps.low, steps.high) == (6, 3, 3)


def test_plain_decoding_reads_as_one_token_a_step() -> None:
    steps = lookahead_steps([1, 2, 3, 9], "abc", TEXT.__getitem__, longest=4, stops=frozenset({9}))
    assert (steps.tokens, steps.low, steps.high) == (3, 3, 3)


def test_a_record_two_segmentations_fit_is_a_range() -> None:
    # a token whose text is empty may start a step or not: [1 5 2] and [1][5 2] both spell "a"
    steps = lookahead_steps([1, 5, 2], "a", TEXT.__getitem__, longest=4)
    assert (steps.low, steps.high) == (1, 2) and not steps.exact


def test_a_segment_longer_than_the_draft_length_allows_is_not_accepted() -> None:
    with pytest.raises(StepsUnreadable):
        lookahead_steps([1, 2, 3, 3], "a", TEXT.__getitem__, longest=3)


def test_a_generate_str_no_segmentation_spells_is_unreadable() -> None:
    with pytest.raises(StepsUnreadable):
        lookahead_steps([1, 2, 3], "zz", TEXT.__getitem__, longest=4)


def test_generations_part_at_the_first_different_token_and_not_after_a_stop() -> None:
    stops = frozenset({9})
    assert first_divergence([1, 2, 3], [1, 2, 4], stops) == 2
    assert first_divergence([1, 2, 3], [1, 2, 3, 4, 5], stops) is None  # the longer overshot max_new_tokens
    assert first_divergence([1, 9, 3], [1, 9, 4], stops) is None  # what follows a stop is not output
    assert first_divergence([1, 9], [1, 2], stops) == 1


def _raw(divergence: dict | None, steps: dict | None = None) -> dict:  # type: ignore[type-arg]
    return {
        "prompt_tokens": 5,
        "plain_tokens": [1, 2, 3],
        "speculative_tokens": [1, 2, 4],
        "repeatable": True,
        "plain_seconds": [1.0, 2.0],
        "speculative_seconds": [0.5, 0.5],
        "plain_counts": [3, 3],
        "speculative_counts": [3, 3],
        "steps": steps,
        "divergence": divergence,
    }


def _summary(*prompts: dict) -> object:  # type: ignore[type-arg]
    request = SimpleNamespace(tie_tolerance=0.05, max_new_tokens=16, repeats=2)
    return summarize({"prompts": list(prompts)}, "eagle", request, "this CPU", {"bundle": "b"})


def test_a_divergence_is_a_near_tie_only_within_the_tolerance_and_a_mismatch_fails() -> None:
    tie = {
        "position": 2,
        "plain_token": 3,
        "speculative_token": 4,
        "plain_logit": 9.0,
        "speculative_logit": 8.97,
        "top_logit": 9.0,
    }
    report = _summary(
        _raw(None, {"tokens": 6, "low": 3, "high": 3}), _raw(tie), _raw({**tie, "speculative_logit": 8.0})
    )
    assert [p.verdict for p in report.per_prompt] == ["identical", "near-tie", "mismatch"]  # type: ignore[attr-defined]
    assert report.as_dict()["lossless"] is False and report.as_dict()["near_ties"] == 1  # type: ignore[attr-defined]
    with pytest.raises(SpeculationNotLossless) as error:
        refuse_if_lossy(report)  # type: ignore[arg-type]
    assert (
        error.value.exit_code == 83
        and "prompt 3 at token 2, 1.000 below the target's best logit" in error.value.message
    )


def test_speed_is_the_ratio_of_summed_tokens_over_summed_time_per_repeat() -> None:
    report = _summary(_raw(None), _raw(None))
    # repeat 1: plain 6 tokens / 2 s, speculative 6 / 1 s -> 2.0; repeat 2: 6/4 against 6/1 -> 4.0
    assert (report.speedup.low, report.speedup.high, report.speedup.median) == (2.0, 4.0, 3.0)  # type: ignore[attr-defined]
    assert report.accepted_per_step is None and report.steps_counted == 0  # type: ignore[attr-defined]
