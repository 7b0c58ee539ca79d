"""convert --dflash on a Llama 3.1-shaped target (untied, llama3 rope at factor 8, Meta's tokenizer) with a random
DFlash draft of its shape (z-lab publishes one for Llama-3.1-8B-Instruct): the bundle converts, its exported draft
passes the faithful check against the torch reference of z-lab's DFlashDraftModel, and validate finds nothing.
(The Qwen3 target with a trained draft, run in MNN's dflash mode: tests/test_trained_dflash.py.)"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from packager.bundle.graph import read
from packager.bundle.kinds import DFLASH_FILES, TARGET_DFLASH, kind_of
from packager.convert.dflash.export import cache_key
from packager.convert.dflash.faithful import MAX_STATE_ERROR, MIN_COSINE, check
from packager.convert.inspect.checkpoint import inspect_checkpoint
from packager.convert.pipeline import ConvertRequest, ConvertResult, convert
from packager.convert.recipe import QuantRecipe
from packager.convert.stream import graphcache
from packager.errors import DFlashTargetUnfaithful
from packager.validate import validate
from tests import shared
from tests.dflashdrafts import build_draft
from tests.families import build_llama32

pytestmark = pytest.mark.converter

LLAMA31_ROPE = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}


@pytest.fixture(scope="module")
def llama31_target() -> Path:
    return shared.once(
        "checkpoint",
        ["build_llama32", "3.1", 4],
        lambda d: build_llama32(d / "llama31", layers=4, tie=False, rope_factor=8.0, seed=3),
    )


@pytest.fixture(scope="module")
def llama31_dflash(llama31_target: Path) -> ConvertResult:
    target = llama31_target
    draft = shared.once(
        "checkpoint",
        ["build_draft", "llama31"],
        lambda d: build_draft(
            d / "draft",
            heads=4,
            kv_heads=2,
            head_dim=64,
            target_layers=4,
            layer_ids=[1, 3],
            mask_token_id=128002,  # <|reserved_special_token_0|>: a row of the embeddings, never ordinary text
            rope_theta=500000.0,
            layers=1,
            vocab_size=128256,
            rope_scaling=LLAMA31_ROPE,
            seed=4,
        ),
    )
    result: ConvertResult = shared.converted(target, dflash=draft)
    return result


def test_a_llama31_target_with_a_random_dflash_draft_converts_and_passes_the_faithful_check(
    llama31_dflash: ConvertResult,
) -> None:
    result = llama31_dflash
    assert kind_of(result.out) is TARGET_DFLASH
    assert result.dflash is not None and result.dflash.rope_scaling is not None
    assert result.dflash.rope_scaling["factor"] == 8.0 and result.dflash.target_layer_ids == (1, 3)
    check = result.dflash_check
    assert check is not None and check.min_cosine >= MIN_COSINE and check.top1_agreement >= 0.9, check
    assert validate(Path(result.out)).errors == ()


def test_the_drafts_head_is_the_targets_lm_head_byte_for_byte(llama31_dflash: ConvertResult) -> None:
    """dflash_lmhead.mnn.weight is the lm_head's range of llm.mnn.weight, and the config names its graph."""
    out = Path(llama31_dflash.out)
    head = read(json.loads((out / "llm.mnn.json").read_text())).lm_head
    assert head is not None and "lm_head" in head.name
    with open(out / "llm.mnn.weight", "rb") as weights:
        weights.seek(head.external[0])
        assert (out / "dflash_lmhead.mnn.weight").read_bytes() == weights.read(sum(head.external[1:]))
    assert json.loads((out / "config.json").read_text())["dflash_lmhead"] == "dflash_lmhead.mnn"


def test_the_exposed_target_states_are_transformers_states_after_the_named_layers(
    llama31_dflash: ConvertResult,
) -> None:
    """Layer 3 is the target's last: its state is transformers' normed hidden_states[4], as the draft was trained
    (the second call of the final norm that makes it is mapped by the streaming writer: the weights are streamed)."""
    assert llama31_dflash.path == "streamed"
    check = llama31_dflash.dflash_check
    assert check is not None and check.state_error <= MAX_STATE_ERROR and check.state_margin > 1.0, check


def test_a_graph_exposing_other_layers_than_the_draft_reads_is_refused(
    llama31_dflash: ConvertResult, llama31_target: Path
) -> None:
    """The same bundle against a draft that reads layers 0 and 2: its states are the wrong layers' (one off)."""
    assert llama31_dflash.dflash is not None
    other = replace(llama31_dflash.dflash, target_layer_ids=(0, 2))
    info = inspect_checkpoint(llama31_target, allow_untied=True)
    with pytest.raises(DFlashTargetUnfaithful, match=r"not transformers' after layers \[0, 2\]"):
        check(Path(llama31_dflash.out), other, info, QuantRecipe())


def test_a_cached_dflash_draft_is_reused_and_a_damaged_one_rebuilt(
    llama31_dflash: ConvertResult, llama31_target: Path, tmp_path: Path
) -> None:
    """The draft's two graphs are a graph cache entry of their own (keyed by the draft's bytes): converting the same
    target and draft again takes them from the cache, byte for byte what the export made (and the head lifted
    again, the same bytes); an entry damaged on disk is removed and exported again, never used."""
    assert llama31_dflash.dflash is not None
    draft = llama31_dflash.dflash.path
    said: list[str] = []
    again = convert(ConvertRequest(llama31_target, tmp_path / "again", dflash=draft), progress=said.append)
    assert any("graph cache hit for the DFlash draft" in line for line in said), said
    for name in DFLASH_FILES:
        assert again.digests[name] == llama31_dflash.digests[name]
    key = cache_key(llama31_dflash.dflash)
    entry = graphcache.root() / key
    with open(entry / "dflash_fc.mnn", "r+b") as handle:
        handle.seek(100)
        handle.write(b"\xff\xff\xff\xff")
    said.clear()
    rebuilt = convert(ConvertRequest(llama31_target, tmp_path / "rebuilt", dflash=draft), progress=said.append)
    assert any(f"graph cache entry {key[:12]} is damaged" in line for line in said), said
    assert not any("graph cache hit for the DFlash draft" in line for line in said)
    assert rebuilt.digests["dflash_fc.mnn"] == llama31_dflash.digests["dflash_fc.mnn"]
    assert graphcache.lookup(key) is not None  # stored again, intact


@pytest.mark.parametrize(
    "damage, said",
    [
        (lambda path: os.truncate(path, path.stat().st_size // 2), "cut short or another head's"),
        (lambda path: _flip(path, 1234), "its byte 1,234 differs from the head's in llm.mnn.weight"),
    ],
    ids=["cut short", "one byte changed"],
)
def test_a_drafts_head_that_is_not_the_targets_is_an_error(
    llama31_dflash: ConvertResult, tmp_path: Path, damage: Callable[[Path], object], said: str
) -> None:
    """MNN runs a head whose weights end early on whatever it reads past the end, without a word: validate
    compares the head's bytes with the target's own."""
    copy = tmp_path / "bundle"
    shutil.copytree(llama31_dflash.out, copy)
    damage(copy / "dflash_lmhead.mnn.weight")
    errors = validate(copy).errors
    assert [e.file for e in errors] == ["dflash_lmhead.mnn.weight"] and said in errors[0].message, errors


def _flip(path: Path, at: int) -> None:
    with open(path, "r+b") as handle:
        handle.seek(at)
        byte = handle.read(1)
        handle.seek(at)
        handle.write(bytes([byte[0] ^ 0xFF]))
