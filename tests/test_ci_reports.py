"""validate and check-spec in the formats CI reads: text, JSON, GitHub workflow commands, JUnit XML."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from packager.convert.pipeline import ConvertResult
from packager.report import Checked, Report
from packager.report.findings import Finding
from packager.report.formats import render
from packager.report.github import command
from tests.conftest import run_cli
from tests.inprocess import invoke, one_error_line, run_packager

JUNIT_XSD = Path(__file__).parent / "data" / "junit.xsd"
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "release.toml"
# What GitHub's runner takes as a workflow command: a line that starts with ::name, properties, ::, message.
COMMAND = re.compile(r"^::(error|warning|notice|debug|group|endgroup|add-mask|stop-commands)( [^:]*)?::(.*)$")


@pytest.fixture()
def bundle(bundle4: ConvertResult, tmp_path: Path) -> Path:
    target = tmp_path / "dist" / "draft"
    shutil.copytree(bundle4.out, target)
    return target


def _break_thread_num(bundle: Path) -> None:
    data = json.loads((bundle / "config_cpu.json").read_text())
    data["thread_num"] = "2"
    (bundle / "config_cpu.json").write_text(json.dumps(data))


def _junit_schema():  # type: ignore[no-untyped-def]
    import xmlschema

    return xmlschema.XMLSchema(str(JUNIT_XSD))


def test_github_format_annotates_file_and_pointer(bundle: Path) -> None:
    _break_thread_num(bundle)
    result = run_cli("validate", str(bundle), "--format", "github")
    assert result.returncode == 30
    lines = result.stdout.splitlines()
    assert (
        f"::error file={bundle}/config_cpu.json,title=packager%3A config_cpu.json /thread_num::'2' is not of "
        "type 'integer'" in result.stdout
    )
    assert all(COMMAND.match(line) for line in lines[:-1]) and lines[-1].startswith("packager validate: 1 checked")


def test_github_format_gives_line_and_column_of_a_syntax_error(bundle: Path) -> None:
    (bundle / "config_opencl.json").write_text('{\n  "backend_type": "opencl"\n  "thread_num": 4\n}\n')
    result = run_cli("validate", str(bundle), "--format", "github")
    assert (
        f"::error file={bundle}/config_opencl.json,line=3,col=3,title=packager%3A config_opencl.json::"
        "invalid JSON" in result.stdout
    )


def test_a_warning_is_a_github_warning(bundle: Path) -> None:
    data = json.loads((bundle / "config.json").read_text())
    data["zzz_custom"] = 1
    (bundle / "config.json").write_text(json.dumps(data))
    plain, strict = (run_cli("validate", str(bundle), "--format", "github", *extra) for extra in ((), ("--strict",)))
    assert plain.returncode == 0 and strict.returncode == 30
    assert plain.stdout.startswith(f"::warning file={bundle}/config.json,title=packager%3A config.json /zzz_custom::")


def test_a_hostile_file_name_cannot_forge_a_second_annotation(bundle: Path) -> None:
    name = "x,line=1:y%0A\n::error file=forged.py::pwned\r::notice::"
    (bundle / name).write_text("")
    result = run_cli("validate", str(bundle), "--format", "github")
    lines = result.stdout.splitlines()
    assert len(lines) == 2 and COMMAND.match(lines[0]) and "forged.py::" not in result.stdout
    properties = COMMAND.match(lines[0]).group(2)  # type: ignore[union-attr]
    assert [p.split("=")[0] for p in properties.strip().split(",")] == ["file", "title"]
    assert "x%2Cline=1%3Ay%250A%0A%3A%3Aerror file=forged.py%3A%3Apwned%0D%3A%3Anotice%3A%3A" in properties


def test_github_escaping_follows_the_toolkit_rules() -> None:
    assert (
        command("error", "100% sure\r\nnext", file="a:b,c.json", line=3)
        == "::error file=a%3Ab%2Cc.json,line=3::100%25 sure%0D%0Anext"
    )
    assert command("warning", "a\x1b[31mred\x00", title=None) == "::warning::a\\x1b[31mred\\x00"


def test_junit_report_is_valid_and_has_one_case_per_file(bundle: Path) -> None:
    _break_thread_num(bundle)
    (bundle / "notes.txt").write_text("extra")
    result = run_cli("validate", str(bundle), "--format", "junit")
    assert result.returncode == 30
    _junit_schema().validate(result.stdout)
    import xml.etree.ElementTree as ET

    suite = ET.fromstring(result.stdout).find("testsuite")
    assert suite is not None and suite.get("name") == str(bundle)
    cases = {case.get("name"): case for case in suite.iter("testcase")}
    assert len(cases) == 11 and int(suite.get("tests", 0)) == 11  # the ten files and the unexpected one
    failed = {name for name, case in cases.items() if case.find("failure") is not None}
    assert failed == {
        f"{bundle}/{n}" for n in ("config_cpu.json", "draft_config_cpu.json", "runtime_config.json", "notes.txt")
    }
    assert suite.get("failures") == "4"
    assert "/thread_num" in cases[f"{bundle}/config_cpu.json"].find("failure").get("message")  # type: ignore[union-attr]


def test_junit_keeps_warnings_out_of_failures_unless_strict() -> None:
    checked = Checked("bundle", "b", (Finding("config.json", "/x", "warning", "unknown key"),), ("config.json",))
    plain = render(Report("packager validate", (checked,)), "junit")
    strict = render(Report("packager validate", (checked,), strict=True), "junit")
    _junit_schema().validate(plain)
    _junit_schema().validate(strict)
    assert "<failure" not in plain and "warning config.json /x: unknown key" in plain
    assert '<failure type="warning"' in strict and 'failures="1"' in strict


def test_junit_survives_characters_xml_cannot_hold() -> None:
    hostile = "a\x00b\x1bc\udcff\ufffe]]><x/>&\"'"
    checked = Checked("bundle", "b" + hostile, (Finding(hostile, "/" + hostile, "error", hostile),))
    report = render(Report("packager validate", (checked,)), "junit")
    _junit_schema().validate(report)
    assert "a\\x00b\\x1bc\\xff\\ufffe]]&gt;&lt;x/&gt;&amp;" in report


def test_json_format_keeps_the_old_keys_and_adds_paths(bundle: Path) -> None:
    _break_thread_num(bundle)
    old = json.loads(run_cli("validate", str(bundle), "--json").stdout)
    new = json.loads(run_cli("validate", str(bundle), "--format", "json").stdout)
    assert old == new
    assert old["bundle"] == str(bundle) and old["ok"] is False and old["errors"] == 3
    first = next(f for f in old["findings"] if f["file"] == "config_cpu.json")
    assert first["pointer"] == "/thread_num" and first["path"] == f"{bundle}/config_cpu.json"
    assert old["checked"] == [
        {
            "kind": "bundle",
            "path": str(bundle),
            "ok": False,
            "errors": 3,
            "warnings": 0,
            "files": old["checked"][0]["files"],
            "bundle_kind": "draft",
        }
    ]
    assert len(old["checked"][0]["files"]) == 10


def test_json_and_another_format_is_a_usage_error(bundle: Path) -> None:
    result = run_cli("validate", str(bundle), "--json", "--format", "github")
    assert result.returncode == 2 and "--json is --format json" in result.stderr


def test_text_output_cannot_be_forged_by_a_file_name(bundle: Path) -> None:
    (bundle / "evil\nERROR   fake.json: injected").write_text("")
    lines = run_cli("validate", str(bundle)).stdout.splitlines()
    assert len(lines) == 2 and lines[0].startswith("ERROR   evil\\x0aERROR   fake.json: injected: unexpected")


def test_validate_several_bundles_reports_all(bundle: Path, bundle4: ConvertResult) -> None:
    _break_thread_num(bundle)
    result = run_cli("validate", str(bundle4.out), str(bundle))
    assert result.returncode == 30
    assert f"{bundle4.out}: ok (0 errors" in result.stdout and f"{bundle}: FAILED (3 errors" in result.stdout


def test_check_spec_formats_name_field_and_line(tmp_path: Path) -> None:
    spec = tmp_path / "release.toml"
    spec.write_text(
        EXAMPLE.read_text().replace(
            'title = "Qwen3 0.6B draft (MNN), KL-distilled from Qwen3 8B"', 'title = "TODO: the title"'
        )
    )
    text = run_packager("check-spec", str(spec))
    assert text.returncode == 17
    assert f"ERROR   {spec}:7:1: release.title: still the placeholder 'TODO: the title'" in text.stdout
    github = run_packager("check-spec", str(spec), "--format", "github")
    assert github.stdout.startswith(f"::error file={spec},line=7,col=1,title=packager%3A release spec::release.title")
    junit = run_packager("check-spec", str(spec), "--format", "junit")
    _junit_schema().validate(junit.stdout)
    assert "release.title: still the placeholder" in junit.stdout
    data = json.loads(run_packager("check-spec", str(spec), "--json").stdout)
    assert data["ok"] is False and data["findings"][0]["line"] == 7


def test_check_spec_reports_every_problem_at_once(tmp_path: Path) -> None:
    spec = tmp_path / "release.toml"
    spec.write_text(
        EXAMPLE.read_text()
        .replace("ar_tok_s = 13.9", 'ar_tok_s = "13.9"')
        .replace('license = "apache-2.0"', 'license = "TODO"')
        .replace("optimizer_steps = 1875", "optimizer_steps = 1800")
    )
    result = run_packager("check-spec", str(spec))
    found = [line for line in result.stdout.splitlines() if line.startswith("ERROR")]
    assert len(found) == 3, result.stdout
    assert re.search(r":9:1: release\.license: still the placeholder 'TODO'", found[0])
    assert re.search(r":35:1: training\.optimizer_steps: 1800 != ceil", found[1])
    assert re.search(r":66:1: benchmarks\.0\.ar_tok_s: '13\.9' is not of type 'number'", found[2])


def test_check_spec_reports_the_presence_checks_with_path_and_line(tmp_path: Path) -> None:
    spec = tmp_path / "release.toml"
    text = EXAMPLE.read_text().replace(
        'publisher = "your-name"\n', 'publisher = "your-name"\ncollection = "  padded"\ngated = "yes"\n', 1
    )
    text = text.replace(
        "\n[[credits]]",
        '\nusage = ["Install it.", "Open | Settings"]\n\n[card.links]\n'
        'Website = "https://me:secret@tokforge.ai"\nStore = "ftp://store.example"\n'
        'Discord = "https://discord.gg/x"\n\n[[credits]]',
        1,
    )
    spec.write_text(text)
    lines = text.splitlines()

    def line_of(start: str) -> int:
        return next(n for n, line in enumerate(lines, 1) if line.startswith(start))

    result = run_packager("check-spec", str(spec))
    assert result.returncode == 17, result.stdout
    found = [line for line in result.stdout.splitlines() if line.startswith("ERROR")]
    expected = [
        (line_of("collection = "), "release.collection: '  padded' must be one line"),
        (line_of("gated = "), "release.gated: 'yes' is not one of"),
        (line_of("usage = "), "card.usage.1: 'Open | Settings' must be one line without |"),
        (line_of("Website = "), "card.links.Website: the URL carries a user name or password"),
        (line_of("Store = "), "card.links.Store: 'ftp://store.example' is not an http:// or https:// URL"),
    ]
    assert len(found) == len(expected), result.stdout
    for (line, says), got in zip(expected, found):
        assert f"{spec}:{line}:1: {says}" in got, (line, says, got)
    github = run_packager("check-spec", str(spec), "--format", "github").stdout
    assert f"::error file={spec},line={line_of('Website = ')},col=1," in github and "card.links.Website" in github


def test_check_spec_passes_the_example_and_finds_release_toml_itself(tmp_path: Path) -> None:
    assert run_packager("check-spec", str(EXAMPLE)).returncode == 0
    shutil.copy(EXAMPLE, tmp_path / "release.toml")
    here = run_packager("check-spec", cwd=tmp_path)
    assert here.returncode == 0 and here.stdout.strip() == "release.toml: ok (0 errors, 0 warnings)"
    none = run_packager("check-spec", cwd=tmp_path / "..")
    assert none.returncode == 17 and none.stderr.count("\n") == 1 and "no release.toml here" in none.stderr


@pytest.mark.parametrize(
    "content, expect",
    [
        (b'[release\nrepo_id = "a/b"\n', r":1:\d+: is not valid TOML"),
        (b"\xff\xfe", "cannot be read"),
        (b"x = [" + b"[" * 3000 + b"]" * 3000 + b"]\n", "nested too deeply|is not valid TOML"),
    ],
)
def test_a_broken_spec_file_is_a_finding_not_a_traceback(tmp_path: Path, content: bytes, expect: str) -> None:
    spec = tmp_path / "release.toml"
    spec.write_bytes(content)
    result = run_packager("check-spec", str(spec), str(tmp_path / "missing.toml"))
    assert result.returncode == 17 and "Traceback" not in result.stderr, result.stderr
    assert re.search(expect, result.stdout) and f"ERROR   {tmp_path}/missing.toml: does not exist" in result.stdout


def test_release_refuses_a_spec_with_a_todo_naming_the_field(tmp_path: Path) -> None:
    spec = tmp_path / "release.toml"
    spec.write_text(EXAMPLE.read_text().replace('runs_on = "Android', 'runs_on = "TODO: Android'))
    result = run_packager("release", str(spec), "--bundle", str(tmp_path))
    assert result.returncode == 17 and "card.runs_on: still the placeholder" in result.stderr


@pytest.mark.parametrize(
    "field, value",
    [("title", "A draft\\u001b]0;PWNED\\u0007"), ("summary", "one\\u2028two"), ("publisher", "me\\u0000")],
)
def test_a_control_character_in_card_text_is_a_check_spec_finding_and_card_refuses_it(
    tmp_path: Path, field: str, value: str
) -> None:
    text = EXAMPLE.read_text()
    spec = tmp_path / "release.toml"
    spec.write_text(re.sub(rf'^{field} = "', lambda m: m.group() + value, text, count=1, flags=re.M))
    checked = invoke("check-spec", str(spec))
    assert checked.exit_code == 17, checked.stdout
    assert f"release.{field}: holds the control character \\" in checked.stdout
    assert "\x1b" not in checked.stdout + checked.stderr and "\x07" not in checked.stdout
    (tmp_path / "bundle").mkdir()
    carded = invoke("card", str(tmp_path / "bundle"), "--spec", str(spec))
    assert carded.exit_code == 17 and f"release.{field}: holds the control character" in one_error_line(carded)
    assert list((tmp_path / "bundle").iterdir()) == []


def test_tabs_and_line_ends_in_card_text_pass_check_spec(tmp_path: Path) -> None:
    spec = tmp_path / "release.toml"
    spec.write_text(EXAMPLE.read_text().replace('summary = "', 'summary = "two\\tcolumns\\r\\nand lines\\n', 1))
    assert invoke("check-spec", str(spec)).exit_code == 0
