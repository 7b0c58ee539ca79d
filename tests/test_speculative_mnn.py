"""The machinery of the real speculative loop over MNN bundles: the cache rollback (erase_history), the loop run
inside the MNN child, the stop ids. Random weights have near-ties that a batched verification and a single-token
step can break differently, so losslessness is tested on trained models (tests/test_trained.py). Timing-free:
the wall time is bench/mnn_loop_bench.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from packager.convert.pipeline import ConvertResult
from packager.runtime.child import MNNModel
from packager.runtime.models import HFModel
from packager.runtime.speculative import autoregressive, speculative

pytestmark = pytest.mark.converter

PROMPTS = ("The capital of France is", "def fibonacci(n):\n", "Q: Why is the sky blue?\nA:")
STOP = (151645, 151643)


@pytest.fixture(scope="module")
def mnn_pair(bundle4: ConvertResult, bundle8: ConvertResult):  # type: ignore[no-untyped-def]
    draft, target = MNNModel(bundle4.out), MNNModel(bundle8.out)
    yield draft, target
    draft.close()
    target.close()


def test_mnn_cache_rollback_gives_the_logits_of_a_fresh_pass(mnn_pair) -> None:  # type: ignore[no-untyped-def]
    _, target = mnn_pair
    ids = target.encode("The quick brown fox jumps over the lazy dog")
    fresh = target.logits_all(ids + [11, 12])
    target.start(ids)
    target.step([5, 6, 7], every=True)  # three tokens that get rejected
    target.keep(len(ids))
    assert target.step([11, 12], every=True) == [int(fresh[len(ids)].argmax()), int(fresh[len(ids) + 1].argmax())]


def test_the_loop_inside_the_child_decodes_as_the_parent_driven_loop(bundle4: ConvertResult, mnn_pair) -> None:  # type: ignore[no-untyped-def]
    # decode() runs the same loop next to the runtime (no pipe inside the timed part): same tokens, same steps.
    draft, target = mnn_pair
    for prompt in PROMPTS:
        ids = target.encode(prompt)
        tokens, accepted, seconds = target.decode(None, ids, 30, 0, STOP)
        assert tokens == autoregressive(target, ids, 30, stop=STOP) and accepted == [] and seconds > 0
        for d in (1, 4):
            taken: list[int] = []
            expected = speculative(draft, target, ids, 30, d, accepted=taken, stop=STOP)
            assert target.decode(bundle4.out, ids, 30, d, STOP)[:2] == (expected, taken)


def test_decoding_ends_at_a_stop_id(tiny_checkpoint: Path, mnn_pair) -> None:  # type: ignore[no-untyped-def]
    _, target = mnn_pair
    ids = target.encode("Once upon a time")
    reference = autoregressive(target, ids, 30)
    stop = (reference[7],)  # pretend the 8th greedy token ends the text
    expected = reference[: reference.index(stop[0]) + 1]
    assert autoregressive(target, ids, 30, stop=stop) == expected
    assert target.decode(None, ids, 30, 0, stop)[0] == expected
    out = speculative(HFModel(tiny_checkpoint), target, ids, 30, 3, stop=stop)
    assert out[-1] in stop or len(out) == 30  # ends at the first stop id it produces
    assert all(t not in stop for t in out[:-1])
