"""Why packager refuses linear-attention families (LFM2, Qwen3.5, Qwen3-Next) for speculation, measured with the
engine itself: MNN's own speculative decoding (lookahead, which needs no draft model) on a tiny LFM2 diverges from
plain decoding once draft tokens are rejected, because MNN 3.6.1 does not roll the linear-attention state back;
the same procedure on a full-attention model agrees token for token. When an engine stops diverging, this test
fails: set packager.families.LINEAR_ROLLBACK_SINCE to it and the refusal lifts for bundles built for it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from packager import families
from packager.convert.inspect.checkpoint import inspect_checkpoint
from packager.errors import UnsupportedModel
from packager.measure.speculate.engine import Engine
from tests.conftest import run_cli
from tests.families import build_lfm2
from tests.models import build_qwen3, llmexport_raw

pytestmark = pytest.mark.converter

PLAIN = {"tokenizer_file": "tokenizer.mtok", "precision": "high", "memory": "normal", "thread_num": 1}
LOOKAHEAD = {**PLAIN, "speculative_type": "lookahead", "draft_predict_length": 3, "ngram_match_maxlen": 4}


def _divergences(bundle: Path, prompts: int = 5, new_tokens: int = 24) -> list[int | None]:
    """For each prompt, where lookahead's greedy output first differs from plain greedy decoding (None: never).

    Each prompt is ten random tokens twice: the last two match the end of the first copy, so lookahead drafts the
    three tokens that followed them there, which the model rejects (it does not repeat the text): the engine must
    roll back what the rejected tokens did to its state."""
    plain, lookahead = Engine(bundle, PLAIN), Engine(bundle, LOOKAHEAD)
    rng = np.random.default_rng(1)
    found: list[int | None] = []
    for _ in range(prompts):
        tail = rng.integers(1000, 100000, size=10).tolist()
        a, b = plain.generate(tail + tail, new_tokens).generated, lookahead.generate(tail + tail, new_tokens).generated
        assert a[:3] != tuple(tail[:3]), "the model repeats the prompt: the draft would be accepted"
        found.append(next((i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y), None))
    return found


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Plain llmexport's bundles (packager refuses LFM2) of a tiny LFM2 and of a Qwen3 built the same way."""
    root = tmp_path_factory.mktemp("linear")
    lfm2 = build_lfm2(root / "lfm2")
    qwen3 = build_qwen3(root / "qwen3", tie=False)
    return {
        "lfm2": llmexport_raw(lfm2, root / "lfm2-mnn" / "out", bits=8),
        "qwen3": llmexport_raw(qwen3, root / "qwen3-mnn" / "out", bits=8),
        "lfm2-checkpoint": lfm2,
    }


def test_mnn_speculation_on_linear_attention_diverges_from_plain_decoding_where_full_attention_does_not(
    exported: dict[str, Path],
) -> None:
    import MNN

    assert families.LINEAR_ROLLBACK_SINCE is None and MNN.version() == "3.6.1", "re-measure for this engine"
    control = _divergences(exported["qwen3"])
    assert control == [None] * len(control), control  # full attention: rejected drafts are rolled back exactly
    linear = _divergences(exported["lfm2"])
    # Measured: every prompt diverges, within the first three tokens.
    assert sum(at is not None for at in linear) >= len(linear) - 1, linear


@pytest.mark.parametrize("kind", [(), ("--kind", "target")])
def test_an_lfm2_checkpoint_is_refused_as_draft_and_target_in_one_line_saying_why(
    exported: dict[str, Path], tmp_path: Path, kind: tuple[str, ...]
) -> None:
    out = tmp_path / "bundle"
    result = run_cli("convert", str(exported["lfm2-checkpoint"]), "--out", str(out), *kind)
    assert result.returncode == 12, result.stderr
    assert "does not roll its state back when draft tokens are rejected" in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) <= 2 and not out.exists()


def test_the_refusal_lifts_only_for_an_engine_at_or_past_the_one_that_rolls_back(
    exported: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    for kind in ("qwen3_5", "qwen3_5_text", "qwen3_next", "lfm2"):
        assert "does not roll its state back" in str(families.refusal(kind))
    monkeypatch.setattr(families, "LINEAR_ROLLBACK_SINCE", (3, 7, 0))
    assert families.refusal("lfm2", (3, 6, 1)) is not None and families.refusal("lfm2", (3, 7, 0)) is None
    with pytest.raises(UnsupportedModel, match="model_type 'lfm2'"):  # lifted, but no family converts it yet
        inspect_checkpoint(exported["lfm2-checkpoint"], allow_untied=True, engine=(3, 7, 0))
