"""On the trained EAGLE-3 fixture (tests/trained_eagle.py: an 8-layer Qwen3 target and a head trained on its own
hidden states and greedy continuations): the head is a SpecForge-layout head packager accepts (and refuses with a
shallow target), and in its target+eagle bundle MNN's own eagle generation emits exactly the target's greedy
tokens (plain decoding's, up to its near-ties), accepts measurably more than one token per step, and agrees with
the torch reference (packager.convert.eagle.reference). Nothing here is timed."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from packager.bundle.kinds import TARGET_EAGLE
from packager.convert.inspect.checkpoint import inspect_checkpoint
from packager.convert.inspect.eagle_head import expected_shapes, inspect_head
from packager.convert.pipeline import ConvertRequest, ConvertResult, convert
from packager.errors import TargetTooShallow
from tests import shared
from tests.models import build_qwen3, qwen3_tokenizer_dir
from tests.trained import EOT, IM_END, VOCAB, _render_chat, build_corpus
from tests.trained_eagle import QUESTIONS, RECIPE, EagleFixture, fixture

pytestmark = [pytest.mark.converter, pytest.mark.trained]

# Built once per recipe, BUILDER number and library versions, reused across this user's test sessions (atomic).
FIXTURES = Path(
    os.environ.get("PACKAGER_FIXTURE_DIR") or Path(tempfile.gettempdir()) / f"packager-test-fixtures-{os.getuid()}"
)
STOP = (IM_END, EOT)
N = 96  # new tokens per prompt: two of the answers end with a stop id before it
# Tokens per verification step over all the questions, from the engine's step count. Measured on the 4-bit bundle:
# 1.74 (627 tokens in 361 steps; per question 1.52 to 2.18); the torch reference on the bfloat16 checkpoint: 2.09
# over the first 48 tokens.
MIN_ACCEPTED = 1.5
# MNN's single-token decode step can rank two tokens otherwise than its prefill and verification passes when their
# logits are this close. Measured on this bundle: plain decoding left the prefill's argmax in 5 of the 7 answers,
# each time for a token 0.012 to 0.047 below it; eagle's tokens were the prefill's argmax at every position.
NEAR_TIE = 0.1


@pytest.fixture(scope="session")
def trained_eagle() -> EagleFixture:
    return fixture(FIXTURES)


@pytest.fixture(scope="module")
def bundle(trained_eagle: EagleFixture) -> ConvertResult:
    result: ConvertResult = shared.converted(trained_eagle.target, eagle=trained_eagle.head)
    return result


@dataclass(frozen=True)
class Run:
    prompt: list[int]
    tokens: list[int]  # what the engine emitted (eagle: without the step count it appends; past a stop id too)
    steps: int | None  # eagle's verification steps; None for plain decoding

    def text(self) -> list[int]:
        """The generated ids up to and including the first stop id, at most N (eagle may emit past either)."""
        cut = next((i + 1 for i, t in enumerate(self.tokens) if t in STOP), len(self.tokens))
        return self.tokens[: min(cut, N)]


def _mnn_runs(bundle: Path, eagle: bool) -> list[Run]:
    """MNN's own generation over the chat questions: eagle as the bundle is configured, or plain decoding (the
    same bundle with speculative_type "" set before load)."""
    import MNN.llm as llm

    model = llm.create(str(bundle / "config.json"))
    # a dict: the wrapper json-dumps it (a JSON string would be merged as a string, silently changing nothing)
    model.set_config({"thread_num": 1, **({} if eagle else {"speculative_type": ""})})
    model.load()
    runs = []
    for question in QUESTIONS:
        prompt = list(model.tokenizer_encode(_render_chat(qwen3_tokenizer_dir(), question, None)))
        model.generate_init()  # clears output_tokens and the KV cache: generate() alone appends to both
        out = list(model._c_obj.generate(prompt, N))
        # EagleGeneration appends its step count when it stops (a stop id, or max_new_tokens reached)
        runs.append(Run(prompt, out[:-1], out[-1]) if eagle else Run(prompt, out, None))
    return runs


@pytest.fixture(scope="module")
def eagle_runs(bundle: ConvertResult) -> list[Run]:
    return _mnn_runs(bundle.out, eagle=True)


@pytest.fixture(scope="module")
def plain_runs(bundle: ConvertResult) -> list[Run]:
    return _mnn_runs(bundle.out, eagle=False)


def test_the_head_is_a_specforge_head_packager_accepts(trained_eagle: EagleFixture, tmp_path: Path) -> None:
    target = inspect_checkpoint(trained_eagle.target, allow_untied=True)
    config = json.loads((trained_eagle.target / "config.json").read_text())
    assert config["num_hidden_layers"] == 8 and config["tie_word_embeddings"] is False
    assert config["rope_parameters"]["rope_theta"] == 1e6
    info = inspect_head(trained_eagle.head, target)
    used = build_corpus(RECIPE.target).used
    assert info.aux_layers == (2, 4, 5) and info.rope_theta == 1e6 and info.dtype == "bfloat16"
    assert info.draft_vocab_size == len(used) and info.vocab_size == VOCAB and not info.pickle
    head_config = json.loads((trained_eagle.head / "config.json").read_text())
    assert head_config["architectures"] == ["LlamaForCausalLMEagle3"]
    with safe_open(str(trained_eagle.head / "model.safetensors"), "pt") as tensors:
        assert set(tensors.keys()) == set(expected_shapes(info)) | {"t2d"}
        d2t, t2d = tensors.get_tensor("d2t"), tensors.get_tensor("t2d")
    draft_ids = torch.arange(len(used)) + d2t  # the draft vocabulary is the ids the corpus uses, in order
    assert draft_ids.tolist() == used and torch.nonzero(t2d).flatten().tolist() == used
    shallow = build_qwen3(tmp_path / "qwen3-6l", layers=6, tie=False)
    with pytest.raises(TargetTooShallow, match="has 6 layers"):
        inspect_head(trained_eagle.head, inspect_checkpoint(shallow, allow_untied=True))


def test_the_bundle_is_an_untied_target_with_its_checked_head(bundle: ConvertResult) -> None:
    from packager.validate import validate

    assert bundle.kind is TARGET_EAGLE and (bundle.out / "embeddings_bf16.bin").is_file()
    checked = bundle.faithfulness
    # measured: 0.8 % from the checkpoint's head at its own theta, 23 % from it at llmexport's 10000
    assert checked is not None and checked.hidden_error < 0.05 and checked.logprob_error < 0.05
    assert checked.other_theta_error > 10 * checked.hidden_error
    report = validate(bundle.out)
    assert report.kind == "target+eagle" and not report.errors, report.errors


def _first_difference(a: list[int], b: list[int]) -> int | None:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None if len(a) == len(b) else min(len(a), len(b)))


@pytest.fixture(scope="module")
def prefill(bundle: ConvertResult):  # type: ignore[no-untyped-def]
    """The target's logits at every position in one MNN forward pass (the bundle's own precision)."""
    from packager.runtime.mnn import MNNRuntime

    runtime = MNNRuntime(bundle.out, precision="low", threads=1)
    return lambda run: runtime.logits_all(run.prompt + run.text())[len(run.prompt) - 1 : -1]


def test_mnn_eagle_emits_exactly_the_targets_greedy_tokens(
    eagle_runs: list[Run], plain_runs: list[Run], prefill
) -> None:  # type: ignore[no-untyped-def]
    import numpy as np

    for eagle, plain in zip(eagle_runs, plain_runs):
        assert eagle.prompt == plain.prompt
        assert len(plain.tokens) == N or (len(plain.tokens) < N and plain.tokens[-1] in STOP)  # a stop id is kept
        rows = prefill(eagle)  # row i: the logits that choose token i
        tokens = eagle.text()
        # every token eagle emits is the target's argmax after the prompt and the tokens before it
        deficit = rows.max(-1) - rows[np.arange(len(tokens)), tokens]
        assert float(deficit.max()) < 1e-3, (eagle.prompt, tokens, deficit)  # measured: 0 at every position
        # plain decoding agrees up to a near-tie, where its single-token step may take the other token
        at = _first_difference(tokens, plain.text())
        if at is not None:
            assert at < min(len(tokens), len(plain.text())), (tokens, plain.text())  # neither is a prefix
            best, chosen = float(rows[at].max()), float(rows[at][plain.text()[at]])
            assert best - chosen < NEAR_TIE, (at, tokens, plain.text(), best - chosen)
    # Whether a run ends on a stop id depends on the trained fixture, which differs between CPUs (a clean CI run
    # trained one whose runs all reach N tokens): the stop id case is asserted above where it occurs, not required.


def test_mnn_eagle_accepts_more_than_one_token_per_step(eagle_runs: list[Run]) -> None:
    for run in eagle_runs:
        # the first token comes from the prefill; each step adds 1 + the drafts the target agreed with (<= 4)
        assert run.steps is not None and 1 <= run.steps <= len(run.tokens) - 1 <= 4 * run.steps
    accepted = sum(len(r.tokens) - 1 for r in eagle_runs) / sum(r.steps or 0 for r in eagle_runs)
    assert accepted > MIN_ACCEPTED, [(len(r.tokens) - 1, r.steps) for r in eagle_runs]


def _replayed_steps(target, head, run: Run, depth: int) -> int:  # type: ignore[no-untyped-def]
    """The verification steps the torch reference takes to emit the engine's tokens: each step drafts a chain
    from the tokens so far (packager.convert.eagle.reference.draft_chain) and takes the drafts that match the
    engine's next tokens, plus one."""
    from packager.convert.eagle.reference import aux_hidden_states, draft_chain

    aux = aux_hidden_states(target, run.prompt + run.tokens)  # causal: row i sees the tokens up to i only
    embed = target.get_input_embeddings()
    done, steps = 1, 0
    while done < len(run.tokens):
        ids = run.prompt + run.tokens[:done]
        drafts = draft_chain(head, embed, aux[: len(ids) - 1], ids, depth)
        matched = 0
        while matched < depth and drafts[matched : matched + 1] == run.tokens[done + matched : done + matched + 1]:
            matched += 1
        done, steps = done + matched + 1, steps + 1
    return steps


