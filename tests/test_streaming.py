"""The streaming conversion gives the reference path's bytes, and its graph cache is safe to share and to damage."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from packager.bundle.kinds import FILES
from packager.convert.pipeline import ConvertRequest, ConvertResult, convert
from packager.convert.stream import graphcache, weightwriter
from packager.convert.stream.quant import QuantSpec, quantize
from tests.bundlecheck import assert_same_bundle
from tests.conftest import run_cli
from tests.models import build_lora, build_qwen3
from tests.weighttasks import weight_tasks


def _llmexport_quant():  # type: ignore[no-untyped-def]
    spec = importlib.util.find_spec("llmexport")
    assert spec is not None and spec.origin is not None
    sys.path.insert(0, str(Path(spec.origin).parent))
    try:
        from utils.torch_utils import quant
    finally:
        sys.path.pop(0)
    return quant


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("block", [32, 128, 0])
def test_numpy_quantization_gives_llmexports_bytes(dtype: str, bits: int, block: int) -> None:
    import torch

    torch.manual_seed(bits * 1000 + block)
    weight = (torch.randn(96, 256) * torch.rand(96, 1) * 0.1).to(getattr(torch, dtype))
    weight[0, :128] = 0  # a constant block: scale 0, torch turns the 0/0 into 0
    weight[1, :] = 0.5
    weight[2] = torch.randn(256).to(weight.dtype) * 1e4  # a large range
    weight[3, :64] = 1e-3  # a tiny range
    weight[3, 1] = 1.0001e-3
    ours = quantize(weight, dtype, QuantSpec(bits, block), lambda rows: rows.float().numpy())
    q, alpha = _llmexport_quant()(weight, bits, block, False, False, False)
    assert ours == (q.numpy().tobytes(), alpha.numpy().tobytes())


def _reference(checkpoint: Path, out: Path, **options: object) -> ConvertResult:
    return convert(ConvertRequest(checkpoint=checkpoint, out=out, reference=True, **options))  # type: ignore[arg-type]


def _streamed(checkpoint: Path, out: Path, **options: object) -> ConvertResult:
    result = convert(ConvertRequest(checkpoint=checkpoint, out=out, **options))  # type: ignore[arg-type]
    assert result.path == "streamed"
    return result


def _sharded(source: Path, out: Path) -> Path:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    model.save_pretrained(out, max_shard_size="20MB")
    for item in source.iterdir():
        if item.suffix != ".safetensors" and not (out / item.name).exists():
            shutil.copy(item, out / item.name)
    assert len(list(out.glob("*.safetensors"))) > 1
    return out


# Each case covers what the default bundle (bfloat16, tied, 4 bits, block 128: the next test) does not, and the
# quantization's bytes for every dtype x bits x block are the unit test above: a float16 untied target at 8 bits
# block 64 (its embeddings file rounded to bfloat16 on the way, as torch rounds it), and a float32 checkpoint in
# shards at 4 bits per channel (block 0).
@pytest.mark.converter
@pytest.mark.parametrize("case", ["float16 untied target, 8 bits, block 64", "float32 sharded, 4 bits, per channel"])
def test_streamed_bundle_is_byte_identical_to_the_reference(case: str, tmp_path: Path) -> None:
    if case.startswith("float16"):
        source = build_qwen3(tmp_path / "t16", layers=2, tie=False, dtype="float16", seed=21)
        options: dict[str, object] = {"quant_bits": 8, "quant_block": 64, "kind": "target"}
    else:
        source = _sharded(build_qwen3(tmp_path / "fp32", dtype="float32", seed=4), tmp_path / "sharded")
        options = {"quant_bits": 4, "quant_block": 0}
    reference = _reference(source, tmp_path / "reference", **options)
    streamed = _streamed(source, tmp_path / "streamed", **options)
    if case.startswith("float16"):
        assert "embeddings_bf16.bin" in streamed.sizes and streamed.kind.name == "target"
    assert_same_bundle(reference.out, streamed.out)


@pytest.mark.converter
def test_default_bundle_is_streamed_and_identical_to_the_reference(
    bundle4: ConvertResult, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    assert bundle4.path == "streamed"
    assert_same_bundle(_reference(tiny_checkpoint, tmp_path / "reference").out, bundle4.out)


@pytest.mark.converter
def test_lora_is_merged_on_the_way_to_the_reference_bytes(
    lora_bundle8: ConvertResult, tiny_checkpoint: Path, lora_adapter: Path, tmp_path: Path
) -> None:
    assert lora_bundle8.path == "streamed"
    reference = _reference(tiny_checkpoint, tmp_path / "reference", adapter=lora_adapter, quant_bits=8)
    assert_same_bundle(reference.out, lora_bundle8.out)


@pytest.mark.converter
def test_rslora_adapter_streams_to_the_reference_bytes(tiny_checkpoint: Path, tmp_path: Path) -> None:
    adapter = build_lora(tiny_checkpoint, tmp_path / "adapter", rank=8, alpha=16)
    config = json.loads((adapter / "adapter_config.json").read_text())
    config["use_rslora"] = True
    (adapter / "adapter_config.json").write_text(json.dumps(config))
    reference = _reference(tiny_checkpoint, tmp_path / "reference", adapter=adapter)
    assert_same_bundle(reference.out, _streamed(tiny_checkpoint, tmp_path / "streamed", adapter=adapter).out)


@pytest.mark.converter
def test_checkpoint_whose_dtype_disagrees_with_its_config_takes_the_reference_path(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    folder = build_qwen3(tmp_path / "mixed", dtype="float32", seed=5)
    config = json.loads((folder / "config.json").read_text())
    config["dtype"] = "bfloat16"  # llmexport loads it as bf16: the streamed bytes would differ
    (folder / "config.json").write_text(json.dumps(config))
    result = run_cli("convert", str(folder), "--out", str(tmp_path / "bundle"), "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["weights"] == "reference"
    assert "streaming does not cover this checkpoint" in result.stderr


# --- target bundles: untied embeddings, an EAGLE-3 head ----------------------------------------------------------


@pytest.mark.converter
def test_a_target_with_its_eagle_head_streams_to_the_reference_bytes(
    eagle_bundle: ConvertResult, target8: Path, head: Path, tmp_path: Path
) -> None:
    assert eagle_bundle.path == "streamed"
    reference = _reference(target8, tmp_path / "reference", eagle=head)
    assert_same_bundle(reference.out, eagle_bundle.out)  # the head's graphs too: their uuids are stamped
    assert json.loads(eagle_bundle.provenance.read_text())["options"]["weights"] == "streamed"


def test_the_graph_key_follows_the_heads_weights_and_rope_theta(target8: Path, head: Path, tmp_path: Path) -> None:
    """The graph cache keeps a head's exported files with the target's graph: another head, or the same head at
    another rope theta, must key another entry (the end-to-end reuse is the next test)."""
    from safetensors.torch import load_file, save_file

    from packager.convert.inspect.checkpoint import inspect_checkpoint
    from packager.convert.inspect.eagle_head import inspect_head
    from packager.convert.stream.run import _head_fields

    target = inspect_checkpoint(target8, allow_untied=True)
    other = tmp_path / "other-head"
    shutil.copytree(head, other)
    tensors = load_file(str(other / "model.safetensors"))
    tensors["midlayer.mlp.down_proj.weight"] = tensors["midlayer.mlp.down_proj.weight"] * 2  # another head
    save_file(tensors, str(other / "model.safetensors"))
    retuned = tmp_path / "retuned-head"
    shutil.copytree(head, retuned)
    config = json.loads((head / "config.json").read_text())
    (retuned / "config.json").write_text(json.dumps({**config, "rope_theta": 500000.0}))
    fields = [_head_fields(inspect_head(folder, target)) for folder in (head, other, retuned, head)]
    keys = [graphcache.key({"target": "same", "eagle": f}) for f in fields]
    assert len(set(keys[:3])) == 3 and keys[3] == keys[0]
    assert graphcache.key({"target": "same"}) not in keys  # no head: another graph


@pytest.mark.parametrize("damage", ["a flipped byte", "a file missing"])
def test_a_damaged_cache_entry_is_removed_and_reported_on_lookup(damage: str, own_cache: Path, tmp_path: Path) -> None:
    files = {name: tmp_path / name for name in ("llm.mnn", "llm.mnn.json", "llm_config.json", "tokenizer.mtok")}
    for name, path in files.items():
        path.write_bytes(name.encode() * 1000)
    entry = graphcache.store("ab" * 16, files, {"describe": "a test entry"})
    assert graphcache.lookup("ab" * 16) == entry
    if damage == "a flipped byte":
        data = bytearray((entry / "llm.mnn").read_bytes())
        data[len(data) // 2] ^= 0xFF
        (entry / "llm.mnn").write_bytes(bytes(data))
    else:
        (entry / "llm.mnn.json").unlink()  # its manifest still names it
    said: list[str] = []
    assert graphcache.lookup("ab" * 16, said.append) is None
    assert said == [f"graph cache entry {'ab' * 6} is damaged; removed it and rebuilding"] and not entry.exists()


@pytest.mark.converter
def test_a_cached_head_is_reused_and_a_damaged_one_rebuilt(
    target8: Path, head: Path, own_cache: Path, tmp_path: Path
) -> None:
    first = run_cli("convert", str(target8), "--eagle", str(head), "--out", str(tmp_path / "first"))
    assert first.returncode == 0 and "graph cache miss" in first.stderr, first.stderr
    again = run_cli("convert", str(target8), "--eagle", str(head), "--out", str(tmp_path / "again"))
    assert "graph cache hit" in again.stderr and "starting the converter" not in again.stderr
    assert_same_bundle(tmp_path / "first", tmp_path / "again")
    (entry,) = [p for p in own_cache.iterdir() if not p.name.startswith(".")]
    weight = entry / "eagle.mnn.weight"
    data = bytearray(weight.read_bytes())
    data[len(data) // 2] ^= 0xFF
    weight.write_bytes(bytes(data))
    third = run_cli("convert", str(target8), "--eagle", str(head), "--out", str(tmp_path / "third"))
    assert third.returncode == 0, third.stderr
    assert "is damaged; removed it and rebuilding" in third.stderr
    assert_same_bundle(tmp_path / "first", tmp_path / "third")


def test_bfloat16_rounding_is_torchs() -> None:
    import torch

    torch.manual_seed(0)
    values = torch.cat(
        [
            torch.randn(50000) * torch.rand(50000) * 1e3,
            torch.tensor(
                [
                    float("inf"),
                    -float("inf"),
                    0.0,
                    -0.0,
                    3.4e38,
                    -3.4e38,
                    1e-40,
                    -1e-40,
                    1.0 + 2**-8,
                    1.0 + 3 * 2**-8,
                    65504.0,
                ]
            ),
        ]
    )  # ties round to even
    assert weightwriter._to_bfloat16(values.numpy()) == values.bfloat16().view(torch.uint16).numpy().tobytes()
    with pytest.raises(weightwriter.StreamingUnsupported, match="NaN"):
        weightwriter._to_bfloat16(np.array([1.0, np.nan], dtype=np.float32))


# --- the graph cache --------------------------------------------------------------------------------------------


@pytest.fixture()
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("PACKAGER_CACHE_DIR", str(folder))
    return folder / "graphs"


@pytest.mark.converter
def test_warm_cache_starts_no_converter_and_gives_the_same_bytes(
    tiny_checkpoint: Path, own_cache: Path, tmp_path: Path
) -> None:
    cold = run_cli("convert", str(tiny_checkpoint), "--out", str(tmp_path / "cold"))
    warm = run_cli("convert", str(tiny_checkpoint), "--out", str(tmp_path / "warm"))
    assert cold.returncode == warm.returncode == 0, cold.stderr + warm.stderr
    assert "graph cache miss" in cold.stderr and "starting the converter" in cold.stderr
    assert "graph cache hit" in warm.stderr and "starting the converter" not in warm.stderr
    assert "MB/s" in warm.stderr  # progress with a rate
    assert_same_bundle(tmp_path / "cold", tmp_path / "warm")


@pytest.mark.converter
def test_two_conversions_on_a_cold_cache_share_it_safely(
    tiny_checkpoint: Path, own_cache: Path, tmp_path: Path
) -> None:
    outs = [tmp_path / "a", tmp_path / "b"]
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "packager.cli", "convert", str(tiny_checkpoint), "--out", str(out), "--quiet"],
            env=os.environ.copy(),
            stderr=subprocess.PIPE,
            text=True,
        )
        for out in outs
    ]
    for process in processes:
        assert process.wait(timeout=600) == 0, process.stderr.read() if process.stderr else ""
    assert_same_bundle(*outs)
    assert len(graphcache.entries()) == 1
    assert not list(own_cache.glob(".incoming-*"))


@pytest.mark.converter
def test_cache_ls_and_clear_touch_only_cache_entries(tiny_checkpoint: Path, own_cache: Path, tmp_path: Path) -> None:
    assert run_cli("convert", str(tiny_checkpoint), "--out", str(tmp_path / "b")).returncode == 0
    (own_cache / "my-notes").mkdir()  # the user pointed the cache at a folder that has other things in it
    (own_cache / "my-notes" / "keep.txt").write_text("mine")
    listing = json.loads(run_cli("cache", "ls", "--json").stdout)["graphs"]
    assert len(listing) == 1 and "hidden 256 x 2 layers" in listing[0]["describe"]
    cleared = run_cli("cache", "clear")
    assert cleared.returncode == 0 and "removed 1 entries" in cleared.stdout
    assert json.loads(run_cli("cache", "ls", "--json").stdout) == {"graphs": [], "targets": []}
    assert (own_cache / "my-notes" / "keep.txt").read_text() == "mine"


def test_a_cache_entry_holds_only_the_files_it_may(own_cache: Path, tmp_path: Path) -> None:
    files = {}
    for name in ("llm.mnn", "llm.mnn.json", "llm_config.json", "tokenizer.mtok", "tokenizer-text.txt", "eagle.mnn"):
        files[name] = tmp_path / name
        files[name].write_bytes(name.encode())
    entry = graphcache.store("a" * 32, files, {"describe": "test"})
    assert graphcache.contents(entry) == (*graphcache.FILES, "tokenizer-text.txt", "eagle.mnn")
    assert graphcache.lookup("a" * 32) == entry
    (entry / "eagle_fc.mnn").write_bytes(b"slipped in")  # a file the manifest does not name
    assert graphcache.lookup("a" * 32) is None and not entry.exists()
    with pytest.raises(ValueError):
        graphcache.store("b" * 32, {**files, "../escape": tmp_path / "llm.mnn"}, {})


def test_cache_keeps_a_bounded_number_of_entries(
    own_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(graphcache, "MAX_ENTRIES", 3)
    source = tmp_path / "file"
    source.write_bytes(b"x")
    files = {name: source for name in graphcache.FILES if name != "meta.json"}
    for number in range(5):
        graphcache.store(graphcache.key({"n": number}), files, {"describe": f"entry {number}"})
        os.utime(own_cache / graphcache.key({"n": number}), (number, number))  # each newer than the last
    kept = {entry.describe for entry in graphcache.entries()}
    assert kept == {"entry 2", "entry 3", "entry 4"}
    assert graphcache.lookup(graphcache.key({"n": 4})) is not None


@pytest.mark.converter
def test_streamed_weights_fill_every_byte(bundle4: ConvertResult) -> None:
    # A region the writer forgot would stay as the zeros the file was created with.
    data = np.fromfile(bundle4.out / "llm.mnn.weight", dtype=np.uint8)
    graph = json.loads((bundle4.out / "llm.mnn.json").read_text())
    for op in graph["oplists"]:
        external = (op.get("main") or {}).get("external") if isinstance(op.get("main"), dict) else None
        if isinstance(external, list) and op["type"] == "Convolution":
            packed = data[external[0] + 26 : external[0] + external[1]]
            assert packed.any(), op["name"]


@pytest.mark.converter
def test_a_graph_build_that_fails_stops_the_weight_writers_and_its_error_stands(
    tiny_checkpoint: Path, own_cache: Path, tmp_path: Path
) -> None:
    # On a cache miss the weights are written from the start, beside the converter's imports; a converter that
    # fails while they are being written stops them, and its error (not theirs) is what the user gets.
    import multiprocessing
    import threading

    from packager.errors import ConversionFailed

    writing = threading.Event()

    def progress(line: str) -> None:
        lines.append(line)
        if line.startswith("quantizing weights:"):
            writing.set()

    def failing(job: object, progress: object) -> object:
        assert writing.wait(timeout=600), "the weights were never written beside the graph build"
        raise ConversionFailed("conversion failed: the converter could not start")

    lines: list[str] = []
    with pytest.raises(ConversionFailed, match="could not start"):
        convert(ConvertRequest(checkpoint=tiny_checkpoint, out=tmp_path / "b"), progress=progress, runner=failing)  # type: ignore[arg-type]
    assert any(line.startswith("graph cache miss") for line in lines)
    assert not (tmp_path / "b").exists()
    assert not multiprocessing.active_children()  # no writer process outlives the conversion


def test_stopped_weight_writers_start_no_further_task(tiny_checkpoint: Path, tmp_path: Path) -> None:
    # Before `widen` one process of two runs; `stop` set at its first report leaves exactly that task written.
    import threading

    tasks, size = weight_tasks(tiny_checkpoint)
    assert len(tasks) > 3
    widen, stop = threading.Event(), threading.Event()
    path = tmp_path / "llm.mnn.weight"
    finished = weightwriter.write(
        path, size, tasks, QuantSpec(4, 128), 2, lambda line: stop.set(), widen=widen, stop=stop
    )
    data = path.read_bytes()
    written = []
    for task in tasks:
        parts = weightwriter._encode(task, QuantSpec(4, 128))
        if all(data[offset : offset + len(part)] == part for part, offset in parts):
            written.append(task)
        else:
            assert not any(any(data[offset : offset + len(part)]) for part, offset in parts), task
    assert finished is False and len(written) == 1 and len(data) == size
    whole = tmp_path / "whole"
    assert weightwriter.write(whole, size, tasks, QuantSpec(4, 128), 2, lambda line: None) is True
    assert all(
        whole.read_bytes()[offset : offset + len(part)] == part
        for task in tasks
        for part, offset in weightwriter._encode(task, QuantSpec(4, 128))
    )


_KILLED_WRITER = """
import multiprocessing, os, signal, sys, threading
from pathlib import Path
from packager.convert.stream.quant import QuantSpec
from packager.convert.stream import weightwriter
from tests.weighttasks import weight_tasks

