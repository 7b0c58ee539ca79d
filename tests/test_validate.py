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
from packager.checksum import write_manifest
from packager.convert.pipeline import ConvertResult
from packager.validate import validate
from tests.conftest import run_cli

CORPUS = Path(__file__).parent / "broken_bundles"
CASES = sorted(p.stem for p in CORPUS.glob("*.json"))
SEEDS = Path(__file__).resolve().parents[2] / "shared" / "seeds"


def _parts(pointer: str) -> list[str]:
    return [p.replace("~1", "/").replace("~0", "~") for p in pointer.split("/")[1:]]


def _edit_json(path: Path, pointer: str, action: str, value: Any = None) -> None:
    data = json.loads(path.read_text())
    *parents, last = _parts(pointer)
    node = data
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    key: Any = int(last) if isinstance(node, list) else last
    if action == "set":
        node[key] = value
    elif action == "remove":
        del node[key]
    else:  # "add": increment a number
        node[key] += value
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def _rewrite_header(path: Path, line: int, content: str) -> None:
    data = path.read_bytes()
    lines = data.split(b"\n", 3)
    lines[line] = content.encode()
    path.write_bytes(b"\n".join(lines))


def mutate(bundle: Path, mutation: dict[str, Any]) -> None:
    op, path = mutation["op"], bundle / mutation.get("file", "")
    if op in ("set", "remove", "add"):
        _edit_json(path, mutation["pointer"], op, mutation.get("value"))
    elif op == "text" or op == "write":
        path.write_text(mutation["content"])
    elif op == "replace":
        text = path.read_text()
        new = (re.sub(mutation["old_regex"], mutation["new"], text, count=1) if "old_regex" in mutation
               else text.replace(mutation["old"], mutation["new"], mutation.get("count", -1)))
        assert new != text
        path.write_text(new)
    elif op == "truncate":
        path.write_bytes(path.read_bytes()[: -mutation["bytes"]])
    elif op == "append":
        path.write_bytes(path.read_bytes() + bytes(mutation["bytes"]))
    elif op == "delete":
        path.unlink()
    elif op == "mkdir":
        path.mkdir()
    elif op == "symlink":
        path.unlink()
        os.symlink(mutation["target"], path)
    elif op == "header":
        _rewrite_header(path, mutation["line"], mutation["content"])
    elif op == "stop_ids":
        lines = path.read_bytes().split(b"\n", 3)
        special, _, prefix = (int(x) for x in lines[1].split())
        ids = lines[2].split()
        stops = [str(i).encode() for i in mutation["ids"]]
        lines[1] = f"{special} {len(stops)} {prefix}".encode()
        lines[2] = b" ".join(ids[:special] + stops + ids[len(ids) - prefix:] if prefix else ids[:special] + stops)
        path.write_bytes(b"\n".join(lines))
    elif op == "manifest":
        write_manifest(bundle)
    elif op == "flip":
        data = bytearray(path.read_bytes())
        data[mutation["offset"]] ^= 0xFF
        path.write_bytes(bytes(data))
    else:
        raise AssertionError(f"unknown mutation {op}")


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
    matches = [f for f in report.findings if f.file == expect["file"] and f.severity == expect["severity"]
               and (f.pointer == expect["pointer"] or (expect["pointer"].endswith("(")
                                                         and f.pointer.startswith(expect["pointer"])))
               and expect["contains"] in f.message]
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
    result = run_cli("validate", str(tmp_path / "nope"))
    assert result.returncode == 22 and result.stderr.count("\n") == 1


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
    draft = {"backend_type": "cpu", "thread_num": 2, "precision": "low", "memory": "low", "sampler_type": "greedy",
             "power": "high"}
    recipe = {"backend_type": "opencl", "thread_num": 4, "precision": "low", "memory": "low",
              "sampler_type": "greedy", "speculative_type": "draftmodel", "draft_predict_length": 3,
              "draft_config_path": "/path/to/config_cpu.json"}
    runtime = {"_comment": "Optimal runtime configuration for TokForge speculative decoding",
               "recommended": {"target_backend": "opencl", "draft_backend": "cpu", "draft_predict_length": 3,
                               "draft_thread_num": 2, "draft_power": "high", "draft_sampler_type": "greedy"},
               "compatible_targets": {"qwen3_8b": {"enabled": True, "uplift": "+24-40%"},
                                      "qwen3_4b": {"enabled": False, "reason": "Degenerates"}},
               "notes": {"thread_num": "2 threads stay on performance cores"}}
    for schema, doc in (("draft_config", draft), ("config_opencl", recipe), ("runtime_config", runtime)):
        assert not list(resources.validator(schema).iter_errors(doc)), schema
    if SEEDS.is_dir():  # the seed card text itself shows the draft config
        text = "".join(p.read_text() for p in SEEDS.glob("*.txt"))
        assert '"thread_num": 2' in text and '"sampler_type": "greedy"' in text


SCHEMA_DIR = Path(__file__).resolve().parents[1] / "schemas"
FILE_SCHEMAS = {"config.json": "config", "config_cpu.json": "draft_config", "draft_config_cpu.json": "draft_config",
                "config_opencl.json": "config_opencl", "llm_config.json": "llm_config",
                "runtime_config.json": "runtime_config"}


def _check_jsonschema(schema: str, *files: Path) -> subprocess.CompletedProcess[str]:
    tool = Path(sys.executable).with_name("check-jsonschema")
    prefix = ["unshare", "-n"] if shutil.which("unshare") and subprocess.run(
        ["unshare", "-n", "true"], capture_output=True).returncode == 0 else []
    return subprocess.run([*prefix, str(tool), "--schemafile", str(SCHEMA_DIR / f"{schema}.schema.json"),
                           *map(str, files)], capture_output=True, text=True, timeout=120)


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
