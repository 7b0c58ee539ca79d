"""The `packager` command run in the test's own process (click's CliRunner): for the errors a command says before
any heavy work, where starting a process per case would cost more than the case."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

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


def run_packager(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`packager ARGS...` in this process, answered as `run_cli` answers (a CompletedProcess: returncode, stdout,
    stderr), for the fast layer's commands that end before any heavy work: a refusal, a plan, a report. An error
    the command does not turn into its one line is raised here (a process would print its traceback). `env`
    replaces the environment for the call, as it would for a process; `cwd` is the folder it runs in."""
    previous, environ = os.getcwd(), dict(os.environ)
    try:
        if cwd is not None:
            os.chdir(cwd)
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        result = invoke(*args)
    finally:
        os.chdir(previous)
        os.environ.clear()
        os.environ.update(environ)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return subprocess.CompletedProcess(["packager", *args], result.exit_code, result.stdout, result.stderr)
