"""Every bad input to `packager convert` ends in one line, its own exit code, no traceback and no output."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.inprocess import run_packager
from tests.models import build_lora, build_qwen3, copy_checkpoint
from tests.refusals import assert_refused


def _edit_config(folder: Path, **changes: object) -> None:
    path = folder / "config.json"
    config = json.loads(path.read_text())
    config.update(changes)
    path.write_text(json.dumps(config))


def _replace(path: Path, data: bytes) -> None:
    # Weights may be hard links to the session checkpoint: write a new file, never edit in place.
    path.unlink()
    path.write_bytes(data)


def _truncate_weights(folder: Path) -> None:
    data = (folder / "model.safetensors").read_bytes()
    _replace(folder / "model.safetensors", data[: len(data) - 4096])


def _corrupt_header(folder: Path) -> None:
    data = bytearray((folder / "model.safetensors").read_bytes())
    data[8:24] = b"\x00garbage-bytes!!"
    _replace(folder / "model.safetensors", bytes(data))


def _bad_json(folder: Path) -> None:
    (folder / "config.json").write_text('{"model_type": "qwen3",}')


MUTATIONS: dict[str, tuple[Callable[[Path], None], int, str]] = {
    "no config.json": (lambda f: (f / "config.json").unlink(), 11, "has no config.json"),
    "config.json not JSON": (_bad_json, 11, "is not valid JSON"),
    "llama": (lambda f: _edit_config(f, model_type="llama"), 12, "model_type 'llama'"),
    "qwen3_moe": (lambda f: _edit_config(f, model_type="qwen3_moe"), 12, "mixture-of-experts"),
    "qwen3_5 linear attention": (lambda f: _edit_config(f, model_type="qwen3_5"), 12, "linear attention"),
    "sliding layers": (
        lambda f: _edit_config(f, layer_types=["full_attention", "sliding_attention"]),
        12,
        "layer_types",
    ),
    "untied embeddings": (lambda f: _edit_config(f, tie_word_embeddings=False), 13, "untied embeddings"),
    "truncated safetensors": (_truncate_weights, 14, "is truncated"),
    "corrupt safetensors header": (_corrupt_header, 14, "safetensors"),
    "no safetensors": (lambda f: (f / "model.safetensors").unlink(), 14, "no *.safetensors"),
    "weights of another shape": (lambda f: _edit_config(f, hidden_size=512), 14, "do not belong"),
    "not a BPE tokenizer.json": (
        lambda f: (f / "tokenizer.json").write_text('{"model": {"type": "WordPiece"}}'),
        15,
        "does not hold a BPE model",
    ),
    "missing tokenizer.json": (lambda f: (f / "tokenizer.json").unlink(), 15, "tokenizer.json"),
    "generation_config.json stop id -1": (
        lambda f: _replace(f / "generation_config.json", b'{"eos_token_id": [151645, -1]}'),
        11,
        "eos_token_id -1 is not a token id",
    ),
    "generation_config.json a list": (
        lambda f: _replace(f / "generation_config.json", b"[]"),
        11,
        "generation_config.json is not a JSON object",
    ),
}


@pytest.mark.parametrize("case", sorted(MUTATIONS))
def test_bad_checkpoint_is_refused_before_any_work(case: str, tiny_checkpoint: Path, tmp_path: Path) -> None:
    mutate, code, text = MUTATIONS[case]
    folder = copy_checkpoint(tiny_checkpoint, tmp_path / "ckpt")
    mutate(folder)
    out = tmp_path / "out" / "bundle"
    out.parent.mkdir()
    assert_refused(run_packager("convert", str(folder), "--out", str(out), "--quiet"), code, text, out)


def test_missing_folder_and_file_are_refused(tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    assert_refused(run_packager("convert", str(tmp_path / "nope"), "--out", str(out)), 10, "does not exist", out)
    (tmp_path / "file").write_text("x")
    assert_refused(run_packager("convert", str(tmp_path / "file"), "--out", str(out)), 10, "is not a folder", out)


@pytest.fixture(scope="module")
def other_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_qwen3(tmp_path_factory.mktemp("other") / "wide", hidden=384, heads=3, intermediate=768)


def test_adapter_for_another_base_is_refused(tiny_checkpoint: Path, other_base: Path, tmp_path: Path) -> None:
    adapter = build_lora(other_base, tmp_path / "adapter")
    out = tmp_path / "bundle"
    assert_refused(
        run_packager("convert", str(tiny_checkpoint), "--lora", str(adapter), "--out", str(out)),
        16,
        "do not fit the base weight",
        out,
    )


def test_adapter_with_a_wrong_shape_is_refused(tiny_checkpoint: Path, lora_adapter: Path, tmp_path: Path) -> None:
    import torch
    from safetensors.torch import load_file, save_file

    adapter = tmp_path / "adapter"
    shutil.copytree(lora_adapter, adapter)
    tensors = load_file(adapter / "adapter_model.safetensors")
    key = next(k for k in sorted(tensors) if "q_proj.lora_A" in k)
    tensors[key] = torch.zeros(tensors[key].shape[0], 100)
    save_file(tensors, adapter / "adapter_model.safetensors")
    out = tmp_path / "bundle"
    assert_refused(
        run_packager("convert", str(tiny_checkpoint), "--lora", str(adapter), "--out", str(out)), 16, "q_proj", out
    )


def test_adapter_folder_without_config_is_refused(tiny_checkpoint: Path, tmp_path: Path) -> None:
    (tmp_path / "adapter").mkdir()
    out = tmp_path / "bundle"
    assert_refused(
        run_packager("convert", str(tiny_checkpoint), "--lora", str(tmp_path / "adapter"), "--out", str(out)),
        16,
        "adapter_config.json",
        out,
    )


def test_bad_quantization_options_are_refused(tiny_checkpoint: Path, tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    assert_refused(
        run_packager("convert", str(tiny_checkpoint), "--out", str(out), "--quant-bits", "3"), 19, "--quant-bits 3", out
    )
    assert_refused(
        run_packager("convert", str(tiny_checkpoint), "--out", str(out), "--quant-block", "100"),
        19,
        "does not divide",
        out,
    )


def test_existing_out_is_refused_without_force(tiny_checkpoint: Path, tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    result = run_packager("convert", str(tiny_checkpoint), "--out", str(out))
    assert result.returncode == 18 and "already exists" in result.stderr
    assert (out / "keep.txt").read_text() == "mine"


@pytest.mark.parametrize(
    "spec, text",
    [
        ("[convert\nquant_bits = 4", "is not valid TOML"),
        ('[runtime.draft]\nthread_num = "2"\n', "runtime.draft.thread_num: '2' is not of type 'integer'"),
        ('[runtime.draft]\nsampler_type = "top_k"\n', "runtime.draft.sampler_type"),
        ('[runtime.main]\ntokenizer_file = "/abs/tokenizer.txt"\n', "runtime.main.tokenizer_file"),
        ("[convert]\nquant_block = 100\n", "convert.quant_block"),
    ],
)
def test_bad_spec_is_refused_with_its_path(spec: str, text: str, tiny_checkpoint: Path, tmp_path: Path) -> None:
    (tmp_path / "release.toml").write_text(spec)
    out = tmp_path / "bundle"
    assert_refused(
        run_packager("convert", str(tiny_checkpoint), "--out", str(out), "--spec", str(tmp_path / "release.toml")),
        17,
        text,
        out,
    )


@pytest.mark.converter
def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    result = run_cli("--debug", "convert", str(tmp_path / "nope"), "--out", str(tmp_path / "b"))
    assert result.returncode == 10 and "Traceback" in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("packager: error: ")
