"""`packager init`: a release repository whose spec holds the checkpoint's facts and refuses its TODOs."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from packager.release.init.facts import say_parameters
from packager.spec import model as spec_module
from tests.conftest import run_cli
from tests.inprocess import invoke, one_error_line, run_packager

WRITTEN = (
    "release.toml",
    "Makefile",
    ".pre-commit-config.yaml",
    ".github/workflows/release.yml",
    ".gitlab-ci.yml",
    ".gitignore",
)


@pytest.fixture()
def repo(tiny_checkpoint: Path, lora_adapter: Path, tmp_path: Path) -> Path:
    folder = tmp_path / "draft-release"
    result = run_cli(
        "init",
        str(folder),
        "--checkpoint",
        str(tiny_checkpoint),
        "--lora",
        str(lora_adapter),
        "--repo-id",
        "me/tiny-draft-mnn",
    )
    assert result.returncode == 0, result.stderr
    return folder


def _fill_todos(text: str) -> str:
    """What a person writes where init left TODOs."""
    return re.sub(
        r'"TODO: [^"]*"',
        lambda m: (
            '"Qwen/Qwen3-0.6B"'
            if "Hub id" in m.group()
            else '"apache-2.0"'
            if "license" in m.group()
            else '"a true sentence"'
        ),
        text,
    )


def test_init_writes_every_file_and_states_the_checkpoint_facts(
    repo: Path, tiny_checkpoint: Path, lora_adapter: Path
) -> None:
    assert all((repo / name).is_file() for name in WRITTEN)
    data = tomllib.loads((repo / "release.toml").read_text())
    assert data["release"]["repo_id"] == "me/tiny-draft-mnn"
    assert data["model"]["architecture"] == "Qwen3 (dense, full attention)"
    assert data["model"]["parameters"] == "40M"  # 40,077,056 in the tiny checkpoint, tied table once
    assert (data["training"]["lora_r"], data["training"]["lora_alpha"]) == (16, 32)
    assert (data["convert"]["quant_bits"], data["convert"]["quant_block"]) == (4, 128)
    assert (repo / data["convert"]["checkpoint"]).resolve() == tiny_checkpoint.resolve()
    assert (repo / data["convert"]["lora"]).resolve() == lora_adapter.resolve()


def test_the_spec_refuses_each_todo_by_name_and_passes_once_filled(repo: Path) -> None:
    spec = repo / "release.toml"
    result = run_packager("check-spec", str(spec))
    assert result.returncode == 17
    named = set(re.findall(r"\d+:1: ([a-z_.0-9]+): still the placeholder", result.stdout))
    # The adapter names a local base folder, not a Hub id: base_model is left for the person too.
    # The license is the checkpoint's family's (Qwen3: apache-2.0), no longer a TODO.
    assert named == {
        "release.title",
        "release.summary",
        "model.base_model",
        "training.method",
        "card.runs_on",
        "card.limitations.0",
    }
    spec.write_text(_fill_todos(spec.read_text()))
    assert run_packager("check-spec", str(spec)).returncode == 0
    loaded = spec_module.load(spec)  # what release reads: paths resolve beside the spec
    assert loaded.convert.checkpoint is not None and (loaded.convert.checkpoint / "config.json").is_file()


def test_the_workflows_pass_check_jsonschemas_builtin_schemas(repo: Path) -> None:
    tool = Path(sys.executable).parent / "check-jsonschema"
    for schema, name in (
        ("vendor.github-workflows", ".github/workflows/release.yml"),
        ("vendor.gitlab-ci", ".gitlab-ci.yml"),
    ):
        result = subprocess.run(
            [str(tool), "--builtin-schema", schema, str(repo / name)], capture_output=True, text=True, timeout=120
        )
        assert result.returncode == 0, (name, result.stdout, result.stderr)


def test_the_workflow_releases_on_tags_with_the_secret_and_caches_by_version(repo: Path) -> None:
    import yaml

    flow = yaml.safe_load((repo / ".github/workflows/release.yml").read_text())
    assert flow[True]["push"]["tags"] == ["v*"] and "pull_request" in flow[True]  # YAML reads `on` as True
    plan, release = flow["jobs"]["plan"]["steps"], flow["jobs"]["release"]["steps"]
    runs = " ".join(step.get("run", "") for step in plan)
    assert "check-spec --format github" in runs and "--dry-run" in runs and "validate --format github" in runs
    secret = [s for s in release if "HF_TOKEN" in s.get("env", {})]
    assert len(secret) == 1 and secret[0]["env"]["HF_TOKEN"] == "${{ secrets.HF_TOKEN }}"
    assert not any("HF_TOKEN" in str(step) for step in plan)  # pull requests never see the token
    for steps in (plan, release):
        cache = next(s for s in steps if s.get("uses", "").startswith("actions/cache@"))
        assert cache["with"]["path"] == "~/.cache/packager" and "steps.packager.outputs.version" in cache["with"]["key"]
        assert any(
            s.get("uses", "").startswith("actions/upload-artifact@") and s.get("if") == "always()" for s in steps
        )
    gitlab = yaml.safe_load((repo / ".gitlab-ci.yml").read_text())
    assert gitlab[".packager"]["cache"]["key"] == "packager-$PACKAGER_VERSION"
    assert gitlab["plan"]["artifacts"]["reports"]["junit"] == ["spec-report.xml", "validate-report.xml"]


def test_the_makefile_has_the_release_targets(repo: Path) -> None:
    for target in ("validate", "card", "dry-run", "release", "check"):
        result = subprocess.run(
            ["make", "-n", target, "PACKAGER=packager"], cwd=repo, capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 0, (target, result.stderr)
        assert "packager check-spec release.toml" in result.stdout
    assert (
        "packager release release.toml --out dist/bundle --dry-run --output dist/release-summary.json"
        in subprocess.run(["make", "-n", "dry-run"], cwd=repo, capture_output=True, text=True).stdout
    )


def test_init_never_overwrites_a_file_and_writes_nothing_then(repo: Path, tmp_path: Path) -> None:
    (repo / "Makefile").write_text("mine\n")
    (repo / "release.toml").unlink()
    result = run_packager("init", str(repo))
    assert result.returncode == 60 and result.stderr.count("\n") == 1
    assert "already has Makefile, .pre-commit-config.yaml" in result.stderr and "release.toml" not in result.stderr
    assert (repo / "Makefile").read_text() == "mine\n" and not (repo / "release.toml").exists()


def test_init_refuses_a_folder_inside_the_checkpoint_or_adapter(tiny_checkpoint: Path, lora_adapter: Path) -> None:
    for target in (tiny_checkpoint, tiny_checkpoint / "release", lora_adapter / "x" / ".."):
        result = run_packager("init", str(target), "--checkpoint", str(tiny_checkpoint), "--lora", str(lora_adapter))
        assert result.returncode == 61 and result.stderr.count("\n") == 1, result.stderr
    assert not (tiny_checkpoint / "release").exists() and not (tiny_checkpoint / "Makefile").exists()


def test_init_through_a_link_into_the_checkpoint_is_refused(tiny_checkpoint: Path, tmp_path: Path) -> None:
    (tmp_path / "alias").symlink_to(tiny_checkpoint)
    result = run_packager("init", str(tmp_path / "alias" / "rel"), "--checkpoint", str(tiny_checkpoint))
    assert result.returncode == 61 and not (tiny_checkpoint / "rel").exists()


def test_init_without_a_checkpoint_leaves_its_facts_to_fill(tmp_path: Path) -> None:
    result = run_packager("init", str(tmp_path / "r"))
    assert result.returncode == 0, result.stderr
    data = tomllib.loads((tmp_path / "r" / "release.toml").read_text())
    assert data["convert"]["checkpoint"].startswith("TODO") and "training" not in data
    assert data["release"]["repo_id"].startswith("TODO")


def test_a_hostile_repo_id_is_refused_before_writing(tmp_path: Path) -> None:
    result = run_packager("init", str(tmp_path / "r"), "--repo-id", 'me/x"\n[release]\nrepo_id = "evil/y')
    assert result.returncode == 19 and "--repo-id" in result.stderr and not (tmp_path / "r").exists()


def test_a_hostile_folder_name_still_gives_a_readable_spec(tiny_checkpoint: Path, tmp_path: Path) -> None:
    folder = tmp_path / 'we"ird\\ na\tme'
    result = run_packager("init", str(folder), "--checkpoint", str(tiny_checkpoint))
    assert result.returncode == 0, result.stderr
    data = tomllib.loads((folder / "release.toml").read_text())
    assert (folder / data["convert"]["checkpoint"]).resolve() == tiny_checkpoint.resolve()


def test_files_are_written_with_the_users_umask(tmp_path: Path) -> None:
    assert run_packager("init", str(tmp_path / "r")).returncode == 0
    mode = (tmp_path / "r" / "Makefile").stat().st_mode & 0o777
    old = os.umask(0)
    os.umask(old)
    assert mode == 0o666 & ~old
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == [
        ".github",
        ".gitignore",
        ".gitlab-ci.yml",
        ".pre-commit-config.yaml",
        "Makefile",
        "release.toml",
    ]  # no temporary left


def test_parameters_are_said_as_people_say_them() -> None:
    assert [say_parameters(n) for n in (596_049_920, 1_720_574_976, 4_022_468_096, 40_077_056)] == [
        "0.6B",
        "1.7B",
        "4B",
        "40M",
    ]


def test_convert_takes_the_checkpoint_from_the_spec_when_none_is_given(tmp_path: Path) -> None:
    spec = tmp_path / "release.toml"
    spec.write_text('[convert]\ncheckpoint = "models/missing-draft"\n')
    result = run_packager("convert", "--spec", str(spec), "--out", str(tmp_path / "b"))
    assert result.returncode == 10 and str(tmp_path / "models" / "missing-draft") in result.stderr
    assert run_packager("convert", "--out", str(tmp_path / "b")).returncode == 2


def test_a_file_that_appears_while_writing_is_kept_and_the_rest_undone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from packager.errors import InitFileExists
    from packager.release.init import scaffold

    folder = tmp_path / "r"
    real_publish = scaffold._publish

    def another_init_wins(path: Path, text: str) -> None:  # the other run writes its Makefile first
        if path.name == "Makefile":
            path.write_text("theirs\n")
        real_publish(path, text)

    monkeypatch.setattr(scaffold, "_publish", another_init_wins)
    with pytest.raises(InitFileExists, match="Makefile appeared while packager init was writing"):
        scaffold.init(scaffold.InitRequest(folder=folder))
    assert [p.name for p in folder.iterdir()] == ["Makefile"] and (folder / "Makefile").read_text() == "theirs\n"


# What CI may install packager by: its git URL pinned to a full commit id, or a wheel inside the checkout.
_OWNED = re.compile(r"^mnn-packager\[convert\] @ git\+\S+://\S+@[0-9a-f]{40}$|^\./\S*mnn_packager-\S+\.whl\[convert\]$")
_INSTALL = re.compile(r"\b(?:pip3?|pipx|uv pip|easy_install)\s+install\b([^\n;&|]*)")


def _installs(folder: Path) -> list[tuple[str, str]]:
    """(file, requirement) for every package install any file init wrote asks for, $VARIABLES resolved from the
    file's own env/variables blocks."""
    import yaml

    found = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        text = path.read_text()
        data = yaml.safe_load(text) if path.suffix in (".yml", ".yaml") else None
        variables = {**(data.get("env") or {}), **(data.get("variables") or {})} if isinstance(data, dict) else {}
        for match in _INSTALL.finditer(text):
            for word in match.group(1).split():
                word = word.strip("\"'")
                if word.startswith("-"):
                    continue
                value = variables.get(word.lstrip("$").strip("{}"), word) if word.startswith("$") else word
                found.append((str(path.relative_to(folder)), str(value)))
        for hook_repo in (data or {}).get("repos", []) if path.name == ".pre-commit-config.yaml" else []:
            for hook in hook_repo.get("hooks", []):
                found += [(path.name, dep) for dep in hook.get("additional_dependencies", [])]
    return found


