"""The suite reads like the package: shared helpers live in helper modules, and no test module imports another."""

from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
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
