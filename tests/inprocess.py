"""The `packager` command run in the test's own process (click's CliRunner): for the errors a command says before
any heavy work, where starting a process per case would cost more than the case."""

from __future__ import annotations

from click.testing import CliRunner, Result

from packager.cli import cli, load_all


def invoke(*args: str) -> Result:
    """`packager ARGS...`; the result's stdout and stderr are apart, as a terminal shows them."""
    load_all()
    return CliRunner().invoke(cli, list(args), prog_name="packager")


def one_error_line(result: Result) -> str:
    """The one line a refused command prints on stderr (no traceback, nothing else)."""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("packager: error: "), result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return lines[0]
