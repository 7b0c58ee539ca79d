"""The target cache of pair: a second draft against the same target reuses the target's continuations and gives
the same figures as decoding it again; the key follows the target's content and the settings, not its folder's
other files; a damaged entry is never used; a cache that cannot be written costs only the reuse; `packager
cache ls/clear` cover it and touch nothing else."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from packager.convert.pipeline import ConvertResult
from packager.measure.pair import Options, pair, targetcache
from tests.conftest import run_cli

pytestmark = pytest.mark.converter

PROMPTS = ("The capital of France is", "def fibonacci(n):", "Q: What is the boiling point of water?\nA:")
QUICK = Options(new_tokens=12, repeats=1)


@pytest.fixture()
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("PACKAGER_CACHE_DIR", str(folder))
    return folder / "targets"


@pytest.fixture()
def target(bundle8: ConvertResult, tmp_path: Path) -> Path:
    copy = tmp_path / "target"
    shutil.copytree(bundle8.out, copy)
    return copy


def test_second_draft_reuses_the_target_and_gets_the_same_figures(
    bundle4: ConvertResult, target: Path, own_cache: Path
) -> None:
    first = pair(bundle4.out, target, PROMPTS, QUICK)
    assert first.target_cached == 0 and len(targetcache.entries()) == len(PROMPTS)
    second = pair(target, target, PROMPTS, QUICK)  # another draft: the target itself
    again = pair(bundle4.out, target, PROMPTS, QUICK)
    fresh = pair(bundle4.out, target, PROMPTS, Options(new_tokens=12, repeats=1, target_cache=False))
    assert second.target_cached == again.target_cached == len(PROMPTS) and fresh.target_cached == 0
    assert second.alpha.value == 1.0
    assert (again.alpha, again.positions) == (fresh.alpha, fresh.positions) == (first.alpha, first.positions)


def test_key_follows_the_targets_content_and_settings_not_its_other_files(target: Path, own_cache: Path) -> None:
    settings = {"new_tokens": 12, "threads": 2, "kind": "mnn", "dtype": None}
    base = targetcache.identity(target, True, settings)
    (target / "README.md").write_text("notes the runtime never reads")
    assert targetcache.identity(target, True, settings) == base
    assert targetcache.identity(target, True, {**settings, "new_tokens": 13}) != base
    assert targetcache.identity(target, True, {**settings, "threads": 1}) != base
    with open(target / "llm.mnn.weight", "r+b") as handle:
        handle.seek(os.path.getsize(target / "llm.mnn.weight") // 2)
        byte = handle.read(1)
        handle.seek(-1, os.SEEK_CUR)
        handle.write(bytes([byte[0] ^ 1]))
    assert targetcache.identity(target, True, settings) != base


def test_damaged_or_foreign_entry_is_a_miss_and_removed(bundle4: ConvertResult, target: Path, own_cache: Path) -> None:
    first = pair(bundle4.out, target, PROMPTS, QUICK)
    damaged, swapped, *_ = sorted(own_cache.glob("*.json"))
    data = json.loads(damaged.read_text())
    data["body"]["continuation"][0] += 1  # the check no longer matches
    damaged.write_text(json.dumps(data))
    other = json.loads(swapped.read_text())
    other["body"]["ids"] = [1, 2, 3]  # a valid entry under another prompt's name
    other["check"] = targetcache._check(other["body"])
    swapped.write_text(json.dumps(other))
    second = pair(bundle4.out, target, PROMPTS, QUICK)
    assert second.target_cached == len(PROMPTS) - 2
    assert (second.alpha, second.positions) == (first.alpha, first.positions)
    assert json.loads(damaged.read_text())["check"] == targetcache._check(json.loads(damaged.read_text())["body"])


def test_a_cache_that_cannot_be_written_costs_only_the_reuse(
    bundle4: ConvertResult, target: Path, own_cache: Path
) -> None:
    own_cache.parent.mkdir(parents=True)
    own_cache.write_text("a file where the folder would go")
    lines: list[str] = []
    report = pair(bundle4.out, target, PROMPTS, QUICK, progress=lines.append)
    assert report.positions > 0 and report.target_cached == 0
    assert any(line.startswith("the target cache was not written (") for line in lines)


def test_cache_ls_and_clear_cover_the_target_cache_and_nothing_else(
    bundle4: ConvertResult, target: Path, own_cache: Path
) -> None:
    pair(bundle4.out, target, PROMPTS, QUICK)
    (own_cache / "my-notes.json").write_text("{}")  # not an entry name: never listed or removed
    listing = json.loads(run_cli("cache", "ls", "--json").stdout)
    assert len(listing["targets"]) == len(PROMPTS)
    assert {e["target"] for e in listing["targets"]} == {str(target.resolve())}
    text = run_cli("cache", "ls").stdout
    assert f"{len(PROMPTS):6} prompts  {target.resolve()}" in text
    cleared = run_cli("cache", "clear")
    assert f"removed {len(PROMPTS)} entries from {own_cache}" in cleared.stdout
    assert json.loads(run_cli("cache", "ls", "--json").stdout)["targets"] == []
    assert (own_cache / "my-notes.json").read_text() == "{}"


def test_quant_sweep_measures_against_the_target_runs_pair_cached(
    bundle4: ConvertResult, tiny_checkpoint: Path, target: Path, own_cache: Path
) -> None:
    from packager.measure.sweep.measure import measure

    first = pair(bundle4.out, target, PROMPTS, Options(repeats=1))  # pair's default settings, as the sweep's
    quality = measure({"b4": bundle4.out}, tiny_checkpoint, target, prompts=PROMPTS)["b4"]
    assert quality.alpha is not None and quality.alpha.value == first.alpha.value
    # Proof that the sweep read the cache rather than decoding again: an entry rewritten (validly) to a target
    # that argmaxes token 0 everywhere makes that prompt accept nothing.
    entry = sorted(own_cache.glob("*.json"))[0]
    data = json.loads(entry.read_text())
    data["body"]["argmax"] = [0] * len(data["body"]["argmax"])
    data["check"] = targetcache._check(data["body"])
    entry.write_text(json.dumps(data))
    changed = measure({"b4": bundle4.out}, tiny_checkpoint, target, prompts=PROMPTS)["b4"]
    assert changed.alpha is not None and changed.alpha.value < quality.alpha.value
