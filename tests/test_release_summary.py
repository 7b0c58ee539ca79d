"""`release --dry-run` changes nothing on the Hub; the summary (--json, -o/--output FILE) is a stable CI artifact."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from packager import resources
from tests.localhub import LocalHub, hub, ready
from tests.localhub import upload as _upload

pytestmark = pytest.mark.hub

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "release.toml"
REPO = "your-name/Qwen3-0.6B-KL-draft-MNN"


def _valid(data: dict) -> dict:  # type: ignore[type-arg]
    Draft202012Validator(resources.schema("release_summary")).validate(data)
    return data


def test_dry_run_plans_every_file_and_creates_nothing(hub: LocalHub, ready: Path, tmp_path: Path) -> None:
    summary_file = tmp_path / "out" / "summary.json"
    result = hub.cli(
        "release",
        str(EXAMPLE),
        "--bundle",
        str(ready),
        "--dry-run",
        "--json",
        "--quiet",
        "--output",
        str(summary_file),
    )
    assert result.returncode == 0, result.stderr
    data = _valid(json.loads(result.stdout))
    assert json.loads(summary_file.read_text()) == data
    assert data["dry_run"] is True and data["commit"] is None and data["exit_code"] == 0
    assert data["stages"][-1]["name"] == "upload plan (dry run)"
    assert {r["action"] for r in data["plan"]} == {"add"} and len(data["plan"]) == 12
    assert data["bytes_to_send"] == sum(r["size"] for r in data["plan"]) and data["endpoint"] == hub.url
    assert hub.cli("verify-remote", REPO).returncode == 43  # no repo was created
    assert hub.stats()["commits_received"] == 0


def test_dry_run_of_a_released_bundle_plans_no_change(hub: LocalHub, ready: Path) -> None:
    assert hub.cli("release", str(EXAMPLE), "--bundle", str(ready), "--quiet").returncode == 0
    again = hub.cli("release", str(EXAMPLE), "--bundle", str(ready), "--dry-run", "--quiet")
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[-1] == f"dry run of {REPO}@v3: nothing changed on {hub.url}"
    assert "unchanged llm.mnn.weight" in again.stdout


def test_summary_of_a_real_release_has_the_commit(hub: LocalHub, ready: Path, tmp_path: Path) -> None:
    summary_file = tmp_path / "summary.json"
    result = hub.cli("release", str(EXAMPLE), "--bundle", str(ready), "--quiet", "--output", str(summary_file))
    assert result.returncode == 0, result.stderr
    data = _valid(json.loads(summary_file.read_text()))
    assert data["ok"] is True and data["tag"] == "v3" and data["version"] == "v3" and len(data["commit"]) == 40
    assert {r["action"] for r in data["plan"]} == {"add"}


def test_summary_of_a_failed_release_names_the_stage_and_exit_code(hub: LocalHub, ready: Path, tmp_path: Path) -> None:
    assert _upload(hub, ready, REPO, "--tag", "v3").returncode == 0
    (ready / "llm.mnn.weight").write_bytes((ready / "llm.mnn.weight").read_bytes()[:-4])  # fails validation
    summary_file = tmp_path / "summary.json"
    result = hub.cli("release", str(EXAMPLE), "--bundle", str(ready), "--quiet", "--output", str(summary_file))
    data = _valid(json.loads(summary_file.read_text()))
    assert result.returncode == data["exit_code"] == 22 and data["ok"] is False
    assert data["stages"][-1] == {**data["stages"][-1], "name": "validate", "ok": False}
    assert data["error"] and data["plan"] == [] and data["commit"] is None


def test_summary_of_a_refused_spec_is_written_too(hub: LocalHub, tmp_path: Path) -> None:
    spec = tmp_path / "release.toml"
    spec.write_text(EXAMPLE.read_text().replace('version = "v3"', 'version = "TODO: v1"'))
    summary_file = tmp_path / "summary.json"
    result = hub.cli("release", str(spec), "--bundle", str(tmp_path), "--output", str(summary_file))
    data = _valid(json.loads(summary_file.read_text()))
    assert result.returncode == data["exit_code"] == 17 and "release.version: still the placeholder" in data["error"]
    assert data["stages"] == [] and data["repo_id"] is None


def test_an_unwritable_summary_is_refused_before_any_work(hub: LocalHub, ready: Path, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    result = hub.cli("release", str(EXAMPLE), "--bundle", str(ready), "--output", str(tmp_path / "file" / "s.json"))
    assert result.returncode == 25 and "--output cannot be written" in result.stderr
    assert hub.cli("verify-remote", REPO).returncode == 43
