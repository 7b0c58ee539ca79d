"""packager engines check on a target+dflash bundle, without an engine: what each MNN release does with the draft
(none before 3.6.0; 3.6.0 and 3.6.1 lossless only on an engine's first response) and the refusal, with its
reason, of an engine past the DFlash format packager writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from packager.cli.engines import _table
from packager.errors import InvalidOption
from packager.measure.engines.check import dflash_notes, is_dflash, requested_versions


def test_each_release_says_what_it_does_with_a_dflash_draft() -> None:
    assert "has no DFlash mode and decodes plainly" in dflash_notes("3.5.0")[0]
    for version in ("3.6.0", "3.6.1"):
        (note,) = dflash_notes(version)
        assert f"lossless only on an engine's first response (MNN {version} keeps" in note
        assert "reload the engine for every response" in note


def test_an_engine_past_the_format_packager_writes_is_refused_with_the_reason() -> None:
    with pytest.raises(InvalidOption) as error:
        requested_versions("3.6.1,3.7.0", dflash=True)
    assert "bc85588f2" in error.value.message and "dflash_shared_lmhead_input" in error.value.message
    assert requested_versions("3.6.1,3.5.0", dflash=True) == ("3.5.0", "3.6.1")


def test_the_table_shows_the_dflash_notes_beside_the_verdict(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"speculative_type": "dflash"}), encoding="utf-8")
    assert is_dflash(tmp_path) and not is_dflash(tmp_path / "missing")
    row = {
        "version": "3.6.1",
        "loads": True,
        "reason": "",
        "agrees": True,
        "min_cosine": 1.0,
        "top1": 4,
        "prompts": 4,
        "same_ids": 4,
        "notes": list(dflash_notes("3.6.1")),
    }
    data = {"bundle": "b", "declared_min_engine": "3.6.1", "reference_engine": "3.6.1", "results": [row]}
    assert "| 3.6.1 | yes | yes | 1.0000 | 4/4 | 4/4 | dflash: lossless only on an engine's first" in _table(data)
