"""The files a release spec names: [verify] prompts named as the spec's key and used by verify --spec, and
check-spec saying which local path is missing (issue 39, row 12)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from packager.errors import InvalidOption, SpecError
from packager.spec.check import check_spec
from packager.spec.model import from_dict

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "release.toml"


def test_a_bad_prompts_file_of_the_spec_is_named_by_its_key(tmp_path: Path) -> None:
    from packager.measure.workload import spec_prompts

    (tmp_path / "p.txt").write_bytes(b"\xff\xfe")
    spec = from_dict({"verify": {"prompts": "p.txt"}}, tmp_path / "release.toml")
    with pytest.raises(SpecError) as refused:
        spec_prompts(spec)
    line = refused.value.one_line()
    assert "[verify] prompts" in line and "--prompts" not in line and "release.toml" in line
    (tmp_path / "p.txt").unlink()
    with pytest.raises(SpecError, match=r"\[verify\] prompts .* does not exist"):
        spec_prompts(spec)


def test_verify_with_a_spec_measures_on_the_specs_prompts_unless_prompts_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from packager.cli import cli
    from packager.measure import verify as verify_module  # imported here: not left to another test's imports

    for name in ("bundle", "ckpt"):
        (tmp_path / name).mkdir()
    (tmp_path / "mine.txt").write_text("first\nsecond\n")
    (tmp_path / "flag.txt").write_text("flag\n")
    (tmp_path / "release.toml").write_text('[verify]\nprompts = "mine.txt"\n')
    seen: list[Any] = []

    def measured(bundle: Path, checkpoint: Path, prompts: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(prompts)
        raise InvalidOption("stopped here by the test")

    monkeypatch.setattr(verify_module, "verify", measured)
    words = ["verify", str(tmp_path / "bundle"), "--checkpoint", str(tmp_path / "ckpt")]
    CliRunner().invoke(cli, [*words, "--spec", str(tmp_path / "release.toml")])
    CliRunner().invoke(cli, [*words, "--spec", str(tmp_path / "release.toml"), "--prompts", str(tmp_path / "flag.txt")])
    assert seen == [("first", "second"), ("flag",)]


def test_check_spec_says_which_local_path_is_missing(tmp_path: Path) -> None:
    text = EXAMPLE.read_text().replace("[convert]\n", '[convert]\ncheckpoint = "ckpt"\n', 1)
    spec = tmp_path / "release.toml"
    spec.write_text(text + '\n[verify]\nprompts = "prompts.txt"\n')
    findings = {(f.severity, f.message.split(":")[0]): f for f in check_spec(spec).findings}
    assert set(findings) == {("warning", "convert.checkpoint"), ("error", "verify.prompts")}
    assert findings[("error", "verify.prompts")].line == len(spec.read_text().splitlines())
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "prompts.txt").write_text("hello\n")
    assert check_spec(spec).findings == ()
