"""The command line: help with examples, version, and the CLI staying light."""

from __future__ import annotations

import subprocess
import sys

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