@pytest.mark.parametrize("source", [None, "git", "wheel"])
def test_the_ci_files_install_packager_only_from_an_exact_source(source: str | None, tmp_path: Path) -> None:
    folder = tmp_path / "r"
    args = []
    if source == "git":
        args = ["--packager-source", "git+https://example.invalid/team/packager@" + "0123456789abcdef" * 2 + "01234567"]
    elif source == "wheel":
        (folder / "wheels").mkdir(parents=True)
        (folder / "wheels" / "mnn_packager-0.1.0-py3-none-any.whl").write_bytes(b"PK")
        args = ["--packager-source", str(folder / "wheels" / "mnn_packager-0.1.0-py3-none-any.whl")]
    result = run_packager("init", str(folder), *args)
    assert result.returncode == 0, result.stderr
    installs = _installs(folder)
    assert {name for name, _ in installs} == {".github/workflows/release.yml", ".gitlab-ci.yml"}
    for name, requirement in installs:
        if source is None:  # unknown: a TODO the job stops on before pip runs, never a guess
            assert requirement.startswith("TODO"), (name, requirement)
            assert 'case "$PACKAGER_REQUIREMENT" in TODO*)' in (folder / name).read_text()
        else:
            assert _OWNED.match(requirement), (name, requirement)
    if source is None:
        assert "left for you in the CI files: PACKAGER_REQUIREMENT" in result.stdout