@contextmanager
def _one_thread() -> Iterator[None]:
    """Many small ops on 2 cores shared with other work: with 2 OpenMP threads the replay ran 7x slower (measured)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def test_the_torch_reference_agrees_with_mnn(trained_eagle: EagleFixture, eagle_runs: list[Run]) -> None:
    from transformers import AutoModelForCausalLM

    from packager.convert.eagle.reference import load_head

    target = AutoModelForCausalLM.from_pretrained(trained_eagle.target, dtype=torch.float32).eval()
    head = load_head(trained_eagle.head)
    with _one_thread():
        _check_the_reference(target, head, eagle_runs)


def _check_the_reference(target, head, eagle_runs: list[Run]) -> None:  # type: ignore[no-untyped-def]
    from packager.convert.eagle.reference import eagle_decode, greedy

    replayed = [_replayed_steps(target, head, run, RECIPE.depth) for run in eagle_runs]
    engine = [run.steps or 0 for run in eagle_runs]
    # the exported 4-bit head drafts what the checkpoint's head drafts, nearly always (measured: 368 steps against
    # the engine's 361, each question within 3; an earlier head on an 8-bit bundle: the same count for each)
    assert abs(sum(replayed) - sum(engine)) <= 0.05 * sum(engine), (replayed, engine)
    tokens = steps = 0
    for run in eagle_runs[:3]:  # the reference recomputes every position at each step: 48 tokens are enough
        decoded = eagle_decode(target, head, run.prompt, 48, depth=RECIPE.depth, stop=STOP)
        assert decoded.tokens[:48] == greedy(target, run.prompt, 48, STOP)  # lossless in torch too
        tokens, steps = tokens + len(decoded.tokens) - 1, steps + len(decoded.accepted)
    assert tokens / steps > MIN_ACCEPTED
