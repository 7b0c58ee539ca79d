"""The documentation cannot drift from the code: every command and exit code is on the built site, every
`packager ...` line of README.md and docs/ parses with the real click tree, every page is in the index's toctree,
the README stays a front door (<= 150 lines, make demo / make test first) and its quick start really releases."""

from __future__ import annotations

import html
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from packager import errors
from packager.cli import cli
from tests.errorcodes import OTHER_CODES, REPORT_CODES, every_error

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"

# Pages whose command lines are a record of what was run then, kept verbatim.
HISTORY = {DOCS / "benchmarks" / "history.md"}


# --- the built site -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`make docs`'s build (warnings are errors, nitpicky), into a temporary folder: about 5 s."""
    pytest.importorskip("sphinx")
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    build = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-n", "-q", "-E", "-b", "html"]
        + ["-d", str(out / "doctrees"), str(DOCS), str(out / "html")],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert build.returncode == 0, build.stderr
    return out / "html"


def _commands(group: click.Group, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is None or command.hidden:
            continue
        yield (*path, name)
        if isinstance(command, click.Group):
            yield from _commands(command, (*path, name))


def test_every_command_and_subcommand_is_in_the_generated_cli_reference(site: Path) -> None:
    page = (site / "reference" / "cli.html").read_text(encoding="utf-8")
    paths = list(_commands(cli))
    assert len(paths) >= 20 and ("hub", "serve") in paths and ("cache", "clear") in paths
    missing = [" ".join(p) for p in paths if f'id="packager-{"-".join(p)}"' not in page]
    assert missing == []


def test_every_option_of_every_command_is_in_the_cli_reference(site: Path) -> None:
    page = html.unescape(re.sub(r"<[^>]+>", "", (site / "reference" / "cli.html").read_text(encoding="utf-8")))
    ctx = click.Context(cli)
    missing = []
    for path in _commands(cli):
        command: click.Command = cli
        for name in path:
            command = command.get_command(ctx, name)  # type: ignore[attr-defined]
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden:
                missing += [f"{' '.join(path)} {opt}" for opt in param.opts if opt not in page]
    assert missing == []


def test_every_exit_code_in_errors_py_is_on_the_exit_code_page(site: Path) -> None:
    page = (site / "reference" / "exit-codes.html").read_text(encoding="utf-8")
    shown = {int(code) for code in re.findall(r'<td><p><code class="[^"]*"><span class="pre">(\d+)</span>', page)}
    codes = {cls.exit_code for cls in every_error()} | REPORT_CODES | OTHER_CODES
    assert sorted(codes - shown) == []
    assert sorted(shown - codes) == []
    for cls in every_error():  # each class is named on the page, with its own docstring
        assert f'<span class="pre">{cls.__name__}</span>' in page, cls.__name__
    assert errors.VerifyFailed.exit_code == errors.VERIFY_FAILED


def test_every_release_spec_table_is_on_the_release_spec_page(site: Path) -> None:
    import json

    schema = json.loads((ROOT / "schemas" / "release.schema.json").read_text(encoding="utf-8"))
    page = html.unescape(re.sub(r"<[^>]+>", "", (site / "reference" / "release-spec.html").read_text(encoding="utf-8")))
    for table, body in schema["properties"].items():
        assert f"[{table}]" in page, table
        for key in body.get("properties") or body.get("items", {}).get("properties") or {}:
            assert key in page, f"{table}.{key}"


# --- the toctree ----------------------------------------------------------------------------------------------------


def _toctree_entries(page: Path) -> list[Path]:
    text = page.read_text(encoding="utf-8")
    entries = []
    for block in re.findall(r"```\{toctree\}\n(.*?)```", text, flags=re.S):
        for line in block.splitlines():
            line = line.strip()
            if line and not line.startswith(":"):
                entries.append((page.parent / f"{line}.md").resolve())
    return entries


def test_every_docs_page_is_reachable_from_the_index_toctree() -> None:
    reached, todo = set(), [DOCS / "index.md"]
    while todo:
        page = todo.pop()
        if page in reached:
            continue
        reached.add(page)
        todo += _toctree_entries(page)
    pages = {p.resolve() for p in DOCS.rglob("*.md") if "_build" not in p.parts}
    assert sorted(str(p.relative_to(DOCS)) for p in pages - reached) == []
    assert sorted(str(p) for p in reached - pages) == []  # every entry is a page that exists


# --- the README -----------------------------------------------------------------------------------------------------


def test_readme_is_a_front_door_of_at_most_150_lines_that_starts_with_make_demo_and_make_test() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 150
    assert lines[0].startswith("# ")
    first_block = lines[lines.index("```sh") + 1 : lines.index("```")]
    assert [line.split()[:2] for line in first_block] == [["make", "demo"], ["make", "test"]]
    assert not any(line.strip() and not line.startswith("#") for line in lines[1 : lines.index("```sh")])


def test_every_link_of_the_readme_and_bench_results_leads_to_a_file_that_exists() -> None:
    for page in (README, ROOT / "bench" / "RESULTS.md"):
        targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8"))
        local = [t for t in targets if "://" not in t]
        assert local, page
        assert [t for t in local if not (page.parent / t).exists()] == []


# --- every `packager ...` line parses -------------------------------------------------------------------------------

SHELL_WORDS = re.compile(r"^(\$ )?((?:[A-Z_][A-Z0-9_]*=\S* )*)packager( |$)")


def command_lines(path: Path) -> list[tuple[int, str]]:
    """The `packager ...` lines of a file's fenced code blocks (sh, bash, console or none), synopsis continuation
    lines (indented, starting with `[`, `(` or `-`) joined to their command."""
    found: list[tuple[int, str]] = []
    fence, shell = "", False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith(("```", "~~~")):
            if not fence:
                fence, info = stripped[:3], stripped[3:].strip()
                shell = info in ("", "sh", "bash", "console", "shell")
            elif stripped == fence:
                fence = ""
            continue
        if not fence or not shell:
            continue
        if SHELL_WORDS.match(stripped):
            found.append((number, stripped[2:] if stripped.startswith("$ ") else stripped))
        elif found and found[-1][0] >= number - 10 and line[:1] == " " and stripped[:1] in "[(-":
            start, text = found[-1]
            found[-1] = (start, f"{text} {stripped}")
    return found


def words_of(line: str) -> list[str]:
    """A documented command line as the words a shell would pass: comments, redirections and pipes dropped, and a
    synopsis read as one example: brackets removed, the first of `a|b` taken, `...` dropped."""
    words: list[str] = []
    depth = 0
    lexer = shlex.shlex(line, posix=True, punctuation_chars="&;<>")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    for word in lexer:
        if word in ("&", "&&", ";", ">", ">>", "<") or (word == "|" and depth == 0):
            break
        opening = word.count("[") + word.count("(")
        closing = word.count("]") + word.count(")")
        inner = re.sub(r"[\[\]()]", "", word)
        depth += opening - closing
        if inner in ("", "|", "..."):
            continue
        words.append(inner.split("|")[0] if "|" in inner and not inner.startswith("-") else inner)
    return words[words.index("packager") + 1 :]  # after any VAR=value words before it


def resolve(words: list[str]) -> tuple[tuple[str, ...], click.Command, list[str]]:
    """The (sub)command the words name, and the words left for it; global options (--debug) skipped."""
    command: click.Command = cli
    path: tuple[str, ...] = ()
    while isinstance(command, click.Group):
        while words and words[0].startswith("-"):
            words = words[1:]
        assert words, f"no command after packager {' '.join(path)}"
        sub = command.get_command(click.Context(command), words[0])
        assert sub is not None, f"packager {' '.join(path)} has no command {words[0]!r}"
        command, path, words = sub, (*path, words[0]), words[1:]
    return path, command, words


def _cases() -> list[object]:
    files = [README, *sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.parts and p not in HISTORY)]
    cases = []
    for path in files:
        for number, line in command_lines(path):
            cases.append(pytest.param(line, id=f"{path.relative_to(ROOT)}:{number}"))
    return cases


