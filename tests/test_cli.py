"""The command line: help with examples, version, and the CLI staying light."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import run_cli

COMMANDS = (
    "convert",
    "validate",
    "checksum",
    "card",
    "upload",
    "verify-remote",
    "release",
    "hub",
    "verify",
    "pair",
    "check-spec",
    "init",
)


def test_every_command_has_help_with_an_example() -> None:
    for command in COMMANDS:
        result = run_cli(command, "--help")
        assert result.returncode == 0
        assert "Example:" in result.stdout, command


def test_help_imports_neither_torch_nor_transformers() -> None:
    code = (
        "import sys; from packager.cli import cli\n"
        "try:\n    cli(['--help'], standalone_mode=False)\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('torch', 'transformers', 'MNN') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_unknown_option_is_a_usage_error() -> None:
    result = run_cli("convert", "--bogus")
    assert result.returncode == 2


def _commands_with_json_output():  # type: ignore[no-untyped-def]
    import click

    from packager.cli import cli

    def walk(group: click.Group, prefix: tuple[str, ...] = ()):  # type: ignore[no-untyped-def]
        for name, command in sorted(group.commands.items()):
            if isinstance(command, click.Group):
                yield from walk(command, (*prefix, name))
            elif {"as_json", "fmt"} & {param.name for param in command.params}:
                yield (*prefix, name), command

    return [(path, [p for p in command.params if isinstance(p, click.Argument)]) for path, command in walk(cli)]


@pytest.mark.parametrize(
    ("path", "arguments"), [pytest.param(p, a, id=" ".join(p)) for p, a in _commands_with_json_output() if a]
)
def test_a_failure_under_json_prints_a_json_error_object(path: tuple[str, ...], arguments: list) -> None:  # type: ignore[type-arg]
    """Every command that prints JSON prints a JSON error object on failure too, usage errors included, with the
    exit code it exits with; the one line still goes to stderr. (A findings report, as check-spec's for a
    missing spec, is its own JSON document with ok false.)"""
    result = run_cli(*path, *(["/nonexistent/x"] * len(arguments)), "--json")
    assert result.returncode not in (0, 1), result.stderr
    printed = json.loads(result.stdout)
    assert printed["ok"] is False
    if "findings" not in printed:
        assert printed["error"]["exit_code"] == result.returncode and printed["error"]["message"]
        assert "Traceback" not in result.stderr and result.stderr.strip()


@pytest.mark.parametrize(
    "args",
    [
        ("verify-remote", "me/x", "--timeout", "nan"),
        ("verify-remote", "me/x", "--timeout", "inf"),
        ("verify-remote", "me/x", "--timeout", "1e300"),
        ("pull", "me/x", "DIR", "--timeout", "nan"),
        ("pull", "me/x", "DIR", "--timeout", "-inf"),
        ("hub", "serve", "--body-timeout", "nan"),
        ("hub", "serve", "--body-timeout", "inf"),
    ],
)
def test_a_seconds_option_that_is_no_finite_number_is_a_usage_error(args: tuple[str, ...], tmp_path: Path) -> None:
    # Were it taken, each would go on: to a Hub nobody serves, or to a server root that cannot exist.
    env = {**os.environ, "PACKAGER_HUB_TOKEN": "hf_test_SECRET", "HF_ENDPOINT": "http://127.0.0.1:9"}
    extra = ("--root", "/dev/null/hub") if args[0] == "hub" else ()
    result = run_cli(*args, *extra, cwd=tmp_path, env=env)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr and "Invalid value for '--" in result.stderr
    assert not (tmp_path / "DIR").exists()
