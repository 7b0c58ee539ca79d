"""`packager init`: a release repository whose spec holds the checkpoint's facts and refuses its TODOs."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from packager import spec as spec_module
from packager.init.facts import say_parameters
from tests.conftest import run_cli

WRITTEN = ("release.toml", "Makefile", ".pre-commit-config.yaml", ".github/workflows/release.yml", ".gitlab-ci.yml")


@pytest.fixture()
def repo(tiny_checkpoint: Path, lora_adapter: Path, tmp_path: Path) -> Path:
    folder = tmp_path / "draft-release"
    result = run_cli("init", str(folder), "--from", str(tiny_checkpoint), "--lora", str(lora_adapter),
                     "--repo-id", "me/tiny-draft-mnn")
    assert result.returncode == 0, result.stderr
    return folder


def _fill_todos(text: str) -> str:
    """What a person writes where init left TODOs."""
    return re.sub(r'"TODO: [^"]*"', lambda m: '"Qwen/Qwen3-0.6B"' if "Hub id" in m.group() else
                  '"apache-2.0"' if "license" in m.group() else '"a true sentence"', text)


def test_init_writes_every_file_and_states_the_checkpoint_facts(repo: Path, tiny_checkpoint: Path,
                                                                lora_adapter: Path) -> None:
    assert all((repo / name).is_file() for name in WRITTEN)
    data = tomllib.loads((repo / "release.toml").read_text())
    assert data["release"]["repo_id"] == "me/tiny-draft-mnn"
    assert data["model"]["architecture"] == "Qwen3 (dense, full attention)"
    assert data["model"]["parameters"] == "40M"  # 40,077,056 in the tiny checkpoint, tied table once
    assert (data["training"]["lora_r"], data["training"]["lora_alpha"]) == (16, 32)
    assert (data["convert"]["quant_bits"], data["convert"]["quant_block"]) == (4, 128)
    assert (repo / data["convert"]["source"]).resolve() == tiny_checkpoint.resolve()
    assert (repo / data["convert"]["lora"]).resolve() == lora_adapter.resolve()


def test_the_spec_refuses_each_todo_by_name_and_passes_once_filled(repo: Path) -> None:
    spec = repo / "release.toml"
    result = run_cli("check-spec", str(spec))
    assert result.returncode == 17
    named = set(re.findall(r"\d+:1: ([a-z_.0-9]+): still the placeholder", result.stdout))
    # The adapter names a local base folder, not a Hub id: base_model is left for the person too.
    assert named == {"release.title", "release.license", "release.summary", "model.base_model", "model.teacher",
                     "training.method", "card.runs_on", "card.limitations.0"}
    spec.write_text(_fill_todos(spec.read_text()))
    assert run_cli("check-spec", str(spec)).returncode == 0
    loaded = spec_module.load(spec)  # what release reads: paths resolve beside the spec
    assert loaded.convert.source is not None and (loaded.convert.source / "config.json").is_file()


def test_the_workflows_pass_check_jsonschemas_builtin_schemas(repo: Path) -> None:
    tool = Path(sys.executable).parent / "check-jsonschema"
    for schema, name in (("vendor.github-workflows", ".github/workflows/release.yml"),
                         ("vendor.gitlab-ci", ".gitlab-ci.yml")):
        result = subprocess.run([str(tool), "--builtin-schema", schema, str(repo / name)], capture_output=True,
                                text=True, timeout=120)
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
        assert any(s.get("uses", "").startswith("actions/upload-artifact@") and s.get("if") == "always()" for s in steps)
    gitlab = yaml.safe_load((repo / ".gitlab-ci.yml").read_text())
    assert gitlab[".packager"]["cache"]["key"] == "packager-$PACKAGER_VERSION"
    assert gitlab["plan"]["artifacts"]["reports"]["junit"] == ["spec-report.xml", "validate-report.xml"]


def test_the_makefile_has_the_release_targets(repo: Path) -> None:
    for target in ("validate", "card", "dry-run", "release", "check"):
        result = subprocess.run(["make", "-n", target, "PACKAGER=packager"], cwd=repo, capture_output=True,
                                text=True, timeout=60)
        assert result.returncode == 0, (target, result.stderr)
        assert "packager check-spec release.toml" in result.stdout
    assert "packager release release.toml --out dist/bundle --dry-run --summary dist/release-summary.json" in \
        subprocess.run(["make", "-n", "dry-run"], cwd=repo, capture_output=True, text=True).stdout


def test_init_never_overwrites_a_file_and_writes_nothing_then(repo: Path, tmp_path: Path) -> None:
    (repo / "Makefile").write_text("mine\n")
    (repo / "release.toml").unlink()
    result = run_cli("init", str(repo))
    assert result.returncode == 60 and result.stderr.count("\n") == 1
    assert "already has Makefile, .pre-commit-config.yaml" in result.stderr and "release.toml" not in result.stderr
    assert (repo / "Makefile").read_text() == "mine\n" and not (repo / "release.toml").exists()


def test_init_refuses_a_folder_inside_the_checkpoint_or_adapter(tiny_checkpoint: Path, lora_adapter: Path) -> None:
    for target in (tiny_checkpoint, tiny_checkpoint / "release", lora_adapter / "x" / ".."):
        result = run_cli("init", str(target), "--from", str(tiny_checkpoint), "--lora", str(lora_adapter))
        assert result.returncode == 61 and result.stderr.count("\n") == 1, result.stderr
    assert not (tiny_checkpoint / "release").exists() and not (tiny_checkpoint / "Makefile").exists()


def test_init_through_a_link_into_the_checkpoint_is_refused(tiny_checkpoint: Path, tmp_path: Path) -> None:
    (tmp_path / "alias").symlink_to(tiny_checkpoint)
    result = run_cli("init", str(tmp_path / "alias" / "rel"), "--from", str(tiny_checkpoint))
    assert result.returncode == 61 and not (tiny_checkpoint / "rel").exists()


def test_init_without_a_checkpoint_leaves_its_facts_to_fill(tmp_path: Path) -> None:
    result = run_cli("init", str(tmp_path / "r"))
    assert result.returncode == 0, result.stderr
    data = tomllib.loads((tmp_path / "r" / "release.toml").read_text())
    assert data["convert"]["source"].startswith("TODO") and "training" not in data
    assert data["release"]["repo_id"].startswith("TODO")


def test_a_hostile_repo_id_is_refused_before_writing(tmp_path: Path) -> None:
    result = run_cli("init", str(tmp_path / "r"), "--repo-id", 'me/x"\n[release]\nrepo_id = "evil/y')
    assert result.returncode == 19 and "--repo-id" in result.stderr and not (tmp_path / "r").exists()


def test_a_hostile_folder_name_still_gives_a_readable_spec(tiny_checkpoint: Path, tmp_path: Path) -> None:
    folder = tmp_path / 'we"ird\\ na\tme'
    result = run_cli("init", str(folder), "--from", str(tiny_checkpoint))
    assert result.returncode == 0, result.stderr
    data = tomllib.loads((folder / "release.toml").read_text())
    assert (folder / data["convert"]["source"]).resolve() == tiny_checkpoint.resolve()


def test_files_are_written_with_the_users_umask(tmp_path: Path) -> None:
    assert run_cli("init", str(tmp_path / "r")).returncode == 0
    mode = (tmp_path / "r" / "Makefile").stat().st_mode & 0o777
    old = os.umask(0)
    os.umask(old)
    assert mode == 0o666 & ~old
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == [".github", ".gitlab-ci.yml",
                                                                  ".pre-commit-config.yaml", "Makefile",
                                                                  "release.toml"]  # no temporary left


def test_parameters_are_said_as_people_say_them() -> None:
    assert [say_parameters(n) for n in (596_049_920, 1_720_574_976, 4_022_468_096, 40_077_056)] == \
        ["0.6B", "1.7B", "4B", "40M"]


def test_convert_takes_the_checkpoint_from_the_spec_when_none_is_given(tmp_path: Path) -> None:
    spec = tmp_path / "release.toml"
    spec.write_text('[convert]\nsource = "models/missing-draft"\n')
    result = run_cli("convert", "--spec", str(spec), "--out", str(tmp_path / "b"))
    assert result.returncode == 10 and str(tmp_path / "models" / "missing-draft") in result.stderr
    assert run_cli("convert", "--out", str(tmp_path / "b")).returncode == 2


def test_a_file_that_appears_while_writing_is_kept_and_the_rest_undone(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from packager.errors import InitFileExists
    from packager.init import scaffold

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