def test_packager_installed_from_git_pins_ci_and_hooks_to_that_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from packager.release.init import scaffold

    commit = "fe" * 20
    monkeypatch.setattr(scaffold, "installed_from", lambda: ("https://example.invalid/team/packager", commit))
    scaffold.init(scaffold.InitRequest(folder=tmp_path / "r"))
    for _, requirement in _installs(tmp_path / "r"):
        assert requirement == f"mnn-packager[convert] @ git+https://example.invalid/team/packager@{commit}"
    import yaml

    hooks = yaml.safe_load((tmp_path / "r" / ".pre-commit-config.yaml").read_text())["repos"][0]
    assert (hooks["repo"], hooks["rev"]) == ("https://example.invalid/team/packager", commit)


@pytest.mark.parametrize(
    ("source", "says"),
    [
        ("packager", "neither git+URL@COMMIT nor a .whl file"),
        ("packager[convert]==0.1.0", "neither git+URL@COMMIT nor a .whl file"),
        ("git+https://example.invalid/packager@main", "not pinned to a full commit id"),
        ("git+https://example.invalid/packager@v0.1.0", "not pinned to a full commit id"),
        ("git+https://example.invalid/packager", "not pinned to a full commit id"),
        ("git+https://example.invalid/p@" + "a" * 40 + " evil", "holds spaces or control characters"),
        ("/elsewhere/mnn_packager-0.1.0-py3-none-any.whl", "is not inside"),
        ("packager-0.2.0.whl", "is not a wheel of mnn-packager"),
        ("git+https://example.invalid/p#@" + "a" * 40, "holds #, ?, %, $, ` or credentials"),
        ("git+https://u:p@example.invalid/p@" + "a" * 40, "holds #, ?, %, $, ` or credentials"),
        ("git+https://${{github.token}}.example.invalid/p@" + "a" * 40, "holds #, ?, %, $, ` or credentials"),
    ],
)
def test_an_install_source_anyone_could_move_is_refused_before_writing(source: str, says: str, tmp_path: Path) -> None:
    result = run_packager("init", str(tmp_path / "r"), "--packager-source", source)
    assert result.returncode == 19 and result.stderr.count("\n") == 1, result.stderr
    assert says in result.stderr and not (tmp_path / "r").exists()


