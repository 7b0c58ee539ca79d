"""The `packager` command line: flags in, library calls, results and exit codes out. The only click package."""

from __future__ import annotations

import gc
import importlib
import inspect
import json
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from .. import __version__
from ..errors import InputTooLarge, PackagerError, from_os_error, printable
from .cloupload import load as _load_cloup
from .commands import COMMANDS as COMMANDS  # where each command lives (re-exported)
from .commands import STAGES as STAGES
from .commands import SUMMARIES as SUMMARIES
from .progress import StderrProgress as StderrProgress  # the commands' progress callback (re-exported)

_load_cloup()  # cloup without importlib.metadata, a third of packager's start (see cloupload)
import cloup  # noqa: E402

INTERRUPTED = 130
TERMINATED = 128 + signal.SIGTERM


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the program is so that it unwinds (and cleans up) exactly as after Ctrl-C."""


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated()


_JSON_OUT = "packager.json"  # ctx.meta key (shared by every context): the command prints JSON to stdout
_JSON_SAID = "packager.json-error"  # ctx.meta key: a JSON error object has been printed
DEBUG_HELP = "Show tracebacks and tool logs on errors."


def _set_debug(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value:
        ctx.ensure_object(dict)["debug"] = True  # the root's dict, shared by every context below it


def with_debug(kwargs: dict[str, Any]) -> dict[str, Any]:
    """A command's keyword arguments with --debug among its params (where it has none), not only before the
    command: an error's hint says "rerun with --debug", and a user adds it to the line they ran. Given before the
    command is made, so that cloup's help sections list it."""
    params = list(kwargs.get("params") or [])
    if not any(param.name == "debug" for param in params):
        params.append(click.Option(["--debug"], is_flag=True, expose_value=False, callback=_set_debug, help=DEBUG_HELP))
    return {**kwargs, "params": params}


def _examples_kept_whole(help_text: str) -> str:
    """The help with each `Example:` paragraph marked for click not to rewrap it (\\b): a command line is shown
    whole, never broken mid-command at the terminal's width."""
    paragraphs = inspect.cleandoc(help_text).split("\n\n")
    return "\n\n".join(f"\b\n{p}" if p.startswith("Example:") else p for p in paragraphs)


