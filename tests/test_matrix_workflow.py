"""A release matrix on GitHub Actions: the workflow `init --matrix` writes, parsed with a YAML parser (a plan job, job
matrices chunked past GitHub's 256, the graph cache under its own key, one gather job; the token only where it is
needed), its plan step run here, and `release --gather` making one result of the jobs'
summaries. No conversion."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from packager.errors import MATRIX_JOBS_FAILED
from packager.spec import matrix as matrix_spec_module
from packager.spec import plan as planning
from tests.inprocess import invoke
from tests.specs import matrix_spec

COMMIT = "a" * 40
SOURCE = f"git+https://github.com/example/packager@{COMMIT}"
KINDS = ("draft", "target")


def _workflow(tmp_path: Path) -> dict[str, Any]:
    result = invoke("init", str(tmp_path / "repo"), "--matrix", "--packager-source", SOURCE)
    assert result.exit_code == 0, result.stderr
    flow = yaml.safe_load((tmp_path / "repo" / ".github" / "workflows" / "release.yml").read_text(encoding="utf-8"))
    assert isinstance(flow, dict)
    return flow


def test_init_matrix_writes_a_plan_job_chunked_job_matrices_and_one_gather_job(tmp_path: Path) -> None:
    flow = _workflow(tmp_path)
    jobs = flow["jobs"]
    chunks = [f"release-{k}" for k in range(4)]
    assert list(jobs) == ["plan", *chunks, "gather"]
    assert flow["env"]["PACKAGER_REQUIREMENT"] == f"mnn-packager[convert] @ {SOURCE}"
    assert flow["permissions"] == {"contents": "read"}
    for k, name in enumerate(chunks):
        job = jobs[name]
        assert job["needs"] == "plan" and f"fromJSON(needs.plan.outputs.chunks), {k})" in job["if"]
        assert job["strategy"] == {"fail-fast": False, "matrix": f"${{{{ fromJSON(needs.plan.outputs.chunk{k}) }}}}"}
        cache = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/cache"))
        assert cache["with"]["key"].startswith("packager-graphs-") and cache["with"]["path"].endswith("/graphs")
        release = next(s for s in job["steps"] if s.get("name", "").startswith("Release"))
        assert '--job "${{ matrix.job }}"' in release["run"]
    assert jobs["gather"]["needs"] == ["plan", *chunks] and "always()" in jobs["gather"]["if"]
    gather = next(s for s in jobs["gather"]["steps"] if s.get("name", "").startswith("Gather"))
    assert "--gather dist/summaries" in gather["run"] and "GITHUB_STEP_SUMMARY" in gather["run"]
    with_token = sorted(
        name for name, job in jobs.items() for step in job["steps"] if "secrets.HF_TOKEN" in json.dumps(step)
    )
    assert with_token == ["gather", *chunks]  # the plan job never holds the write token


def test_a_matrix_past_256_jobs_is_planned_in_chunks_of_256(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    recipes = tuple((f"r{n}", 8, 0) for n in range(20))
    spec = matrix_spec(tmp_path, checkpoints={f"c{n}": tmp_path / "a" for n in range(13)}, recipes=recipes)
    matrix = matrix_spec_module.load(spec)
    assert len(matrix.jobs) == 260 and planning.chunks(matrix) == [0, 1]
    sizes = [len(planning.github(matrix, k)["include"]) for k in range(3)]
    assert sizes == [256, 4, 0]
    assert planning.github(matrix, 1)["include"][-1]["job"] == "c12-r19"


def test_the_workflows_plan_step_runs_here(tmp_path: Path) -> None:
    flow = _workflow(tmp_path)
    step = next(s for s in flow["jobs"]["plan"]["steps"] if s.get("id") == "plan")
    folder = tmp_path / "repo"
    (folder / "a").mkdir()
    spec = matrix_spec(  # the shape: 2 checkpoints x 2 recipes x 2 kinds
        folder,
        checkpoints={f"c{n}": folder / "a" for n in range(2)},
        kinds=("draft", "target"),
        repo_id="me/tiny-{checkpoint}-{recipe}-{kind}-mnn",
    )
    assert spec == folder / "release.toml"
    shims = tmp_path / "bin"
    shims.mkdir()
    (shims / "packager").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m packager.cli "$@"\n', encoding="utf-8")
    (shims / "packager").chmod(0o755)
    output, summary = tmp_path / "github-output", tmp_path / "step-summary"
    root = str(Path(__file__).resolve().parents[1])
    env = {
        **os.environ,
        **{k: str(v) for k, v in flow["env"].items()},
        "CHUNK_SIZE": "3",  # as the workflow's 256 does past 256 jobs (the test above), on 8 jobs
        "PATH": f"{shims}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]),
        "GITHUB_OUTPUT": str(output),
        "GITHUB_STEP_SUMMARY": str(summary),
    }
    ran = subprocess.run(["bash", "-e", "-c", step["run"]], cwd=folder, env=env, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
    outputs = dict(line.split("=", 1) for line in output.read_text(encoding="utf-8").splitlines())
    assert json.loads(outputs["chunks"]) == [0, 1, 2]
    sizes = [len(json.loads(outputs[f"chunk{k}"])["include"]) for k in range(4)]
    assert sizes == [3, 3, 2, 0]
    included = [row for k in range(3) for row in json.loads(outputs[f"chunk{k}"])["include"]]
    assert [row["job"] for row in included] == [f"c{c}-{r}-{k}" for c in "01" for r in ("q4", "q8") for k in KINDS]
    assert included[1] == {
        "checkpoint": "c0", "recipe": "q4", "kind": "target", "job": "c0-q4-target",
        "repo_id": "me/tiny-c0-q4-target-mnn", "tag": "v1",
    }  # fmt: skip
    assert "8 jobs" in summary.read_text(encoding="utf-8")


def test_gather_makes_one_result_of_the_jobs_summaries(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    spec = matrix_spec(tmp_path, checkpoints={"a": tmp_path / "a"})
    artifacts = tmp_path / "summaries"
    row = {"job": "a-q4", "status": "released", "repo_id": "me/tiny-a-q4-mnn", "tag": "v1", "commit": "c0ffee" * 6}
    row |= {"size": 1000, "fidelity": {"top1_agreement": 0.95}, "acceptance": None, "error": None, "exit_code": 0}
    (artifacts / "matrix-summary-a-q4").mkdir(parents=True)
    (artifacts / "matrix-summary-a-q4" / "summary.json").write_text(json.dumps({"jobs": [row]}), encoding="utf-8")
    out = tmp_path / "gathered"
    result = invoke("release", str(spec), "--gather", str(artifacts), "--out", str(out))
    assert result.exit_code == MATRIX_JOBS_FAILED  # a-q8 left no summary
    assert "a-q8: no summary of it under" in result.stderr
    data = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert [(j["job"], j["status"]) for j in data["jobs"]] == [("a-q4", "released"), ("a-q8", "failed")]
    assert "| a-q4 | me/tiny-a-q4-mnn@v1 (c0ffeec0ffee) | 1.0 KB | top-1 0.950 | - | released |" in result.stdout
    assert not (out / "journal.jsonl").exists()  # gathering runs no job
