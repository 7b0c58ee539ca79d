"""The command line: help with examples, version, and the CLI staying light."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import run_cli

COMMANDS = ("convert", "validate", "checksum", "card", "upload", "verify-remote", "release", "hub", "verify", "pair",
            "check-spec", "init")


def test_every_command_has_help_with_an_example() -> None:
    for command in COMMANDS:
        result = run_cli(command, "--help")
        assert result.returncode == 0
        assert "Example:" in result.stdout, command


def test_help_imports_neither_torch_nor_transformers() -> None:
    code = ("import sys; from packager.cli import cli\n"
            "try:\n    cli(['--help'], standalone_mode=False)\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('torch', 'transformers', 'MNN') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_unknown_option_is_a_usage_error() -> None:
    result = run_cli("convert", "--bogus")
    assert result.returncode == 2


@pytest.mark.parametrize("args", [
    ("verify-remote", "me/x", "--timeout", "nan"), ("verify-remote", "me/x", "--timeout", "inf"),
    ("verify-remote", "me/x", "--timeout", "1e300"), ("pull", "me/x", "DIR", "--timeout", "nan"),
    ("pull", "me/x", "DIR", "--timeout", "-inf"), ("hub", "serve", "--body-timeout", "nan"),
    ("hub", "serve", "--body-timeout", "inf"),
])
def test_a_seconds_option_that_is_no_finite_number_is_a_usage_error(args: tuple[str, ...], tmp_path: Path) -> None:
    # Were it taken, each would go on: to a Hub nobody serves, or to a server root that cannot exist.
    env = {**os.environ, "PACKAGER_HUB_TOKEN": "hf_test_SECRET", "HF_ENDPOINT": "http://127.0.0.1:9"}
    extra = ("--root", "/dev/null/hub") if args[0] == "hub" else ()
    result = run_cli(*args, *extra, cwd=tmp_path, env=env)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr and "Invalid value for '--" in result.stderr
    assert not (tmp_path / "DIR").exists()
