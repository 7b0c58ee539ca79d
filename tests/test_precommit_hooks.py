"""The pre-commit hooks, run by the real pre-commit (`pre-commit run`, the hook repo named at its commit) in a
publisher's git repo, on base dependencies."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from packager.convert.pipeline import ConvertResult
from tests.conftest import run_cli
from tests.inprocess import run_packager

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "release.toml"
# What `pip install .` of the hook repo needs: the package, its data and the hook manifest.
INSTALLABLE = ("pyproject.toml", "README.md", ".pre-commit-hooks.yaml", "packager", "schemas", "templates")
HEAVY = ("torch", "transformers", "MNN", "peft", "safetensors", "tokenizers", "llmexport", "onnx", "onnxruntime")


def _git(cwd: Path, *args: str) -> None:
    env = {
        **os.environ,
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
    }
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, timeout=120)


@pytest.fixture(scope="module")
def hook_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This project as a publisher's `repo:` sees it: a git repo of the working tree's installable files (the
    working tree, not HEAD, so uncommitted changes are what is tested)."""
    repo = tmp_path_factory.mktemp("hooks") / "packager"
    repo.mkdir()
    for name in INSTALLABLE:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, repo / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, repo / name)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "snapshot")
    return repo


@pytest.fixture()
def publisher(bundle4: ConvertResult, tmp_path: Path) -> Path:
    """A publisher's repo: a good bundle and spec, a broken bundle and spec, and a file in no bundle."""
    repo = tmp_path / "publisher"
    shutil.copytree(bundle4.out, repo / "dist" / "good")
    shutil.copytree(bundle4.out, repo / "dist" / "broken")
    config = json.loads((repo / "dist" / "broken" / "config_cpu.json").read_text())
    config["thread_num"] = "2"
    (repo / "dist" / "broken" / "config_cpu.json").write_text(json.dumps(config))
    shutil.copy(EXAMPLE, repo / "release.toml")
    (repo / "old").mkdir()
    (repo / "old" / "release.toml").write_text(
        EXAMPLE.read_text().replace('license = "apache-2.0"', 'license = "TODO: the license"')
    )
    (repo / "notes.md").write_text("not part of any bundle\n")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    return repo


@pytest.fixture(scope="module")
def hook_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """pre-commit's own store (PRE_COMMIT_HOME) for this module: the hooks' environment (pip install of the hook
    repo, about 20 s) is made by the first run and reused by the others, as on a publisher's machine."""
    return tmp_path_factory.mktemp("pre-commit-home")


