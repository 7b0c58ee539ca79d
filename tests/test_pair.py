"""`pair`: compatibility before measurement, acceptance on chat-templated prompts with intervals, honest costs
(interleaved here, or the device's from --costs), sampling acceptance, memory refusal, any MNN folder llmexport
makes, and an estimate whose arithmetic matches a real speculative loop step by step (its wall-time comparison
is bench/speculative_bench.py: tests do not time)."""

from __future__ import annotations

import json
import re
import shutil
import struct
from pathlib import Path

import pytest

from packager.bundle.kinds import APP_FILES
from packager.convert.pipeline import ConvertResult
from packager.families.qwen3 import QWEN3
from packager.measure import compat, workload
from packager.measure.pair import Options, acceptance, pair, runs_for
from packager.runtime.models import HFModel, MNNModel
from packager.runtime.speculative import autoregressive, speculative
from tests import shared
from tests.conftest import run_cli
from tests.inprocess import run_packager
from tests.models import build_deep_target, build_qwen3, copy_checkpoint, llmexport_raw

PROMPTS = (
    "The capital of France is",
    "def fibonacci(n):",
    "Q: What is the boiling point of water?\nA:",
    "Once upon a time, in a small village,",
)
QUICK = Options(new_tokens=12, repeats=1)


def test_acceptance_arithmetic() -> None:
    assert acceptance.match_runs([1, 2, 9, 4, 5], [1, 2, 3, 4, 5]) == [2, 1, 0, 2, 1]
    runs = [6] * 40
    for d in range(1, 7):
        steps = acceptance.simulate(runs, d)
        assert steps.accepted == steps.proposed and steps.tokens / steps.steps == d + 1 and steps.full == steps.steps
    assert acceptance.simulate([3, 0, 5, 4, 3, 2, 1, 0, 0, 0], 2).full == 2  # steps at 0, 3 and 6: 2, 2, 1
    assert acceptance.expected_tokens(1.0, 3) == 4 and abs(acceptance.expected_tokens(0.5, 1) - 1.5) < 1e-12


def test_speedup_charges_the_draft_catch_up_after_a_full_acceptance() -> None:
    # d = 3, draft step 1, verification 4, target step 4: 3 tokens per step cost 3 + 4 = 7 against 3 x 4.
    assert acceptance.speedup(3.0, 3, 1.0, 4.0, 4.0) == 12 / 7
    # Half the steps accept everything and then pay a two-token catch-up of 1.5 instead of a step of 1.
    assert acceptance.speedup(3.0, 3, 1.0, 4.0, 4.0, full=0.5, catchup=1.5) == 12 / 7.25
    assert acceptance.speedup(3.0, 3, 1.0, 4.0, 4.0, full=1.0, catchup=None) == 12 / 7


@pytest.mark.converter
def test_pair_reports_every_prompt_and_an_estimate_from_the_first(tiny_checkpoint: Path) -> None:
    """With stderr no terminal each report is a line: one as measuring starts, one a prompt, one a timing
    repeat, and the estimate of the whole run after the first prompt; never a stage silent for minutes."""
    from packager.infra.progress import Step

    lines: list[str] = []
    report = pair(tiny_checkpoint, tiny_checkpoint, None, Options(new_tokens=8, repeats=2, threads=1), lines.append)
    assert report.prompts == 24  # a tiny target: the small default
    prompts = [line for line in lines if isinstance(line, Step) and line.label == "measuring acceptance"]
    assert [step.done for step in prompts] == list(range(25)) and {step.total for step in prompts} == {24}
    estimate = lines.index(prompts[1]) - 1
    assert re.fullmatch(
        r"pair: 24 prompts x up to 8 tokens on the target and the draft, then 2 timing repeats; about \d+ s on this "
        r"machine \(the first prompt took \d+\.\d s\)",
        lines[estimate],
    ), lines
    repeats = [line for line in lines if isinstance(line, Step) and line.label == "timing steps"]
    assert [step.done for step in repeats] == [0, 1, 2]