tasks, size = weight_tasks(Path(sys.argv[1]))

def progress(line):  # at the first report the pool still has tasks: print its processes, then die at once
    print(" ".join(str(p.pid) for p in multiprocessing.active_children()), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)

weightwriter.write(Path(sys.argv[2]), size, tasks, QuantSpec(4, 128), 2, progress, widen=threading.Event())
"""


def test_a_killed_packager_leaves_no_weight_writer_behind(tiny_checkpoint: Path, tmp_path: Path) -> None:
    # The writers asked the kernel to kill them with the process that started them: without that, a SIGKILLed
    # conversion left a writer (and multiprocessing's tracker) waiting on their queue forever.
    import psutil

    # Files, not pipes: an orphaned writer would hold a pipe open and hang the test instead of failing it.
    with open(tmp_path / "out", "w") as stdout, open(tmp_path / "err", "w") as stderr:
        code = subprocess.run(
            [sys.executable, "-c", _KILLED_WRITER, str(tiny_checkpoint), str(tmp_path / "w")],
            stdout=stdout,
            stderr=stderr,
            cwd=Path(__file__).resolve().parents[1],
        ).returncode
    assert code == -9, (tmp_path / "err").read_text()
    pids = (tmp_path / "out").read_text().split()
    assert pids, "the pool had no process at its first report"
    helpers = []
    for pid in pids:
        try:
            helpers.append(psutil.Process(int(pid)))
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(helpers, timeout=120)
    for process in alive:
        process.kill()
    assert not alive, "writers outlived the killed packager"
