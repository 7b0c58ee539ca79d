"""Issue 14: build for the MNN engine an app ships (--engine), and prove the bundle in the real engines.

The engines come from PyPI into PACKAGER_ENGINES_DIR (tests/conftest.py: one folder reused across test
sessions). Only the oldest engine packager builds for (3.4.0) and the current one (3.6.1) run here; every
PyPI version x {default, oldest-engine bundle} is in bench/engines_bench.py and bench/RESULTS.md.
"""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import pytest

from packager.bundle.engine import NEWEST, OLDEST, UnservedEngine, format_version, target
from packager.bundle.kinds import FILES
from packager.convert.pipeline import ConvertRequest, ConvertResult, convert
from packager.convert.stream import graphcache
from packager.convert.stream import run as stream
from packager.errors import InvalidOption
from packager.measure.engines import venvs
from packager.measure.engines.check import check, compare, run_probe
from packager.validate import validate
from tests import shared
from tests.conftest import run_cli

pytestmark = pytest.mark.engines

OLDEST_TEXT = format_version(OLDEST)


@pytest.fixture(scope="module")
def oldest(tiny_checkpoint: Path) -> ConvertResult:
    result: ConvertResult = shared.converted(tiny_checkpoint, engine=OLDEST_TEXT)
    assert result.path == "streamed"  # the option keeps the weight layout: no fallback to the reference path
    return result


# --- choosing and refusing engines -----------------------------------------------------------------------


@pytest.mark.parametrize("text", [None, "newest", " Newest "])
def test_newest_is_the_default(text: str | None) -> None:
    goal = target(text)
    assert goal.default and goal.version == NEWEST and goal.fuse_c4 and goal.converter_flags == ()


@pytest.mark.parametrize(
    "text, reason",
    [
        ("3.6", "not an MNN version"),
        ("abc", "not an MNN version"),
        ("3.4.1.0", "not an MNN version"),
        ("-3.4.1", "not an MNN version"),
        ("3.4.x", "not an MNN version"),
        ("", "not an MNN version"),
        ("99.0.0", "cannot know what MNN 99.0.0 reads"),
        ("3.6.2", "cannot know"),
        ("3.2.0", "no LLM runtime"),
        ("3.0.0", "older than the oldest engine packager builds for"),
        ("0000003.0004.0000001", "not an MNN version"),
    ],
)
def test_unserved_engines_are_refused_with_the_reason(text: str, reason: str) -> None:
    with pytest.raises(UnservedEngine, match=reason):
        target(text)


def test_older_targets_drop_c4_fusion() -> None:
    assert not target("3.4.0").fuse_c4 and not target("3.6.0").fuse_c4 and target("3.6.1").fuse_c4
    assert target("3.5.0").converter_flags == ("--transformerFuseC4=0",)


def test_cli_refuses_an_unserved_engine_in_one_line(tiny_checkpoint: Path, tmp_path: Path) -> None:
    for value in ("3.6", "99.0.0", "abc", "3.1.0"):
        result = run_cli("convert", str(tiny_checkpoint), "--out", str(tmp_path / "b"), "--engine", value)
        assert result.returncode == InvalidOption.exit_code, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
        assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("value, reason", [("3.4", "does not match"), ("3.2.0", "no LLM runtime")])
def test_spec_engine_is_checked(tiny_checkpoint: Path, tmp_path: Path, value: str, reason: str) -> None:
    spec = tmp_path / "release.toml"
    spec.write_text(f'[convert]\nengine = "{value}"\n', encoding="utf-8")
    result = run_cli("convert", str(tiny_checkpoint), "--out", str(tmp_path / "b"), "--spec", str(spec))
    assert result.returncode == 17 and "convert.engine" in result.stderr and reason in result.stderr, result.stderr
    if reason == "does not match":
        return  # the schema refuses the spec before any flag is read
    # The flag wins over the spec.
    flagged = run_cli(
        "convert", str(tiny_checkpoint), "--out", str(tmp_path / "b"), "--spec", str(spec), "--engine", "99.0.0"
    )
    assert flagged.returncode == InvalidOption.exit_code and "--engine 99.0.0" in flagged.stderr


# --- what the oldest-engine bundle is -------------------------------------------------------------------


