"""The real converter makes exactly the ten files, MNN loads them, and they behave like the source model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from packager import resources
from packager.bundle.kinds import FILES
from packager.bundle.tokenizer_txt import read_header
from packager.convert import provenance
from packager.convert.fence.launch import WorkerJob, WorkerResult, run_worker
from packager.convert.pipeline import ConvertRequest, ConvertResult, convert
from packager.errors import ConversionFailed, OutputExists
from packager.infra.hashing import xxh3_128_file
from tests.conftest import run_cli
from tests.parity import compare, load_mnn

pytestmark = pytest.mark.converter

PROMPTS = resources.parity_prompts()


def test_bundle_is_exactly_the_ten_files(bundle4: ConvertResult) -> None:
    assert sorted(p.name for p in bundle4.out.iterdir()) == sorted(FILES)
    assert all(p.is_file() and not p.is_symlink() for p in bundle4.out.iterdir())
    assert not list(bundle4.out.parent.glob(".*packager-partial-*"))


def test_mnn_runtime_loads_the_bundle(bundle4: ConvertResult) -> None:
    llm = load_mnn(bundle4.out)
    ids = llm.tokenizer_encode("Hello world")
    assert len(ids) > 0
    assert llm.forward(list(ids)).read().shape == (1, len(ids), 151936)  # all_logits: every position


def test_8bit_logits_match_transformers_on_every_prompt(bundle8: ConvertResult, tiny_checkpoint: Path) -> None:
    report = compare(bundle8.out, tiny_checkpoint, PROMPTS)
    assert report.min_cosine >= 0.99, [round(p.cosine, 4) for p in report.prompts]
    assert all(p.same_top1 for p in report.prompts), [(p.top1_mnn, p.top1_source) for p in report.prompts]


def test_4bit_logits_stay_close_to_transformers(bundle4: ConvertResult, tiny_checkpoint: Path) -> None:
    # 4-bit figures are reported (README "Parity"); on random weights the logits are nearly flat, so top-1
    # is fragile and the bar is the cosine only.
    report = compare(bundle4.out, tiny_checkpoint, PROMPTS)
    print(
        f"4-bit parity: min cosine {report.min_cosine:.4f}, mean {report.mean_cosine:.4f}, "
        f"top-1 agreement {report.top1_agreement:.2f}"
    )
    assert report.min_cosine >= 0.9


def test_tampered_weights_break_parity(bundle8: ConvertResult, tiny_checkpoint: Path, tmp_path: Path) -> None:
    import shutil

    tampered = tmp_path / "tampered"
    shutil.copytree(bundle8.out, tampered)
    weights = bytearray((tampered / "llm.mnn.weight").read_bytes())
    start = len(weights) // 3
    weights[start : start + 2_000_000] = bytes(2_000_000)
    (tampered / "llm.mnn.weight").write_bytes(bytes(weights))
    assert compare(tampered, tiny_checkpoint, PROMPTS[:4]).min_cosine < 0.99


def test_quantization_is_what_was_asked(bundle4: ConvertResult, bundle8: ConvertResult) -> None:
    for result, bits in ((bundle4, 4), (bundle8, 8)):
        llm_config = json.loads((result.out / "llm_config.json").read_text())
        assert llm_config["tie_embeddings"][3:5] == [bits, 128]
        graph = json.loads((result.out / "llm.mnn.json").read_text())
        quant = [
            op["main"]["quanParameter"]
            for op in graph["oplists"]
            if op["type"] == "Convolution" and "quanParameter" in op.get("main", {})
        ]
        assert quant and all(q["aMaxOrBits"] == bits for q in quant)


def test_configs_name_tokenizer_txt_with_relative_paths(bundle4: ConvertResult) -> None:
    main = json.loads((bundle4.out / "config.json").read_text())
    assert main["tokenizer_file"] == "tokenizer.txt"
    for name in ("config.json", "config_cpu.json", "draft_config_cpu.json", "config_opencl.json"):
        data = json.loads((bundle4.out / name).read_text())
        for key in ("llm_model", "llm_weight", "llm_config", "tokenizer_file", "draft_config_path"):
            if key in data:
                assert not data[key].startswith("/") and ".." not in data[key]
                assert (bundle4.out / data[key]).is_file()
    assert (bundle4.out / "config_cpu.json").read_bytes() == (bundle4.out / "draft_config_cpu.json").read_bytes()
    draft = json.loads((bundle4.out / "config_cpu.json").read_text())
    assert draft == {
        "backend_type": "cpu",
        "thread_num": 2,
        "precision": "low",
        "memory": "low",
        "sampler_type": "greedy",
        "power": "high",
    }


def test_runtime_config_agrees_with_the_draft_and_opencl_configs(bundle4: ConvertResult) -> None:
    runtime = json.loads((bundle4.out / "runtime_config.json").read_text())
    draft = json.loads((bundle4.out / "config_cpu.json").read_text())
    opencl = json.loads((bundle4.out / "config_opencl.json").read_text())
    rec = runtime["recommended"]
    assert (rec["draft_backend"], rec["draft_thread_num"], rec["draft_power"], rec["draft_sampler_type"]) == (
        draft["backend_type"],
        draft["thread_num"],
        draft["power"],
        draft["sampler_type"],
    )
    assert (rec["target_backend"], rec["draft_predict_length"]) == (
        opencl["backend_type"],
        opencl["draft_predict_length"],
    )
    assert runtime["min_mnn_engine"]["version"] == bundle4.engine.text


def test_generated_configs_pass_their_schemas(bundle4: ConvertResult) -> None:
    for name, schema in (
        ("config.json", "config"),
        ("config_cpu.json", "draft_config"),
        ("config_opencl.json", "config_opencl"),
        ("runtime_config.json", "runtime_config"),
    ):
        errors = list(resources.validator(schema).iter_errors(json.loads((bundle4.out / name).read_text())))
        assert not errors, (name, [e.message for e in errors])


def test_stop_ids_include_both_qwen3_end_tokens(bundle4: ConvertResult) -> None:
    header = read_header(bundle4.out / "tokenizer.txt")
    assert {151645, 151643} <= set(header.stop)


def test_tokenizer_choice_is_measured_and_recorded(bundle4: ConvertResult) -> None:
    choice = bundle4.tokenizer
    by_format = {a.format: a for a in choice.agreements}
    assert set(by_format) == {"text", "pipeline"}
    assert by_format[choice.format].matched == max(a.matched for a in choice.agreements)
    header = read_header(bundle4.out / "tokenizer.txt")
    assert header.type == (4 if choice.format == "pipeline" else 3)
    # The shipped file really encodes like the HF tokenizer as often as measured.
    from packager.convert.tokenizer import hf_encodings

    corpus = resources.tokenizer_corpus()
    llm = load_mnn(bundle4.out)
    reference = hf_encodings(Path(provenance.read(bundle4.provenance)["source"]["path"]) / "tokenizer.json", corpus)
    matched = sum(list(llm.tokenizer_encode(t)) == ref for t, ref in zip(corpus, reference))
    assert matched == by_format[choice.format].matched
    recorded = provenance.read(bundle4.provenance)["tokenizer"]["agreement"]
    assert recorded[choice.format]["matched"] == matched


def test_minimum_engine_is_derived_and_printed(tiny_checkpoint: Path, tmp_path: Path) -> None:
    result = run_cli("convert", str(tiny_checkpoint), "--out", str(tmp_path / "b"), "--json", "--quiet")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    graph_c4 = '"output_c4": true' in (tmp_path / "b" / "llm.mnn.json").read_text()
    assert summary["min_mnn_engine"] == ("3.6.1" if graph_c4 else summary["min_mnn_engine"])
    assert summary["min_mnn_engine_because"]
    assert result.stderr == ""


def test_two_conversions_are_byte_identical(bundle4: ConvertResult, tiny_checkpoint: Path, tmp_path: Path) -> None:
    again = convert(ConvertRequest(checkpoint=tiny_checkpoint, out=tmp_path / "again"))
    assert {n: xxh3_128_file(again.out / n) for n in FILES} == bundle4.digests
    assert again.graph_uuid == bundle4.graph_uuid


def test_provenance_lives_outside_the_bundle(bundle4: ConvertResult, tiny_checkpoint: Path) -> None:
    record = provenance.read(bundle4.provenance)
    assert bundle4.provenance.parent == bundle4.out.parent
    assert set(record["versions"]) >= {"mnn", "llmexport", "torch", "transformers"}
    assert record["source"]["files_xxh3_128"]["model.safetensors"] == xxh3_128_file(
        tiny_checkpoint / "model.safetensors"
    )
    assert record["options"] == {
        "quant_bits": 4,
        "quant_block": 128,
        "spec": None,
        "weights": "streamed",
        "quant_recipe": {
            "bits": 4,
            "block": 128,
            "symmetric": False,
            "algorithm": "plain",
            "lm_bits": 4,
            "lm_block": 128,
        },
    }
    assert record["bundle_xxh3_128"] == bundle4.digests
    assert record["sandbox_blocked"] == []
    assert not list(resources.validator("provenance").iter_errors(record))


def test_spec_overrides_reach_the_configs(tiny_checkpoint: Path, tmp_path: Path) -> None:
    spec = tmp_path / "release.toml"
    spec.write_text(
        "[convert]\nquant_bits = 8\n[runtime.draft]\nthread_num = 3\n[runtime.opencl]\ndraft_predict_length = 4\n"
    )
    result = run_cli("convert", str(tiny_checkpoint), "--out", str(tmp_path / "b"), "--spec", str(spec), "--quiet")
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "b" / "config_cpu.json").read_text())["thread_num"] == 3
    assert json.loads((tmp_path / "b" / "config.json").read_text())["thread_num"] == 3
    runtime = json.loads((tmp_path / "b" / "runtime_config.json").read_text())
    assert runtime["recommended"]["draft_thread_num"] == 3 and runtime["recommended"]["draft_predict_length"] == 4
    assert "quantization: 8-bit" in result.stdout


def test_force_replaces_an_existing_bundle_and_nothing_else(
    bundle4: ConvertResult, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    out = tmp_path / "b"
    shutil.copytree(bundle4.out, out)
    (out / "README.md").write_text("an old card")
    with pytest.raises(OutputExists):
        convert(ConvertRequest(checkpoint=tiny_checkpoint, out=out))
    convert(ConvertRequest(checkpoint=tiny_checkpoint, out=out, force=True))
    assert sorted(p.name for p in out.iterdir()) == sorted(FILES)
    (out / "old.txt").write_text("not a bundle file")
    with pytest.raises(OutputExists, match="not a packager bundle"):
        convert(ConvertRequest(checkpoint=tiny_checkpoint, out=out, force=True))
    assert (out / "old.txt").read_text() == "not a bundle file"


def test_force_replaces_a_signed_release_folder(bundle4: ConvertResult, tiny_checkpoint: Path, tmp_path: Path) -> None:
    """init's `make validate` and `make release` rebuild dist/bundle after a signed release: the card, the manifest
    and model.sig are files of a release folder, not strangers in it."""
    out = tmp_path / "b"
    shutil.copytree(bundle4.out, out)
    for name in ("README.md", "checksums.xxh128", "model.sig"):
        (out / name).write_text("from the last release")
    result = run_cli("convert", str(tiny_checkpoint), "--out", str(out), "--force")
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted(FILES)


def _failing_runner(exc: BaseException):  # type: ignore[no-untyped-def]
    def runner(job: WorkerJob, progress) -> WorkerResult:  # type: ignore[no-untyped-def]
        run_worker(job, progress)  # the real conversion runs; then the failure strikes mid-assembly
        (job.workdir.parent / "bundle").mkdir(exist_ok=True)
        (job.workdir.parent / "bundle" / "llm.mnn").write_bytes(b"half")
        raise exc

    return runner


@pytest.mark.parametrize("exc", [ConversionFailed("boom"), KeyboardInterrupt()])
def test_failure_or_ctrl_c_leaves_nothing_behind(exc: BaseException, tiny_checkpoint: Path, tmp_path: Path) -> None:
    out = tmp_path / "b"
    with pytest.raises(type(exc)):
        convert(ConvertRequest(checkpoint=tiny_checkpoint, out=out, reference=True), runner=_failing_runner(exc))
    assert list(tmp_path.iterdir()) == []


def test_failure_keeps_the_bundle_it_would_replace(
    bundle4: ConvertResult, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    out = tmp_path / "b"
    shutil.copytree(bundle4.out, out)
    (out / "llm.mnn.weight").write_bytes(b"the old bundle")
    with pytest.raises(ConversionFailed):
        convert(
            ConvertRequest(checkpoint=tiny_checkpoint, out=out, force=True, reference=True),
            runner=_failing_runner(ConversionFailed("boom")),
        )
    assert sorted(p.name for p in out.iterdir()) == sorted(FILES)
    assert (out / "llm.mnn.weight").read_bytes() == b"the old bundle"
    assert [p.name for p in tmp_path.iterdir()] == ["b"]