def test_the_docs_have_command_lines_to_check() -> None:
    assert len(_cases()) >= 30


def parse(command: click.Command, path: tuple[str, ...], words: list[str]) -> list[str]:
    """click's own parser of the command over the words: an unknown option, or one without its value, raises; values
    are not converted (an example names placeholders, not real files). Returns the words no parameter took."""
    ctx = click.Context(command, info_name=" ".join(["packager", *path]))
    _, left, _ = command.make_parser(ctx).parse_args(args=list(words))
    return left


@pytest.mark.parametrize("line", _cases())
def test_every_documented_packager_command_line_parses_with_the_real_click_tree(line: str) -> None:
    path, command, words = resolve(words_of(line))
    assert parse(command, path, words) == []
    # An old spelling still parses (a hidden alias) but the docs name only the current one.
    old = {name for param in command.params for name in getattr(param, "old", ())}
    assert sorted(w.split("=")[0] for w in words if w.split("=")[0] in old) == []


def test_a_synopsis_is_read_as_one_example() -> None:
    line = "packager pull REPO_ID[@REV] DIR [--files app|all] (--public-key KEY.pub | --identity ID) > out.json  # x"
    expected = ["pull", "REPO_ID@REV", "DIR", "--files", "app", "--public-key", "KEY.pub", "--identity", "ID"]
    assert words_of(line) == expected


