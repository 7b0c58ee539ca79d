"""`convert` never destroys what it did not make, survives signals and full or read-only disks, and fails in one
line."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from packager.bundle.staging import PARTIAL_MARK
from tests.conftest import run_cli, start_cli
from tests.inprocess import run_packager
from tests.models import copy_checkpoint
from tests.refusals import assert_refused


def _partials(folder: Path) -> list[Path]:
    return [p for p in folder.iterdir() if PARTIAL_MARK in p.name]


def _listing(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_size for p in sorted(folder.rglob("*")) if p.is_file()}


# --- --force replaces only a packager bundle, never an input or the user's places -----------------------------


@pytest.fixture()
def checkpoint(tiny_checkpoint: Path, tmp_path: Path) -> Path:
    return copy_checkpoint(tiny_checkpoint, tmp_path / "work" / "ckpt")


@pytest.mark.parametrize(
    "where", ["the checkpoint", "the checkpoint's parent", "the current directory", "an unrelated folder"]
)
def test_force_refuses_to_replace_what_packager_did_not_make(where: str, checkpoint: Path, tmp_path: Path) -> None:
    unrelated = tmp_path / "work" / "photos"
    unrelated.mkdir()
    (unrelated / "holiday.jpg").write_bytes(b"\xff\xd8 not a bundle")
    out = {
        "the checkpoint": checkpoint,
        "the checkpoint's parent": checkpoint.parent,
        "the current directory": Path("."),
        "an unrelated folder": unrelated,
    }[where]
    before = _listing(tmp_path)
    result = run_packager("convert", str(checkpoint), "--out", str(out), "--force", "--quiet", cwd=unrelated)
    assert result.returncode == 18, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("packager: error: --force will not replace"), lines
    assert _listing(tmp_path) == before  # nothing deleted, nothing left behind


def test_force_refuses_the_adapter_and_a_folder_inside_the_checkpoint(
    checkpoint: Path, lora_adapter: Path, tmp_path: Path
) -> None:
    adapter = tmp_path / "adapter"
    shutil.copytree(lora_adapter, adapter)
    inside = checkpoint / "old-bundle"
    inside.mkdir()
    (inside / "llm.mnn").write_bytes(b"x")
    for out in (adapter, inside):
        before = _listing(tmp_path)
        result = run_packager(
            "convert", str(checkpoint), "--lora", str(adapter), "--out", str(out), "--force", "--quiet"
        )
        assert result.returncode == 18 and "input" in result.stderr, result.stderr
        assert _listing(tmp_path) == before


def test_force_refuses_a_symlink_to_the_checkpoint(checkpoint: Path, tmp_path: Path) -> None:
    link = tmp_path / "link"
    link.symlink_to(checkpoint)
    before = _listing(checkpoint)
    result = run_packager("convert", str(checkpoint), "--out", str(link), "--force", "--quiet")
    assert result.returncode == 18 and "not a folder" in result.stderr
    assert _listing(checkpoint) == before


@pytest.mark.converter
def test_force_replaces_a_previous_bundle(bundle4, tiny_checkpoint: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "bundle"
    shutil.copytree(bundle4.out, out)
    (out / "llm.mnn.weight").write_bytes(b"stale")
    result = run_cli("convert", str(tiny_checkpoint), "--out", str(out), "--force", "--quiet")
    assert result.returncode == 0, result.stderr
    assert (out / "llm.mnn.weight").read_bytes() == (bundle4.out / "llm.mnn.weight").read_bytes()
    assert run_cli("validate", str(out), "--strict").returncode == 0


@pytest.mark.converter
def test_help_says_what_force_replaces() -> None:
    text = " ".join(run_cli("convert", "--help").stdout.split())
    assert "only bundle files inside" in text and "Never replaces" in text


# --- what training scripts save ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def saved_by_transformers(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkpoint exactly as transformers 5 `save_pretrained` writes it (no vocab.json, no merges.txt)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path_factory.mktemp("t5") / "saved"
    AutoModelForCausalLM.from_pretrained(tiny_checkpoint, dtype=torch.bfloat16).save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny_checkpoint).save_pretrained(out)
    shutil.copy(tiny_checkpoint / "generation_config.json", out / "generation_config.json")
    return out


@pytest.mark.converter
def test_checkpoint_saved_by_transformers_converts_to_the_same_bytes(
    saved_by_transformers: Path,
    bundle4,  # type: ignore[no-untyped-def]
    tmp_path: Path,
) -> None:
    assert not (saved_by_transformers / "vocab.json").exists() and not (saved_by_transformers / "merges.txt").exists()
    before = _listing(saved_by_transformers)
    out = tmp_path / "bundle"
    result = run_cli("convert", str(saved_by_transformers), "--out", str(out), "--quiet")
    assert result.returncode == 0, result.stderr
    for name in bundle4.sizes:
        assert (out / name).read_bytes() == (bundle4.out / name).read_bytes(), name
    assert _listing(saved_by_transformers) == before  # nothing was written into the checkpoint


def test_tokenizer_without_bpe_merges_is_refused(saved_by_transformers: Path, tmp_path: Path) -> None:
    folder = copy_checkpoint(saved_by_transformers, tmp_path / "ckpt")
    data = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    data["model"]["merges"] = []
    (folder / "tokenizer.json").write_text(json.dumps(data), encoding="utf-8")
    out = tmp_path / "bundle"
    assert_refused(run_packager("convert", str(folder), "--out", str(out), "--quiet"), 15, "no BPE merges", out)


# --- LoRA adapters ------------------------------------------------------------------------------------------


def _adapter(base: Path, out: Path, modules_to_save: list[str], train: bool) -> Path:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(5)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    peft_model = get_peft_model(
        model,
        LoraConfig(
            r=4, lora_alpha=8, target_modules=["q_proj"], modules_to_save=modules_to_save, init_lora_weights=False
        ),
    )
    if train:  # what training does to a saved module: its values change
        with torch.no_grad():
            for name, param in peft_model.named_parameters():
                if "modules_to_save" in name:
                    param.add_(torch.randn_like(param) * 0.05)
    peft_model.save_pretrained(out, safe_serialization=True)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("modules", [["lm_head"], ["embed_tokens"], ["embed_tokens", "lm_head"]])
def test_adapter_that_unties_the_embeddings_is_refused_before_work(
    modules: list[str], tiny_checkpoint: Path, tmp_path: Path
) -> None:
    adapter = _adapter(tiny_checkpoint, tmp_path / "adapter", modules, train=True)
    out = tmp_path / "bundle"
    result = run_cli("convert", str(tiny_checkpoint), "--lora", str(adapter), "--out", str(out), "--quiet")
    assert_refused(result, 16, "modules_to_save", out)
    assert "starting the converter" not in result.stderr


@pytest.mark.converter
def test_adapter_with_saved_norms_is_merged_into_a_valid_bundle(tiny_checkpoint: Path, tmp_path: Path) -> None:
    from packager import resources
    from packager.convert.inspect.lora import merge
    from tests.parity import compare

    adapter = _adapter(tiny_checkpoint, tmp_path / "adapter", ["norm"], train=True)
    out = tmp_path / "bundle"
    result = run_cli(
        "convert", str(tiny_checkpoint), "--lora", str(adapter), "--out", str(out), "--quant-bits", "8", "--quiet"
    )
    assert result.returncode == 0, result.stderr
    assert run_cli("validate", str(out), "--strict").returncode == 0
    merged = tmp_path / "merged"
    merge(tiny_checkpoint, adapter, merged)
    report = compare(out, merged, resources.parity_prompts()[:4])
    assert report.min_cosine >= 0.99  # the bundle is the adapted model, saved norms included


@pytest.mark.converter
def test_adapter_naming_another_base_model_converts_with_a_warning(
    tiny_checkpoint: Path, lora_adapter: Path, tmp_path: Path
) -> None:
    adapter = tmp_path / "adapter"
    shutil.copytree(lora_adapter, adapter)
    config = json.loads((adapter / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = "Qwen/Qwen3-8B"
    (adapter / "adapter_config.json").write_text(json.dumps(config))
    result = run_cli(
        "convert", str(tiny_checkpoint), "--lora", str(adapter), "--out", str(tmp_path / "b"), "--quiet", "--json"
    )
    assert result.returncode == 0, result.stderr
    assert "packager: warning: the adapter says it was trained on 'Qwen/Qwen3-8B'" in result.stderr
    assert json.loads(result.stdout)["warnings"]
    plain = run_cli(
        "convert", str(tiny_checkpoint), "--lora", str(lora_adapter), "--out", str(tmp_path / "c"), "--quiet"
    )
    assert plain.returncode == 0 and "warning" not in plain.stderr


# --- quantization blocks ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def three_heads(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.models import build_qwen3

    # o_proj's input is 3 x 128 = 384, while hidden (256) and intermediate (512) divide by 256.
    return build_qwen3(tmp_path_factory.mktemp("h3") / "three-heads", heads=3)


def test_block_that_does_not_divide_o_proj_is_refused(three_heads: Path, tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    assert_refused(
        run_packager("convert", str(three_heads), "--out", str(out), "--quant-block", "256", "--quiet"),
        19,
        "input size 384 of o_proj",
        out,
    )
    assert_refused(
        run_packager("convert", str(three_heads), "--out", str(out), "--quant-block", "-1", "--quiet"),
        19,
        "is negative",
        out,
    )


@pytest.mark.converter
def test_block_zero_is_per_channel(three_heads: Path, tmp_path: Path) -> None:
    from packager import resources
    from tests.parity import compare

    out = tmp_path / "bundle"
    result = run_cli(
        "convert", str(three_heads), "--out", str(out), "--quant-block", "0", "--quant-bits", "8", "--quiet", "--json"
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["quant"]["block"] == 0
    assert json.loads((out / "llm_config.json").read_text())["tie_embeddings"][4] == 0
    assert run_cli("validate", str(out), "--strict").returncode == 0
    assert compare(out, three_heads, resources.parity_prompts()[:4]).min_cosine >= 0.99  # MNN runs it right


# --- OS errors: one line with the OS's reason ----------------------------------------------------------------


@pytest.mark.converter
def test_full_disk_is_one_line_naming_it(tiny_checkpoint: Path, small_disk: Path) -> None:
    out = small_disk / "bundle"
    result = run_cli("convert", str(tiny_checkpoint), "--out", str(out), "--quiet")
    assert_refused(result, 25, "No space left on device", out)


def test_read_only_output_is_one_line_naming_it(tiny_checkpoint: Path, small_disk: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    result = run_packager("convert", str(tiny_checkpoint), "--out", str(small_disk / "bundle"), "--quiet")
    assert result.returncode == 25 and "Read-only file system" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "out, reason",
    [
        ("under-a-file/bundle", "File exists"),
        ("/proc/packager-bundle", "No such file or directory"),
        ("x" * 300, "File name too long"),
    ],
)
def test_impossible_out_is_one_line(out: str, reason: str, tiny_checkpoint: Path, tmp_path: Path) -> None:
    (tmp_path / "under-a-file").write_text("a file")
    result = run_packager("convert", str(tiny_checkpoint), "--out", out, "--quiet", cwd=tmp_path)
    assert result.returncode == 25, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and reason in lines[0] and "Traceback" not in result.stderr
    assert len(lines[0]) < 400  # a 300-character name is shown shortened


def test_deeply_nested_config_is_one_line(tiny_checkpoint: Path, tmp_path: Path) -> None:
    folder = copy_checkpoint(tiny_checkpoint, tmp_path / "ckpt")
    (folder / "config.json").write_text("[" * 10_000 + "]" * 10_000)
    out = tmp_path / "bundle"
    assert_refused(run_packager("convert", str(folder), "--out", str(out), "--quiet"), 11, "nested too deeply", out)


@pytest.mark.converter
def test_huge_config_value_is_shown_shortened(tiny_checkpoint: Path, tmp_path: Path) -> None:
    folder = copy_checkpoint(tiny_checkpoint, tmp_path / "ckpt")
    config = json.loads((folder / "config.json").read_text())
    config["model_type"] = "q" * 1_000_000
    (folder / "config.json").write_text(json.dumps(config))
    result = run_cli("convert", str(folder), "--out", str(tmp_path / "bundle"), "--quiet")
    assert result.returncode == 12 and len(result.stderr) < 600 and "more characters" in result.stderr


# --- signals and killed runs ---------------------------------------------------------------------------------


def _start(checkpoint: Path, out: Path) -> subprocess.Popen[str]:
    # The reference path: its worker reports "loading the checkpoint" long before it can finish.
    return start_cli("convert", str(checkpoint), "--out", str(out), "--reference")


def _wait_for_stage(process: subprocess.Popen[str], stage: str) -> None:
    """Block until the converter reports `stage` (no clock involved)."""
    assert process.stderr is not None
    for line in process.stderr:
        if stage in line:
            return
    raise AssertionError(f"the converter ended before reporting {stage!r}")


@pytest.mark.converter
@pytest.mark.parametrize("sig, code, word", [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")])
def test_signal_exits_cleanly_and_leaves_nothing(
    sig: signal.Signals, code: int, word: str, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    import psutil

    out = tmp_path / "out" / "bundle"
    out.parent.mkdir()
    process = _start(tiny_checkpoint, out)
    _wait_for_stage(process, "loading the checkpoint into llmexport")
    workers = psutil.Process(process.pid).children(recursive=True)
    process.send_signal(sig)
    assert process.stderr is not None
    rest = process.stderr.read()
    assert process.wait(timeout=120) == code
    assert word in rest and "Traceback" not in rest
    assert list(out.parent.iterdir()) == []
    psutil.wait_procs(workers, timeout=60)
    assert not [w for w in workers if w.is_running() and w.status() != psutil.STATUS_ZOMBIE]


@pytest.mark.converter
def test_killed_run_leftovers_are_removed_by_the_next_run(tiny_checkpoint: Path, tmp_path: Path) -> None:
    import psutil

    out = tmp_path / "out" / "bundle"
    out.parent.mkdir()
    process = _start(tiny_checkpoint, out)
    _wait_for_stage(process, "loading the checkpoint into llmexport")
    workers = psutil.Process(process.pid).children(recursive=True)
    process.kill()
    process.wait(timeout=60)
    _, alive = psutil.wait_procs(workers, timeout=60)
    assert not alive  # the worker dies with packager instead of writing on as an orphan
    stale = _partials(out.parent)
    assert len(stale) == 1
    foreign = out.parent / f".bundle{PARTIAL_MARK}not-ours"
    foreign.mkdir()  # a look-alike without our marker is not ours to remove
    result = run_cli("convert", str(tiny_checkpoint), "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert f"removed {stale[0].name}, left by a conversion that was killed" in result.stderr
    assert _partials(out.parent) == [foreign]


@pytest.mark.converter
def test_a_live_runs_stage_is_not_removed(tiny_checkpoint: Path, tmp_path: Path) -> None:
    out = tmp_path / "out" / "bundle"
    out.parent.mkdir()
    process = _start(tiny_checkpoint, out)
    try:
        _wait_for_stage(process, "loading the checkpoint into llmexport")
        other = run_cli("convert", str(tiny_checkpoint), "--out", str(out))
    finally:
        process.wait(timeout=300)
    assert "removed" not in other.stderr
    # Whichever finished first made the bundle; the other refused to replace it without --force.
    assert sorted([process.returncode, other.returncode]) == [0, 18]
    assert _partials(out.parent) == []
    assert run_cli("validate", str(out), "--strict").returncode == 0


# --- provenance, version ------------------------------------------------------------------------------------


@pytest.mark.converter
def test_provenance_hashes_only_model_and_tokenizer_files(checkpoint: Path) -> None:
    (checkpoint / "notes.txt").write_text("training log")
    first = run_cli("convert", str(checkpoint), "--out", str(checkpoint / "bundle"), "--quiet")
    assert first.returncode == 0, first.stderr
    record = json.loads((checkpoint / "bundle.provenance.json").read_text())
    assert set(record["source"]["files_xxh3_128"]) == {
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "vocab.json",
        "merges.txt",
    }
    second = run_cli("convert", str(checkpoint), "--out", str(checkpoint / "bundle2"), "--quiet")
    assert second.returncode == 0
    again = json.loads((checkpoint / "bundle2.provenance.json").read_text())
    assert again["source"] == record["source"]


@pytest.mark.converter
def test_version_names_the_engines() -> None:
    from importlib import metadata

    result = run_cli("--version")
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    assert lines[0].startswith("packager ")
    for name in ("mnn", "llmexport", "huggingface_hub", "torch"):
        assert f"{name} {metadata.version(name)}" in lines


@pytest.mark.converter
def test_spec_path_too_long_for_the_bundle_is_a_spec_error(tiny_checkpoint: Path, tmp_path: Path) -> None:
    spec = tmp_path / "release.toml"
    spec.write_text(f'[runtime.main]\ntokenizer_file = "{"a" * 300}.txt"\n')
    out = tmp_path / "bundle"
    result = run_cli("convert", str(tiny_checkpoint), "--out", str(out), "--spec", str(spec), "--quiet")
    assert_refused(result, 17, "tokenizer_file", out)
    assert len(result.stderr) < 600


def test_a_worker_that_reports_done_but_dies_is_a_failed_conversion(tmp_path: Path) -> None:
    # The worker's last event said "done", then it was killed on its way out: one error line naming the signal,
    # not a KeyError from looking for the failure's message.
    from packager.convert.fence.launch import _result
    from packager.errors import ConversionFailed

    log = tmp_path / "worker.log"
    log.write_text("the worker's log\n")
    with pytest.raises(ConversionFailed, match="killed by SIGKILL"):
        _result({"event": "done", "result": {}, "blocked": []}, -9, log, tmp_path)
