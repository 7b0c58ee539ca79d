"""The card renders from the spec, the files and measurements; every figure moves with its source."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from packager.card.measurements import gather_measurements
from packager.card.render import human_size, render
from packager.convert import provenance
from packager.convert.pipeline import ConvertResult
from packager.errors import CardError, SpecError
from packager.spec import model as spec_module
from packager.validate import validate
from tests.conftest import run_cli
from tests.inprocess import invoke, one_error_line
from tests.specs import EXAMPLE


@pytest.fixture()
def example() -> spec_module.ReleaseSpec:
    return spec_module.load(EXAMPLE)


def _spec_with(tmp_path: Path, old: str, new: str) -> Path:
    text = EXAMPLE.read_text()
    assert old in text
    path = tmp_path / "release.toml"
    path.write_text(text.replace(old, new, 1))
    return path


def test_card_renders_with_hub_front_matter(bundle4: ConvertResult, example: spec_module.ReleaseSpec) -> None:
    from huggingface_hub import ModelCard

    card = render(bundle4.out, example)
    data = ModelCard(card.text).data.to_dict()
    assert data["license"] == "apache-2.0" and data["library_name"] == "mnn"
    assert data["base_model"] == ["Qwen/Qwen3-0.6B"] and data["base_model_relation"] == "finetune"
    assert data["pipeline_tag"] == "text-generation"
    assert {"speculative-decoding", "draft-model", "4-bit"} <= set(data["tags"])
    for section in (
        "## Files",
        "## Which targets it pairs with",
        "## Recommended settings",
        "## How it was made",
        "## Benchmark",
        "## Measured by packager",
        "## Limitations",
        "## License",
        "## Credits",
    ):
        assert section in card.text


def test_a_card_without_a_verify_report_says_the_bundle_was_not_verified_against_its_source(
    bundle4: ConvertResult, example: spec_module.ReleaseSpec
) -> None:
    assert "**Not verified against its source**" in render(bundle4.out, example).text


def test_card_states_the_files_as_they_are(bundle4: ConvertResult, example: spec_module.ReleaseSpec) -> None:
    text = render(bundle4.out, example).text
    for name, digest in bundle4.digests.items():
        assert f"| `{name}` | {human_size(bundle4.sizes[name])} |" in text
        assert digest in text
    assert f"{human_size(sum(bundle4.sizes.values()))} (10 files)" in text
    assert (bundle4.out / "config_cpu.json").read_text().strip() in text
    assert "Minimum MNN engine | 3.6.1" in text


def test_card_follows_a_changed_file(bundle4: ConvertResult, example: spec_module.ReleaseSpec, tmp_path: Path) -> None:
    bundle = tmp_path / "b"
    shutil.copytree(bundle4.out, bundle)
    for name in ("config_cpu.json", "draft_config_cpu.json"):
        data = json.loads((bundle / name).read_text())
        data["thread_num"] = 3
        (bundle / name).write_text(json.dumps(data, indent=2) + "\n")
    before = render(bundle4.out, example).text
    after = render(bundle, example).text
    assert "| Draft threads | 2 |" in before and "| Draft threads | 3 |" in after
    assert '"thread_num": 3' in after


def test_card_follows_the_quantization_of_the_files(bundle8: ConvertResult, example: spec_module.ReleaseSpec) -> None:
    text = render(bundle8.out, example).text
    assert "MNN bundle, 8-bit weights (block 128)" in text and "- 8-bit" in text


def test_uplift_is_computed_from_the_spec(bundle4: ConvertResult, tmp_path: Path) -> None:
    assert "| +30% |" in render(bundle4.out, spec_module.load(EXAMPLE)).text
    faster = spec_module.load(_spec_with(tmp_path, "draft_tok_s = 18.1", "draft_tok_s = 20.0"))
    assert "| +44% |" in render(bundle4.out, faster).text


def test_training_figures_come_from_the_spec(bundle4: ConvertResult, tmp_path: Path) -> None:
    changed = spec_module.load(_spec_with(tmp_path, "final_kl = 0.339", "final_kl = 0.41"))
    text = render(bundle4.out, changed).text
    assert "- Final KL: 0.41" in text and "0.339" not in text
    assert "LoRA r=16, alpha=32" in text and "1,875 optimizer steps" in text


def test_measurements_come_from_provenance(bundle4: ConvertResult, example: spec_module.ReleaseSpec) -> None:
    from packager.card.measurements import measurements_from_provenance

    record = provenance.read(bundle4.provenance)
    text = render(bundle4.out, example, measurements=measurements_from_provenance(record)).text
    chosen = record["tokenizer"]["agreement"][record["tokenizer"]["format"]]
    assert f"**{chosen['matched']}/{chosen['total']}**" in text
    assert f"llmexport {record['versions']['llmexport']}" in text
    assert "Tokenizer agreement" not in render(bundle4.out, example).text  # no measurement, no claim


def test_missing_spec_field_fails_with_its_name(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"release: 'title' is a required property"):
        spec_module.load(_spec_with(tmp_path, 'title = "Qwen3 0.6B draft (MNN), KL-distilled from Qwen3 8B"\n', ""))


def test_wrong_type_fails_with_its_path(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"benchmarks\.0\.ar_tok_s: '13.9' is not of type 'number'"):
        spec_module.load(_spec_with(tmp_path, "ar_tok_s = 13.9", 'ar_tok_s = "13.9"'))


def test_inconsistent_training_figures_are_refused(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"training\.optimizer_steps: 1800 != ceil\(.*\) x epochs = 1875"):
        spec_module.load(_spec_with(tmp_path, "optimizer_steps = 1875", "optimizer_steps = 1800"))


def test_card_needs_its_tables(bundle4: ConvertResult, tmp_path: Path) -> None:
    path = tmp_path / "release.toml"
    path.write_text("[convert]\nquant_bits = 4\n")
    with pytest.raises(SpecError, match=r"no \[release\] table"):
        render(bundle4.out, spec_module.load(path))


def test_own_template_and_strict_undefined(
    bundle4: ConvertResult, example: spec_module.ReleaseSpec, tmp_path: Path
) -> None:
    own = tmp_path / "card.j2"
    own.write_text("---\n{{ front_matter }}\n---\n# {{ release.title }} ({{ bits }}-bit)\n")
    assert render(bundle4.out, example, template=own).text.endswith("(4-bit)\n")
    own.write_text("---\n{{ front_matter }}\n---\n{{ release.download_count }}\n")
    with pytest.raises(CardError, match="download_count"):
        render(bundle4.out, example, template=own)


def test_broken_front_matter_is_refused(
    bundle4: ConvertResult, example: spec_module.ReleaseSpec, tmp_path: Path
) -> None:
    own = tmp_path / "card.j2"
    own.write_text("---\nlicense: [unclosed\n---\n# x\n")
    with pytest.raises(CardError, match="front matter"):
        render(bundle4.out, example, template=own)


def test_cli_writes_readme_that_validate_accepts(bundle4: ConvertResult, tmp_path: Path) -> None:
    bundle = tmp_path / "b"
    shutil.copytree(bundle4.out, bundle)
    shutil.copy(bundle4.provenance, tmp_path / "b.provenance.json")
    result = run_cli("card", str(bundle), "--spec", str(EXAMPLE))
    assert result.returncode == 0, result.stderr
    text = (bundle / "README.md").read_text()
    assert text.startswith("---\n") and "Tokenizer agreement" in text
    assert validate(bundle).findings == ()


def test_cli_spec_error_is_one_line(bundle4: ConvertResult, tmp_path: Path) -> None:
    spec = _spec_with(tmp_path, 'uses = "yes"', 'uses = "maybe"')
    result = run_cli("card", str(bundle4.out), "--spec", str(spec), "-o", "-")
    assert result.returncode == 17 and result.stderr.count("\n") == 1 and "pairing.0.uses" in result.stderr


def test_card_states_a_pair_report(bundle4: ConvertResult, tmp_path: Path) -> None:
    report = tmp_path / "pair.json"
    prompts = tmp_path / "prompts.txt"  # a few prompts: the card's wiring is under test, not the figures
    prompts.write_text("The capital of France is\ndef fibonacci(n):\nQ: Why is the sky blue?\n", encoding="utf-8")
    pair = run_cli(
        "pair",
        str(bundle4.out),
        str(bundle4.out),
        "--tokens",
        "12",
        "--repeats",
        "1",
        "--prompts",
        str(prompts),
        "--json",
        "--quiet",
    )
    assert pair.returncode == 0, pair.stderr
    report.write_text(pair.stdout)
    bundle = tmp_path / "b"
    shutil.copytree(bundle4.out, bundle)
    result = run_cli("card", str(bundle), "--spec", str(EXAMPLE), "--pair", str(report), "-o", "-")
    assert result.returncode == 0, result.stderr
    assert "- alpha (per-token acceptance): 1.000 (1.000-1.000)" in result.stdout
    assert "| 3 | 1.000 (1.000-1.000) | 4.00 (4.00-4.00) |" in result.stdout
    assert "draft_predict_length` for that device" not in result.stdout  # only device costs may recommend it
    (tmp_path / "bad.json").write_text("{}")
    bad = run_cli("card", str(bundle), "--spec", str(EXAMPLE), "--pair", str(tmp_path / "bad.json"))
    assert bad.returncode == 24 and "is not a `packager pair --json` report" in bad.stderr


def test_a_pair_of_the_draft_with_itself_names_no_local_folder_warns_and_labels_the_machine(
    bundle4: ConvertResult, tmp_path: Path
) -> None:
    report = tmp_path / "pair.json"
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("The capital of France is\ndef fibonacci(n):\n", encoding="utf-8")
    folder = tmp_path / "my-local-target-folder"
    shutil.copytree(bundle4.out, folder)
    pair = run_cli(
        "pair", str(folder), str(folder), "--tokens", "8", "--repeats", "1", "--prompts", str(prompts), "--json"
    )
    assert pair.returncode == 0, pair.stderr
    report.write_text(pair.stdout)
    text = render(folder, spec_module.load(EXAMPLE), measurements=gather_measurements(folder, pair_report=report)).text
    assert "my-local-target-folder" not in text and "Acceptance with a target whose Hub id was not given" in text
    assert "**Draft and target are the same model here**:" in text
    cpu = json.loads(pair.stdout)["costs"]["source"].removeprefix("this CPU (").removesuffix(")")
    assert f"Speed, with the step costs measured on a machine's CPU ({cpu}), not a phone" in text
    assert "this CPU" not in text
    named = _spec_with(tmp_path, "[card]\n", '[card]\npair_target = "Qwen/Qwen3-8B"\n')
    text = render(folder, spec_module.load(named), measurements=gather_measurements(folder, pair_report=report)).text
    assert "Acceptance with Qwen/Qwen3-8B (packager pair:" in text and "the same model here** (Qwen/Qwen3-8B)" in text
    bad = run_cli("check-spec", str(_spec_with(tmp_path, "[card]\n", '[card]\npair_target = "./target"\n')))
    assert bad.returncode == 17 and "card.pair_target" in bad.stdout + bad.stderr


def test_a_draft_card_says_how_to_use_it_and_counts_its_parameters(
    bundle4: ConvertResult, tiny_checkpoint: Path, example: spec_module.ReleaseSpec
) -> None:
    from safetensors import safe_open

    from packager.card.render import parameters_text

    text = render(bundle4.out, example).text
    assert "## How to use it with MNN" in text
    assert "packager pull your-name/Qwen3-0.6B-KL-draft-MNN@v3 ./draft" in text
    assert (
        bundle4.out / "config_opencl.json"
    ).read_text().strip() in text and '"speculative_type": "draftmodel"' in text
    assert "`draft_config_path` set to where the app keeps this folder's `draft_config_cpu.json`" in text
    counted = 0
    for path in tiny_checkpoint.glob("*.safetensors"):
        with safe_open(path, "np") as tensors:
            for name in tensors.keys():  # noqa: SIM118 - safe_open is no mapping
                counted += int(np.prod(tensors.get_slice(name).get_shape()))
    assert f"| Parameters | {parameters_text(counted)} (counted in the bundle's graph;" in text


CAPPED = ("bash", "-c", 'ulimit -v 4000000; exec "$0" "$@"')  # a read that would not stop fails here, not the host


def _one_line(result, code: int, *words: str) -> None:  # type: ignore[no-untyped-def]
    assert result.returncode == code, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("packager: error:") and "Traceback" not in result.stderr, (
        result.stderr
    )
    for word in words:
        assert word in lines[0], lines[0]


def _measured(tmp_path: Path, name: str, *command: str) -> Path:
    done = run_cli(*command, "--json", "--quiet")
    assert done.returncode == 0, done.stderr
    (tmp_path / name).write_text(done.stdout)
    return tmp_path / name


def test_pair_and_verify_reports_are_stated_only_on_the_card_of_the_bundle_they_measured(
    bundle4: ConvertResult, bundle8: ConvertResult, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("The capital of France is\nQ: Why is the sky blue?\n", encoding="utf-8")
    pair8 = _measured(
        tmp_path,
        "pair8.json",
        "pair",
        str(bundle8.out),
        str(bundle4.out),
        "--tokens",
        "12",
        "--repeats",
        "1",
        "--prompts",
        str(prompts),
    )
    verify8 = _measured(
        tmp_path,
        "verify8.json",
        "verify",
        str(bundle8.out),
        "--checkpoint",
        str(tiny_checkpoint),
        "--prompts",
        str(prompts),
    )
    for option, report, command in (("--pair", pair8, "pair"), ("--verify", verify8, "verify")):
        refused = run_cli("card", str(bundle4.out), "--spec", str(EXAMPLE), option, str(report), "-o", "-")
        _one_line(
            refused, 24, "measured another bundle: llm.mnn differs here", f"run packager {command} on this bundle again"
        )
    stated = run_cli(
        "card", str(bundle8.out), "--spec", str(EXAMPLE), "--pair", str(pair8), "--verify", str(verify8), "-o", "-"
    )
    assert stated.returncode == 0, stated.stderr
    assert "Not verified against its source" not in stated.stdout
    assert "greedy_acceptance_alpha" in stated.stdout and "mean_kl" in stated.stdout
    for report, key in ((pair8, "draft_files_xxh3_128"), (verify8, "files_xxh3_128")):  # an older packager's
        data = json.loads(report.read_text())
        del data[key]
        report.write_text(json.dumps(data))
        old = run_cli(
            "card",
            str(bundle8.out),
            "--spec",
            str(EXAMPLE),
            "--pair" if report == pair8 else "--verify",
            str(report),
            "-o",
            "-",
        )
        _one_line(old, 24, "names no files it measured", key)


@pytest.mark.parametrize("source", ["/dev/zero", "sparse"])
@pytest.mark.parametrize("given", ["--pair", "--verify", "--speculate", "spec pair_report"])
def test_a_report_larger_than_any_is_one_line_under_a_memory_cap(
    bundle4: ConvertResult, tmp_path: Path, given: str, source: str
) -> None:
    path = tmp_path / "report.json"
    if source == "sparse":
        with open(path, "wb") as handle:  # 3 GB that hold no memory
            handle.truncate(3 << 30)
    report = source if source == "/dev/zero" else str(path)
    if given == "spec pair_report":
        spec = _spec_with(tmp_path, "[card]\n", f'[card]\npair_report = "{report}"\n')
        carded = run_cli("card", str(bundle4.out), "--spec", str(spec), "-o", "-", prefix=CAPPED)
        released = run_cli("release", str(spec), "--bundle", str(bundle4.out), "--dry-run", prefix=CAPPED)
        _one_line(released, 26, "pair report", "64 MiB", "too large")
    else:
        carded = run_cli("card", str(bundle4.out), "--spec", str(EXAMPLE), given, report, "-o", "-", prefix=CAPPED)
    _one_line(carded, 26, "report", "64 MiB", "too large")


@pytest.mark.parametrize(
    "content, said",
    [
        (b'{"tokenizer": {"format"', "is not valid JSON"),
        (b"[1, 2, 3]", "is not a JSON object"),
        (b'{"tokenizer": 5}', "is not a record packager convert wrote"),
        (b"\xff\xfe", "is not UTF-8 text"),
    ],
)
@pytest.mark.parametrize("given", [True, False], ids=["--provenance", "BUNDLE.provenance.json"])
def test_a_malformed_provenance_record_is_one_line_naming_it_and_no_card(
    content: bytes, said: str, given: bool, tmp_path: Path
) -> None:
    (tmp_path / "bundle").mkdir()
    record = tmp_path / "bundle.provenance.json"  # where convert writes it, so the card finds it by default
    record.write_bytes(content)
    result = invoke("card", str(tmp_path / "bundle"), "--spec", str(EXAMPLE), *(["--provenance", str(record)] * given))
    assert result.exit_code == 24, result.stderr
    line = one_error_line(result)
    assert f"provenance record {record}" in line and said in line and "BUNDLE.provenance.json" in line
    assert list((tmp_path / "bundle").iterdir()) == []


def test_a_control_character_a_template_writes_is_refused(
    bundle4: ConvertResult, example: spec_module.ReleaseSpec, tmp_path: Path
) -> None:
    template = tmp_path / "card.md.j2"
    template.write_text("# {{ release.title }}\n\nset the title\x1b]0;PWNED\x07\n")
    with pytest.raises(CardError, match=r"control character \\x1b \(line 3\); card text is plain text"):
        render(bundle4.out, example, template=template)