def test_hook_repo_without_a_commit_is_refused(tmp_path: Path) -> None:
    result = run_packager("init", str(tmp_path / "r"), "--hook-repo", "https://example.invalid/packager")
    assert result.returncode == 19 and "--hook-repo needs --hook-rev" in result.stderr
    assert not (tmp_path / "r").exists()


COMMIT = "0123456789abcdef" * 2 + "01234567"


@pytest.mark.parametrize(
    ("source", "says"),
    [
        ("git+file:///tmp/packager@" + COMMIT, "is not an https:// URL"),
        ("git+http://example.com/team/packager@" + COMMIT, "is not an https:// URL"),
        ("git+ssh://git@example.com/team/packager@" + COMMIT, "is not an https:// URL"),
        ("git+svn://example.com/team/packager@" + COMMIT, "is not an https:// URL"),
        ("git+https:///team/packager@" + COMMIT, "names no host"),
        ("git+https://localhost:0/team/packager@" + COMMIT, "not one from 1 to 65535"),
        ("git+https://localhost/team/packager@" + COMMIT, "not a host name"),
        ("git+https://127.0.0.1/team/packager@" + COMMIT, "an address CI cannot reach"),
        ('git+https://example.com/team/pack"ager@' + COMMIT, "not plain /OWNER/NAME segments"),
        ("git+https://example.com/team/pack'ager@" + COMMIT, "not plain /OWNER/NAME segments"),
        ("git+https://example.com/team/[packager]@" + COMMIT, "not plain /OWNER/NAME segments"),
        ("git+https://example.com/team\\packager@" + COMMIT, "not plain /OWNER/NAME segments"),
        ("git+https://example.com/team/../packager@" + COMMIT, "not plain /OWNER/NAME segments"),
        ("git+https://example.com@" + COMMIT, "not plain /OWNER/NAME segments"),
    ],
)
def test_a_packager_source_ci_cannot_install_from_is_refused_before_writing(
    source: str, says: str, tmp_path: Path
) -> None:
    from packager.errors import InvalidOption
    from packager.release.init import scaffold

    with pytest.raises(InvalidOption, match=re.escape(says)):
        scaffold.init(scaffold.InitRequest(folder=tmp_path / "r", packager_source=source))
    assert not (tmp_path / "r").exists()


