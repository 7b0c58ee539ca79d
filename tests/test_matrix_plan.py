"""A matrix release spec: its expansion into plain per-bundle specs, `plan` (a table, and the JSON GitHub's fromJSON
takes), and `check-spec` on a matrix (every expansion checked, one line per problem, exit 62). No conversion."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from packager.errors import MATRIX_INVALID, SPEC_ERROR, MatrixInvalid
from packager.spec import matrix as matrix_spec
from packager.spec import plan as planning
from packager.spec.model import ReleaseSpec
from tests.inprocess import invoke, one_error_line
from tests.specs import matrix_spec as write_matrix

KINDS = (
    "",
    "[[matrix.axes.kind]]",
    'name = "draft"',
    "",
    "[[matrix.axes.kind]]",
    'name = "target"',
    'convert = { kind = "target" }',
)


def _spec(tmp_path: Path, **kwargs: object) -> Path:
    (tmp_path / "a").mkdir(exist_ok=True)
    (tmp_path / "b").mkdir(exist_ok=True)
    kwargs.setdefault("checkpoints", {"a": tmp_path / "a", "b": tmp_path / "b"})
    return write_matrix(tmp_path, **kwargs)  # type: ignore[arg-type]


def _with(path: Path, *lines: str) -> Path:
    path.write_text(path.read_text(encoding="utf-8") + "\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_a_matrix_expands_to_plain_specs_in_axis_order_with_stable_ids(tmp_path: Path) -> None:
    spec = _with(_spec(tmp_path, repo_id="me/{checkpoint}-{recipe}-{kind}"), *KINDS)
    matrix = matrix_spec.load(spec)
    ids = [job.id for job in matrix.jobs]
    assert ids == [f"{c}-{r}-{k}" for c in "ab" for r in ("q4", "q8") for k in ("draft", "target")]
    assert matrix_spec.load(spec).jobs == matrix.jobs  # the same spec, the same jobs
    job = matrix.job("b-q8-target")
    assert isinstance(job.spec, ReleaseSpec) and job.axes == (("checkpoint", "b"), ("recipe", "q8"), ("kind", "target"))
    assert job.spec.convert.checkpoint == tmp_path / "b" and job.spec.convert.quant_bits == 8
    assert job.spec.convert.kind == "target" and matrix.job("b-q8-draft").spec.convert.kind is None
    release = job.release
    assert (release.repo_id, release.title, release.version) == ("me/b-q8-target", "Tiny b draft (q8)", "v1")
    assert "matrix" not in job.spec.data and job.spec.card is not None  # a plain spec, the base's tables kept
    assert {j.group for j in matrix.jobs} == {str(tmp_path / "a"), str(tmp_path / "b")}


def test_excludes_leave_out_the_combinations_they_match(tmp_path: Path) -> None:
    spec = _spec(tmp_path, lines=())
    _with(spec, "", "[[matrix.exclude]]", 'checkpoint = "b"', 'recipe = "q8"')
    matrix = matrix_spec.load(spec)
    assert [j.id for j in matrix.jobs] == ["a-q4", "a-q8", "b-q4"] and matrix.excluded == 1


def test_plan_prints_a_table_and_the_json_github_takes(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    shown = invoke("plan", str(spec))
    assert shown.exit_code == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].split() == ["job", "builds", "checkpoint", "publishes", "to"]
    assert lines[1].split()[:1] == ["a-q4"] and "me/tiny-a-q4-mnn@main tag v1" in lines[1]
    assert "4-bit block 128" in lines[1] and lines[-1] == "4 jobs"
    data = invoke("plan", str(spec), "--json")
    assert len(data.stdout.strip().splitlines()) == 1  # one line: it goes into $GITHUB_OUTPUT as it is
    matrix = json.loads(data.stdout)
    assert list(matrix) == ["include"]  # anything beside include would be one more axis to GitHub
    assert matrix["include"][3] == {
        "checkpoint": "b",
        "recipe": "q8",
        "job": "b-q8",
        "repo_id": "me/tiny-b-q8-mnn",
        "tag": "v1",
    }


def test_plan_chunks_a_matrix_past_what_one_github_matrix_holds(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    assert json.loads(invoke("plan", str(spec), "--chunks", "--chunk-size", "3").stdout) == [0, 1]
    second = json.loads(invoke("plan", str(spec), "--json", "--chunk", "1", "--chunk-size", "3").stdout)
    assert [row["job"] for row in second["include"]] == ["b-q8"]
    matrix = matrix_spec.load(spec)
    assert planning.chunks(matrix, 256) == [0]


@pytest.mark.parametrize(
    ("lines", "said"),
    [
        (('title = "x"',), "matrix.title"),  # a key given twice is TOML's problem: said as such
        (("",), None),
    ],
)
def test_a_spec_that_is_no_toml_is_one_line(tmp_path: Path, lines: tuple[str, ...], said: str | None) -> None:
    spec = _spec(tmp_path, lines=lines)
    result = invoke("plan", str(spec))
    if said is None:
        assert result.exit_code == 0
    else:
        assert result.exit_code == SPEC_ERROR and "is not valid TOML" in one_error_line(result)


CASES = [
    ("me/{checkpoint}-{recipe}-{kind}", (), "matrix.repo_id: {kind} names no axis (the axes: checkpoint, recipe)"),
    ("me/{checkpoint-{recipe}", (), "has an unmatched { or }"),
    ("me/{checkpoint}", (), "jobs a-q4, a-q8 all publish to me/a@main: one repo per job"),
    ("me/tiny-{checkpoint}-{recipe}", ("", "[[matrix.exclude]]", 'recipe = "q9"'), "'q9' is no value of the axis"),
    ("me/tiny-{checkpoint}-{recipe}", ("", "[[matrix.exclude]]", 'kind = "x"'), "is no axis of the matrix"),
    (
        "me/tiny-{checkpoint}-{recipe}",
        ("", "[[matrix.exclude]]", 'recipe = "q4"', "", "[[matrix.exclude]]", 'recipe = "q8"'),
        "leaves out every combination",
    ),
    ("me/tiny-{checkpoint}-{recipe}", ("", "[[matrix.axes.recipe]]", 'name = "q4"'), "names the value 'q4' twice"),
    (
        "me/tiny-{checkpoint}-{recipe}",
        ("", "[[matrix.axes.recipe]]", 'name = "q3"', "convert = { quant_bits = 3 }"),
        "convert.quant_bits: 3 is not one of [4, 8] (in jobs a-q3, b-q3)",
    ),
    ("me/tiny-{checkpoint}-{recipe}", ("", "[[matrix.axes.recipe]]", 'name = "q 3"'), "is no value name"),
    ("me/tiny-{checkpoint}-{recipe}", ("", "[[matrix.axes.Recipe]]", 'name = "q3"'), "is no axis name"),
    (
        "me/tiny-{checkpoint}-{recipe}",
        ("", "[[matrix.axes.recipe]]", 'name = "q3"', "lora = { x = 1 }"),
        "'lora' is not one of",
    ),
    ("me/ti ny-{checkpoint}-{recipe}", (), "release.repo_id: 'me/ti ny-a-q4'"),
]


@pytest.mark.parametrize(("repo_id", "lines", "said"), CASES)
def test_a_broken_matrix_is_one_line_and_its_own_exit_code(
    tmp_path: Path, repo_id: str, lines: tuple[str, ...], said: str
) -> None:
    spec = _with(_spec(tmp_path, repo_id=repo_id), *lines)
    with pytest.raises(MatrixInvalid, match=None) as raised:
        matrix_spec.load(spec)
    assert said in raised.value.message
    result = invoke("plan", str(spec))
    assert result.exit_code == MATRIX_INVALID and said in one_error_line(result)
    checked = invoke("check-spec", str(spec))
    assert checked.exit_code == MATRIX_INVALID and said in checked.stdout
    assert "Traceback" not in checked.stdout + checked.stderr


def test_check_spec_says_each_problem_once_with_its_line_and_which_jobs_it_is_in(tmp_path: Path) -> None:
    spec = _spec(tmp_path, repo_id="me/{checkpoint}-{recipe}-{kind}")
    spec.write_text(spec.read_text(encoding="utf-8").replace("({recipe})", "({recip})"), encoding="utf-8")
    assert invoke("check-spec", str(spec), "--json").exit_code == MATRIX_INVALID
    errors = [line for line in invoke("check-spec", str(spec)).stdout.splitlines() if line.startswith("ERROR")]
    assert len(errors) == 2, errors
    assert ":18:1: matrix.repo_id: {kind} names no axis" in errors[0] and "{recip} names no axis" in errors[1]
    (tmp_path / "a").rmdir()
    fixed = _spec(tmp_path)
    (tmp_path / "a").rmdir()
    shown = invoke("check-spec", str(fixed)).stdout
    assert "does not exist (relative to the spec)" in shown and "(in jobs a-q4, a-q8)" in shown
    assert invoke("check-spec", str(fixed)).exit_code == 0  # a checkpoint a CI step fetches is a warning


def test_a_single_bundle_command_refuses_a_matrix_in_one_line(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    card = invoke("card", str(tmp_path), "--spec", str(spec))
    assert card.exit_code == SPEC_ERROR and "is a matrix ([matrix])" in one_error_line(card)


def test_the_example_matrix_plans_its_four_jobs_and_passes_check_spec() -> None:
    example = Path(__file__).resolve().parents[1] / "examples" / "matrix.toml"
    matrix = matrix_spec.load(example)
    assert [job.id for job in matrix.jobs] == ["q8-draft", "q8-target", "q8b128-draft", "q8b128-target"]
    assert len({job.repo_id for job in matrix.jobs}) == 4 and matrix.jobs[0].release.collection == "Tiny demo drafts"
    checked = invoke("check-spec", str(example))
    assert checked.exit_code == 0 and "ERROR" not in checked.stdout  # the checkpoint the demo builds: a warning
