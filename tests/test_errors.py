"""Every exit code is one error's: unique, defined in errors.py, and documented there (the docs' exit-code page is
generated from errors.py: tests/test_docs.py checks the page)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from packager import errors
from tests.errorcodes import OTHER_CODES, REPORT_CODES, every_error

ROOT = Path(__file__).resolve().parents[1]


def _documented() -> dict[int, list[str]]:
    """Code -> the meanings errors.py gives it: its classes' own docstrings and its constants' #: comments."""
    pytest.importorskip("sphinx")  # the docs extension reads the #: comments with Sphinx's own analyzer
    sys.path.insert(0, str(ROOT / "docs" / "_ext"))
    try:
        from packager_docs import exit_codes
    finally:
        sys.path.remove(str(ROOT / "docs" / "_ext"))
    documented: dict[int, list[str]] = {}
    for code, _name, meaning, _hint in exit_codes():
        if meaning.strip():
            documented.setdefault(code, []).append(meaning)
    return documented


def test_every_error_class_lives_in_errors_py() -> None:
    assert [c.__qualname__ for c in every_error() if c.__module__ != "packager.errors"] == []


def test_every_exit_code_belongs_to_one_error_class() -> None:
    owners: dict[int, list[str]] = {}
    for cls in every_error():
        if "exit_code" in vars(cls):  # a subclass without its own code shares its parent's on purpose
            owners.setdefault(cls.exit_code, []).append(cls.__name__)
    shared = {code: names for code, names in owners.items() if len(names) > 1 or code in OTHER_CODES}
    assert shared == {}
    # A report's code is no other error's (verify's failed report and its one-line failure are one outcome).
    assert {code: owners[code] for code in REPORT_CODES if code in owners} == {errors.VERIFY_FAILED: ["VerifyFailed"]}


def test_every_exit_code_has_a_meaning_in_errors_py() -> None:
    codes = {cls.exit_code for cls in every_error()} | REPORT_CODES | OTHER_CODES
    assert sorted(codes - set(_documented())) == []
    # every error class says what it means in a docstring of its own (the page's "meaning" column)
    assert [cls.__name__ for cls in every_error() if not (vars(cls).get("__doc__") or "").strip()] == []