def test_a_commit_id_in_upper_case_is_taken_and_written_in_lower_case(tmp_path: Path) -> None:
    from packager.release.init import scaffold

    result = scaffold.init(
        scaffold.InitRequest(
            folder=tmp_path / "r",
            packager_source="git+https://git.example.com:8443/team/packager.git@" + COMMIT.upper(),
            hook_repo="https://git.example.com/team/packager",
            hook_rev=COMMIT.upper(),
        )
    )
    assert result.ci_source == f"mnn-packager[convert] @ git+https://git.example.com:8443/team/packager.git@{COMMIT}"
    assert f'rev: "{COMMIT}"' in (tmp_path / "r" / ".pre-commit-config.yaml").read_text()


@pytest.mark.parametrize(
    ("repo", "rev", "says"),
    [
        ("https://example.com/team/packager", "main", "--hook-rev 'main' is not a full commit id"),
        ("https://example.com/team/packager", "HEAD", "--hook-rev 'HEAD' is not a full commit id"),
        ("file:///tmp/x", COMMIT, "--hook-repo file:///tmp/x is not an https:// URL"),
        ("local", COMMIT, "--hook-repo local is not an https:// URL"),
        ("https://github.com/x/y$(id)", COMMIT, "holds #, ?, %, $, ` or credentials"),
        ("https://localhost:0/x/y", COMMIT, "not one from 1 to 65535"),
        (None, COMMIT, "--hook-rev needs --hook-repo"),
        ("https://example.com/team/packager", None, "--hook-repo needs --hook-rev"),
    ],
)
def test_hooks_are_pinned_by_the_rules_of_packager_source(
    repo: str | None, rev: str | None, says: str, tmp_path: Path
) -> None:
    from packager.errors import InvalidOption
    from packager.release.init import scaffold

    with pytest.raises(InvalidOption, match=re.escape(says)):
        scaffold.init(scaffold.InitRequest(folder=tmp_path / "r", hook_repo=repo, hook_rev=rev))
    assert not (tmp_path / "r").exists()


def test_an_install_of_packager_ci_cannot_reach_pins_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from packager.release.init import scaffold

    monkeypatch.setattr(scaffold, "installed_from", lambda: ("file:///home/me/packager", COMMIT))
    result = scaffold.init(scaffold.InitRequest(folder=tmp_path / "r"))
    assert result.ci_source is None and "repo: local" in (tmp_path / "r" / ".pre-commit-config.yaml").read_text()


def test_no_file_suggests_a_tag_that_does_not_exist(tmp_path: Path) -> None:
    assert run_packager("init", str(tmp_path / "r")).returncode == 0
    for path in (tmp_path / "r").rglob("*"):
        if path.is_file():
            assert not re.search(r"rev: v\d", path.read_text()), path


