"""A bundle kind is one of KINDS and is compared by identity across packager: it stays itself when a result
carrying it is pickled (sent to another process, or kept by the test session's shared builds)."""

from __future__ import annotations

import pickle

import pytest

from packager.bundle.kinds import KINDS, BundleKind


@pytest.mark.parametrize("kind", KINDS.values(), ids=list(KINDS))
def test_a_kind_pickled_comes_back_as_the_same_object(kind: BundleKind) -> None:
    assert pickle.loads(pickle.dumps(kind)) is kind
    assert pickle.loads(pickle.dumps({"kind": kind}))["kind"] is kind


def test_a_dflash_bundle_ships_its_draft_in_the_app_subset_pull_sign_and_release_take(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from packager.bundle.kinds import TARGET_DFLASH, kind_from_names, kind_of, release_names

    names = {"config.json", "llm.mnn", "llm.mnn.weight", "dflash.mnn", "dflash_fc.mnn"}
    assert kind_from_names(frozenset(names)) is TARGET_DFLASH
    assert {"dflash.mnn", "dflash_fc.mnn"} <= set(TARGET_DFLASH.app_files)
    for name in ("config.json", "llm_config.json", "llm.mnn", "llm.mnn.weight", "tokenizer.txt", *names):
        (tmp_path / name).write_text("{}")
    assert kind_of(tmp_path) is TARGET_DFLASH
    assert {"dflash.mnn", "dflash_fc.mnn"} <= set(release_names(tmp_path))
