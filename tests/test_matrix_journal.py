"""A matrix run's logic without converting: the journal replayed (torn lines, other fingerprints, the last outcome),
one run at a time, the jobs grouped by the graph they build, the summary (JSON, Markdown, the collection's notes)
and release's refusals of what a matrix cannot take."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from packager.errors import INVALID_OPTION, MatrixBusy
from packager.release.matrix import gather
from packager.release.matrix.jobs import JobOutcome, MatrixResult
from packager.release.matrix.journal import Journal, fingerprint, parse, replay
from packager.release.matrix.run import default_folder, graph_group, schedule
from packager.spec import matrix as matrix_spec
from tests.inprocess import invoke, one_error_line
from tests.specs import card_spec
from tests.specs import matrix_spec as write_matrix

VARIANTS = ("", "[[matrix.axes.variant]]", 'name = "a"', "", "[[matrix.axes.variant]]", 'name = "b"',
            'card = { intended_use = "Another use." }')  # fmt: skip


def _matrix(tmp_path: Path, *lines: str, repo_id: str = "me/tiny-{checkpoint}-{recipe}-mnn") -> matrix_spec.Matrix:
    (tmp_path / "a").mkdir(exist_ok=True)
    spec = write_matrix(tmp_path, checkpoints={"a": tmp_path / "a"}, repo_id=repo_id)
    spec.write_text(spec.read_text(encoding="utf-8") + "\n".join(lines) + "\n", encoding="utf-8")
    return matrix_spec.load(spec)


def test_replay_takes_the_last_outcome_of_each_job_and_ignores_torn_lines_and_other_fingerprints(
    tmp_path: Path,
) -> None:
    matrix = _matrix(tmp_path)
    q4, q8 = matrix.jobs
    journal = Journal(tmp_path / "run")
    with journal.held():
        journal.append(q4, "start")
        journal.append(q4, "failed", {"error": "verify failed"})
        journal.append(q4, "start")
        journal.append(q4, "released", {"commit": "c" * 40, "repo_id": q4.repo_id, "tag": "v1"})
        journal.append(q8, "start")
    with journal.path.open("a", encoding="utf-8") as handle:
        handle.write('{"job": "a-q8", "event": "relea')  # SIGKILL mid-write
    prints = {job.id: fingerprint(job) for job in matrix.jobs}
    states = replay(journal.read(), prints)
    assert states["a-q4"].status == "released" and states["a-q4"].facts["commit"] == "c" * 40
    assert states["a-q4"].attempts == 2
    assert states["a-q8"].status == "started"
    journal.append(q8, "failed", {"error": "x"})  # after a torn line: a line of its own, read whole
    assert replay(journal.read(), prints)["a-q8"].status == "failed"
    assert len(parse(journal.path.read_text(encoding="utf-8").splitlines())) == 6
    changed = {**prints, "a-q4": "another spec"}  # the job's spec changed since: its records do not count
    assert replay(journal.read(), changed)["a-q4"].status == "pending"
    assert set(replay(journal.read(), {"a-q4": prints["a-q4"]})) == {"a-q4"}


def test_one_run_at_a_time_holds_a_matrix_run_folder(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "run")
    busy = pytest.raises(MatrixBusy, match="another packager release is running this matrix")
    with journal.held(), busy, Journal(tmp_path / "run").held():
        pass
    with Journal(tmp_path / "run").held():
        pass  # released when the first run ended


def test_a_fingerprint_is_the_jobs_spec(tmp_path: Path) -> None:
    first = _matrix(tmp_path)
    assert fingerprint(first.jobs[0]) == fingerprint(_matrix(tmp_path).jobs[0])
    assert fingerprint(first.jobs[0]) != fingerprint(first.jobs[1])
    assert default_folder(first) == tmp_path / "dist" / "matrix-release"


def test_jobs_that_build_one_graph_are_one_group(tmp_path: Path) -> None:
    matrix = _matrix(tmp_path, *VARIANTS, repo_id="me/{checkpoint}-{recipe}-{variant}")
    groups = {job.id: graph_group(job) for job in matrix.jobs}
    assert groups["a-q4-a"] == groups["a-q4-b"]  # the card differs, the graph does not
    assert groups["a-q4-a"] != groups["a-q8-a"]  # another quantization is another graph


def test_a_draft_and_a_target_of_one_recipe_share_a_graph_and_wait_for_its_first_build(tmp_path: Path) -> None:
    """The graph cache's key has no bundle kind: a draft and a target of one checkpoint and recipe are one group,
    so the target waits for the draft to fill the cache instead of building the same graph beside it."""
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    spec = write_matrix(
        tmp_path,
        checkpoints={"a": tmp_path / "a", "b": tmp_path / "b"},
        repo_id="me/{checkpoint}-{recipe}-{kind}",
        kinds=("draft", "target"),
    )
    jobs = list(matrix_spec.load(spec).jobs)
    assert graph_group(jobs[0]) == graph_group(jobs[1]) != graph_group(jobs[2])  # a-q4-draft, a-q4-target, a-q8-draft
    ready, waiting = schedule(jobs)
    assert [j.id for j in ready] == ["a-q4-draft", "a-q8-draft", "b-q4-draft", "b-q8-draft"]  # one per graph
    assert sorted(j.id for members in waiting.values() for j in members) == [
        "a-q4-target", "a-q8-target", "b-q4-target", "b-q8-target",
    ]  # fmt: skip


def _result(matrix: matrix_spec.Matrix) -> MatrixResult:
    q4, q8 = matrix.jobs
    return MatrixResult(
        matrix,
        Path("run"),
        (
            JobOutcome(
                q4.id,
                "released",
                q4.repo_id,
                "v1",
                "ab" * 20,
                46_841_876,
                {"top1_agreement": 0.9388, "mean_kl": 0.00001},
                0.61,
                12.5,
            ),
            JobOutcome(q8.id, "failed", q8.repo_id, "v1", error="verify failed (a | b)", exit_code=50),
        ),
    )


def test_the_summary_names_each_job_its_repo_size_fidelity_acceptance_and_status(tmp_path: Path) -> None:
    result = _result(_matrix(tmp_path))
    data = gather.summary(result, "http://127.0.0.1:1")
    assert data["ok"] is False and data["failed"] == ["a-q8"]
    first = data["jobs"][0]
    assert first["axes"] == {"checkpoint": "a", "recipe": "q4"} and first["builds"] == "draft, 4-bit block 128"
    assert (first["repo_id"], first["revision"], first["tag"], first["status"]) == ("me/tiny-a-q4-mnn", "main", "v1",
                                                                                    "released")  # fmt: skip
    assert json.loads(json.dumps(data)) == data
    table = gather.markdown(data).splitlines()
    assert table[0] == "## Release matrix: 2 jobs, 1 failed"
    assert table[4] == (
        "| a-q4 | me/tiny-a-q4-mnn@v1 (abababababab) | 46.8 MB | top-1 0.939, KL 0.0000 | 0.610 | released |"
    )
    assert table[5] == "| a-q8 | me/tiny-a-q8-mnn@v1 | - | - | - | FAILED: verify failed (a \\| b) |"


def test_a_collection_note_is_the_jobs_row_within_the_hubs_limit(tmp_path: Path) -> None:
    result = _result(_matrix(tmp_path))
    note = gather.note(result, result.outcomes[0])
    assert note == "a × q4: draft, 4-bit block 128, 46.8 MB, top-1 0.939, KL 0.0000, acceptance 0.610"
    long = MatrixResult(result.matrix, Path("run"), (JobOutcome("a-q4", "released", "me/x", "v1", size=1, fidelity={
        "top1_agreement": 1.0}, acceptance=0.5),))  # fmt: skip
    assert len(gather.note(long, long.outcomes[0])) <= gather.MAX_NOTE


def test_outcomes_survive_the_journal(tmp_path: Path) -> None:
    outcome = _result(_matrix(tmp_path)).outcomes[0]
    back = JobOutcome.from_facts(outcome.job, "skipped", json.loads(json.dumps(outcome.facts())))
    assert back.commit == outcome.commit and back.fidelity == outcome.fidelity and back.status == "skipped"


def test_release_refuses_what_a_matrix_cannot_take_in_one_line(tmp_path: Path) -> None:
    spec = _matrix(tmp_path).path
    for args, said in (
        (("--bundle", str(tmp_path)), "--bundle is for a single release"),
        (("--dry-run",), "--dry-run is for a single release"),
        (("--job", "nope"), "--job nope is no job of the matrix"),
    ):
        result = invoke("release", str(spec), *args)
        assert result.exit_code == INVALID_OPTION and said in one_error_line(result)
    single = card_spec(tmp_path / "a")
    result = invoke("release", str(single), "--jobs", "2")
    assert (
        result.exit_code == INVALID_OPTION
        and "--jobs, --job, --backend and --gather are for a matrix" in one_error_line(result)
    )


def test_a_terminal_shows_an_overall_bar_and_one_bar_per_running_job_and_elsewhere_only_job_logs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from packager.cli.matrix import MatrixBars
    from tests.terminal import fake_terminal, finished_lines

    with fake_terminal() as screen:
        bars = MatrixBars(4, quiet=False)
        bars("start", "a-q4", "")
        bars("start", "a-q8", "")
        bars("line", "a-q4", "release: convert")
        assert len(bars.bars) == 2 and {b.position_ for b in bars.bars.values()} == {1, 2}
        bars("done", "a-q4", "released")
        bars("start", "b-q4", "")
        assert bars.bars["b-q4"].position_ == 1  # the line a finished job left
        bars("log", "b-q4", "a line of its Hugging Face Job")
        bars("done", "a-q8", "failed")
        bars("skipped", "b-q8", "")
        bars("done", "b-q4", "unchanged")
        bars.close()
    shown = finished_lines(screen.getvalue())
    assert shown[-1].startswith("matrix: 100%") and "| 4/4 [" in shown[-1] and shown[-1].endswith("b-q4 unchanged]")
    assert "[b-q4] a line of its Hugging Face Job" in screen.getvalue()
    elsewhere = MatrixBars(2, quiet=False)  # pytest's stderr is no terminal
    elsewhere("start", "a-q4", "")
    elsewhere("line", "a-q4", "release: convert")
    elsewhere("log", "a-q4", "from the job")
    elsewhere("done", "a-q4", "released")
    assert capsys.readouterr().err == "[a-q4] from the job\n"
    MatrixBars(2, quiet=True)("log", "a-q4", "not shown")
    assert capsys.readouterr().err == ""


def test_workers_share_the_cores_without_overlap() -> None:
    import os

    from packager.release.matrix.jobs import shares

    cores = os.sched_getaffinity(0)
    assert shares(1) == [] and shares(len(cores) + 1) == []
    if len(cores) >= 2:
        split = shares(2)
        assert len(split) == 2 and split[0] | split[1] == cores and not split[0] & split[1]
