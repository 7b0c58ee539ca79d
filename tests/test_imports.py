"""Large imports run with Python's garbage collector paused, and what they made is never walked again."""

from __future__ import annotations

import gc

import pytest

from packager.runtime.imports import without_collection


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_paused_inside_and_restored_after_even_on_an_error(enabled: bool) -> None:
    (gc.enable if enabled else gc.disable)()
    try:
        with pytest.raises(ValueError), without_collection():
            assert not gc.isenabled()
            raise ValueError("an import that fails")
        assert gc.isenabled() == enabled
    finally:
        gc.enable()


def test_what_the_block_made_is_frozen_so_later_collections_skip_it() -> None:
    before = gc.get_freeze_count()
    try:
        with without_collection():
            made = [[i] for i in range(1000)]  # containers the collector tracks, as a module's objects are
        assert gc.get_freeze_count() >= before + len(made)
        assert all(gc.is_tracked(item) for item in made)
    finally:
        gc.unfreeze()
