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