def test_an_option_that_does_not_exist_is_refused() -> None:
    path, command, words = resolve(words_of("packager convert CHECKPOINT --out DIR --no-such-option"))
    with pytest.raises(click.NoSuchOption):
        parse(command, path, words)
    path, command, words = resolve(words_of("packager checksum BUNDLE EXTRA"))
    assert parse(command, path, words) == ["EXTRA"]


# --- the quick start ------------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.converter
@pytest.mark.hub
def test_the_readme_quick_start_releases_a_bundle_to_a_local_hub_and_pulls_it_back(
    tiny_checkpoint: Path,
    tmp_path: Path,
) -> None:
    text = README.read_text(encoding="utf-8")
    block = text.split("<!-- quick start -->\n```sh\n", 1)[1].split("```\n<!-- /quick start -->", 1)[0]
    port = str(_free_port())
    script = ["set -euo pipefail"]
    for line in block.splitlines():
        line = line.replace("8765", port)
        if re.match(r"packager hub serve .* &", line):
            # The README's line started as a coprocess, so the script reads the served URL instead of guessing when.
            serve = line.split("&")[0]
            line = "\n".join(
                [
                    # exec: $HUB_PID is the server itself, so the trap stops it (it stopped only a shell before)
                    f"coproc HUB {{ exec {serve} 2>&1; }}",
                    'read -r served <&"${HUB[0]}"; echo "$served"',
                    'cat <&"${HUB[0]}" > hub.log &',
                    "trap 'kill $HUB_PID' EXIT",
                ]
            )
        script.append(line)
    (tmp_path / "quickstart.sh").write_text("\n".join(script) + "\n")
    (tmp_path / "bin").mkdir()
    wrapper = tmp_path / "bin" / "packager"
    wrapper.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m packager.cli "$@"\n')
    wrapper.chmod(0o755)
    (tmp_path / "my-draft").symlink_to(tiny_checkpoint)
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    guard = tmp_path / "netguard.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(
        PATH=f"{tmp_path / 'bin'}{os.pathsep}{env['PATH']}",
        PYTHONPATH=os.pathsep.join([str(ROOT / "tests" / "netguard"), str(ROOT)]),
        PACKAGER_NETGUARD_LOG=str(guard),
        HF_HOME=str(tmp_path / "hf-home"),
    )
    assert shutil.which("openssl"), "the quick start makes its token with openssl"
    run = subprocess.run(["bash", "quickstart.sh"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "bundle: ok (0 errors, 0 warnings; a draft bundle)" in run.stdout
    assert f"serving http://127.0.0.1:{port}" in run.stdout
    assert "dry run of your-name/Qwen3-0.6B-KL-draft-MNN@v3: nothing changed" in run.stdout
    assert "released your-name/Qwen3-0.6B-KL-draft-MNN@v3" in run.stdout
    assert re.search(r"your-name/Qwen3-0\.6B-KL-draft-MNN@[0-9a-f]{40}: all 11 files match", run.stdout)
    assert "pulled 8 files of your-name/Qwen3-0.6B-KL-draft-MNN@" in run.stdout
    assert sorted(p.name for p in (tmp_path / "app-copy").iterdir()) == sorted(
        ["config.json", "config_cpu.json", "draft_config_cpu.json", "llm.mnn", "llm.mnn.weight", "llm_config.json"]
        + ["tokenizer.txt", "checksums.xxh128"]  # the manifest's lines of the seven: xxhsum -c checks the copy
    )
    assert not guard.exists() or guard.read_text() == ""  # nothing left 127.0.0.1