@pytest.mark.parametrize("name", ["n1\nall:\n\techo PWNED", "x\nPACKAGER = true\n#", "y\u2028z: 1\x85w\\"])
def test_a_folder_name_with_line_breaks_adds_no_line_of_code(name: str, tmp_path: Path) -> None:
    import yaml

    assert run_packager("init", str(tmp_path / "plain")).returncode == 0
    folder = tmp_path / name
    result = run_packager("init", str(folder))
    assert result.returncode == 0, result.stderr
    # A make of its own, not a sub-make of `make test` (which would print the folder's name on entering it).
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    dry = subprocess.run(["make", "-n", "check"], cwd=folder, capture_output=True, text=True, timeout=60, env=env)
    assert dry.returncode == 0 and dry.stdout.strip() == "packager check-spec release.toml", dry.stdout + dry.stderr
    assert "PWNED" not in subprocess.run(["make", "-n"], cwd=folder, capture_output=True, text=True, env=env).stdout
    assert (
        tomllib.loads((folder / "release.toml").read_text()).keys()
        == tomllib.loads((tmp_path / "plain" / "release.toml").read_text()).keys()
    )
    for name_ in (".github/workflows/release.yml", ".gitlab-ci.yml", ".pre-commit-config.yaml"):
        assert yaml.safe_load((folder / name_).read_text()) == yaml.safe_load((tmp_path / "plain" / name_).read_text())
    first = (folder / "Makefile").read_text().splitlines()[0]
    assert first.startswith("# Release targets of ") and ("\\n" in first or "\\u2028" in first)


def test_a_folder_name_that_is_not_utf8_is_written_as_its_bytes_escaped(tmp_path: Path) -> None:
    folder = tmp_path / os.fsdecode(b"draft-\xff")  # b'\xff' as the OS hands it to Python (surrogateescape)
    result = invoke("init", str(folder))
    assert result.exit_code == 0, result.stderr + repr(result.exception)
    assert f"wrote {tmp_path}/draft-\\xff/release.toml" in result.stdout
    spec = (folder / "release.toml").read_text(encoding="utf-8")
    assert spec.splitlines()[0].startswith("# Release spec of draft-\\xff, written by packager init")
    assert tomllib.loads(spec)["release"]


def test_a_checkpoint_path_that_is_not_utf8_is_refused_before_anything_is_read_or_written(tmp_path: Path) -> None:
    checkpoint = tmp_path / os.fsdecode(b"ckpt-\xfe")
    checkpoint.mkdir()
    result = invoke("init", str(tmp_path / "repo"), "--checkpoint", str(checkpoint))
    assert result.exit_code == 19, result.stderr
    assert "is not UTF-8 text, which release.toml (TOML) cannot hold" in one_error_line(result)
    assert "ckpt-\\xfe" in result.stderr and not (tmp_path / "repo").exists()


def test_local_hooks_run_once_per_commit_and_the_built_bundle_stays_out_of_git(tmp_path: Path) -> None:
    import yaml

    folder = tmp_path / "r"
    assert run_packager("init", str(folder)).returncode == 0
    hooks = yaml.safe_load((folder / ".pre-commit-config.yaml").read_text())["repos"][0]["hooks"]
    assert [hook["require_serial"] for hook in hooks] == [True, True]
    subprocess.run(["git", "init", "-q"], cwd=folder, check=True)
    (folder / "dist" / "bundle").mkdir(parents=True)
    (folder / "dist" / "bundle" / "llm.mnn.weight").write_bytes(b"w")
    ignored = subprocess.run(["git", "check-ignore", "-q", "dist/bundle/llm.mnn.weight"], cwd=folder)
    assert ignored.returncode == 0
    assert subprocess.run(["git", "check-ignore", "-q", "release.toml"], cwd=folder).returncode == 1


def test_a_gitignore_of_the_users_is_kept_as_it_was(tmp_path: Path) -> None:
    folder = tmp_path / "r"
    folder.mkdir()
    (folder / ".gitignore").write_text("mine\n")
    result = run_packager("init", str(folder))
    assert result.returncode == 0, result.stderr
    assert (folder / ".gitignore").read_text() == "mine\n"
    assert "kept" in result.stdout and "add /dist/ to it" in result.stdout


