"""packager speculate runs MNN's own generation strategies (eagle, lookahead) against plain decoding in the real
engine: the tokens are the plain greedy ones (up to near-ties), the steps come from the engine's own record, and a
bundle that cannot run the mode is one line before any work. Random weights: no figure about acceptance or speed
is asserted here (tests/test_trained_eagle.py has the trained head; bench/ the speed)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from packager.convert.pipeline import ConvertResult
from packager.measure.speculate import Request, speculate
from tests.conftest import run_cli, start_cli

pytestmark = pytest.mark.converter

PROMPTS = ("What is Python?", "Write a haiku about rain.", "List three colors.")


@pytest.fixture(scope="module")
def prompts_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("prompts") / "prompts.txt"
    path.write_text("\n".join(PROMPTS) + "\n", encoding="utf-8")
    return path


def test_eagle_in_mnn_emits_the_plain_greedy_tokens_and_its_steps_are_read(eagle_bundle: ConvertResult) -> None:
    report = speculate(Request(bundle=eagle_bundle.out, prompts=PROMPTS, max_new_tokens=16, repeats=1, threads=2))
    assert report.mode == "eagle" and report.prompts == 3 and not report.mismatches, report.per_prompt
    assert all(p.verdict in ("identical", "near-tie") and p.compared > 0 for p in report.per_prompt)
    # every step accepts the bonus token and at most eagle_depth drafted ones (depth 3)
    assert report.steps_counted == 3 and all(p.steps and 1 <= p.tokens / p.steps[1] <= 4 for p in report.per_prompt)
    assert report.accepted_per_step is not None and report.accepted_per_step.low >= 1.0
    assert report.plain_tokens_per_second.median > 0 and report.speculative_tokens_per_second.median > 0
    assert report.engine == "MNN 3.6.1" and report.measured_on.startswith("this CPU (")


def test_lookahead_runs_on_a_bundle_not_configured_for_it_and_json_says_so(
    bundle4: ConvertResult, prompts_file: Path
) -> None:
    done = run_cli(
        "speculate",
        str(bundle4.out),
        "--mode",
        "lookahead",
        "--prompts",
        str(prompts_file),
        "--tokens",
        "16",
        "--repeats",
        "1",
        "--threads",
        "2",
        "--json",
        "--quiet",
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["mode"] == "lookahead" and report["lossless"] is True and report["prompts"] == 3
    assert len(report["per_prompt"]) == 3 and report["speedup"]["median"] > 0
    assert done.stderr == ""


def test_a_bundle_without_a_speculative_mode_is_refused_before_any_work(bundle4: ConvertResult) -> None:
    done = run_cli("speculate", str(bundle4.out))
    assert done.returncode == 82 and "is configured for no speculative mode" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    eagle = run_cli("speculate", str(bundle4.out), "--mode", "eagle")
    assert eagle.returncode == 82 and "holds no EAGLE-3 head" in eagle.stderr


@pytest.mark.parametrize("damage", ["config", "missing_fc"])
def test_a_damaged_eagle_bundle_is_one_line_not_an_engine_crash(
    eagle_bundle: ConvertResult, tmp_path: Path, damage: str
) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(eagle_bundle.out, broken)
    if damage == "config":
        (broken / "config.json").write_text("{ not json", encoding="utf-8")
    else:
        (broken / "eagle_fc.mnn").unlink()
    done = run_cli("speculate", str(broken), "--quiet")
    assert done.returncode == 82, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_an_engine_that_crashes_on_a_damaged_graph_is_one_line(
    eagle_bundle: ConvertResult, tmp_path: Path, prompts_file: Path
) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(eagle_bundle.out, broken)
    (broken / "eagle.mnn").write_bytes((eagle_bundle.out / "eagle.mnn").read_bytes()[:1000])
    done = run_cli(
        "speculate", str(broken), "--prompts", str(prompts_file), "--tokens", "8", "--repeats", "1", "--quiet"
    )
    assert done.returncode == 27 and "MNN's generation failed" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_a_graph_without_logits_index_dims_is_refused_since_mnn_would_decode_plainly(
    bundle4: ConvertResult, tmp_path: Path
) -> None:
    bundle = tmp_path / "bundle"
    shutil.copytree(bundle4.out, bundle)
    dump = json.loads((bundle / "llm.mnn.json").read_text())
    for op in dump["oplists"]:
        if op.get("type") == "Input" and op.get("name") == "logits_index":
            op["main"]["dims"] = []
    (bundle / "llm.mnn.json").write_text(json.dumps(dump))
    done = run_cli("speculate", str(bundle), "--mode", "lookahead")
    assert done.returncode == 82 and "no logits_index input with dims" in done.stderr


@pytest.fixture(scope="module")
def eagle_report(eagle_bundle: ConvertResult, prompts_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    done = run_cli(
        "speculate",
        str(eagle_bundle.out),
        "--prompts",
        str(prompts_file),
        "--tokens",
        "12",
        "--repeats",
        "1",
        "--threads",
        "2",
        "--json",
        "--quiet",
    )
    assert done.returncode == 0, done.stderr
    path = tmp_path_factory.mktemp("speculate") / "eagle.json"
    path.write_text(done.stdout, encoding="utf-8")
    return path


def _card(bundle: Path, *reports: Path) -> object:
    from tests.specs import EXAMPLE

    return run_cli(
        "card",
        str(bundle),
        "--spec",
        str(EXAMPLE),
        "-o",
        "-",
        *(arg for report in reports for arg in ("--speculate", str(report))),
    )


def test_the_card_states_mnns_own_figures_from_a_report_of_this_bundle(
    eagle_bundle: ConvertResult, eagle_report: Path
) -> None:
    report = json.loads(eagle_report.read_text())
    done = _card(eagle_bundle.out, eagle_report)
    assert done.returncode == 0, done.stderr  # type: ignore[attr-defined]
    text = done.stdout  # type: ignore[attr-defined]
    assert "## Speculative decoding measured by MNN" in text
    row = next(line for line in text.splitlines() if line.startswith("| eagle |"))
    accepted = report["accepted_per_step"]
    assert f"{accepted['value']:.2f} ({accepted['low']:.2f}-{accepted['high']:.2f}, 3 of 3 prompts)" in row
    assert f"{report['speedup']['median']:.2f}x" in row and "MNN 3.6.1, a machine's CPU (" in row
    assert "), not a phone;" in row and "this CPU" not in row


@pytest.mark.parametrize(
    "change, said",
    [
        (lambda r: r.update(lossless=False), "was not lossless"),
        (lambda r: r["accepted_per_step"].update(value=99.0), "accepted_per_step.value is"),
        (lambda r: r.update(mode="draftmodel"), "mode is 'draftmodel'"),
        (lambda r: r["files_xxh3_128"].update({"../../etc/passwd": "0" * 32}), "which is no bundle file"),
        (
            lambda r: r["files_xxh3_128"].update({"config.json": "0" * 32}),
            "measured another bundle: config.json differs",
        ),
        (lambda r: r.pop("speedup"), "is not a `packager speculate --json` report"),
    ],
)
def test_a_lossy_tampered_or_stale_report_is_not_stated(
    eagle_bundle: ConvertResult, eagle_report: Path, tmp_path: Path, change, said: str
) -> None:  # type: ignore[no-untyped-def]
    report = json.loads(eagle_report.read_text())
    change(report)
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report))
    done = _card(eagle_bundle.out, path)
    assert done.returncode == 24 and said in done.stderr, done.stderr  # type: ignore[attr-defined]
    assert "Traceback" not in done.stderr  # type: ignore[attr-defined]


def test_two_reports_of_one_mode_are_refused(eagle_bundle: ConvertResult, eagle_report: Path) -> None:
    done = _card(eagle_bundle.out, eagle_report, eagle_report)
    assert done.returncode == 24 and "same mode" in done.stderr  # type: ignore[attr-defined]


def test_the_specs_speculate_reports_reach_the_card_and_a_lossy_one_stops_a_release_before_any_work(
    eagle_bundle: ConvertResult, eagle_report: Path, tmp_path: Path
) -> None:
    from tests.specs import EXAMPLE

    shutil.copy(eagle_report, tmp_path / "eagle.json")
    spec = tmp_path / "release.toml"
    spec.write_text(EXAMPLE.read_text().replace("[card]\n", '[card]\nspeculate_reports = ["eagle.json"]\n', 1))
    done = run_cli("card", str(eagle_bundle.out), "--spec", str(spec), "-o", "-")
    assert done.returncode == 0 and "| eagle |" in done.stdout, done.stderr
    report = json.loads(eagle_report.read_text())
    (tmp_path / "eagle.json").write_text(json.dumps({**report, "lossless": False}))
    released = run_cli("release", str(spec), "--bundle", str(eagle_bundle.out), "--dry-run")
    assert released.returncode == 24 and "was not lossless" in released.stderr, released.stderr
    assert "release: validate" not in released.stderr


def test_an_eagle_path_outside_the_bundle_is_refused(eagle_bundle: ConvertResult, tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(eagle_bundle.out, broken)
    config = json.loads((broken / "config.json").read_text())
    config["eagle_model"] = "../" + broken.name + "/eagle.mnn"
    (broken / "config.json").write_text(json.dumps(config))
    done = run_cli("speculate", str(broken), "--quiet")
    assert done.returncode == 82 and "outside the bundle folder" in done.stderr


def test_interrupting_speculate_stops_the_engine_child_at_once(eagle_bundle: ConvertResult, prompts_file: Path) -> None:
    import signal

    import psutil

    process = start_cli(
        "speculate", str(eagle_bundle.out), "--prompts", str(prompts_file), "--tokens", "512", "--repeats", "50"
    )
    assert process.stderr is not None
    for line in process.stderr:  # wait for a reported stage, not a time
        if "repeat 1 of 50" in line:
            break
    children = psutil.Process(process.pid).children(recursive=True)
    assert children, "the engine runs in a child process"
    process.send_signal(signal.SIGINT)
    rest = process.stderr.read()
    assert process.wait(timeout=60) == 130 and "Traceback" not in rest
    _gone, alive = psutil.wait_procs(children, timeout=30)
    assert not alive, alive


def _lookahead_copy(bundle4: ConvertResult, tmp_path: Path) -> Path:
    """bundle4 configured for lookahead with its corpus, as convert --lookahead=CORPUS makes it."""
    bundle = tmp_path / "bundle"
    shutil.copytree(bundle4.out, bundle)
    config = json.loads((bundle / "config.json").read_text())
    (bundle / "config.json").write_text(
        json.dumps({**config, "speculative_type": "lookahead", "lookup_file": "lookup_file.txt"})
    )
    (bundle / "lookup_file.txt").write_text("The capital of France is Paris.\n", encoding="utf-8")
    return bundle


def _run(bundle: Path, prompts_file: Path):  # type: ignore[no-untyped-def]
    return run_cli(
        "speculate", str(bundle), "--prompts", str(prompts_file), "--tokens", "8", "--repeats", "1", "--quiet"
    )


def _refused(done, code: int, *words: str) -> None:  # type: ignore[no-untyped-def]
    assert done.returncode == code, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("packager: error:") and "Traceback" not in done.stderr, done.stderr
    for word in words:
        assert word in lines[0], lines[0]


@pytest.mark.parametrize(
    "damage, code, words",
    [
        ("truncated weights", 82, ("llm.mnn.weight is truncated:", "places weights up to byte")),
        ("empty weights", 82, ("llm.mnn.weight is empty",)),
        ("no llm.mnn", 82, ("is missing llm.mnn,",)),
        ("no llm_config.json", 82, ("is missing llm_config.json",)),
        ("tokenizer.txt a folder", 82, ("tokenizer.txt is not a regular file",)),
        ("truncated weights, no llm.mnn.json", 27, ("MNN decoded no tokens", "plain decoding")),
    ],
)
def test_a_damaged_bundle_is_one_line_naming_the_file(
    bundle4: ConvertResult, tmp_path: Path, prompts_file: Path, damage: str, code: int, words: tuple[str, ...]
) -> None:
    bundle = _lookahead_copy(bundle4, tmp_path)
    weights = bundle / "llm.mnn.weight"
    if damage.startswith("truncated"):
        weights.write_bytes(weights.read_bytes()[:100])
        if "no llm.mnn.json" in damage:  # an app's folder: nothing says how long the weights are
            (bundle / "llm.mnn.json").unlink()
    elif damage == "empty weights":
        weights.write_bytes(b"")
    elif damage == "tokenizer.txt a folder":
        (bundle / "tokenizer.txt").unlink()
        (bundle / "tokenizer.txt").mkdir()
    else:
        (bundle / damage.removeprefix("no ")).unlink()
    _refused(_run(bundle, prompts_file), code, *words)


@pytest.mark.parametrize("where", ["../side/outside.txt", "absolute", "link", "base_dir"])
def test_a_lookup_file_outside_the_bundle_is_refused_and_validate_flags_it(
    bundle4: ConvertResult, tmp_path: Path, prompts_file: Path, where: str
) -> None:
    bundle = _lookahead_copy(bundle4, tmp_path)
    outside = tmp_path / "side" / "outside.txt"
    outside.parent.mkdir()
    outside.write_text("Text MNN would draft from, which no digest of the report covers.\n", encoding="utf-8")
    config = json.loads((bundle / "config.json").read_text())
    if where == "link":
        (bundle / "lookup_file.txt").unlink()
        (bundle / "lookup_file.txt").symlink_to(outside)
    else:
        changed = {
            "../side/outside.txt": {"lookup_file": "../side/outside.txt"},
            "absolute": {"lookup_file": str(outside)},
            "base_dir": {"base_dir": "../"},
        }[where]
        (bundle / "config.json").write_text(json.dumps({**config, **changed}))
    words = (
        ("lookup_file.txt is a link to a file outside the bundle folder",)
        if where == "link"
        else ("config.json names", "a path outside the bundle folder")
    )
    _refused(_run(bundle, prompts_file), 82, *words)
    validated = run_cli("validate", str(bundle))
    assert validated.returncode == 30 and ("lookup_file" in validated.stdout or "base_dir" in validated.stdout), (
        validated.stdout
    )
