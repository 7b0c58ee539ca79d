"""Every exit code is one error's: unique, defined in errors.py, and in README's table of exit codes."""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import packager
from packager import errors
from packager.errors import PackagerError

README = Path(__file__).resolve().parents[1] / "README.md"
# Exit codes of commands that print a whole report instead of one error line, and of signals.
REPORT_CODES = {errors.VALIDATION_FAILED, errors.CHECKSUM_MISMATCH, errors.ENGINES_CHECK_FAILED, errors.VERIFY_FAILED}
OTHER_CODES = {0, 2, 130, 143}


def _every_error() -> list[type[PackagerError]]:
    for module in pkgutil.walk_packages(packager.__path__, "packager."):
        if not module.name.endswith("__main__"):
            importlib.import_module(module.name)  # an error class defined anywhere is found

    def below(cls: type[PackagerError]) -> list[type[PackagerError]]:
        return [c for sub in cls.__subclasses__() for c in (sub, *below(sub))]

    return below(PackagerError)


def _documented() -> set[int]:
    section = README.read_text(encoding="utf-8").split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    return {int(code) for code in re.findall(r"^\| (\d+) \|", section, flags=re.M)}


def test_every_error_class_lives_in_errors_py() -> None:
    assert [c.__qualname__ for c in _every_error() if c.__module__ != "packager.errors"] == []


def test_every_exit_code_belongs_to_one_error_class() -> None:
    owners: dict[int, list[str]] = {}
    for cls in _every_error():
        if "exit_code" in vars(cls):  # a subclass without its own code shares its parent's on purpose
            owners.setdefault(cls.exit_code, []).append(cls.__name__)
    shared = {code: names for code, names in owners.items() if len(names) > 1 or code in OTHER_CODES}
    assert shared == {}
    # A report's code is no other error's (verify's failed report and its one-line failure are one outcome).
    assert {code: owners[code] for code in REPORT_CODES if code in owners} == {errors.VERIFY_FAILED: ["VerifyFailed"]}


def test_every_exit_code_is_in_the_readme_table_and_the_table_has_no_other() -> None:
    codes = {cls.exit_code for cls in _every_error()} | REPORT_CODES
    documented = _documented()
    assert sorted(codes - documented) == []
    assert sorted(documented - codes - OTHER_CODES) == []