def test_oldest_engine_bundle_has_no_c4_attention_and_a_text_tokenizer(
    oldest: ConvertResult, bundle4: ConvertResult
) -> None:
    graph = (oldest.out / "llm.mnn.json").read_text(encoding="utf-8")
    assert '"output_c4": true' not in graph and '"output_c4": true' in (bundle4.out / "llm.mnn.json").read_text()
    assert (oldest.out / "tokenizer.txt").read_bytes().startswith(b"430 3\n")
    assert oldest.tokenizer.format == "text" and bundle4.tokenizer.format == "pipeline"
    # The same weights: the option changes the graph only.
    assert (oldest.out / "llm.mnn.weight").read_bytes() == (bundle4.out / "llm.mnn.weight").read_bytes()
    runtime = json.loads((oldest.out / "runtime_config.json").read_text(encoding="utf-8"))
    assert runtime["min_mnn_engine"]["version"] == OLDEST_TEXT
    assert any(
        f"built for MNN {OLDEST_TEXT}" in r and "--transformerFuseC4=0" in r
        for r in runtime["min_mnn_engine"]["because"]
    )
    record = json.loads(oldest.provenance.read_text(encoding="utf-8"))
    assert record["options"]["engine"] == {
        "requested": OLDEST_TEXT,
        "version": OLDEST_TEXT,
        "converter_flags": ["--transformerFuseC4=0"],
    }
    assert record["min_mnn_engine"]["version"] == OLDEST_TEXT
    report = validate(oldest.out)
    assert not report.errors and not report.warnings, (report.errors, report.warnings)


