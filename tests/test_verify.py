"""`verify` passes a faithful bundle and fails a tampered one with the numbers shown."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from packager.convert.pipeline import ConvertResult
from packager.infra.progress import Step
from packager.measure.logits import compare_in_chunks, compare_positions, margins
from packager.measure.verify import Thresholds, verify
from tests.conftest import run_cli


def test_faithful_8bit_bundle_passes(bundle8: ConvertResult, tiny_checkpoint: Path) -> None:
    """...and reports its stages by counts: the source's continuations and the bundle's comparisons each from 0
    (a bar from the stage's start), the comparisons every 6 prompts (a line each when stderr is no terminal)."""
    lines: list[str] = []
    report = verify(bundle8.out, tiny_checkpoint, progress=lines.append)
    counts = {
        label: [line.done for line in lines if isinstance(line, Step) and line.label == label]
        for label in ("the source's continuations", "the bundle on the same tokens")
    }
    assert counts["the source's continuations"][0] == 0 and counts["the source's continuations"][-1] == 54
    assert counts["the bundle on the same tokens"] == [*range(0, 54, 6), 54], counts
    assert report.ok, report.failures
    assert report.mean_cosine > 0.999 and report.mean_kl < 0.001
    assert report.positions >= 1000 and report.prompts == 54
    assert report.tokenizer_total == 44 and report.tokenizer_matched >= 37
    # Random weights have flat logits: almost no position is decisive, so top-1 is reported but not gated.
    assert report.top1_decisive is None and any("not gated" in note for note in report.notes)


def _few_prompts(folder: Path) -> Path:
    """A short --prompts file: the CLI tests check the gate's wiring, not the figures (fewer positions, faster)."""
    path = folder / "prompts.txt"
    path.write_text("The capital of France is\ndef fibonacci(n):\nQ: Why is the sky blue?\n", encoding="utf-8")
    return path


def test_tampered_weights_fail_with_numbers(bundle8: ConvertResult, tiny_checkpoint: Path, tmp_path: Path) -> None:
    bundle = tmp_path / "tampered"
    shutil.copytree(bundle8.out, bundle)
    weights = bytearray((bundle / "llm.mnn.weight").read_bytes())
    start = len(weights) // 3
    weights[start : start + 3_000_000] = bytes(reversed(weights[start : start + 3_000_000]))
    (bundle / "llm.mnn.weight").write_bytes(bytes(weights))
    result = run_cli(
        "verify",
        str(bundle),
        "--checkpoint",
        str(tiny_checkpoint),
        "--json",
        "--quiet",
        "--prompts",
        str(_few_prompts(tmp_path)),
    )
    assert result.returncode == 50
    data = json.loads(result.stdout)
    assert not data["ok"] and data["mean_cosine"] < 0.98
    assert any(f.startswith("mean cosine 0.") and "< 0.9800" in f for f in data["failures"])


def test_thresholds_come_from_the_spec(bundle4: ConvertResult, tiny_checkpoint: Path, tmp_path: Path) -> None:
    spec = tmp_path / "release.toml"
    # Gates the defaults leave off (all-position top-1, greedy agreement) bite when the spec sets them.
    spec.write_text("[verify]\ntop1_agreement = 0.9999\ngreedy_agreement = 0.9999\n")
    result = run_cli(
        "verify",
        str(bundle4.out),
        "--checkpoint",
        str(tiny_checkpoint),
        "--spec",
        str(spec),
        "--json",
        "--quiet",
        "--prompts",
        str(_few_prompts(tmp_path)),
    )
    assert result.returncode == 50, result.stdout
    failures = json.loads(result.stdout)["failures"]
    assert any(f.startswith("top-1 agreement") for f in failures)
    assert any(f.startswith("greedy agreement") for f in failures)
    assert Thresholds.from_spec({"mean_cosine": 0.5}).mean_cosine == 0.5
    assert Thresholds.from_spec(None).top1_agreement is None  # not gated by default


def test_position_metrics() -> None:
    import numpy as np

    a = np.array([[1.0, 2.0, 3.0], [3.0, 1.0, 0.0]])
    top1, cosine, kl = compare_positions(a, a.copy())
    assert top1 == [True, True] and all(abs(c - 1) < 1e-12 for c in cosine) and all(abs(k) < 1e-9 for k in kl)
    top1, _, kl = compare_positions(a, a[::-1].copy())
    assert top1 == [False, False] and all(k > 0.1 for k in kl)


def test_float32_comparison_equals_the_float64_reference_on_real_logits(
    bundle4: ConvertResult, tiny_checkpoint: Path
) -> None:
    """verify compares in torch's float32 kernels; the float64 reference (compare_positions, margins) gives the
    same top-1 and margins exactly and the same cosine and KL to within float32 rounding, for a faithful pair of
    rows and for rows far apart (another prompt's, reversed)."""
    import numpy as np

    from packager.runtime.child import MNNModel
    from packager.runtime.models import HFModel

    source, ours = HFModel(tiny_checkpoint, dtype="stored"), MNNModel(bundle4.out)
    try:
        for text in ("The capital of France is", "def fibonacci(n):\n    return", "Q: Why is the sky blue?"):
            ids = source.encode(text)
            theirs = source.logits_all(ids).astype(np.float32)  # bf16 widened: exact in float32
            mine = ours.logits_all(ids).astype(np.float32)  # MNN's own float32 rows
            for a, b in ((mine, theirs), (np.ascontiguousarray(theirs[::-1]) * 3, theirs)):
                top1, cosine, kl, margin = compare_in_chunks(a, b, chunk=3)
                ref_top1, ref_cosine, ref_kl = compare_positions(a.astype(np.float64), b.astype(np.float64))
                assert top1 == ref_top1 and margin == list(margins(b.astype(np.float64)))
                assert np.abs(np.array(cosine) - ref_cosine).max() < 1e-6
                assert np.abs(np.array(kl) - ref_kl).max() < 1e-6 + 1e-5 * max(ref_kl)
    finally:
        ours.close()


def test_logits_each_gives_every_sequence_its_own_rows_in_order(bundle4: ConvertResult) -> None:
    import numpy as np

    from packager.runtime import shared
    from packager.runtime.child import MNNModel

    model = MNNModel(bundle4.out)
    sequences = [[1, 2, 3], [4, 5, 6, 7, 8, 9, 10], [11], [1, 2, 3]]
    alone = [model.logits_all(ids) for ids in sequences]
    got = list(model.logits_each(iter(sequences)))
    assert len(got) == len(sequences)
    assert all(rows.dtype == np.float32 and np.array_equal(rows, one) for rows, one in zip(got, alone))
    for rows, one in zip(model.logits_each(sequences, borrowed=True), alone):  # each used before the next
        assert np.array_equal(rows, one)
        assert rows.nbytes < shared.THRESHOLD or not rows.flags.owndata  # large ones: the child's bytes in place
    assert all(rows.flags.owndata for rows in got if rows.nbytes >= shared.THRESHOLD)  # not borrowed: copies
    assert list(model.logits_each([])) == [] and np.array_equal(model.logits_all([11]), alone[2])  # in step
    early = model.logits_each(sequences)
    assert np.array_equal(next(early), alone[0])  # the second forward is now in flight, its reply never read
    process = model._process
    model.close()  # the child's write of that reply fails and it ends by itself, not killed after a timeout
    assert process.returncode == 0


def test_large_replies_cross_through_shared_memory_with_the_pipes_bytes(
    bundle4: ConvertResult, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A prompt's logits come back through the shared file, not pickled through the pipe, bit for bit the same;
    where there is no shared file (monkeypatched away) they take the pipe."""
    import os

    import numpy as np

    from packager.runtime import shared
    from packager.runtime.child import MNNModel

    ids = [1, 2, 3, 4, 5, 6, 7, 8, 9]
    model = MNNModel(bundle4.out)
    try:
        through_shared = model.logits_all(ids)
        assert model._shared is not None and os.fstat(model._shared[0]).st_size == through_shared.size * 4
        small = model.encode("hi")  # small replies stay in the pipe
    finally:
        model.close()
    monkeypatch.setattr(shared, "create", lambda: None)
    model = MNNModel(bundle4.out)
    try:
        assert model._shared is None
        assert np.array_equal(model.logits_all(ids), through_shared) and model.encode("hi") == small
    finally:
        model.close()


def test_a_shared_write_that_fails_leaves_the_array_to_the_pipe(tmp_path: Path) -> None:
    import os

    import numpy as np

    from packager.runtime import shared

    array = np.arange(shared.THRESHOLD, dtype=np.float32).reshape(4, -1)
    (tmp_path / "f").write_bytes(b"")
    fd = os.open(tmp_path / "f", os.O_RDONLY)  # writing fails (EBADF), as a full memory limit would
    try:
        assert shared.Writer((fd,)).put(array) is array
        # a view of MNN's buffer never crosses the pipe uncopied: not when the write fails, not without shared
        # files, not when it is small
        for writer, view in (
            (shared.Writer((fd,)), array),
            (shared.Writer(()), array),
            (shared.Writer((fd,)), array[:1, :10]),
        ):
            copied = writer.put(view, owned=False)
            assert isinstance(copied, np.ndarray) and not np.shares_memory(copied, view)
            assert np.array_equal(copied, view)
    finally:
        os.close(fd)
    fds = shared.create()
    assert fds is not None and len(fds) == 2
    try:
        writer = shared.Writer(fds)
        sent = writer.put(array)
        assert isinstance(sent, shared.SharedArray) and np.array_equal(shared.take(fds, sent), array)
        assert isinstance(writer.put(array[:1, :10]), np.ndarray) and isinstance(writer.put([1, 2]), list)
        os.ftruncate(fds[sent.slot], 100)  # a file shorter than the reply says: an error, never a half-filled array
        with pytest.raises(OSError, match="ended after 100 of"):
            shared.take(fds, sent)
        with pytest.raises(OSError, match="ended after 100 of"):  # mapped, it would have been SIGBUS
            shared.borrow(fds, sent)
        with pytest.raises(OSError, match="names file 2 of 2"):
            shared.take(fds, shared.SharedArray(sent.shape, sent.dtype, 2))
        for shape in ((-1, 4), (), (0, 4)):  # a reply that makes no sense: an error, not a negative mapping
            with pytest.raises(OSError, match="no usable shape"):
                shared.borrow(fds, shared.SharedArray(shape, sent.dtype, 0))
    finally:
        for fd in fds:
            os.close(fd)


def test_replies_alternate_between_two_files_so_a_borrowed_array_outlives_the_next_write() -> None:
    """The child writes reply i + 1 while the parent still reads reply i in place: the two go to different
    files, and a borrowed array is the file's bytes (no copy) until the reply after next."""
    import os

    import numpy as np

    from packager.runtime import shared

    fds = shared.create()
    assert fds is not None
    try:
        writer = shared.Writer(fds)
        arrays = [np.full((4, shared.THRESHOLD // 4), i, dtype=np.float32) for i in range(3)]
        first = writer.put(arrays[0])
        borrowed = shared.borrow(fds, first)
        second = writer.put(arrays[1])
        assert (first.slot, second.slot) == (0, 1)
        assert np.array_equal(borrowed, arrays[0]) and np.array_equal(shared.borrow(fds, second), arrays[1])
        third = writer.put(arrays[2])  # back to the first file: the first borrowed array now holds reply three
        assert third.slot == 0 and np.array_equal(borrowed, arrays[2])
        assert np.array_equal(shared.take(fds, second), arrays[1])
    finally:
        for fd in fds:
            os.close(fd)


def test_a_runtime_killed_with_a_request_in_flight_is_named(bundle4: ConvertResult) -> None:
    import os

    from packager.errors import RuntimeCrashed
    from packager.runtime.child import MNNModel

    model = MNNModel(bundle4.out)
    model.submit("logits_all", [1, 2, 3])
    os.kill(model._process.pid, 9)
    with pytest.raises(RuntimeCrashed, match="was killed .* while running logits_all on the bundle"):
        model.collect()


def _zeroed_copy(bundle: Path, out: Path) -> Path:
    shutil.copytree(bundle, out)
    weights = out / "llm.mnn.weight"
    weights.write_bytes(bytes(weights.stat().st_size))
    return out


def test_runtime_crash_on_zeroed_weights_is_one_line_and_exit_27(
    bundle4: ConvertResult, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    # MNN 3.6.1 really segfaults loading an all-zero llm.mnn.weight; it happens in the child process.
    bundle = _zeroed_copy(bundle4.out, tmp_path / "zeroed")
    result = run_cli("verify", str(bundle), "--checkpoint", str(tiny_checkpoint), "--quiet")
    assert result.returncode == 27, (result.returncode, result.stderr[-2000:])
    assert result.stderr.count("\n") == 1 and result.stdout == ""
    assert result.stderr.startswith("packager: error: the MNN runtime crashed (SIGSEGV, signal 11) while loading")


def test_runtime_crash_is_runtime_crashed_in_the_library_too(bundle4: ConvertResult, tmp_path: Path) -> None:
    from packager.errors import RuntimeCrashed
    from packager.runtime.child import MNNModel

    bundle = _zeroed_copy(bundle4.out, tmp_path / "zeroed")
    try:
        MNNModel(bundle)
    except RuntimeCrashed as exc:
        assert exc.exit_code == 27 and "SIGSEGV" in exc.message and str(bundle) in exc.message
    else:
        raise AssertionError("MNN loaded an all-zero weight file")


def test_runtime_child_serves_the_same_logits_as_the_runtime_in_process(bundle4: ConvertResult) -> None:
    from packager.runtime.child import MNNModel
    from packager.runtime.mnn import MNNRuntime

    child, here = MNNModel(bundle4.out), MNNRuntime(bundle4.out)
    ids = here.encode("The capital of France is")
    assert child.encode("The capital of France is") == ids and child.vocab == here.vocab
    assert (child.logits_all(ids) == here.logits_all(ids)).all()
    assert child.greedy(ids, 5) == here.greedy(ids, 5)
    assert child.start(ids) == len(ids) and child.timed_step(ids[:2], True) > 0
    process = child._process
    child.close()
    assert process.returncode == 0  # a closed pipe ends the child cleanly


@pytest.mark.parametrize(
    "content, expect",
    [
        (b"\xff\xfe not utf-8", "is not UTF-8 text"),
        (b'["unclosed", ', "is not valid JSON"),
        (b"[" * 10_000 + b"]" * 10_000, "is not valid JSON (nested too deeply)"),
        (b'{"prompts": [1, 2]}', "must hold a list of non-empty strings"),
        (b"[]", "holds no prompts"),
        (b"\n  \n", "holds no prompts"),
    ],
)
def test_unusable_prompts_file_is_one_line(
    bundle4: ConvertResult, tiny_checkpoint: Path, tmp_path: Path, content: bytes, expect: str
) -> None:
    prompts = tmp_path / "prompts.txt"
    prompts.write_bytes(content)
    result = run_cli(
        "verify", str(bundle4.out), "--checkpoint", str(tiny_checkpoint), "--prompts", str(prompts), "--quiet"
    )
    assert result.returncode == 19 and result.stderr.count("\n") == 1, result.stderr[-2000:]
    assert f"--prompts {prompts} {expect}" in result.stderr


def test_unreadable_source_tokenizer_is_one_line(bundle4: ConvertResult, tiny_checkpoint: Path, tmp_path: Path) -> None:
    source = tmp_path / "source"
    shutil.copytree(tiny_checkpoint, source)
    (source / "tokenizer.json").write_text("{ broken")
    result = run_cli("verify", str(bundle4.out), "--checkpoint", str(source), "--quiet")
    assert result.returncode == 15 and result.stderr.count("\n") == 1, result.stderr[-2000:]
    assert f"cannot load {source}/tokenizer.json" in result.stderr


@pytest.mark.parametrize(
    "signal_number, words",
    [
        (9, "was killed (SIGKILL; often the out-of-memory killer) while running encode on the bundle"),
        (6, "crashed (SIGABRT, signal 6) while running encode on the bundle"),
    ],
)
def test_a_killed_runtime_child_is_named_by_its_signal(bundle4: ConvertResult, signal_number: int, words: str) -> None:
    import os

    from packager.errors import RuntimeCrashed
    from packager.runtime.child import MNNModel

    model = MNNModel(bundle4.out)
    os.kill(model._process.pid, signal_number)  # what the OOM killer or an abort inside MNN does
    with pytest.raises(RuntimeCrashed) as caught:
        model.encode("hello")
    assert caught.value.exit_code == 27 and f"the MNN runtime {words} {bundle4.out}" == caught.value.message


def test_a_small_bundle_is_loaded_once_a_larger_one_is_never_resident_beside_the_source(
    bundle4: ConvertResult, tiny_checkpoint: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A small bundle's runtime from the preflight serves the comparison too (no second load); a larger one's is
    closed before the source is loaded and loaded again after the source is freed. The figures are the same."""
    import packager.measure.verify as verify_module
    from packager.runtime import models
    from packager.runtime.child import MNNModel

    assert verify_module._small(bundle4.out, 151936)  # the tiny test bundle is one of the small ones
    made: list[MNNModel] = []
    alive_at_source: list[int] = []
    original_init, original_source = MNNModel.__init__, models.HFModel.__init__

    def counting_init(self: MNNModel, *args: object, **kwargs: object) -> None:
        original_init(self, *args, **kwargs)
        made.append(self)

    def source_init(self: models.HFModel, *args: object, **kwargs: object) -> None:
        alive_at_source.append(sum(model._process.poll() is None for model in made))
        original_source(self, *args, **kwargs)

    monkeypatch.setattr(MNNModel, "__init__", counting_init)
    monkeypatch.setattr(models.HFModel, "__init__", source_init)
    prompts = ("The capital of France is", "def fibonacci(n):")
    kept = verify(bundle4.out, tiny_checkpoint, prompts=prompts)
    assert (len(made), alive_at_source) == (1, [1])
    made.clear()
    alive_at_source.clear()
    monkeypatch.setattr(verify_module, "_small", lambda bundle, vocab: False)
    reloaded = verify(bundle4.out, tiny_checkpoint, prompts=prompts)
    assert (len(made), alive_at_source) == (2, [0])
    assert all(model._process.poll() is not None for model in made)  # every child ended with verify
    assert kept.positions == reloaded.positions > 0
    assert (kept.mean_kl, kept.mean_cosine, kept.top1_agreement) == (
        reloaded.mean_kl,
        reloaded.mean_cosine,
        reloaded.top1_agreement,
    )


def test_small_is_the_weight_file_against_the_lm_head_at_a_byte_a_weight(
    bundle4: ConvertResult, tmp_path: Path
) -> None:
    from packager.measure.verify import _small

    weights = (bundle4.out / "llm.mnn.weight").stat().st_size
    hidden = json.loads((bundle4.out / "llm_config.json").read_text())["hidden_size"]
    assert _small(bundle4.out, -(-weights // hidden)) and not _small(bundle4.out, weights // hidden - 1)
    folder = shutil.copytree(bundle4.out, tmp_path / "b")
    (folder / "llm_config.json").write_text('{"hidden_size": "wide"}')  # unreadable: not small, two threads
    assert not _small(folder, 10**9)
    (folder / "llm_config.json").unlink()
    assert not _small(folder, 10**9)


def test_an_interrupt_during_the_imports_closes_the_runtime_the_preflight_kept(
    bundle4: ConvertResult, tiny_checkpoint: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import packager.measure.verify as verify_module
    from packager.runtime.child import MNNModel

    made: list[MNNModel] = []
    original_init = MNNModel.__init__

    def counting_init(self: MNNModel, *args: object, **kwargs: object) -> None:
        original_init(self, *args, **kwargs)
        made.append(self)

    def interrupted(source: Path) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(MNNModel, "__init__", counting_init)
    monkeypatch.setattr(verify_module, "_import_source_libraries", interrupted)
    with pytest.raises(KeyboardInterrupt):
        verify(bundle4.out, tiny_checkpoint, prompts=("The capital of France is",))
    assert len(made) == 1 and made[0]._process.poll() is not None and made[0]._shared is None
