"""One name per idea (issue 34): the shared options' spellings and metavars, defaults shown by click, the old
spellings kept as hidden aliases that warn once on stderr, --quiet wherever there is progress, and the two caches
side by side wherever they live."""

from __future__ import annotations

import inspect
import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

import click
import pytest

from packager.cli import cli
from tests.clitree import command_tree
from tests.conftest import run_cli
from tests.inprocess import run_packager

EXAMPLE_SPEC = Path(__file__).resolve().parents[1] / "examples" / "release.toml"


def leaves() -> list[tuple[tuple[str, ...], click.Command]]:
    return [(path, command) for path, command in command_tree() if not isinstance(command, click.Group)]


def parse(capsys: pytest.CaptureFixture[str], *words: str) -> tuple[dict[str, Any], list[str]]:
    """The parameters packager's parser makes of `words` (a command path, then its arguments), and the lines it
    printed on stderr while parsing; stdout must stay empty (it may be a --json document)."""
    command: click.Command = cli
    ctx = cli.make_context("packager", [], resilient_parsing=True)
    args = list(words)
    while isinstance(command, click.Group):
        name = args.pop(0)
        found = command.get_command(ctx, name)
        assert found is not None, name
        command = found
    ctx = command.make_context(str(command.name), args, parent=ctx)
    out, err = capsys.readouterr()
    assert out == ""
    return ctx.params, err.splitlines()


def warning(old: str, new: str) -> str:
    return f"packager: warning: {old} is deprecated; use {new}"


@pytest.fixture()
def folders(tmp_path: Path) -> Path:
    for name in ("bundle", "ckpt"):
        (tmp_path / name).mkdir()
    return tmp_path


# --- old spellings: hidden aliases that work and warn once ------------------------------------------------------------

ALIASES = [
    # (words with the old spelling, the same with the new one, the parameter, its value, old, new)
    (
        ("verify", "{d}/bundle", "--source", "{d}/ckpt"),
        ("verify", "{d}/bundle", "--checkpoint", "{d}/ckpt"),
        "checkpoint",
        "{d}/ckpt",
        "--source",
        "--checkpoint",
    ),
    (
        ("verify", "{d}/bundle", "--checkpoint", "{d}/ckpt", "--source-dtype", "float32"),
        ("verify", "{d}/bundle", "--checkpoint", "{d}/ckpt", "--dtype", "float32"),
        "dtype",
        "float32",
        "--source-dtype",
        "--dtype",
    ),
    (
        ("init", "{d}/new", "--from", "{d}/ckpt"),
        ("init", "{d}/new", "--checkpoint", "{d}/ckpt"),
        "checkpoint",
        "{d}/ckpt",
        "--from",
        "--checkpoint",
    ),
    (
        ("validate", "--files", "x.json"),
        ("validate", "--from-files", "x.json"),
        "from_files",
        True,
        "--files",
        "--from-files",
    ),
    (
        ("quant-sweep", "{d}/ckpt", "--json", "{d}/s.json"),
        ("quant-sweep", "{d}/ckpt", "-o", "{d}/s.json"),
        "output",
        "{d}/s.json",
        "--json",
        "--output",
    ),
    (
        ("release", "r.toml", "--summary", "{d}/s.json"),
        ("release", "r.toml", "--output", "{d}/s.json"),
        "output",
        "{d}/s.json",
        "--summary",
        "--output",
    ),
]


def _fill(words: tuple[str, ...], folder: Path) -> list[str]:
    return [w.format(d=folder) for w in words]


def _value(value: Any, folder: Path) -> Any:
    return Path(value.format(d=folder)) if isinstance(value, str) and "{d}" in value else value


