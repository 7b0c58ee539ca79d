"""The command line: help with examples, version, and the CLI staying light."""

from __future__ import annotations

import inspect
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest

from tests.clitree import command_tree
from tests.conftest import run_cli
from tests.inprocess import invoke, one_error_line, run_packager


def examples(command: click.Command) -> list[str]:
    return [line.removeprefix("Example:").strip() for line in _paragraphs(command) if line.startswith("Example:")]


def _paragraphs(command: click.Command) -> list[str]:
    return [" ".join(p.split()) for p in inspect.cleandoc(command.help or "").split("\n\n") if p.strip()]


def _parse_example(line: str) -> tuple[str, ...]:
    """Parse one example command line (each `&&` part; `VAR=value` prefixes dropped) as packager would, with
    resilient parsing off; returns the command path the example runs."""
    from packager.cli import cli

    paths = []
    for part in line.split("&&"):
        words = shlex.split(part)
        while words and "=" in words[0] and not words[0].startswith("-"):
            words.pop(0)
        assert words[:1] == ["packager"], f"an example runs packager: {line}"
        command: click.Command = cli
        ctx = None
        args, path = words[1:], ()
        while True:
            ctx = command.make_context(path[-1] if path else "packager", list(args), parent=ctx)
            assert not ctx.resilient_parsing
            if not isinstance(command, click.Group):
                break
            remaining = [*ctx._protected_args, *ctx.args]
            assert remaining, f"{line}: names no subcommand"
            name, sub, args = command.resolve_command(ctx, remaining)
            assert name is not None and sub is not None
            command, path = sub, (*path, name)
        paths.append(path)
    assert len(set(paths)) == 1, line
    return paths[0]


