"""The options several commands share: one spelling, one metavar and one help text per idea, the default shown by
click. An old spelling stays as a hidden alias that still works and says, in one line on stderr, what replaced it."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click

Decorator = Callable[[Any], Any]


def warn_deprecated(ctx: click.Context | None, old: str, new: str) -> None:
    """The one deprecation line, on stderr (stdout may be a --json document a script parses)."""
    if ctx is None or not ctx.resilient_parsing:
        click.echo(f"packager: warning: {old} is deprecated; use {new}", err=True)


class Option(click.Option):
    """An option that also answers to old spellings (`old=("--source",)`), hidden from --help; using one prints
    the deprecation line once. Giving an old and the new spelling together is a usage error (which one won would
    be a guess)."""

    def __init__(self, *args: Any, old: Sequence[str] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.old = tuple(old)

    def get_help_extra(self, ctx: click.Context) -> Any:
        """A default described in words (show_default="every core") shows as such, not in click's parentheses."""
        extra = super().get_help_extra(ctx)
        if isinstance(self.show_default, str):
            extra["default"] = self.show_default
        return extra

    def _dest(self, old: str) -> str:
        return f"{self.name}\0{old}"

    def add_to_parser(self, parser: Any, ctx: click.Context) -> None:
        super().add_to_parser(parser, ctx)
        for old in self.old:
            if self.is_flag:
                parser.add_option(
                    obj=self, opts=[old], dest=self._dest(old), action="store_const", const=self.flag_activation_value
                )
            else:
                action = "append" if self.multiple else "store"
                parser.add_option(obj=self, opts=[old], dest=self._dest(old), action=action, nargs=self.nargs)

    def consume_value(self, ctx: click.Context, opts: Any) -> Any:
        used = [old for old in self.old if self._dest(old) in opts]
        if used:
            new = self.opts[-1]
            if self.name in opts:
                raise click.BadOptionUsage(str(self.name), f"{used[0]} is the old name of {new}: give {new} once", ctx)
            for old in used:
                warn_deprecated(ctx, old, new)
            opts = {**opts, str(self.name): opts[self._dest(used[-1])]}
        return super().consume_value(ctx, opts)


def option(*names: str, **kwargs: Any) -> Decorator:
    """click.option with packager's Option class (old spellings) and defaults shown by click."""
    kwargs.setdefault("cls", Option)
    if "default" in kwargs or "show_default" in kwargs:
        kwargs.setdefault("show_default", True)
    return click.option(*names, **kwargs)


def path(**kwargs: Any) -> click.Path:
    return click.Path(path_type=Path, **kwargs)


class _Seconds(click.FloatRange):
    """A number of seconds in the range; nan is refused too (a FloatRange lets it through: nan < min is False)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        seconds = super().convert(value, param, ctx)
        if math.isnan(seconds):
            self.fail(f"{value!r} is not a number of seconds.", param, ctx)
        return seconds


def seconds(most: float) -> click.FloatRange:
    """Seconds from 0.1 to `most`: nan, inf and a timeout no socket takes are usage errors (exit 2)."""
    return _Seconds(min=0.1, max=most)


def timeout_option(help: str) -> Decorator:
    """--timeout SECONDS of a download (30 by default, a day at most)."""
    return option("--timeout", type=seconds(86400), metavar="SECONDS", default=30.0, help=help)


def prompts_option(show_default: str) -> Decorator:
    """--prompts FILE: the user turns a measurement runs on, one per line (or JSON)."""
    return option(
        "--prompts",
        "prompts_file",
        metavar="FILE",
        type=path(exists=True, dir_okay=False),
        show_default=show_default,
        help="Prompts (user turns), one per line (or JSON).",
    )


# --- output and chatter -------------------------------------------------------------------------------------------


def json_option(command: Any) -> Any:
    """--json: the result as one JSON document on stdout (a failure too: a JSON error object)."""
    return option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")(command)


def quiet_option(command: Any) -> Any:
    """-q/--quiet: no progress on stderr (no bar on a terminal, no stage lines elsewhere); the result still prints."""
    return option(
        "-q",
        "--quiet",
        "quiet",
        is_flag=True,
        help="No progress on stderr (bar or stage lines); the result still prints.",
    )(command)


def output_option(help: str, old: Sequence[str] = (), **kwargs: Any) -> Decorator:
    """-o/--output FILE: where a command writes a file of its result."""
    kwargs.setdefault("type", path(dir_okay=False))
    return option("-o", "--output", "output", metavar="FILE", old=old, help=help, **kwargs)


# --- inputs -------------------------------------------------------------------------------------------------------


def checkpoint_argument(required: bool = True, **kwargs: Any) -> Decorator:
    """CHECKPOINT: the command's main input, a Hugging Face checkpoint folder."""
    return click.argument("checkpoint", type=path(**kwargs), required=required)  # click writes [CHECKPOINT] if optional


