"""The source's side of verify: greedy continuations decoded in batches of left-padded prompts are exactly greedy in
the logits kept for them, those logits are the model's own at every position (padding changes nothing but
rounding), and the spill file gives back every row bit for bit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from packager.families.qwen3 import QWEN3
from packager.measure import workload
from packager.measure.continuation import MAX_BATCH, MAX_BATCH_TOKENS, Spill, batches, continue_all
from packager.runtime.models import HFModel

STOP = (151643, 151645)


def test_batches_go_shortest_first_within_both_limits() -> None:
    lengths = [30, 5, 2000, 40, 7] + [10] * 20
    groups = list(batches(lengths))
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    for group in groups:
        assert len(group) <= MAX_BATCH
        assert len(group) == 1 or max(lengths[i] for i in group) * len(group) <= MAX_BATCH_TOKENS
    assert groups[-1] == [2] and groups[0][0] == 1  # the longest alone, the shortest first


def test_the_continuations_report_none_done_before_their_first_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """verify's longest stage shows its count (a bar at 0 on a terminal) from its start, not after a first batch
    that can take most of a minute."""
    from packager.measure import continuation

    counts: list[int] = []
    monkeypatch.setattr(continuation, "_decode", lambda prompts, *_: (counts.append(-1), list(prompts))[1])
    prompts = [[1] * 10] * (MAX_BATCH + 3)
    done = continue_all(object(), prompts, 4, STOP, None, progress=counts.append)  # type: ignore[arg-type]
    assert len(done) == len(prompts)
    assert counts == [0, -1, MAX_BATCH, -1, len(prompts)]  # 0 before the first batch decodes, then per batch


@pytest.fixture(scope="module")
def source(tiny_checkpoint: Path) -> HFModel:
    return HFModel(tiny_checkpoint, dtype="stored")


@pytest.mark.slow
@pytest.mark.parametrize("n", [0, 1, 12])
def test_batched_continuations_are_greedy_in_their_own_rows_which_match_one_prompt_alone(
    source: HFModel, tiny_checkpoint: Path, tmp_path: Path, n: int
) -> None:
    template = workload.chat_template(tiny_checkpoint)
    prompts = [
        source.encode(workload.render(template, item, QWEN3.template_variables)) for item in workload.builtin()[:5]
    ]
    prompts.append(source.encode("Hi"))  # much shorter than the rest: most of its batch row is padding
    spill = Spill(source.vocab, tmp_path)
    try:
        done = continue_all(source.model, prompts, n, STOP, spill)
        assert [list(item.ids) for item in done] == prompts
        for item in done:
            rows = spill.read(item)
            assert not list(tmp_path.iterdir())  # the spill file has no name: a killed run leaves nothing
            assert rows.shape == (item.positions, source.vocab) and rows.dtype == np.float32
            assert 1 <= len(item.tokens) <= n or (n == 0 and not item.tokens)
            start = len(item.ids) - 1
            assert [int(rows[start + j].argmax()) for j in range(len(item.tokens))] == list(item.tokens)
            assert all(t not in STOP for t in item.tokens[:-1])
            alone = source.logits_all([*item.ids, *item.tokens]).astype(np.float32)[: item.positions]
            cosine = (rows * alone).sum(-1) / (np.linalg.norm(rows, axis=-1) * np.linalg.norm(alone, axis=-1))
            assert cosine.min(initial=1.0) > 0.999  # bf16 rounding, not another computation
    finally:
        spill.close()


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_spill_gives_back_every_row_bit_for_bit(dtype: str, tmp_path: Path) -> None:
    import torch

    from packager.measure.continuation import Continued

    rows = torch.randn(7, 11).to(getattr(torch, dtype))
    spill = Spill(11, tmp_path)
    try:
        first, second = spill.write(rows[:4]), spill.write(rows[4:])
        item = Continued(ids=(1, 2, 3, 4), tokens=(5, 6, 7, 8), segments=(first, second))
        back = spill.read(item)
        # borrowed: the same rows in the spill's own buffer, which the next borrowed read reuses
        lent = spill.read(item, borrowed=True)
        assert np.array_equal(lent, back) and not np.shares_memory(lent, back)
        shorter = spill.read(Continued(ids=(1, 2), tokens=(), segments=(second,)), borrowed=True)
        assert np.shares_memory(shorter, lent) and np.array_equal(shorter, rows[4:5].float().numpy())
        assert np.array_equal(spill.read(item, borrowed=True), back)  # grown back to the longer item's rows
    finally:
        spill.close()
    assert np.array_equal(back, rows.float().numpy())


def test_spill_that_cannot_be_written_is_one_line(tmp_path: Path) -> None:
    from packager.errors import FileSystemError

    with pytest.raises(FileSystemError, match="cannot write the source's logits: No such file or directory"):
        Spill(11, tmp_path / "gone")


def test_a_disk_that_fills_under_the_background_writes_is_one_line(small_disk: Path) -> None:
    """The rows are written by a thread while decoding goes on; a full disk still ends verify with one line (the
    next write or the flush raises it), and the spill closes cleanly after it."""
    import torch

    from packager.errors import FileSystemError

    rows = torch.ones(1000, 1000, dtype=torch.bfloat16)  # 2 MB a write: the 6 MB disk holds two
    spill = Spill(1000, small_disk)
    try:
        with pytest.raises(FileSystemError, match="cannot write the source's logits: No space left on device"):
            for _ in range(6):
                spill.write(rows)
            spill.flush()
    finally:
        spill.close()
    assert not list(small_disk.iterdir())


def test_a_spill_file_cut_short_under_verify_is_one_line_not_garbage_rows(tmp_path: Path) -> None:
    import os

    import torch

    from packager.errors import FileSystemError
    from packager.measure.continuation import Continued

    spill = Spill(11, tmp_path)
    try:
        segment = spill.write(torch.randn(4, 11))
        spill.flush()
        os.ftruncate(spill._file.fileno(), 20)
        with pytest.raises(FileSystemError, match="ended early"):
            spill.read(Continued(ids=(1, 2, 3), tokens=(4,), segments=(segment,)))
    finally:
        spill.close()