@pytest.mark.parametrize(
    ("old_words", "new_words", "name", "value", "old", "new"), ALIASES, ids=[a[4] for a in ALIASES]
)
def test_an_old_spelling_still_works_and_warns_once_on_stderr(
    old_words: tuple[str, ...],
    new_words: tuple[str, ...],
    name: str,
    value: Any,
    old: str,
    new: str,
    folders: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    params, said = parse(capsys, *_fill(old_words, folders))
    assert params[name] == _value(value, folders)
    assert said == [warning(old, new)]
    params, said = parse(capsys, *_fill(new_words, folders))  # the new name: the same value, nothing said
    assert params[name] == _value(value, folders) and said == []


def test_an_old_spelling_is_hidden_from_help() -> None:
    for path, old in (
        ("verify", "--source"),
        ("verify", "--source-dtype"),
        ("init", "--from"),
        ("release", "--summary"),
    ):
        shown = run_packager(path, "--help")
        assert shown.returncode == 0 and old not in shown.stdout.replace(f"{old}-", ""), (path, old)
    assert "--files" not in run_packager("validate", "--help").stdout


def test_an_old_and_a_new_spelling_together_are_a_usage_error(folders: Path) -> None:
    result = run_packager(
        "verify", str(folders / "bundle"), "--source", str(folders / "ckpt"), "--checkpoint", str(folders / "ckpt")
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "--source is the old name of --checkpoint: give --checkpoint once" in result.stderr


def test_validate_files_alias_keeps_json_on_stdout_parseable(tmp_path: Path) -> None:
    notes = tmp_path / "notes.md"
    notes.write_text("in no bundle folder")
    result = run_packager("validate", "--files", "--json", str(notes))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["ok"] is True
    assert [line for line in result.stderr.splitlines() if "deprecated" in line] == [warning("--files", "--from-files")]


def _spec_with(tmp_path: Path, key: str) -> Path:
    """The example spec with a [convert] table naming a checkpoint that does not exist, under `key`."""
    text = EXAMPLE_SPEC.read_text().replace("[convert]\n", f'[convert]\n{key} = "missing/checkpoint"\n', 1)
    spec = tmp_path / "release.toml"
    spec.write_text(text)
    return spec


@pytest.mark.parametrize("key", ["source", "checkpoint"])
def test_release_reads_convert_source_with_a_warning_and_summary_alias_writes_the_file(
    key: str, tmp_path: Path
) -> None:
    """`[convert] source` is still the checkpoint (the release refuses the folder it names), said once; --summary
    still writes the summary; --json's stdout is one JSON document whatever is said on stderr."""
    spec, summary = _spec_with(tmp_path, key), tmp_path / "summary.json"
    env = {**os.environ, "HF_ENDPOINT": "http://127.0.0.1:9"}
    flag = "--summary" if key == "source" else "--output"
    result = run_packager("release", str(spec), "--dry-run", "--json", flag, str(summary), env=env)
    assert result.returncode not in (0, 1, 2), result.stderr
    assert f"[convert] checkpoint {tmp_path / 'missing' / 'checkpoint'} does not exist" in result.stderr
    assert json.loads(result.stdout)["ok"] is False and json.loads(summary.read_text())["ok"] is False
    said = [line for line in result.stderr.splitlines() if "deprecated" in line]
    if key == "source":
        assert said == [warning("--summary", "--output"), warning("[convert] source", "[convert] checkpoint")]
    else:
        assert said == []


def test_check_spec_reports_convert_source_as_a_deprecation_warning(tmp_path: Path) -> None:
    spec = _spec_with(tmp_path, "source")
    result = run_packager("check-spec", str(spec))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[convert] source is deprecated; use [convert] checkpoint" in result.stdout


def test_a_spec_with_both_source_and_checkpoint_is_refused(tmp_path: Path) -> None:
    spec = _spec_with(tmp_path, "source")
    spec.write_text(spec.read_text().replace("[convert]\n", '[convert]\ncheckpoint = "x"\n', 1))
    result = run_packager("check-spec", str(spec))
    assert result.returncode == 17
    assert "convert.source: is the old name of checkpoint: keep checkpoint only" in result.stdout


# --- one spelling and metavar per idea; defaults shown by click -----------------------------------------------------


def test_each_option_has_one_spelling_and_metavar_across_commands() -> None:
    """An option name means one thing: the same names (short and long) and the same metavar wherever it appears."""
    shown: dict[str, set[str]] = defaultdict(set)
    ctx = click.Context(cli)
    for _path, command in leaves():
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden:
                record = param.get_help_record(ctx)
                assert record is not None
                for name in param.opts:
                    shown[name].add(record[0])
    differing = {name: forms for name, forms in shown.items() if len(forms) > 1}
    assert differing == {}


@pytest.mark.parametrize(
    ("name", "form"),
    [
        ("--lora", "--lora ADAPTER"),
        ("--endpoint", "--endpoint URL"),
        ("--threads", "--threads N"),
        ("--spec", "--spec SPEC"),
        ("--checkpoint", "--checkpoint CHECKPOINT"),
        ("--output", "-o, --output FILE"),
        ("--json", "--json"),
        ("--quiet", "-q, --quiet"),
        ("--dtype", "--dtype [stored|float32]"),
    ],
)
def test_the_decided_names_and_metavars(name: str, form: str) -> None:
    ctx = click.Context(cli)
    forms = {
        record[0]
        for _, command in leaves()
        for param in command.params
        if isinstance(param, click.Option) and name in param.opts and (record := param.get_help_record(ctx))
    }
    assert forms == {form}


def test_the_spec_is_spec_everywhere_and_positional_where_it_is_the_main_input() -> None:
    ctx = click.Context(cli)
    for path in (("release",), ("check-spec",)):
        command = cli.get_command(ctx, path[0])
        assert command is not None
        usage = " ".join(command.collect_usage_pieces(ctx))
        assert "SPEC" in usage and "RELEASE_TOML" not in usage, usage
    for _, command in leaves():
        for param in command.params:
            if param.name in ("spec_path", "specs") and isinstance(param, click.Option):
                assert param.opts == ["--spec"] and param.metavar == "SPEC"


def test_no_help_text_types_its_default_by_hand() -> None:
    for path, command in leaves():
        for param in command.params:
            text = getattr(param, "help", None) or ""
            assert "[default" not in text and "default:" not in text, (path, param.name)


def test_threads_zero_is_refused_by_click_everywhere(tmp_path: Path) -> None:
    found = [(path, param) for path, command in leaves() for param in command.params if param.name == "threads"]
    assert {path for path, _ in found} >= {("pair",), ("speculate",), ("quant-sweep",)}
    for _path, param in found:
        with pytest.raises(click.BadParameter):
            param.type.convert("0", param, None)
    result = run_packager("quant-sweep", str(tmp_path), "--threads", "0")
    assert result.returncode == 2 and "Invalid value for '--threads'" in result.stderr
    assert "Traceback" not in result.stderr


def test_every_command_that_reports_progress_has_quiet() -> None:
    """A command whose code reports progress takes -q/--quiet (verify-remote, validate and sign too)."""
    with_progress = []
    for path, command in leaves():
        if "StderrProgress(" in inspect.getsource(command.callback):  # type: ignore[arg-type]
            with_progress.append(path)
            (quiet,) = [p for p in command.params if p.name == "quiet"]
            assert isinstance(quiet, click.Option) and quiet.opts == ["-q", "--quiet"], path
    assert {("verify-remote",), ("validate",), ("sign",), ("convert",), ("pull",), ("upload",)} <= set(with_progress)


# --- item 12: the graph cache and the target cache side by side ------------------------------------------------------


def test_graph_and_target_caches_are_siblings_with_and_without_packager_cache_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from packager.convert.stream import graphcache
    from packager.measure.pair import targetcache

    monkeypatch.delenv("PACKAGER_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert graphcache.root() == tmp_path / "xdg" / "packager" / "graphs"
    assert targetcache.root() == tmp_path / "xdg" / "packager" / "targets"
    monkeypatch.setenv("PACKAGER_CACHE_DIR", str(tmp_path / "mine"))
    assert graphcache.root() == tmp_path / "mine" / "graphs"
    assert targetcache.root() == tmp_path / "mine" / "targets"


def test_graph_entries_left_directly_in_packager_cache_dir_move_into_graphs_and_stay_warm(tmp_path: Path) -> None:
    """A cache an older packager filled ($PACKAGER_CACHE_DIR/<key>) is not lost: its entries move, each with one
    rename, into $PACKAGER_CACHE_DIR/graphs; nothing else in the folder is touched."""
    home = tmp_path / "cache"
    key = "0123456789abcdef0123456789abcdef"
    (home / key).mkdir(parents=True)
    (home / key / "meta.json").write_text(json.dumps({"describe": "an old entry"}))
    (home / key / "llm.mnn").write_bytes(b"graph")
    (home / "targets").mkdir()
    (home / "targets" / "t.json").write_text("{}")
    (home / "notes").mkdir()  # not the cache's: stays
    result = run_packager("cache", "ls", "--json", env={**os.environ, "PACKAGER_CACHE_DIR": str(home)})
    assert result.returncode == 0, result.stderr
    assert [entry["key"] for entry in json.loads(result.stdout)["graphs"]] == [key]
    assert (home / "graphs" / key / "llm.mnn").read_bytes() == b"graph" and not (home / key).exists()
    assert (home / "notes").is_dir() and (home / "targets" / "t.json").is_file()


def test_convert_flags_the_spec_may_set_stay_unset_unless_given(capsys: pytest.CaptureFixture[str]) -> None:
    """Defaults shown by click must not become defaults given by click: the spec's [convert] decides what no flag
    says (--sym/--asym included), so each is None when not given."""
    params, said = parse(capsys, "convert", "ckpt", "--out", "b")
    spec_keys = ("quant_bits", "quant_block", "symmetric", "algorithm", "lm_bits", "lm_block", "engine", "kind")
    assert {key: params[key] for key in spec_keys} == dict.fromkeys(spec_keys) and said == []
    assert parse(capsys, "convert", "ckpt", "--out", "b", "--asym")[0]["symmetric"] is False