def _run_hooks(
    hook_repo: Path, store: Path, publisher: Path, *files: str, verbose: bool = False
) -> subprocess.CompletedProcess[str]:
    """`pre-commit run` in the publisher's repo with a config naming the hook repo at its commit, every hook."""
    tool = Path(sys.executable).parent / "pre-commit"
    rev = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=hook_repo, capture_output=True, text=True, check=True
    ).stdout.strip()
    config = publisher.parent / f"{publisher.name}-pre-commit-config.yaml"  # outside the repo: not its own file
    config.write_text(
        f"repos:\n- repo: {hook_repo}\n  rev: {rev}\n  hooks:\n  - id: packager-validate\n  - id: packager-check-spec\n"
    )
    selection = ["--files", *files] if files else ["--all-files"]
    selection += ["--verbose"] if verbose else []  # a passing hook's output too
    env = {
        **os.environ,
        "PRE_COMMIT_HOME": str(store),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PIP_NO_COMPILE": "1",
        "NO_COLOR": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
    }
    env.pop("PYTHONPATH", None)  # the hooks run packager from their own environment, nothing from here
    return subprocess.run(
        [str(tool), "run", "--config", str(config), *selection, "--color", "never"],
        cwd=publisher,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_the_hooks_pass_a_good_bundle_and_spec(hook_repo: Path, hook_store: Path, publisher: Path) -> None:
    good = sorted(str(p.relative_to(publisher)) for p in (publisher / "dist" / "good").iterdir())
    result = _run_hooks(hook_repo, hook_store, publisher, *good, "release.toml", "notes.md")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "packager validate" in result.stdout and "packager check-spec" in result.stdout
    assert result.stdout.count("Passed") == 2


def test_the_hooks_fail_a_broken_bundle_and_spec_naming_each(
    hook_repo: Path, hook_store: Path, publisher: Path
) -> None:
    result = _run_hooks(hook_repo, hook_store, publisher)
    assert result.returncode == 1, result.stdout + result.stderr
    out = result.stdout
    assert "ERROR   config_cpu.json /thread_num: '2' is not of type 'integer'" in out
    assert "dist/broken: FAILED (3 errors" in out and "dist/good: ok (0 errors, 0 warnings; a draft bundle)" in out
    assert "ERROR   old/release.toml:9:1: release.license: still the placeholder" in out
    assert "release.toml: ok (0 errors" in out
    assert "Traceback" not in out + result.stderr


def test_the_hooks_note_the_eagle_engine_check_they_skip_on_base_dependencies(
    hook_repo: Path, hook_store: Path, eagle_bundle: ConvertResult, tmp_path: Path
) -> None:
    repo = tmp_path / "publisher"
    shutil.copytree(eagle_bundle.out, repo / "dist" / "eagle")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    result = _run_hooks(hook_repo, hook_store, repo, verbose=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "NOTE    eagle.mnn: the engine check was skipped: MNN is not installed here" in result.stdout
    assert "dist/eagle: ok (0 errors, 0 warnings; a target+eagle bundle)" in result.stdout
    assert "ERROR" not in result.stdout and "Traceback" not in result.stdout + result.stderr


NO_MNN = "import sys; sys.modules['MNN'] = None; from packager.cli import main; sys.argv[0] = 'packager'; main()"


@pytest.mark.parametrize(
    "fmt, line",
    [
        ("text", "NOTE    eagle.mnn: the engine check was skipped: MNN is not installed here"),
        ("github", "::notice file="),
    ],
)
def test_validate_without_mnn_notes_the_skipped_head_check_and_passes_strict(
    eagle_bundle: ConvertResult, fmt: str, line: str
) -> None:
    result = subprocess.run(
        [sys.executable, "-c", NO_MNN, "validate", str(eagle_bundle.out), "--strict", "--format", fmt],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert any(row.startswith(line) for row in result.stdout.splitlines()), result.stdout
    data = json.loads(
        subprocess.run(
            [sys.executable, "-c", NO_MNN, "validate", str(eagle_bundle.out), "--json"],
            capture_output=True,
            text=True,
            timeout=300,
        ).stdout
    )
    assert (data["ok"], data["errors"], data["warnings"]) == (True, 0, 0)
    assert [f["severity"] for f in data["findings"]] == ["note"]
    with_mnn = run_cli("validate", str(eagle_bundle.out), "--json")
    assert json.loads(with_mnn.stdout)["findings"] == []  # where MNN is installed the head is run, nothing noted


def test_the_hook_code_paths_import_neither_torch_nor_mnn(
    bundle4: ConvertResult, tiny_checkpoint: Path, lora_adapter: Path, tmp_path: Path
) -> None:
    runs = [
        ["validate", "--from-files", "--format", "junit", str(bundle4.out / "config.json"), str(tmp_path / "x")],
        ["validate", str(bundle4.out), "--format", "github"],
        ["check-spec", str(EXAMPLE), "--format", "json"],
        ["init", str(tmp_path / "r"), "--checkpoint", str(tiny_checkpoint), "--lora", str(lora_adapter)],
    ]
    code = f"""
import sys
class Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {HEAVY!r}:
            raise ImportError("blocked: " + name)
sys.meta_path.insert(0, Blocked())
from packager.cli import cli
codes = []
for args in {runs!r}:
    codes.append(cli(args, standalone_mode=False))
print(codes, sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY!r}))
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[None, None, None, None] []"


def test_validate_files_skips_what_belongs_to_no_bundle(bundle4: ConvertResult, tmp_path: Path) -> None:
    (tmp_path / "notes.md").write_text("")
    result = run_cli("validate", "--from-files", str(tmp_path / "notes.md"), str(EXAMPLE))
    assert result.returncode == 0 and result.stdout.splitlines() == [
        "skipped 2 file(s) that belong to no bundle folder",
        "nothing to check: no bundle folder among the files given",
    ]


def test_validate_files_checks_each_bundle_once_whatever_the_alias(bundle4: ConvertResult, tmp_path: Path) -> None:
    (tmp_path / "alias").symlink_to(bundle4.out)
    files = [
        bundle4.out / "config.json",
        bundle4.out / "llm.mnn",
        bundle4.out / ".." / bundle4.out.name / "README.md",
        tmp_path / "alias" / "tokenizer.txt",
    ]
    data = json.loads(run_cli("validate", "--from-files", "--json", *map(str, files)).stdout)
    assert [c["path"] for c in data["checked"]] == [str(bundle4.out)] and data["ok"] is True


def test_a_bundle_folder_gone_since_the_commit_is_a_finding(tmp_path: Path) -> None:
    gone = tmp_path / "dist" / "gone"
    result = run_packager(
        "validate", "--from-files", "--format", "github", str(gone / "llm.mnn"), str(gone / "config.json")
    )
    assert result.returncode == 30 and "Traceback" not in result.stderr
    assert (
        result.stdout.splitlines()[0] == f"::error file={gone},title=packager%3A bundle folder::bundle folder "
        f"{gone} does not exist"
    )
