"""The suite reads like the package: shared helpers live in helper modules (no test module imports another), and a
module whose every test needs the converter, a trained fixture, the Hub or an engine says so at its top."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
HEAVY = ("converter", "trained", "hub", "engines")
# Modules whose every test is heavy but which do not say so yet: their owners add `pytestmark` after their own
# changes land. Remove a name once its module says it (the test below fails if it already does).
NOT_YET_MARKED: set[str] = set()

# A line of a script's source that imports a test module.
_SCRIPT_IMPORT = re.compile(r"\s*(from tests\.test_\w+ import |import tests\.test_|from tests import (.*, )?test_)")


def _test_modules() -> list[Path]:
    return sorted(TESTS.glob("test_*.py"))


def _imports_of_test_modules(path: Path) -> list[str]:
    """Every import of a tests.test_* module in `path`: at module level, inside functions, or in the source of a
    script it hands to a subprocess."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] if node.module.startswith("tests.test_") else []
            if node.module == "tests":
                names = [f"tests.{alias.name}" for alias in node.names if alias.name.startswith("test_")]
            found += [f"{path.name}:{node.lineno}: from {name}" for name in names]
        elif isinstance(node, ast.Import):
            found += [
                f"{path.name}:{node.lineno}: import {a.name}" for a in node.names if a.name.startswith("tests.test_")
            ]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            for line in node.value.splitlines():
                if _SCRIPT_IMPORT.match(line):
                    found.append(f"{path.name}:{node.lineno}: {line.strip()} (in a string)")
    return found


def test_no_test_module_imports_another() -> None:
    assert [hit for path in _test_modules() for hit in _imports_of_test_modules(path)] == []


def test_the_import_check_sees_imports_inside_functions_and_scripts(tmp_path: Path) -> None:
    sample = tmp_path / "test_sample.py"
    # Written with TEST for test_, so that this file's own strings do not name a test module.
    text = (
        "from tests.TEST_cli import command_tree\n"
        "from tests import TEST_card, clitree\n"
        "import tests.TEST_validate\n"
        "def test_x():\n"
        "    from tests.TEST_card import EXAMPLE\n"
        'SCRIPT = """\nimport os\nfrom tests.TEST_streaming import f\n"""\n'
        "from tests.clitree import command_tree\n"
    )
    sample.write_text(text.replace("TEST_", "test_"), encoding="utf-8")
    assert [hit.split(": ", 1)[1].replace("test_", "TEST_") for hit in _imports_of_test_modules(sample)] == [
        "from tests.TEST_cli",
        "from tests.TEST_card",
        "import tests.TEST_validate",
        "from tests.TEST_card",
        "from tests.TEST_streaming import f (in a string)",
    ]


# Collects the suite (nothing runs) and prints, per module, the heavy marks all its tests carry once conftest has
# marked them, and the marks its own `pytestmark` declares.
_COLLECT = """
import json, sys
import pytest

HEAVY = set(sys.argv[1].split(","))


class Marks:
    def __init__(self):
        self.modules = {}

    def pytest_collection_finish(self, session):
        for item in session.items:
            name = item.path.name
            carried = {m.name for m in item.iter_markers()} & HEAVY
            own = getattr(item.module, "pytestmark", [])
            own = {m.name for m in (own if isinstance(own, list) else [own])} & HEAVY
            entry = self.modules.setdefault(name, {"all": carried, "declared": own})
            entry["all"] &= carried


marks = Marks()
code = pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", sys.argv[2]], plugins=[marks])
print("MARKS " + json.dumps({k: {n: sorted(v) for n, v in e.items()} for k, e in marks.modules.items()}))
sys.exit(int(code))
"""


@pytest.mark.slow  # a whole collection of the suite in a process of its own
def test_every_module_whose_tests_are_all_heavy_says_so_with_pytestmark() -> None:
    # One collection of the whole suite in a process of its own (a few seconds: the imports of the test modules).
    result = subprocess.run(
        [sys.executable, "-c", _COLLECT, ",".join(HEAVY), str(TESTS)],
        capture_output=True,
        text=True,
        cwd=TESTS.parent,
        timeout=300,
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("MARKS ")]
    assert result.returncode == 0 and lines, result.stdout[-3000:] + result.stderr[-3000:]
    modules = json.loads(lines[-1].removeprefix("MARKS "))
    assert len(modules) > 50, sorted(modules)
    unsaid = {
        name: sorted(set(entry["all"]) - set(entry["declared"]))
        for name, entry in modules.items()
        if set(entry["all"]) - set(entry["declared"]) and name not in NOT_YET_MARKED
    }
    assert unsaid == {}, "add `pytestmark = pytest.mark.<kind>` (or a list) at the top of these modules"
    done = {
        n
        for n in NOT_YET_MARKED
        if set(modules.get(n, {}).get("all", [])) <= set(modules.get(n, {}).get("declared", []))
    }
    assert done == set(), "these modules need no exemption now: remove them from NOT_YET_MARKED"


def test_the_session_names_a_test_that_converts_without_its_mark(tmp_path: Path) -> None:
    """tests/counting's log as the session reads it at its end: counts per kind, and each unmarked converter once."""
    import packager_test_counts as counts  # on sys.path: tests/conftest.py loads it into every process

    log = tmp_path / "conversions.log"
    log.write_text(
        "conversion\t0\ttests/test_a.py::test_refuses\n"
        "graph build\t0\ttests/test_a.py::test_refuses\n"
        "conversion\t0\ttests/test_a.py::test_refuses\n"
        "conversion\t1\ttests/test_b.py::test_converts\n"
        "llmexport\t1\t\n",
        encoding="utf-8",
    )
    made, unmarked = counts.read(str(log))
    assert made == {"conversion": 3, "graph build": 1, "llmexport": 1}
    assert unmarked == ["tests/test_a.py::test_refuses (conversion)", "tests/test_a.py::test_refuses (graph build)"]
    assert counts.read(str(tmp_path / "none.log")) == ({"conversion": 0, "graph build": 0, "llmexport": 0}, [])