def test_streaming_and_reference_paths_agree_with_the_option(
    oldest: ConvertResult, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    reference = convert(
        ConvertRequest(checkpoint=tiny_checkpoint, out=tmp_path / "ref", reference=True, engine=OLDEST_TEXT)
    )
    assert reference.path == "reference"
    for name in FILES:
        assert (reference.out / name).read_bytes() == (oldest.out / name).read_bytes(), name


def test_newest_spelled_out_gives_the_default_bytes(
    bundle4: ConvertResult, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    spec = tmp_path / "release.toml"
    spec.write_text('[convert]\nengine = "newest"\n', encoding="utf-8")
    from packager.spec import model as spec_module

    result = convert(ConvertRequest(checkpoint=tiny_checkpoint, out=tmp_path / "b", spec=spec_module.load(spec)))
    for name in FILES:
        assert (result.out / name).read_bytes() == (bundle4.out / name).read_bytes(), name
    runtime = json.loads((result.out / "runtime_config.json").read_text(encoding="utf-8"))
    assert not any("built for" in r for r in runtime["min_mnn_engine"]["because"])
    assert "engine" not in json.loads(result.provenance.read_text(encoding="utf-8"))["options"]


def test_the_option_is_part_of_the_graph_cache_key(tiny_checkpoint: Path, oldest: ConvertResult) -> None:
    from packager.convert.inspect.checkpoint import inspect_checkpoint

    info = inspect_checkpoint(tiny_checkpoint)
    default = stream._key_fields(info, 4, 128, "bfloat16", (), ("x",))
    without = stream._key_fields(info, 4, 128, "bfloat16", (), ("x",), fuse_c4=False)
    assert "fuse_c4" not in default  # the default's entries keep their keys
    assert graphcache.key(default) != graphcache.key(without)
    assert any("no C4 fusion" in e.describe for e in graphcache.entries())


def test_spec_engine_builds_for_that_engine(tiny_checkpoint: Path, oldest: ConvertResult, tmp_path: Path) -> None:
    spec = tmp_path / "release.toml"
    spec.write_text(f'[convert]\nengine = "{OLDEST_TEXT}"\n', encoding="utf-8")
    result = run_cli(
        "convert", str(tiny_checkpoint), "--out", str(tmp_path / "b"), "--spec", str(spec), "--json", "--quiet"
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["engine_target"]["version"] == OLDEST_TEXT
    assert (tmp_path / "b" / "llm.mnn").read_bytes() == (oldest.out / "llm.mnn").read_bytes()


# --- validate: the declared engine against every option ------------------------------------------------


def _copy(bundle: Path, to: Path) -> Path:
    shutil.copytree(bundle, to)
    return to


def _declare(bundle: Path, version: str) -> None:
    path = bundle / "runtime_config.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["min_mnn_engine"]["version"] = version
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")


def test_validate_checks_the_declared_engine_of_every_option(
    oldest: ConvertResult, bundle4: ConvertResult, tmp_path: Path
) -> None:
    older = _copy(oldest.out, tmp_path / "older")
    _declare(older, "3.2.0")  # below any proven engine: a warning naming why
    report = validate(older)
    assert not report.errors and any("3.4.0" in w.message and "no LLM runtime" in w.message for w in report.warnings)
    # A text tokenizer swapped for the PIPELINE one, still declaring 3.4.0: the tokenizer needs 3.5.0.
    mixed = _copy(oldest.out, tmp_path / "mixed")
    shutil.copyfile(bundle4.out / "tokenizer.txt", mixed / "tokenizer.txt")
    assert any("PIPELINE" in e.message and "3.5.0" in e.message for e in validate(mixed).errors)
    # The C4 graph of the default bundle declared for 3.4.0: the graph needs 3.6.1.
    fused = _copy(bundle4.out, tmp_path / "fused")
    _declare(fused, OLDEST_TEXT)
    assert any("C4" in e.message and "3.6.1" in e.message for e in validate(fused).errors)


# --- the real engines ------------------------------------------------------------------------------------


def test_oldest_engine_bundle_loads_and_agrees_in_the_oldest_engine_and_in_3_6_1(oldest: ConvertResult) -> None:
    report = check(oldest.out, (OLDEST_TEXT, "3.6.1"))
    rows = {r.version: r for r in report.results}
    for version in (OLDEST_TEXT, "3.6.1"):
        row = rows[version]
        assert row.loads and row.agrees, row
        assert row.top1 == row.prompts and row.same_ids == row.prompts and row.min_cosine >= 0.99
    assert report.failures() == []


def test_the_probe_imports_only_mnn_and_numpy(oldest: ConvertResult) -> None:
    found = run_probe(venvs.ensure(OLDEST_TEXT).python, oldest.out, None)
    assert found["loads"] and found["modules"] == ["MNN", "_mnncengine", "numpy"]
    assert found["mnn_tools_imported"] is False  # MNN's telemetry (pip install, upload) lives in MNN.tools


def test_the_check_tells_disagreeing_logits_from_agreeing_ones(oldest: ConvertResult) -> None:
    """Real logits of the bundle, then the same with one prompt's argmax moved (as a wrong engine would)."""
    found = run_probe(venvs.ensure("3.6.1").python, oldest.out, None)
    ids, logits = found["ids"], found["logits"]
    assert compare("x", found, ids, logits).agrees
    wrong = logits.copy()
    wrong[0, int(wrong[0].argmin())] = float(wrong[0].max()) + 1.0
    verdict = compare("x", {**found, "logits": wrong}, ids, logits)
    assert not verdict.agrees and verdict.top1 == len(ids) - 1 and verdict.verdict == "loads, logits DISAGREE"
    nan = logits.copy()
    nan[1, 0] = float("nan")
    assert not compare("x", {**found, "logits": nan}, ids, logits).agrees


def test_engine_3_5_keeps_the_pipeline_tokenizer_without_c4(
    tiny_checkpoint: Path, oldest: ConvertResult, tmp_path: Path
) -> None:
    result = convert(ConvertRequest(checkpoint=tiny_checkpoint, out=tmp_path / "b", engine="3.5.0"))
    assert result.tokenizer.format == "pipeline" and result.engine.text == "3.5.0"
    assert (result.out / "llm.mnn").read_bytes() == (oldest.out / "llm.mnn").read_bytes()


def test_default_bundle_crashes_the_oldest_engine_and_the_check_says_so(bundle4: ConvertResult, tmp_path: Path) -> None:
    bundle = _copy(bundle4.out, tmp_path / "bundle")
    shutil.copyfile(bundle4.provenance, tmp_path / "bundle.provenance.json")
    result = run_cli(
        "engines", "check", str(bundle), "--versions", f"3.6.1,{OLDEST_TEXT}", "--record", "--json", "--quiet"
    )
    assert result.returncode == 0, result.stderr  # 3.4.0 is below the declared 3.6.1: expected, not a failure
    rows = {r["version"]: r for r in json.loads(result.stdout)["results"]}
    # Measured: MNN 3.4.x has no PIPELINE tokenizer (createTokenizer returns null) and dies tokenizing.
    assert not rows[OLDEST_TEXT]["loads"]
    assert rows[OLDEST_TEXT]["reason"] == "SIGSEGV while tokenizing with tokenizer.txt"
    assert rows["3.6.1"]["loads"] and rows["3.6.1"]["agrees"]
    record = json.loads((tmp_path / "bundle.provenance.json").read_text(encoding="utf-8"))
    assert [r["version"] for r in record["engine_check"]["results"]] == [OLDEST_TEXT, "3.6.1"]
    from packager.resources import validator

    assert list(validator("provenance").iter_errors(record)) == []
    card = run_cli(
        "card", str(bundle), "--spec", str(Path(__file__).parents[1] / "examples" / "release.toml"), "-o", "-"
    )
    assert card.returncode == 0, card.stderr
    assert f"| {OLDEST_TEXT} | no: SIGSEGV while tokenizing with tokenizer.txt |" in card.stdout


def test_a_bundle_below_its_declared_engine_fails_the_check(bundle4: ConvertResult, tmp_path: Path) -> None:
    bundle = _copy(bundle4.out, tmp_path / "bundle")
    _declare(bundle, OLDEST_TEXT)  # a lie: the C4 graph and .mtok tokenizer need 3.6.1
    result = run_cli("engines", "check", str(bundle), "--versions", OLDEST_TEXT, "--quiet")
    assert result.returncode == 32, result.stdout + result.stderr
    assert "SIGSEGV" in result.stdout


def test_a_bundle_the_current_engine_runs_to_zeros_is_refused(oldest: ConvertResult, tmp_path: Path) -> None:
    bundle = _copy(oldest.out, tmp_path / "bundle")
    with open(bundle / "llm.mnn.weight", "r+b") as weights:  # MNN reads the missing bytes as zeros
        weights.truncate(1_000_000)
    result = run_cli("engines", "check", str(bundle), "--versions", "3.6.1", "--quiet")
    assert result.returncode == 22 and "constant or not finite" in result.stderr, result.stderr


@pytest.mark.parametrize("versions", ["3.3.0", "abc", "3.6.1,99.0.0", ""])
def test_engines_check_refuses_versions_not_on_pypi(bundle4: ConvertResult, versions: str) -> None:
    result = run_cli("engines", "check", str(bundle4.out), "--versions", versions)
    assert result.returncode == InvalidOption.exit_code, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_damaged_engine_environment_is_rebuilt_and_two_checks_can_install_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A real environment whose marker and files look right but whose engine library is gone.
    good = venvs.ensure(OLDEST_TEXT)
    monkeypatch.setenv("PACKAGER_ENGINES_DIR", str(tmp_path / "engines"))
    damaged = tmp_path / "engines" / f"mnn-{OLDEST_TEXT}"
    shutil.copytree(good.path, damaged, symlinks=True)
    for library in damaged.glob("lib/python*/site-packages/_mnncengine*.so"):
        library.write_bytes(b"truncated")
    assert venvs._intact(damaged, OLDEST_TEXT) and not venvs._runs(damaged)
    found: list[venvs.Engine] = []
    errors: list[BaseException] = []

    def install() -> None:
        try:
            found.append(venvs.ensure(OLDEST_TEXT))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=install) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and len(found) == 2 and found[0].path == found[1].path == damaged
    leftovers = [p.name for p in (tmp_path / "engines").iterdir() if not p.name.endswith(".lock")]
    assert leftovers == [damaged.name]  # no half-made environment left behind
    assert [e.version for e in venvs.installed()] == [OLDEST_TEXT] and venvs._runs(damaged)
    (damaged / venvs.MARKER).write_text("{not json", encoding="utf-8")  # an install killed before its marker
    assert not venvs.installed()  # ensure() would install it again, as above


def test_engines_help_has_examples() -> None:
    for command in (("engines",), ("engines", "check"), ("engines", "ls")):
        result = run_cli(*command, "--help")
        assert result.returncode == 0 and "Example:" in result.stdout, command
