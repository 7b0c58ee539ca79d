"""On a trained teacher/draft pair (tests/trained.py, the small recipe): the fixture really learned and the
distillation moved the draft toward the teacher, `verify` passes faithful 8-bit and 4-bit bundles and fails a
draft checked without its LoRA, and the real speculative loop over two MNN bundles emits the target's greedy
tokens (up to MNN's near-ties) and accepts what the estimate counts."""

from __future__ import annotations

import json
import os
import tempfile
from collections import Counter
from pathlib import Path

import pytest

from packager.convert.pipeline import ConvertRequest, ConvertResult, convert
from packager.families.qwen3 import QWEN3
from packager.measure.pair import acceptance
from packager.measure.verify import verify
from packager.runtime.child import MNNModel
from packager.runtime.speculative import speculative
from tests import shared
from tests.conftest import run_cli
from tests.trained import RECIPES, Fixture, build_corpus, fixture, held_out_accuracy

pytestmark = pytest.mark.trained

# Built once per recipe, BUILDER number and library versions, reused across this user's test sessions (atomic).
FIXTURES = Path(
    os.environ.get("PACKAGER_FIXTURE_DIR") or Path(tempfile.gettempdir()) / f"packager-test-fixtures-{os.getuid()}"
)
STOP = (151645, 151643)


@pytest.fixture(scope="session")
def trained() -> Fixture:
    return fixture("small", FIXTURES)


def _bundle(checkpoint: Path, **options: object) -> ConvertResult:
    result: ConvertResult = shared.converted(checkpoint, **options)
    return result


@pytest.fixture(scope="session")
def teacher8(trained: Fixture) -> ConvertResult:
    return _bundle(trained.teacher, quant_bits=8)


@pytest.fixture(scope="session")
def teacher4(trained: Fixture) -> ConvertResult:
    return _bundle(trained.teacher)


@pytest.fixture(scope="session")
def draft4(trained: Fixture) -> ConvertResult:
    return _bundle(trained.student, adapter=trained.adapter)


def test_the_teacher_learned_and_distillation_moved_the_draft_toward_it(trained: Fixture) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    m = trained.metrics
    corpus = build_corpus(RECIPES["small"])  # the small recipe is too small to generalize: it learns its text
    counts = Counter(t for ids in corpus.train for t in ids[1:])
    unigram = counts.most_common(1)[0][1] / sum(counts.values())  # always guessing the most frequent token
    teacher = AutoModelForCausalLM.from_pretrained(trained.teacher, dtype=torch.float32).eval()
    accuracy = held_out_accuracy(teacher, corpus.train[:4], 64)  # full 151,936-id argmax, as MNN computes it
    assert accuracy > 3 * unigram, (accuracy, unigram)
    assert m["draft_alpha_on_samples"] > m["base_alpha_on_samples"], m
    assert 0.0 < m["training_alpha_final_epoch"] < 1.0
    config = json.loads((trained.teacher / "config.json").read_text())
    assert (
        config["vocab_size"] == 151936
        and config["head_dim"] == 128
        and config["torch_dtype" if "torch_dtype" in config else "dtype"] == "bfloat16"
    )
    adapter = json.loads((trained.adapter / "adapter_config.json").read_text())
    assert adapter["r"] == 16 and adapter["lora_alpha"] == 32


@pytest.mark.parametrize("bits", [8, 4])
def test_verify_passes_faithful_bundles_of_a_trained_model(
    bits: int, trained: Fixture, teacher8: ConvertResult, teacher4: ConvertResult
) -> None:
    bundle = teacher8 if bits == 8 else teacher4
    report = verify(bundle.out, trained.teacher)
    assert report.ok, (report.failures, report)
    assert report.positions >= 1000 and report.decisive_positions >= 100 and report.top1_decisive is not None
    assert report.mean_kl < (0.01 if bits == 8 else 0.05)


def test_verify_fails_a_draft_converted_without_its_lora(trained: Fixture, draft4: ConvertResult) -> None:
    # The bundle holds base + adapter; checked against the base alone (the adapter forgotten), it must fail.
    prompts = draft4.out.parent / "prompts.txt"
    prompts.write_text(
        "Explain assignment statements in Python.\nWhat is the Python module abc for?\ndef __init__(self):\n",
        encoding="utf-8",
    )
    result = run_cli(
        "verify", str(draft4.out), "--checkpoint", str(trained.student), "--json", "--quiet", "--prompts", str(prompts)
    )
    assert result.returncode == 50, result.stdout[-2000:]
    data = json.loads(result.stdout)
    assert any(f.startswith("mean KL") for f in data["failures"]), data["failures"]


def test_mnn_speculative_loop_on_trained_bundles_emits_the_targets_greedy_tokens(
    trained: Fixture, draft4: ConvertResult, teacher4: ConvertResult
) -> None:
    # MNN computes a one-token decode step and a batched verification along different paths whose logits differ
    # by up to ~0.4 nats (measured), so at a near-tie the loop keeps the verification's choice where the
    # one-token-at-a-time baseline keeps the other. Lossless therefore means: every emitted token is the
    # target's argmax given the tokens before it (one full pass over the output), up to such near-ties.
    from packager.measure import workload

    draft, target = MNNModel(draft4.out), MNNModel(teacher4.out)
    template = workload.chat_template(trained.teacher)
    exact = total = same_steps = steps = 0
    try:
        for item in workload.builtin()[:4]:
            ids = target.encode(workload.render(template, item, QWEN3.template_variables))
            for d in (1, 3, acceptance.MAX_D):
                taken: list[int] = []
                out = speculative(draft, target, ids, 40, d, accepted=taken, stop=STOP)
                rows = target.logits_all(ids + out)[len(ids) - 1 : len(ids) - 1 + len(out)]
                for row, token in zip(rows, out):
                    total += 1
                    exact += int(row.argmax()) == token
                    assert row.max() - row[token] < 0.5, (d, token, row.max() - row[token])  # a near-tie at most
                assert not any(t in STOP for t in out[:-1]) and len(out) <= 40
                draft_rows = draft.logits_all(ids + out)[len(ids) - 1 : len(ids) - 1 + len(out)]
                runs = acceptance.match_runs([int(r.argmax()) for r in draft_rows], [int(r.argmax()) for r in rows])
                predicted = acceptance.accepted_per_step(runs, d)
                steps += len(predicted)
                same_steps += sum(1 for a, b in zip(taken, predicted) if a == b)
    finally:
        draft.close()
        target.close()
    assert exact / total >= 0.98, (exact, total)
    assert same_steps / steps >= 0.9, (same_steps, steps)  # the estimate's arithmetic, step by step