@pytest.mark.parametrize(
    ("path", "command"), [pytest.param(p, c, id=" ".join(p) or "packager") for p, c in command_tree()]
)
def test_every_command_help_ends_with_an_example_that_parses(
    path: tuple[str, ...], command: click.Command, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every command and group, found by walking the tree, ends its help with `Example: packager ...`, and each of
    its examples is a command line its own parser takes (options, arity, choices, ranges): examples cannot drift.
    Paths in examples need not exist here: click's exists checks are off for the parse."""
    for _, each in command_tree():
        for param in each.params:
            if isinstance(param.type, click.Path):
                monkeypatch.setattr(param.type, "exists", False)
    assert re.match(r"Example: ([A-Z_]+=\S+ )*packager ", _paragraphs(command)[-1]), path
    found = examples(command)
    assert found, path
    for line in found:
        ran = _parse_example(line)
        assert ran[: len(path)] == path, f"{' '.join(path)}'s example runs {' '.join(ran)}: {line}"


def test_the_help_lists_each_command_by_its_own_summary_at_any_width() -> None:
    """`packager --help` lists commands from a table (packager.cli.COMMANDS), not from the commands themselves:
    at every terminal width each line is what the command's own help gives, and each command lives in the module
    the table names."""
    from packager.cli import COMMANDS, _Listed

    commands = {path[0]: command for path, command in command_tree() if len(path) == 1}
    assert sorted(COMMANDS) == sorted(commands)
    for name, (module, _) in COMMANDS.items():
        real = commands[name]
        assert real.callback is not None and real.callback.__module__ == f"packager.cli.{module}", name
        for width in range(8, 400, 3):
            assert _Listed(name).get_short_help_str(width) == real.get_short_help_str(width), (name, width)


def test_at_80_columns_no_summary_is_cut_and_no_example_is_broken() -> None:
    """Issue 39: `packager --help` cut each summary mid-sentence at 80 columns, and examples wrapped mid-command."""
    from click.testing import CliRunner

    from packager.cli import SUMMARIES, cli

    listing = CliRunner().invoke(cli, ["--help"], terminal_width=80).output
    for name, summary in SUMMARIES.items():
        assert re.search(rf"^  {re.escape(name)} +{re.escape(summary)}$", listing, re.M), name
        assert max(len(line) for line in listing.splitlines()) <= 80
    for path, command in command_tree():
        shown = CliRunner().invoke(cli, [*path, "--help"], terminal_width=80).output
        for example in examples(command):
            assert f"Example: {example}" in shown, (path, example)


IMPORTED = (
    "import sys\n"
    "from packager.cli import cli\n"
    "try:\n"
    "    cli(sys.argv[1:], prog_name='packager')\n"
    "except SystemExit:\n"
    "    pass\n"
    "print(' '.join(sorted(m for m in sys.modules if m.startswith('packager.cli.'))), file=sys.stderr)\n"
)


@pytest.mark.parametrize(
    ("words", "loaded"),
    [
        (("--help",), set()),
        (("validate", "--help"), {"check"}),
        (("hub", "serve", "--help"), {"hubserver"}),
        (("pull", "--help"), {"trust"}),
    ],
)
def test_a_command_line_imports_only_the_modules_of_the_commands_it_names(
    words: tuple[str, ...], loaded: set[str]
) -> None:
    """The help of the group imports no command module, and a command imports its own (and what that imports),
    not every other command's: `packager validate` does not pay for what release needs."""
    from packager.cli import COMMANDS

    ran = subprocess.run([sys.executable, "-c", IMPORTED, *words], capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, ran.stderr
    assert "Usage: packager" in ran.stdout
    modules = {name.removeprefix("packager.cli.") for name in ran.stderr.split()}
    assert modules & {module for module, _ in COMMANDS.values()} == loaded


def test_help_lists_the_commands_by_stage_and_every_command_in_one() -> None:
    """`packager --help` has the six stage sections in order, each listing its commands, and no command is left
    out of a stage (no "Other commands")."""
    from packager.cli import STAGES, cli

    staged = [name for _, names in STAGES for name in names]
    assert sorted(staged) == [path[0] for path, _ in command_tree() if len(path) == 1]  # each in exactly one stage
    result = run_packager("--help")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    headings = [line.rstrip(":") for line in lines if line and not line.startswith(" ") and line.endswith(":")]
    assert headings == ["Options", *(title for title, _ in STAGES)]
    assert "Other commands" not in result.stdout
    for title, names in STAGES:
        start = lines.index(f"{title}:") + 1
        listed = [line.split()[0] for line in lines[start : start + len(names)]]
        assert listed == list(names), title
    assert "Build, check, measure and publish MNN bundles (drafts, targets, EAGLE-3 and" in result.stdout


def test_help_imports_neither_torch_nor_transformers() -> None:
    code = (
        "import sys; from packager.cli import cli\n"
        "try:\n    cli(['--help'], standalone_mode=False)\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('torch', 'transformers', 'MNN') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_unknown_option_is_a_usage_error() -> None:
    result = run_packager("convert", "--bogus")
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
    # Under /dev/null: no folder can be made there (init makes its DIR), not even by root.
    result = run_packager(*path, *(["/dev/null/nonexistent"] * len(arguments)), "--json")
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
    result = run_packager(*args, *extra, cwd=tmp_path, env=env)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr and "Invalid value for '--" in result.stderr
    assert not (tmp_path / "DIR").exists()


@pytest.mark.parametrize(
    "line",
    [
        "packager verify ./bundle --sauce ./qwen3",  # an option that does not exist
        "packager pair ./draft",  # an argument missing
        "packager speculate ./bundle --mode medusa",  # a choice that does not exist
        "packager hub serve --port eighty",  # a value of the wrong type
    ],
)
def test_an_example_that_drifted_from_its_command_does_not_parse(line: str) -> None:
    with pytest.raises(click.UsageError):
        _parse_example(line)


def test_cloup_is_imported_without_importlib_metadata_and_leaves_the_real_one_importable() -> None:
    """cloup asks importlib.metadata for click's version (20 ms of every start); packager answers that one question
    while cloup imports, and leaves nothing behind: a later import gets the real module."""
    code = (
        "import sys\n"
        "from packager.cli import cli\n"
        "import cloup._util\n"
        "print('importlib.metadata' in sys.modules)\n"
        "import importlib.metadata\n"
        "print(importlib.metadata.version('click') == '.'.join(cloup._util.click_version_tuple))\n"
        "print(hasattr(importlib.metadata, 'distributions'), type(importlib.metadata).__name__)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["False", "True", "True", "module"]


# --- --debug where the hints say it (issue 39, row 19) --------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "command"), [pytest.param(p, c, id=" ".join(p) or "packager") for p, c in command_tree()]
)
def test_every_command_and_group_takes_debug(path: tuple[str, ...], command: click.Command) -> None:
    assert any("--debug" in getattr(param, "opts", ()) for param in command.params), path


def test_debug_after_the_command_shows_the_traceback_and_only_then(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from packager.cli import cli

    for words in (["checksum", str(tmp_path / "missing"), "--debug"], ["--debug", "checksum", str(tmp_path / "x")]):
        shown = CliRunner().invoke(cli, words)
        assert shown.exit_code == 22 and "Traceback" in shown.stderr, shown.stderr
    plain = CliRunner().invoke(cli, ["checksum", str(tmp_path / "missing")])
    assert plain.exit_code == 22 and "Traceback" not in plain.stderr and plain.stderr.count("\n") == 1


def test_a_base_install_is_told_the_distributions_name_before_any_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from packager.cli import cli
    from packager.convert import plan

    monkeypatch.setattr(plan, "missing", lambda: ("torch", "llmexport"))
    result = CliRunner().invoke(cli, ["convert", str(tmp_path), "--out", str(tmp_path / "b")])
    assert result.exit_code == 29 and result.stderr.count("\n") == 1, result.stderr
    assert "converting needs torch, llmexport" in result.stderr
    assert "pip install 'mnn-packager[convert]'" in result.stderr and not (tmp_path / "b").exists()


def test_no_hint_names_the_wrong_distribution() -> None:
    """PyPI's `packager` is another project: every install hint names mnn-packager."""
    root = Path(__file__).resolve().parents[1]
    wrong = [
        f"{path.relative_to(root)}:{number}"
        for folder in ("packager", "docs", "templates")
        for path in (root / folder).rglob("*")
        if path.suffix in (".py", ".md", ".j2", ".yaml", ".yml") and "_build" not in path.parts
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"""(pip|pipx) install[^\n]*?['" ]packager\[""", line)
    ]
    assert wrong == []


# --- --json on every command with a result (issue 39, row 16) -------------------------------------------------------

NEWLY_JSON = [("card",), ("checksum",), ("init",), ("hub", "serve"), ("cache", "clear"), ("quant-sweep",)]


@pytest.mark.parametrize("path", NEWLY_JSON, ids=" ".join)
def test_json_is_the_stdout_flag_on_these_commands_too(path: tuple[str, ...]) -> None:
    command = dict(command_tree())[path]
    (flag,) = [p for p in command.params if isinstance(p, click.Option) and "--json" in p.opts]
    assert flag.is_flag and flag.name == "as_json" and flag.opts == ["--json"]


def _invoke(*words: str, **env: str) -> Any:
    from click.testing import CliRunner

    from packager.cli import cli

    return CliRunner(env=env or None).invoke(cli, list(words))


def test_checksum_json_writes_and_checks_with_one_document_each(tmp_path: Path) -> None:
    (tmp_path / "a.bin").write_bytes(b"a")
    written = _invoke("checksum", str(tmp_path), "--json")
    assert written.exit_code == 0 and json.loads(written.stdout)["files"] == 1
    (tmp_path / "a.bin").write_bytes(b"b")
    checked = _invoke("checksum", "--check", str(tmp_path), "--json")
    assert checked.exit_code == 31 and checked.stderr == ""
    assert json.loads(checked.stdout) | {"bundle": "", "manifest": ""} == {
        "ok": False,
        "bundle": "",
        "manifest": "",
        "checked": 1,
        "mismatched": ["a.bin"],
        "missing": [],
        "extra": [],
    }


def test_init_and_cache_clear_print_their_result_as_json(tmp_path: Path) -> None:
    made = _invoke("init", str(tmp_path / "r"), "--json")
    assert made.exit_code == 0, made.stderr
    data = json.loads(made.stdout)
    assert data["ok"] and "release.toml" in data["written"] and data["ci_source"] is None
    assert "release.title" in data["todos"]
    cleared = _invoke("cache", "clear", "--json", PACKAGER_CACHE_DIR=str(tmp_path / "cache"))
    assert cleared.exit_code == 0, cleared.stderr
    assert {k: v["removed"] for k, v in json.loads(cleared.stdout).items() if k != "ok"} == {"graphs": 0, "targets": 0}


@pytest.mark.parametrize(
    ("words", "code"),
    [
        (("card", "{d}", "--spec", "{d}/missing.toml", "--json"), 17),
        (("card", "{d}", "--spec", "{d}/missing.toml", "-o", "-", "--json"), 2),
        (("hub", "serve", "--root", "{d}/hub", "--json"), 2),  # no write token: the command's own usage error
        (("init", "{d}/r", "--hook-rev", "main", "--json"), 19),
    ],
)
def test_a_failure_of_a_new_json_command_is_one_json_error_object(
    words: tuple[str, ...], code: int, tmp_path: Path
) -> None:
    result = _invoke(*(w.format(d=tmp_path) for w in words), PACKAGER_HUB_TOKEN="")
    assert result.exit_code == code, result.stderr
    error = json.loads(result.stdout)["error"]
    assert error["exit_code"] == code and error["message"] and "Traceback" not in result.stderr
    assert not (tmp_path / "r").exists() and not (tmp_path / "hub").exists()


def test_quant_sweep_json_is_the_flag_and_the_old_json_file_only_where_unambiguous(tmp_path: Path) -> None:
    from packager.cli import cli

    def parsed(*words: str) -> dict[str, Any]:
        command = cli.get_command(click.Context(cli), "quant-sweep")
        assert command is not None
        return command.make_context("quant-sweep", list(words)).params

    assert (parsed("--json", str(tmp_path))["as_json"], parsed("--json", str(tmp_path))["output"]) == (True, None)
    assert (parsed(str(tmp_path), "--json")["as_json"], parsed(str(tmp_path), "--json")["output"]) == (True, None)
    for old in (
        (str(tmp_path), "--json", "s.json"),
        ("--json=s.json", str(tmp_path)),
        ("--json", "s.json", str(tmp_path)),
    ):
        params = parsed(*old)
        assert (params["as_json"], params["output"], params["checkpoint"]) == (False, Path("s.json"), tmp_path), old


def test_hub_serve_json_says_where_it_serves_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from packager.hub.local import server

    async def serving(config: Any, host: str, port: int, announce: Any) -> None:
        announce(f"http://{host}:43210", 2)  # what the server says once it listens (port 0 picked 43210)

    monkeypatch.setattr(server, "serve", serving)
    result = _invoke("hub", "serve", "--root", str(tmp_path / "hub"), "--port", "0", "--json", PACKAGER_HUB_TOKEN="t")
    assert result.exit_code == 0, result.stderr
    (line,) = result.stdout.splitlines()
    assert json.loads(line) == {
        "ok": True,
        "url": "http://127.0.0.1:43210",
        "root": str(tmp_path / "hub"),
        "removed": 2,
    }


# A terminal that prints this sets its window title: what a path or a spec value may hold must reach it escaped.
OSC = "x\x1b]0;PWNED\x07y"
OSC_SHOWN = "x\\x1b]0;PWNED\\x07y"
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "release.toml"


def assert_escaped(stderr: str) -> None:
    assert "\x1b" not in stderr and "\x07" not in stderr, stderr
    assert OSC_SHOWN in stderr, stderr


@pytest.mark.parametrize(
    "args",
    [
        ("validate", f"no{OSC}"),
        ("card", f"no{OSC}", "--spec", str(EXAMPLE)),
        ("convert", f"no{OSC}", "--out", "OUT"),
        ("pair", "HERE", "HERE", "--costs", f"no{OSC}"),  # click's own usage error
        (f"no{OSC}",),  # no such command
    ],
    ids=["validate", "card", "convert", "click usage error", "command"],
)
def test_an_escape_sequence_in_an_argument_reaches_the_terminal_escaped(args: tuple[str, ...], tmp_path: Path) -> None:
    result = invoke(*(str(tmp_path / "out") if a == "OUT" else str(tmp_path) if a == "HERE" else a for a in args))
    assert result.exit_code not in (0, 1), result.stderr
    assert_escaped(result.stderr)


def test_init_twice_in_a_folder_named_with_an_escape_sequence_says_so_escaped(tmp_path: Path) -> None:
    folder = tmp_path / f"repo{OSC}"
    assert invoke("init", str(folder)).exit_code == 0
    again = invoke("init", str(folder))
    assert again.exit_code == 60 and "already has release.toml" in again.stderr
    assert_escaped(again.stderr)


@pytest.mark.parametrize("command", ["convert", "release"])
def test_an_escape_sequence_in_the_spec_checkpoint_reaches_the_terminal_escaped(command: str, tmp_path: Path) -> None:
    spec = tmp_path / "release.toml"
    spec.write_text(EXAMPLE.read_text().replace("[convert]\n", '[convert]\ncheckpoint = "ck\\u001b]0;PWNED\\u0007y"\n'))
    args = ("--spec", str(spec), "--out", str(tmp_path / "out")) if command == "convert" else (str(spec), "--dry-run")
    result = invoke(command, *args)
    assert result.exit_code == 10 and one_error_line(result).endswith(
        "does not exist; pass the folder that holds config.json and the *.safetensors files"
        if command == "convert"
        else "does not exist; set [convert] checkpoint to the checkpoint folder (relative to the spec), or remove it "
        "to release a --bundle without verifying it"
    )
    assert "\x1b" not in result.stdout and f"{tmp_path}/ck\\x1b]0;PWNED\\x07y" in result.stderr