def checkpoint_option(help: str, old: Sequence[str] = (), required: bool = False, **kwargs: Any) -> Decorator:
    """--checkpoint CHECKPOINT: a checkpoint folder where it is not the command's main input."""
    return option(
        "--checkpoint", "checkpoint", metavar="CHECKPOINT", type=path(**kwargs), required=required, old=old, help=help
    )


def spec_argument(nargs: int = 1) -> Decorator:
    """SPEC: the release spec (TOML) as the command's main input."""
    if nargs == 1:
        return click.argument("spec_path", metavar="SPEC", type=path())
    return click.argument("specs", metavar="[SPEC]...", nargs=nargs, type=path())


def spec_option(help: str = "Release spec (TOML).", required: bool = False) -> Decorator:
    """--spec SPEC: the release spec where it is a secondary input."""
    return option("--spec", "spec_path", metavar="SPEC", type=path(), required=required, help=help)


def lora_option(help: str = "peft LoRA adapter folder to merge into the checkpoint first.", **kwargs: Any) -> Decorator:
    """--lora ADAPTER: a peft LoRA adapter folder."""
    return option("--lora", "lora", metavar="ADAPTER", type=path(**kwargs), help=help)


def dtype_option(help: str, old: Sequence[str] = ()) -> Decorator:
    """--dtype stored|float32: the dtype a checkpoint computes in."""
    return option("--dtype", "dtype", type=click.Choice(["stored", "float32"]), default="stored", old=old, help=help)


def threads_option(help: str, default: str = "every core") -> Decorator:
    """--threads N: at least 1 (click refuses 0 and negatives); the default said by click in one wording."""
    return option("--threads", "threads", type=click.IntRange(min=1), metavar="N", show_default=default, help=help)


def endpoint_option(command: Any) -> Any:
    """--endpoint URL: which Hub."""
    return option(
        "--endpoint",
        "endpoint",
        metavar="URL",
        show_default="$HF_ENDPOINT, else https://huggingface.co",
        help="Hub URL.",
    )(command)


def load_spec(spec_path: Path) -> Any:
    """The release spec, loaded and checked, with one deprecation line per old key it still uses."""
    from ..spec import model as spec_module

    spec = spec_module.load(spec_path)
    for old, new in spec_module.deprecated_keys(spec.data):
        warn_deprecated(None, old, new)
    return spec


# --- the Hub ---------------------------------------------------------------------------------------------------


def token_option(command: Any) -> Any:
    return option(
        "--token-file",
        metavar="FILE",
        type=path(dir_okay=False),
        show_default="$HF_TOKEN, else your huggingface login",
        help="Read the Hub token from this file (first line).",
    )(command)


def hub_token(token_file: Path | None) -> str | None:
    from ..hub.client import read_token_file

    return read_token_file(token_file) if token_file is not None else None


def target_revision(target: str) -> tuple[str, str]:
    """REPO_ID[@REV] as (repo id, revision): main without an @, and "" (refused later, naming it) for a bare @."""
    repo_id, at, revision = target.partition("@")
    return repo_id, revision if at else "main"