class _WholeExamples:
    help: str | None

    def format_help_text(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        original = self.help
        if original:
            self.help = _examples_kept_whole(original)
        try:
            super().format_help_text(ctx, formatter)  # type: ignore[misc]
        finally:
            self.help = original


class PackagerCommand(_WholeExamples, cloup.Command):
    """Notes whether the command was asked for JSON, so that a failure prints a JSON error object too; takes
    --debug as the group does; shows its examples whole."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **with_debug(kwargs))

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        asks_json = self._asks_json(args)  # judged from the words before click's parser consumes the list
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            if asks_json:
                _print_json_error(exc.exit_code, "UsageError", exc.format_message(), f"see: {ctx.command_path} --help")
            raise

    def invoke(self, ctx: click.Context) -> Any:
        ctx.meta[_JSON_OUT] = ctx.params.get("as_json") is True or ctx.params.get("fmt") == "json"
        return super().invoke(ctx)

    def _asks_json(self, args: list[str]) -> bool:
        names = {param.name for param in self.params}
        words = args[: args.index("--")] if "--" in args else args
        pairs = zip(words, [*words[1:], ""])
        return ("as_json" in names and "--json" in words) or (
            "fmt" in names
            and any(word == "--format=json" or (word == "--format" and value == "json") for word, value in pairs)
        )


class _Listed(click.Command):
    """A command as `packager --help` lists it before its module is imported: its name, first sentence and
    summary."""

    def __init__(self, name: str) -> None:
        super().__init__(name, help=COMMANDS[name][1], short_help=SUMMARIES[name])


class PackagerGroup(_WholeExamples, cloup.Group):
    """Maps PackagerError to its one line and exit code, Ctrl-C to 130 and SIGTERM to 143; tracebacks only
    with --debug. An OS error or an absurdly deep input that escaped the library still ends in one line (and,
    for a command asked for --json, a JSON error object on stdout). Every error line is escaped
    (errors.printable; click quotes a usage error's value with repr): a path or a value holding ESC, BEL or a
    newline reaches the terminal as \\x1b, \\x07, \\n. With `stages`, --help lists the subcommands by stage (a
    command in no stage still shows, under "Other commands")."""

    command_class = PackagerCommand
    group_class = type  # subgroups (hub, cache, engines) are PackagerGroups too
    stages: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **with_debug(kwargs))  # the root's own --debug (which sets ctx.obj) is kept

    def add_command(self, cmd: click.Command, name: str | None = None, *args: Any, **kwargs: Any) -> None:
        if self.stages and cmd.short_help is None and (name or cmd.name) in SUMMARIES:
            cmd.short_help = SUMMARIES[name or cmd.name or ""]
        super().add_command(cmd, name, *args, **kwargs)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(self.commands) | (set(COMMANDS) if self.stages else set()))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if self.stages and cmd_name not in self.commands and cmd_name in COMMANDS:
            importlib.import_module(f"{__name__}.{COMMANDS[cmd_name][0]}")  # it registers its commands on `cli`
        return super().get_command(ctx, cmd_name)

    def list_sections(self, ctx: click.Context, include_default_section: bool = True) -> list[cloup.Section]:
        if not self.stages:
            return super().list_sections(ctx, include_default_section)
        placed = {name for _, names in self.stages for name in names}
        listed = {name: self.commands.get(name) or _Listed(name) for name in COMMANDS}
        sections = [
            cloup.Section(title, [listed[name] for name in names if name in listed]) for title, names in self.stages
        ]
        rest = [command for name, command in sorted(self.commands.items()) if name not in placed]
        return sections + ([cloup.Section("Other commands", rest)] if rest and include_default_section else [])

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except Terminated as exc:
            click.echo(f"packager: terminated; {_left(exc)}", err=True)
            ctx.exit(TERMINATED)
        except KeyboardInterrupt as exc:
            click.echo(f"packager: interrupted; {_left(exc)}", err=True)
            ctx.exit(INTERRUPTED)
        except PackagerError as exc:
            _fail(ctx, exc)
        except click.ClickException as exc:  # a usage error the command found (its parser's prints its own)
            if ctx.meta.get(_JSON_OUT) and not ctx.meta.get(_JSON_SAID):  # said once, by the innermost group
                ctx.meta[_JSON_SAID] = True
                hint = f"see: {exc.ctx.command_path} --help" if isinstance(exc, click.UsageError) and exc.ctx else ""
                _print_json_error(exc.exit_code, type(exc).__name__, exc.format_message(), hint)
            raise
        except OSError as exc:
            _fail(ctx, from_os_error(exc))
        except RecursionError:
            _fail(ctx, InputTooLarge("an input is nested too deeply to be a file packager reads"))


def _left(exc: BaseException) -> str:
    """What an interrupted command leaves: nothing, unless it kept something to resume (pull says where)."""
    return getattr(exc, "kept", None) or "nothing was left half-written"


def _fail(ctx: click.Context, exc: PackagerError) -> None:
    if _debug(ctx):
        import traceback

        traceback.print_exc()
        if exc.details:
            click.echo(exc.details, err=True)
    click.echo(f"packager: error: {printable(exc.one_line())}", err=True)
    if ctx.meta.get(_JSON_OUT):  # a script reading stdout learns what failed without parsing stderr
        _print_json_error(exc.exit_code, type(exc).__name__, exc.message, exc.hint)
    ctx.exit(exc.exit_code)


def _print_json_error(code: int, kind: str, message: str, hint: str) -> None:
    error = {
        "exit_code": code,
        "error": kind,
        "message": printable(" ".join(message.split())),  # as on stderr: a path's undecodable bytes as \\xff
        "hint": printable(" ".join(hint.split())) or None,
    }
    click.echo(json.dumps({"ok": False, "error": error}, indent=2, ensure_ascii=False))


def warn(text: str) -> None:
    """One warning line on stderr, escaped as error lines are (a path or a spec value cannot drive the terminal)."""
    click.echo(f"packager: warning: {printable(text)}", err=True)


def _debug(ctx: click.Context) -> bool:
    return bool((ctx.obj or {}).get("debug"))


def version_text() -> str:
    from ..infra.versions import installed

    return "\n".join([f"packager {__version__}", *(f"{name} {version}" for name, version in installed().items())])


def _print_version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(version_text())
        ctx.exit()


@cloup.group(cls=PackagerGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help=DEBUG_HELP)
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Show packager's version and its engines' (MNN, llmexport, huggingface_hub, torch, ...).",
)
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Build, check, measure and publish MNN bundles (drafts, targets, EAGLE-3 and lookahead).

    Example: packager convert ./my-qwen3-draft --out ./bundle
    """
    ctx.obj = {"debug": debug}  # a command's own --debug sets it later (the group's callback runs first)


cli.stages = STAGES


def _path(**kwargs: Any) -> click.Path:
    return click.Path(path_type=Path, **kwargs)


def _emit(data: dict[str, Any], as_json: bool, text: Callable[[dict[str, Any]], str]) -> None:
    click.echo(json.dumps(data, indent=2, ensure_ascii=False) if as_json else text(data))


def format_option(command: Any) -> Any:
    from ..report import FORMATS
    from .options import option

    return option(
        "--format",
        "fmt",
        type=click.Choice(FORMATS),
        show_default="text",  # None, not text: --json alone must not meet a --format given by default
        help="text for people, json for scripts, github for GitHub Actions annotations (workflow commands), junit for "
        "a JUnit XML test report.",
    )(command)


def chosen_format(fmt: str | None, as_json: bool) -> str:
    if as_json and fmt not in (None, "json"):
        raise click.UsageError(f"--json is --format json; it cannot be combined with --format {fmt}")
    return "json" if as_json else fmt or "text"


def emit_report(report: Any, fmt: str) -> None:
    from ..report.formats import render

    click.echo(render(report, fmt))


def load_all() -> None:
    """Import every command's module (each registers its commands on `cli`): for code that walks cli.commands."""
    for module in sorted({module for module, _ in COMMANDS.values()}):
        importlib.import_module(f"{__name__}.{module}")


def library_defaults() -> None:
    """What packager asks of its libraries unless the user says otherwise. huggingface_hub reads these at import: no
    telemetry call and no progress bars."""
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


def main() -> None:
    library_defaults()
    signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        cli(prog_name="packager")
    finally:
        # The work is done and reported. Python's last garbage collection at exit walks every object torch and
        # transformers made (0.5 s after verify or pair); frozen, it skips them. Files and child processes are
        # closed by the commands themselves, and atexit handlers (temporary folders) still run.
        gc.freeze()
