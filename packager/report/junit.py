"""JUnit XML, as Jenkins, GitLab and GitHub test reporters read it: one test suite per thing checked, one test case
per file, each finding that fails the run a <failure>; warnings that do not (no --strict) go to <system-out>."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from . import FOLDER, Checked, Report, clean


def render(report: Report) -> str:
    suites = [_suite(report, checked) for checked in report.checked]
    root = ET.Element(
        "testsuites",
        {
            "name": report.tool,
            "errors": "0",
            "tests": str(sum(int(s.get("tests", 0)) for s in suites)),
            "failures": str(sum(int(s.get("failures", 0)) for s in suites)),
        },
    )
    root.extend(suites)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _suite(report: Report, checked: Checked) -> ET.Element:
    cases = [_case(report, checked, name) for name in _files(checked)]
    failed = sum(1 for case in cases if case.find("failure") is not None)  # JUnit counts failed tests
    suite = ET.Element(
        "testsuite",
        {"name": _text(checked.path), "tests": str(len(cases)), "failures": str(failed), "errors": "0", "skipped": "0"},
    )
    suite.extend(cases)
    return suite


def _files(checked: Checked) -> list[str]:
    """Every file checked, then any other a finding names (an unexpected file, the folder itself)."""
    return list(dict.fromkeys([*checked.files, *(f.file for f in checked.findings)])) or [FOLDER]


def _case(report: Report, checked: Checked, name: str) -> ET.Element:
    case = ET.Element("testcase", {"classname": report.tool.replace(" ", "."), "name": _text(checked.where(name))})
    notes = []
    for finding in (f for f in checked.findings if f.file == name):
        line = _text(f"{finding.severity} {finding.location}: {finding.message}")
        if checked.fails(finding, report.strict):
            ET.SubElement(case, "failure", {"type": finding.severity, "message": line}).text = line
        else:
            notes.append(line)
    if notes:
        ET.SubElement(case, "system-out").text = "\n".join(notes)
    return case


def _text(value: str) -> str:
    """XML 1.0 cannot hold most control characters or lone surrogates at all: they are shown as \\xNN."""
    return clean(value, keep_lines=True)
