"""`validate` names the right file and JSON pointer for every broken bundle of the corpus, and passes good ones."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from packager import resources
from packager.bundle.checksum import write_manifest
from packager.convert.pipeline import ConvertResult
from packager.validate import validate
from tests.appfiles import app_copy
from tests.conftest import run_cli
from tests.inprocess import invoke, one_error_line, run_packager
from tests.mutations import mutate

CORPUS = Path(__file__).parent / "broken_bundles"
CASES = sorted(p.stem for p in CORPUS.glob("*.json"))
SEEDS = Path(__file__).resolve().parents[2] / "shared" / "seeds"


@pytest.fixture()
def copy_of(bundle4: ConvertResult, tmp_path: Path) -> Path:
    target = tmp_path / "bundle"
    shutil.copytree(bundle4.out, target)
    return target


def test_corpus_is_large_enough() -> None:
    assert len(CASES) >= 25


@pytest.mark.parametrize("case", CASES)
def test_broken_bundle_is_reported_at_the_right_place(case: str, copy_of: Path) -> None:
    spec = json.loads((CORPUS / f"{case}.json").read_text())
    for mutation in spec["mutations"]:
        mutate(copy_of, mutation)
    report = validate(copy_of)
    expect = spec["expect"]
    matches = [
        f
        for f in report.findings
        if f.file == expect["file"]
        and f.severity == expect["severity"]
        and (
            f.pointer == expect["pointer"]
            or (expect["pointer"].endswith("(") and f.pointer.startswith(expect["pointer"]))
        )
        and expect["contains"] in f.message
    ]
    assert matches, [f"{f.severity} {f.file} {f.pointer}: {f.message}" for f in report.findings]
    assert not report.ok(strict=True)


def test_converted_bundle_passes_strict(bundle4: ConvertResult, bundle8: ConvertResult) -> None:
    for result in (bundle4, bundle8):
        report = validate(result.out)
        assert report.findings == (), report.findings
        assert len(report.checked_files) == 10


def test_bundle_with_card_and_manifest_passes(copy_of: Path) -> None:
    (copy_of / "README.md").write_text("# card\n")
    write_manifest(copy_of)
    assert validate(copy_of).findings == ()


def test_the_app_files_a_default_pull_leaves_validate_as_such(copy_of: Path, tmp_path: Path) -> None:
    app = app_copy(copy_of, tmp_path / "app")
    report = validate(app)
    assert report.subset == "app" and report.errors == () and report.warnings == (), report.findings
    assert [f.file for f in report.findings] == ["llm.mnn.json"]  # a note: the graph checks did not run
    shown = run_cli("validate", str(app), "--strict")
    assert shown.returncode == 0 and "ok (0 errors, 0 warnings; the app files of a draft bundle)" in shown.stdout
    assert json.loads(run_cli("validate", str(app), "--json").stdout)["checked"][0]["subset"] == "app"
    assert subprocess.run(["xxhsum", "-c", "checksums.xxh128"], cwd=app, capture_output=True).returncode == 0


def test_an_app_copy_is_still_checked_file_by_file(copy_of: Path, tmp_path: Path) -> None:
    app = app_copy(copy_of, tmp_path / "app")
    (app / "tokenizer.txt").unlink()
    mutate(app, {"op": "set", "file": "config_cpu.json", "pointer": "/thread_num", "value": "2"})
    errors = {(f.file, f.message.split(":")[0]) for f in validate(app).errors}
    assert ("tokenizer.txt", "missing (tokenizer)") in errors and ("checksums.xxh128", "tokenizer.txt") in errors
    assert any(f == "config_cpu.json" for f, _ in errors)  # its schema, and it no longer matches its line


def test_a_bundle_missing_its_reference_files_without_an_app_manifest_still_fails(copy_of: Path) -> None:
    for name in ("llm.mnn.json", "runtime_config.json", "config_opencl.json"):
        (copy_of / name).unlink()
    report = validate(copy_of)
    assert report.subset is None and {f.file for f in report.errors} >= {"llm.mnn.json", "runtime_config.json"}
    (copy_of / "README.md").write_text("# card\n")
    write_manifest(copy_of)  # a release's manifest (it lists the card): no app pull's
    assert validate(copy_of).subset is None


def test_syntax_error_has_line_and_column(copy_of: Path) -> None:
    (copy_of / "config_opencl.json").write_text('{\n  "backend_type": "opencl"\n  "thread_num": 4\n}\n')
    finding = next(f for f in validate(copy_of).findings if f.file == "config_opencl.json")
    assert (finding.line, finding.column) == (3, 3)
    assert finding.location == "config_opencl.json:3:3"


def test_all_findings_are_reported_at_once(copy_of: Path) -> None:
    for case in ("config_string_thread_num", "draft_configs_differ", "extra_file", "weights_padded"):
        for mutation in json.loads((CORPUS / f"{case}.json").read_text())["mutations"]:
            mutate(copy_of, mutation)
    files = {f.file for f in validate(copy_of).errors}
    assert {"config.json", "draft_config_cpu.json", "notes.txt", "llm.mnn.weight"} <= files


def test_cli_exit_codes_and_json(copy_of: Path) -> None:
    good = run_cli("validate", str(copy_of), "--json")
    assert good.returncode == 0 and json.loads(good.stdout)["ok"] is True
    mutate(copy_of, {"op": "set", "file": "config.json", "pointer": "/zzz_custom", "value": 1})
    assert run_cli("validate", str(copy_of)).returncode == 0  # a warning alone passes
    strict = run_cli("validate", str(copy_of), "--strict", "--json")
    assert strict.returncode == 30
    report = json.loads(strict.stdout)
    assert report["warnings"] == 1 and report["findings"][0]["pointer"] == "/zzz_custom"
    mutate(copy_of, {"op": "set", "file": "config.json", "pointer": "/thread_num", "value": "2"})
    failed = run_cli("validate", str(copy_of))
    assert failed.returncode == 30 and "ERROR   config.json /thread_num" in failed.stdout


def test_missing_bundle_folder_is_one_line(tmp_path: Path) -> None:
    result = run_packager("validate", str(tmp_path / "nope"))
    assert result.returncode == 22 and result.stderr.count("\n") == 1
    assert f"bundle folder {tmp_path / 'nope'} does not exist" in result.stderr


def test_a_file_given_as_the_bundle_is_named_a_file(copy_of: Path) -> None:
    result = run_cli("validate", str(copy_of / "config.json"))
    assert result.returncode == 22 and result.stderr.count("\n") == 1 and result.stdout == ""
    assert f"packager: error: {copy_of / 'config.json'} is a file, not a bundle folder" in result.stderr
    assert "does not exist" not in result.stderr


def _loop(tmp_path: Path) -> Path:
    os.symlink(tmp_path / "b", tmp_path / "a")
    os.symlink(tmp_path / "a", tmp_path / "b")
    return tmp_path / "a"


@pytest.mark.parametrize(
    "make, reason",
    [
        (lambda tmp: tmp / "plain.txt" / "bundle", "Not a directory"),
        (lambda tmp: tmp / ("n" * 300), "File name too long"),
    ],
)
def test_unreadable_bundle_path_is_one_line_with_the_os_reason(tmp_path: Path, make: Any, reason: str) -> None:
    (tmp_path / "plain.txt").write_text("x")
    result = run_packager("validate", str(make(tmp_path)))
    assert result.returncode == 25, (result.returncode, result.stderr[-2000:])
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("packager: error: cannot read the bundle")
    assert reason in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("args", [(), ("--json",)])
def test_a_bundle_folder_that_is_a_loop_of_links_is_a_bundle_error_not_a_file_system_one(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    result = invoke("validate", str(_loop(tmp_path)), *args)
    assert result.exit_code == 22, result.stderr
    line = one_error_line(result)
    assert f"bundle folder {tmp_path / 'a'} is a loop of symbolic links" in line and "free space" not in line


@pytest.mark.parametrize("args", [(), ("--json",), ("--from-files",)])
def test_a_bundle_file_linked_to_itself_is_a_finding(tmp_path: Path, args: tuple[str, ...]) -> None:
    bundle = tmp_path / "b"
    bundle.mkdir()
    (bundle / "config.json").write_text("{}")
    (bundle / "tokenizer.txt").symlink_to("tokenizer.txt")
    named = bundle / "tokenizer.txt" if "--from-files" in args else bundle
    result = invoke("validate", str(named), *args)
    assert result.exit_code == 30 and result.stderr == "", result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    if "--json" in args:
        found = [f for f in json.loads(result.stdout)["findings"] if f["file"] == "tokenizer.txt"]
        assert "a loop of links" in found[0]["message"]
    else:
        assert "tokenizer.txt: is a symbolic link to 'tokenizer.txt', a loop of links" in result.stdout
        assert "'tokenizer.txt' cannot name a file in the bundle (a loop of symbolic links)" in result.stdout


def test_empty_folder_is_reported_once(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    result = run_packager("validate", str(tmp_path / "empty"))
    assert result.returncode == 30
    lines = result.stdout.splitlines()
    assert len(lines) == 2, lines  # one finding and the verdict
    assert lines[0].startswith("ERROR   .: none of the ten bundle files is here (config.json, ")
    assert "it is empty" in lines[0] and lines[0].count("tokenizer.txt") == 1


def test_missing_files_are_one_short_finding_each(copy_of: Path) -> None:
    for name in ("tokenizer.txt", "llm.mnn.json"):
        (copy_of / name).unlink()
    missing = [f for f in validate(copy_of).errors if f.message.startswith("missing")]
    assert [(f.file, f.message) for f in missing] == [
        ("llm.mnn.json", "missing (model graph as json (reference copy))"),
        ("tokenizer.txt", "missing (tokenizer)"),
    ]


def test_zeroed_weights_fail_strict_validation_through_the_cli(copy_of: Path) -> None:
    weights = copy_of / "llm.mnn.weight"
    weights.write_bytes(bytes(weights.stat().st_size))
    result = run_cli("validate", str(copy_of), "--strict")
    assert result.returncode == 30
    assert (
        f"ERROR   llm.mnn.weight: all 64 blocks sampled across its {weights.stat().st_size} bytes are the byte "
        "0x00 repeated: the weights were zeroed or overwritten"
    ) in result.stdout


def test_zero_scales_of_one_tensor_are_named_through_the_cli(copy_of: Path) -> None:
    mutate(
        copy_of,
        {
            "op": "tensor",
            "file": "llm.mnn.weight",
            "tensor": "/layers.0/mlp/gate_proj/Linear",
            "part": "scales",
            "value": 0.0,
        },
    )
    result = run_cli("validate", str(copy_of), "--strict")
    assert result.returncode == 30
    assert (
        "ERROR   llm.mnn.weight tensor /layers.0/mlp/gate_proj/Linear: every sampled quantization scale is 0"
        in result.stdout
    )


def test_huge_values_and_keys_are_echoed_shortened(copy_of: Path) -> None:
    huge = "x" * 3_000_000  # stands for the 100 MB value of the report; the cap is the same
    config = json.loads((copy_of / "config_opencl.json").read_text())
    config.update(backend_type=huge, tmp_path=7, **{huge[:1_000_000] + "y": 1})
    (copy_of / "config_opencl.json").write_text(json.dumps(config))
    mutate(copy_of, {"op": "set", "file": "config_cpu.json", "pointer": "/power", "value": huge})
    for args in (("validate", str(copy_of)), ("validate", str(copy_of), "--json")):
        result = run_cli(*args)
        assert result.returncode == 30 and len(result.stdout) < 8000, len(result.stdout)
        assert "more characters)" in result.stdout and "xxxxxxxxxx" in result.stdout
    lines = run_cli("validate", str(copy_of)).stdout.splitlines()
    assert all(len(line) < 1000 for line in lines) and len(lines) >= 5
    assert any(line.startswith("ERROR   config_opencl.json /backend_type: 'xxxx") for line in lines)


def test_overlong_path_value_in_a_config_is_a_finding(copy_of: Path) -> None:
    mutate(copy_of, {"op": "set", "file": "config.json", "pointer": "/tokenizer_file", "value": "t" * 300})
    result = run_cli("validate", str(copy_of))
    assert result.returncode == 30 and "Traceback" not in result.stderr
    assert (
        "ERROR   config.json /tokenizer_file: 'tttttttttt" in result.stdout
        and "cannot name a file in the bundle (File name too long)" in result.stdout
    )


def test_config_nested_10000_deep_is_a_finding(copy_of: Path) -> None:
    mutate(copy_of, {"op": "deep", "file": "config_cpu.json", "depth": 10_000})
    mutate(copy_of, {"op": "deep", "file": "llm.mnn.json", "depth": 10_000})
    result = run_cli("validate", str(copy_of), "--json")
    assert result.returncode == 30 and result.stderr == ""
    findings = {(f["file"], f["message"]) for f in json.loads(result.stdout)["findings"]}
    assert ("config_cpu.json", "nested too deeply to parse; a bundle file is a few levels deep") in findings
    assert ("llm.mnn.json", "nested too deeply to parse; a bundle file is a few levels deep") in findings


def test_schemas_are_valid_and_self_identified() -> None:
    from jsonschema import Draft202012Validator

    for name in resources.SCHEMA_NAMES:
        schema = resources.schema(name)
        Draft202012Validator.check_schema(schema)
        assert schema["$id"].endswith(f"/{name}.schema.json") and schema["title"] and schema["description"]


def _all_properties(node: Any):  # type: ignore[no-untyped-def]
    if isinstance(node, dict):
        for key, value in node.get("properties", {}).items():
            yield key, value
        for value in node.values():
            yield from _all_properties(value)
    elif isinstance(node, list):
        for value in node:
            yield from _all_properties(value)


def test_every_property_has_a_title_and_description() -> None:
    for name in resources.SCHEMA_NAMES:
        for key, prop in _all_properties(resources.schema(name)):
            if set(prop) <= {"$ref"}:
                continue  # a reference to a property defined (and described) elsewhere
            assert prop.get("title") and prop.get("description"), (name, key)


def test_seed_card_config_values_pass_the_schemas() -> None:
    draft = {
        "backend_type": "cpu",
        "thread_num": 2,
        "precision": "low",
        "memory": "low",
        "sampler_type": "greedy",
        "power": "high",
    }
    recipe = {
        "backend_type": "opencl",
        "thread_num": 4,
        "precision": "low",
        "memory": "low",
        "sampler_type": "greedy",
        "speculative_type": "draftmodel",
        "draft_predict_length": 3,
        "draft_config_path": "/path/to/config_cpu.json",
    }
    runtime = {
        "_comment": "Optimal runtime configuration for TokForge speculative decoding",
        "recommended": {
            "target_backend": "opencl",
            "draft_backend": "cpu",
            "draft_predict_length": 3,
            "draft_thread_num": 2,
            "draft_power": "high",
            "draft_sampler_type": "greedy",
        },
        "compatible_targets": {
            "qwen3_8b": {"enabled": True, "uplift": "+24-40%"},
            "qwen3_4b": {"enabled": False, "reason": "Degenerates"},
        },
        "notes": {"thread_num": "2 threads stay on performance cores"},
    }
    for schema, doc in (("draft_config", draft), ("config_opencl", recipe), ("runtime_config", runtime)):
        assert not list(resources.validator(schema).iter_errors(doc)), schema
    if SEEDS.is_dir():  # the seed card text itself shows the draft config
        text = "".join(p.read_text() for p in SEEDS.glob("*.txt"))
        assert '"thread_num": 2' in text and '"sampler_type": "greedy"' in text


SCHEMA_DIR = Path(__file__).resolve().parents[1] / "schemas"
FILE_SCHEMAS = {
    "config.json": "config",
    "config_cpu.json": "draft_config",
    "draft_config_cpu.json": "draft_config",
    "config_opencl.json": "config_opencl",
    "llm_config.json": "llm_config",
    "runtime_config.json": "runtime_config",
}


def _check_jsonschema(schema: str, *files: Path) -> subprocess.CompletedProcess[str]:
    tool = Path(sys.executable).with_name("check-jsonschema")
    prefix = (
        ["unshare", "-n"]
        if shutil.which("unshare") and subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode == 0
        else []
    )
    return subprocess.run(
        [*prefix, str(tool), "--schemafile", str(SCHEMA_DIR / f"{schema}.schema.json"), *map(str, files)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_jsonschema_accepts_the_bundle_offline(bundle4: ConvertResult) -> None:
    for name, schema in FILE_SCHEMAS.items():
        result = _check_jsonschema(schema, bundle4.out / name)
        assert result.returncode == 0, (name, result.stdout, result.stderr)
    result = _check_jsonschema("provenance", bundle4.provenance)
    assert result.returncode == 0, result.stdout


def test_check_jsonschema_rejects_a_wrong_type(bundle4: ConvertResult, tmp_path: Path) -> None:
    bad = tmp_path / "config_cpu.json"
    data = json.loads((bundle4.out / "config_cpu.json").read_text())
    data["thread_num"] = "2"
    bad.write_text(json.dumps(data))
    result = _check_jsonschema("draft_config", bad)
    assert result.returncode == 1 and "thread_num" in result.stdout


def test_schemas_are_self_contained_and_in_sync() -> None:
    # No schema refers to another file, so editors and check-jsonschema need no network or registry;
    # the per-file copies of the MNN key definitions must equal mnn_runtime.schema.json's.
    keys = resources.schema("mnn_runtime")["$defs"]["properties"]
    for name in resources.SCHEMA_NAMES:
        text = json.dumps(resources.schema(name))
        assert not re.search(r'"\$ref": "[^#]', text), name
    for name in ("config", "draft_config", "config_opencl", "release"):
        assert resources.schema(name)["$defs"]["keys"] == keys, name
    assert resources.schema("llm_config")["properties"]["jinja"]["properties"] == keys["jinja"]["properties"]


def test_a_damaged_weight_file_gives_a_short_report(copy_of: Path) -> None:
    (copy_of / "llm.mnn.weight").write_bytes(b"")
    mutate(copy_of, {"op": "set", "file": "llm_config.json", "pointer": "/tie_embeddings/3", "value": 8})
    errors = validate(copy_of).errors
    past = [f for f in errors if "ends past llm.mnn.weight" in f.message]
    bits = [f for f in errors if "4-bit weights, the bundle declares 8" in f.message]
    assert len(past) == 9 and past[-1].message.startswith("16 more ops whose weights end past the file (the last: ")
    # tie_embeddings declares the lm_head's recipe only (it may have its own bits): the other linears are not blamed.
    assert [f.pointer for f in bits] == ["/oplists (/lm/lm_head/Linear)"]
    assert ("llm.mnn.weight", "is empty") in {(f.file, f.message) for f in errors}