def test_init_on_a_file_says_to_name_a_folder(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    result = run_packager("init", str(tmp_path / "afile"))
    assert result.returncode == 61 and result.stderr.count("\n") == 1
    assert "is a file, not a folder" in result.stderr and "checkpoint" not in result.stderr


# --- init's spec for a family whose defaults are not Qwen3's (issue 39, row 18) ------------------------------------


def _smollm2_135m(folder: Path) -> Any:
    """SmolLM2-135M-Instruct as inspect_checkpoint describes it (its family record and real shape; no weights)."""
    from packager.convert.inspect.checkpoint import CheckpointInfo, ModelShape
    from packager.families import BY_NAME

    shape = ModelShape(576, 30, 9, 3, 64, 1536, 49152)
    return CheckpointInfo(folder, "llama", BY_NAME["smollm2"], shape, "bfloat16", (), {"w": (1, 1)}, (2, 0), 49152)


def test_init_writes_the_recipe_convert_takes_for_the_checkpoints_family(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from packager.convert.pipeline import ConvertRequest, quant_recipe
    from packager.release.init import facts, scaffold

    info = _smollm2_135m(tmp_path / "smol")
    monkeypatch.setattr(facts, "inspect_checkpoint", lambda path: info)
    scaffold.init(scaffold.InitRequest(folder=tmp_path / "r", checkpoint=tmp_path / "smol"))
    text = (tmp_path / "r" / "release.toml").read_text()
    data = tomllib.loads(text)
    assert (data["convert"]["quant_bits"], data["convert"]["quant_block"]) == (8, 64)
    spec = spec_module.from_dict(data)
    recipe = quant_recipe(ConvertRequest(checkpoint=info.path, out=tmp_path / "b", spec=spec), info)
    assert (recipe.bits, recipe.block) == (8, 64)
    # teacher is optional (no TODO), the example repo id is the family's, and signing keys stay out of git
    assert "teacher" not in data["model"] and "your-name/SmolLM2-135M-Instruct-draft-MNN" in data["release"]["repo_id"]
    assert not [line for line in text.splitlines() if "Qwen" in line and not line.startswith("#")]
    ignored = (tmp_path / "r" / ".gitignore").read_text().splitlines()
    assert "*.pem" in ignored and "signing_key*" in ignored


def test_a_block_from_the_spec_is_refused_by_its_key_with_the_checkpoints_own_default(tmp_path: Path) -> None:
    from packager.convert.pipeline import ConvertRequest, quant_recipe
    from packager.errors import InvalidOption, SpecError

    info = _smollm2_135m(tmp_path / "smol")
    spec = spec_module.from_dict({"convert": {"quant_block": 128}}, tmp_path / "release.toml")
    with pytest.raises(SpecError) as refused:
        quant_recipe(ConvertRequest(checkpoint=info.path, out=tmp_path / "b", spec=spec), info)
    line = refused.value.one_line()
    assert "[convert] quant_block 128 does not divide the input size 576" in line and "--quant-block" not in line
    assert "64, the default for this SmolLM2 checkpoint" in line and "Qwen3" not in line
    with pytest.raises(InvalidOption, match="^--quant-block 128 does not divide") as flagged:
        quant_recipe(ConvertRequest(checkpoint=info.path, out=tmp_path / "b", quant_block=128), info)
    assert "SmolLM2" in flagged.value.one_line()
    spec = spec_module.from_dict({"convert": {"quant_bits": 3}}, tmp_path / "release.toml")
    with pytest.raises(SpecError, match=r"\[convert\] quant_bits 3 is not supported"):
        quant_recipe(ConvertRequest(checkpoint=info.path, out=tmp_path / "b", spec=spec), info)


def test_convert_help_says_the_checkpoint_decides_the_default_block_and_bits() -> None:
    from click.testing import CliRunner

    from packager.cli import cli

    result = CliRunner().invoke(cli, ["convert", "--help"], terminal_width=400)
    assert result.exit_code == 0
    block = next(line for line in result.output.splitlines() if "--quant-block N" in line)
    assert "[default: 128]" not in block and "the largest of 64 and 32 that divides" in block
    bits = next(line for line in result.output.splitlines() if "--quant-bits BITS" in line)
    assert "8 for SmolLM2" in bits