def test_builtin_workload_is_rendered_with_the_checkpoints_own_template(tiny_checkpoint: Path) -> None:
    from transformers import AutoTokenizer

    items = workload.builtin()
    assert len(items) >= 48 and len({p.language for p in items}) >= 6
    assert {"prose", "code", "qa", "chat"} <= {p.category for p in items}
    tokenizer, template = AutoTokenizer.from_pretrained(tiny_checkpoint), workload.chat_template(tiny_checkpoint)
    for item in items:
        messages = [{"role": role, "content": content} for role, content in item.messages]
        expected = tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True, enable_thinking=False
        )
        assert workload.render(template, item, QWEN3.template_variables) == expected
    assert workload.render(template, items[0], QWEN3.template_variables).endswith(
        "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )


@pytest.mark.converter
def test_generation_stops_at_a_stop_id_in_both_runtimes(tiny_checkpoint: Path, bundle4: ConvertResult) -> None:
    for model in (HFModel(tiny_checkpoint, dtype="stored"), MNNModel(bundle4.out)):
        ids = model.encode("Hello there")
        free = model.greedy(ids, 8)
        assert len(free) == 8
        assert model.greedy(ids, 8, stop=(free[2],)) == free[: free.index(free[2]) + 1]


def test_checkpoints_load_in_their_stored_dtype_with_the_threads_asked(tiny_checkpoint: Path) -> None:
    import torch

    assert HFModel(tiny_checkpoint, threads=1, dtype="stored").model.dtype == torch.bfloat16
    assert torch.get_num_threads() == 1
    assert HFModel(tiny_checkpoint, dtype="float32").model.dtype == torch.float32


@pytest.mark.converter
def test_draft_paired_with_itself_accepts_everything(bundle4: ConvertResult) -> None:
    report = pair(bundle4.out, bundle4.out, PROMPTS, Options(new_tokens=24, repeats=2, threads=1))
    assert report.alpha.value == report.alpha.low == report.alpha.high == 1.0
    for depth in report.depths:
        assert depth.acceptance_rate is not None and depth.acceptance_rate.value == 1.0
        assert depth.tokens_per_step is not None and depth.tokens_per_step.value == depth.d + 1
        speedup = depth.speedup_from_measured_tau
        assert speedup is not None and speedup.low <= speedup.median <= speedup.high
    assert report.costs.source.startswith("this CPU (") and report.costs.source.endswith(", 1 thread)")
    assert not report.costs.device and report.recommended_draft_predict_length is None
    assert len(report.costs.repeats) == 2 and all(len(row[2]) == acceptance.MAX_D for row in report.costs.repeats)


def _costs(path: Path, draft: float, target: float, verify: list[float]) -> Path:
    path.write_text(
        json.dumps(
            {
                "draft_step_seconds": draft,
                "target_step_seconds": target,
                "verify_seconds": {str(d): v for d, v in enumerate(verify, 1)},
            }
        )
    )
    return path


@pytest.mark.converter
def test_device_costs_decide_the_recommendation(bundle4: ConvertResult, tmp_path: Path) -> None:
    # A draft as costly as the target gains nothing at any d; a cheap one gains, and only then is a
    # draft_predict_length recommended.
    same = _costs(tmp_path / "same.json", 0.05, 0.05, [0.051] * 6)
    report = pair(bundle4.out, bundle4.out, PROMPTS, Options(new_tokens=24, costs_file=same))
    assert report.best_d is None and report.recommended_draft_predict_length is None
    assert report.verdict == "no speedup at any d on the device (--costs same.json)"
    cheap = _costs(tmp_path / "cheap.json", 0.005, 0.05, [0.05 + 0.002 * d for d in range(1, 7)])
    result = run_cli(
        "pair",
        str(bundle4.out),
        str(bundle4.out),
        "--prompts",
        str(_prompts(tmp_path)),
        "--tokens",
        "24",
        "--costs",
        str(cheap),
        "--json",
        "--quiet",
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    speedups = {d["d"]: d["speedup_from_measured_tau"]["median"] for d in data["depths"]}
    best = max(speedups, key=speedups.__getitem__)
    assert data["best_d"] == data["recommended_draft_predict_length"] == best and speedups[best] > 1
    assert data["costs"] == {
        "source": "--costs cheap.json",
        "device": True,
        "repeats": 1,
        "draft_step_s": {"median": 0.005, "low": 0.005, "high": 0.005},
        "target_step_s": {"median": 0.05, "low": 0.05, "high": 0.05},
        "draft_catchup_s": {"median": 0.005, "low": 0.005, "high": 0.005},
    }
    # A draft paired with itself accepts everything, so every step pays the catch-up the file names.
    costly = json.loads(cheap.read_text()) | {"draft_catchup_seconds": 0.02}
    (tmp_path / "costly.json").write_text(json.dumps(costly))
    slower = pair(bundle4.out, bundle4.out, PROMPTS, Options(new_tokens=24, costs_file=tmp_path / "costly.json"))
    for depth in slower.depths:
        assert depth.speedup_from_measured_tau is not None and depth.tokens_per_step is not None
        expected = acceptance.speedup(
            depth.tokens_per_step.value, depth.d, 0.005, 0.05 + 0.002 * depth.d, 0.05, full=1.0, catchup=0.02
        )
        assert abs(depth.speedup_from_measured_tau.median - expected) < 1e-9
        assert expected < speedups[depth.d]


def _prompts(tmp_path: Path) -> Path:
    (tmp_path / "prompts.txt").write_text("\n".join(PROMPTS))
    return tmp_path / "prompts.txt"


@pytest.mark.parametrize(
    "content",
    [
        "[1, 2",
        '{"draft_step_seconds": 0.1, "target_step_seconds": 0.1}',
        '{"draft_step_seconds": -1, "target_step_seconds": 0.1, "verify_seconds": [1]}',
        '{"draft_step_seconds": 1e999, "target_step_seconds": 0.1, "verify_seconds": [1]}',
        '{"draft_step_seconds": 0.1, "target_step_seconds": 0.1, "verify_seconds": '
        '[1, 1, 1, 1, 1, 1], "draft_catchup_seconds": 0}',
    ],
)
def test_bad_costs_file_is_one_line_before_anything_loads(content: str, tmp_path: Path) -> None:
    (tmp_path / "costs.json").write_text(content)
    result = run_packager("pair", str(tmp_path), str(tmp_path), "--costs", str(tmp_path / "costs.json"))
    assert result.returncode == 19 and result.stderr.count("\n") == 1
    assert "costs.json" in result.stderr and "verify_seconds" in result.stderr


@pytest.mark.converter
def test_sampling_acceptance_is_one_for_identical_models_and_drops_for_a_perturbed_pair(
    bundle4: ConvertResult, bundle8: ConvertResult, tmp_path: Path
) -> None:
    args = (
        "--prompts",
        str(_prompts(tmp_path)),
        "--tokens",
        "12",
        "--temperature",
        "0.7",
        "--top-k",
        "20",
        "--top-p",
        "0.8",
        "--json",
        "--quiet",
    )
    same = run_cli("pair", str(bundle4.out), str(bundle4.out), *args)
    assert same.returncode == 0, same.stderr
    data = json.loads(same.stdout)
    assert data["sampling"]["temperature"] == 0.7 and data["sampling"]["top_k"] == 20
    assert abs(data["sampling"]["acceptance"]["value"] - 1.0) < 1e-9
    assert all(abs(d["tokens_per_step_sampled"] - (d["d"] + 1)) < 1e-6 for d in data["depths"])
    other = json.loads(run_cli("pair", str(bundle4.out), str(bundle8.out), *args).stdout)
    assert other["sampling"]["acceptance"]["value"] < 0.999
    low, high = other["sampling"]["acceptance"]["low"], other["sampling"]["acceptance"]["high"]
    assert 0 < low <= other["sampling"]["acceptance"]["value"] <= high <= 1


@pytest.mark.converter
def test_sampling_options_need_a_temperature(tmp_path: Path) -> None:
    result = run_cli("pair", str(tmp_path), str(tmp_path), "--top-k", "20")
    assert result.returncode == 19 and "--top-k and --top-p need --temperature" in result.stderr


@pytest.mark.converter
def test_4bit_bundle_against_its_8bit_bundle_accepts_most(bundle4: ConvertResult, bundle8: ConvertResult) -> None:
    report = pair(bundle4.out, bundle8.out, PROMPTS, Options(new_tokens=24, repeats=1))
    assert report.alpha.value > 0.7 and report.alpha.low <= report.alpha.value <= report.alpha.high


@pytest.fixture(scope="module")
def raw_exports() -> dict[str, Path]:
    """An untied checkpoint, plain llmexport's folder of it (embeddings_bf16.bin, tokenizer.mtok), and the same
    folder reduced to what MNN itself needs (no config.json, no llm.mnn.json)."""

    def build(root: Path) -> dict[str, Path]:
        untied = build_qwen3(root / "untied", tie=False, seed=5)
        raw = llmexport_raw(untied, root / "export" / "raw")
        bare = root / "bare"
        shutil.copytree(raw, bare)
        for name in ("config.json", "llm.mnn.json", "export_args.json"):
            (bare / name).unlink()
        return {"checkpoint": untied, "raw": raw, "bare": bare, "other": build_qwen3(root / "other", tie=False, seed=7)}

    return shared.once("conversion", ["raw llmexport exports"], build)


@pytest.mark.converter
def test_unrelated_models_accept_little(raw_exports: dict[str, Path]) -> None:
    # Untied: two random tied models agree often, as both mostly repeat the last token (its embedding is the one
    # closest to itself), which says nothing about drafting.
    report = pair(raw_exports["checkpoint"], raw_exports["other"], PROMPTS, Options(new_tokens=24, repeats=1))
    assert report.alpha.value < 0.05


@pytest.mark.converter
def test_any_mnn_folder_llmexport_makes_pairs(raw_exports: dict[str, Path]) -> None:
    assert (raw_exports["raw"] / "embeddings_bf16.bin").is_file()
    assert compat.facts(raw_exports["bare"]).vocab_size == 151936  # from the embeddings' bytes
    same = pair(raw_exports["raw"], raw_exports["bare"], PROMPTS, QUICK)
    assert same.alpha.value == 1.0
    mixed = pair(raw_exports["checkpoint"], raw_exports["bare"], PROMPTS, QUICK)
    assert mixed.tokenizer_strings_compared > 30 and mixed.alpha.value > 0.3


@pytest.mark.converter
def test_tied_target_stored_as_an_app_stores_it_pairs(bundle4: ConvertResult, tmp_path: Path) -> None:
    """The seven runtime files an app downloads (no llm.mnn.json): the vocabulary comes from tie_embeddings'
    weight span (its second entry is the alpha offset, not a size; read as a size it gave 158962)."""
    app = tmp_path / "app-target"
    app.mkdir()
    for name in APP_FILES:
        shutil.copy(bundle4.out / name, app / name)
    assert compat.facts(app).vocab_size == 151936
    assert pair(bundle4.out, app, PROMPTS, QUICK).alpha.value == 1.0


def test_folder_that_is_neither_a_checkpoint_nor_an_mnn_model_says_so(tiny_checkpoint: Path, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("not a model")
    result = run_packager("pair", str(tiny_checkpoint), str(tmp_path), "--quiet")
    assert result.returncode == 51 and result.stderr.count("\n") == 1
    assert "is neither a checkpoint nor an MNN model folder" in result.stderr
    assert "tokenizer" not in result.stderr and "llm_config.json" in result.stderr


def _huge_safetensors(path: Path, rows: int, cols: int) -> None:
    header = json.dumps({"w": {"dtype": "BF16", "shape": [rows, cols], "data_offsets": [0, rows * cols * 2]}})
    path.write_bytes(struct.pack("<Q", len(header)) + header.encode())


@pytest.mark.converter
@pytest.mark.parametrize("kind", ["checkpoint", "bundle"])
def test_pair_that_cannot_fit_in_memory_is_refused_before_loading(
    kind: str, tiny_checkpoint: Path, bundle4: ConvertResult, tmp_path: Path
) -> None:
    if kind == "checkpoint":  # a header saying 2 TiB of bf16 parameters; nothing is read past it
        target = copy_checkpoint(tiny_checkpoint, tmp_path / "huge")
        _huge_safetensors(target / "model-00002.safetensors", 1 << 20, 1 << 20)
    else:  # a sparse 2 TiB weight file
        target = tmp_path / "huge"
        shutil.copytree(bundle4.out, target)
        with (target / "llm.mnn.weight").open("r+b") as handle:
            handle.truncate(2 << 40)
    result = run_cli("pair", str(bundle4.out), str(target), "--quiet")
    assert result.returncode == 52 and result.stderr.count("\n") == 1, result.stderr[-2000:]
    assert "pairing needs about 2" in result.stderr and "GiB of memory is available" in result.stderr
    assert "convert the target to a 4-bit MNN bundle with `packager convert" in result.stderr


def test_other_vocabulary_is_refused_before_any_measurement(tiny_checkpoint: Path, tmp_path: Path) -> None:
    target = copy_checkpoint(tiny_checkpoint, tmp_path / "qwen3_5-like")
    config = json.loads((target / "config.json").read_text())
    config.update(model_type="qwen3_5", vocab_size=248320)
    (target / "config.json").write_text(json.dumps(config))
    (target / "model.safetensors").unlink()  # nothing to load: the refusal must come from the files alone
    result = run_packager("pair", str(tiny_checkpoint), str(target), "--quiet")
    assert result.returncode == 51 and result.stderr.count("\n") == 1
    assert "the draft is Qwen3, the target model_type 'qwen3_5'" in result.stderr


def test_a_vocabulary_more_than_128_rows_wider_is_refused_before_any_measurement(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    target = copy_checkpoint(tiny_checkpoint, tmp_path / "qwen3-wider")
    config = json.loads((target / "config.json").read_text())
    config.update(vocab_size=248320)
    (target / "config.json").write_text(json.dumps(config))
    (target / "model.safetensors").unlink()  # nothing to load: the refusal must come from the files alone
    result = run_packager("pair", str(tiny_checkpoint), str(target), "--quiet")
    assert result.returncode == 51 and result.stderr.count("\n") == 1
    assert "vocabulary 151936 vs 248320 ids (more than 128 apart)" in result.stderr


def test_other_chat_template_is_refused(tiny_checkpoint: Path, tmp_path: Path) -> None:
    target = copy_checkpoint(tiny_checkpoint, tmp_path / "other-template")
    tok = json.loads((target / "tokenizer_config.json").read_text())
    tok["chat_template"] = "{{ messages }}"
    (target / "tokenizer_config.json").write_text(json.dumps(tok))
    result = run_packager("pair", str(tiny_checkpoint), str(target), "--quiet")
    assert result.returncode == 51 and "different chat templates" in result.stderr


@pytest.fixture(scope="module")
def deep_targets(tiny_checkpoint: Path) -> dict[str, Path]:
    # Four extra layers: what the loop checks (lossless, each step's acceptance as the estimate counts) does not
    # depend on the target's depth, and the noisy one still disagrees on about 4 in 10 tokens (alpha 0.58).
    return shared.once(
        "checkpoint",
        ["deep targets", tiny_checkpoint, 4, 0.02],
        lambda root: {
            "same": build_deep_target(tiny_checkpoint, root / "same", extra_layers=4, noise=0.0),
            "noisy": build_deep_target(tiny_checkpoint, root / "noisy", extra_layers=4, noise=0.02),
        },
    )


@pytest.mark.converter
@pytest.mark.parametrize("kind", ["same", "noisy"])
def test_real_speculative_loop_is_lossless_and_accepts_what_the_estimate_counts(
    kind: str, tiny_checkpoint: Path, deep_targets: dict[str, Path]
) -> None:
    # Timing-free: the loop's tokens equal the target's greedy ones, and each of its steps accepts exactly the
    # tokens the estimate's arithmetic (one teacher-forced draft pass) predicts. Wall time: bench/.
    target_path = deep_targets[kind]
    report = pair(tiny_checkpoint, target_path, PROMPTS[:2], Options(new_tokens=32, repeats=1, dtype="float32"))
    draft, target = HFModel(tiny_checkpoint), HFModel(target_path)
    template = workload.chat_template(target_path)
    tokens = dict.fromkeys(range(1, acceptance.MAX_D + 1), 0)
    steps = dict(tokens)
    for item in workload.from_texts(PROMPTS[:2]):
        ids = target.encode(workload.render(template, item, QWEN3.template_variables))
        reference = autoregressive(target, ids, 32)
        continuation, runs = runs_for(draft, target, ids, 32)
        assert continuation == reference
        for d in range(1, acceptance.MAX_D + 1):
            predicted = acceptance.accepted_per_step(runs, d)
            tokens[d], steps[d] = tokens[d] + sum(predicted) + len(predicted), steps[d] + len(predicted)
            if d in (1, acceptance.MAX_D):
                taken: list[int] = []
                assert speculative(draft, target, ids, 32, d, accepted=taken) == reference  # lossless
                assert taken[: len(predicted)] == predicted, (kind, d)
    for depth in report.depths:
        assert depth.tokens_per_step is not None
        assert abs(tokens[depth.d] / steps[depth.d] - depth.tokens_per_step.value) < 1e-12
    assert (report.alpha.value == 1.0) if kind == "same" else (0.05 < report.alpha.value < 0.9)


@pytest.mark.converter
def test_runtime_crash_while_pairing_is_one_line_and_exit_27(bundle4: ConvertResult, tmp_path: Path) -> None:
    draft = tmp_path / "zeroed"
    shutil.copytree(bundle4.out, draft)
    (draft / "llm.mnn.weight").write_bytes(bytes((draft / "llm.mnn.weight").stat().st_size))
    result = run_cli("pair", str(draft), str(bundle4.out), "--quiet")
    assert result.returncode == 27 and result.stderr.count("\n") == 1 and result.stdout == ""
    assert result.stderr.startswith(
        f"packager: error: the MNN runtime crashed (SIGSEGV, signal 11) while loading the bundle {draft}"
    )


@pytest.mark.converter
def test_malformed_bundle_files_in_pair_are_one_line(bundle4: ConvertResult, tmp_path: Path) -> None:
    draft = tmp_path / "malformed"
    shutil.copytree(bundle4.out, draft)
    lines = (draft / "tokenizer.txt").read_bytes().split(b"\n", 1)
    (draft / "tokenizer.txt").write_bytes(b"430 " + b"7" * 3000 + b"\n" + lines[1])
    result = run_cli("pair", str(draft), str(bundle4.out), "--quiet")
    assert result.returncode == 51 and result.stderr.count("\n") == 1, result.stderr[-2000:]
    assert f"packager: error: {draft} is malformed (line 1 is '430 7777" in result.stderr
    assert len(result.stderr) < 700  # the 3,000-character line is shortened


@pytest.mark.parametrize("tokens", ["0", "1", "4", "6"])
def test_too_few_tokens_is_one_line_before_anything_loads(tokens: str, tmp_path: Path) -> None:
    # Every d up to 6 needs a window of d + 1 target tokens: fewer would leave large d unmeasured.
    result = run_packager("pair", str(tmp_path), str(tmp_path), "--tokens", tokens)
    assert result.returncode == 19 and result.stderr.count("\n") == 1
    assert f"--tokens {tokens} is too few: measuring every d up to 6 needs at least 7 tokens" in result.stderr
