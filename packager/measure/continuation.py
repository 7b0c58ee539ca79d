"""The source's greedy continuations of many prompts, decoded in batches of prompts, with its logits at every
position kept in a temporary file: the half of `verify` that runs the source.

Why batches: one decoding step of a 0.6B model reads every weight once whatever the batch, and with bf16 weights
(the checkpoint's own dtype, which this CPU multiplies natively) a step over 16 prompts costs about what a step
over one does (measured: bench/verify_bench.py). Prompts are left-padded, with the attention mask and positions
that make padding invisible; each continuation is exactly greedy in the logits stored for it (every token is the
argmax of the row it was chosen from). The rows go to a file, not memory, so the bundle's runtime can be loaded
after the source is freed and the workload's size does not bound memory."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from ..errors import FileSystemError, from_os_error
from ..infra.fdio import read_into, write_all

MAX_BATCH = 16  # prompts decoded together
MAX_BATCH_TOKENS = 2048  # padded prompt tokens per batch: bounds the prefill's activations
PAD = 0


@dataclass(frozen=True)
class Continued:
    """One prompt, its greedy continuation, and where its logit rows (one per position but the last) are."""

    ids: tuple[int, ...]
    tokens: tuple[int, ...]
    segments: tuple[tuple[int, int], ...]  # (byte offset, rows) in the spill file, in position order

    @property
    def positions(self) -> int:
        return len(self.ids) + len(self.tokens) - 1


class Spill:
    """Logit rows in one temporary file, in the model's own dtype (bf16 stored as its 16 bits: lossless). The
    file has no name (O_TMPFILE, or unlinked at once), so even a killed run leaves nothing behind.

    Rows are written by a thread of their own while the source decodes on (a file write releases the GIL): on
    the trained miniature the writes were 1.3 s of its 3.2 s pass. At most WRITES_AHEAD writes wait, each
    holding its tensor, so memory stays bounded; the first failed write is raised by the next call."""

    WRITES_AHEAD = 2

    def __init__(self, vocab: int, folder: Path | None = None) -> None:
        self.vocab = vocab
        self.stored = "<f4"  # the numpy dtype of the file's numbers: "<u2" (bf16's 16 bits), "<f2" or "<f4"
        self._end = 0  # where the next rows go
        self._writes: list[Future[None]] = []
        self._buffers: dict[str, np.ndarray] = {}  # reused by read()
        try:
            self._file: BinaryIO = tempfile.TemporaryFile(prefix="packager-verify-", dir=folder)
        except OSError as exc:
            raise from_os_error(exc, "cannot write the source's logits") from None
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="packager-spill")

    def write(self, rows: Any) -> tuple[int, int]:
        """A torch tensor of rows (bf16, fp16 or fp32); returns (offset, rows) at once, the bytes follow."""
        import torch

        if rows.dtype == torch.bfloat16:
            self.stored, data = "<u2", rows.contiguous().view(torch.int16)
        else:
            self.stored, data = ("<f2", rows.contiguous()) if rows.dtype == torch.float16 else ("<f4", rows.float())
        self._settle(self.WRITES_AHEAD - 1)
        offset, buffer = self._end, data.contiguous().numpy()  # the tensor's own buffer: no copy
        self._end += buffer.nbytes
        self._writes.append(self._writer.submit(write_all, self._file.fileno(), buffer, offset))
        return offset, int(rows.shape[0])

    def flush(self) -> None:
        """Wait until every row is in the file; the first failed write's error here."""
        self._settle(0)

    def _settle(self, keep: int) -> None:
        while len(self._writes) > keep:
            try:
                self._writes.pop(0).result()
            except OSError as exc:
                raise from_os_error(exc, "cannot write the source's logits") from None

    def read(self, item: Continued, borrowed: bool = False) -> np.ndarray:
        """float32 rows for every position of `item`, converted in one pass into one array (verify reads a
        prompt's rows while MNN computes the next prompt's; astype, shift and concatenate made three copies).
        `borrowed`: the rows are in a buffer of the spill's own, reused by the next borrowed read (a fresh 26 MB
        array per prompt was paged in anew each time: 0.15 s of verify's reads on the trained miniature)."""
        self.flush()
        stored = np.dtype(self.stored)
        total = sum(count for _, count in item.segments)
        size = total * self.vocab
        out = self._buffer("rows", size, np.float32) if borrowed else np.empty(size, np.float32)
        out = out.reshape(total, self.vocab)
        at = 0
        for offset, count in item.segments:
            rows = out[at : at + count].reshape(-1)
            raw = rows if stored == np.float32 else self._buffer("raw", rows.size, stored)
            if read_into(self._file.fileno(), raw, offset) != raw.nbytes:
                raise FileSystemError(
                    f"the source's logits file ended early (at a {count}-row segment): its "
                    "file system lost data under verify",
                    "rerun verify",
                )
            if self.stored == "<u2":  # bf16: torch widens it to float32 exactly, 10x faster than numpy's shift
                import torch

                torch.from_numpy(rows).copy_(torch.from_numpy(raw.view(np.int16)).view(torch.bfloat16))
            elif raw is not rows:
                rows[:] = raw
            at += count
        return out[: item.positions]  # n = 0: the prompt's rows only

    def _buffer(self, name: str, size: int, dtype: np.dtype[Any] | type) -> np.ndarray:
        """The first `size` numbers of a reusable buffer, grown when too small."""
        buffer = self._buffers.get(name)
        if buffer is None or buffer.size < size or buffer.dtype != dtype:
            buffer = self._buffers[name] = np.empty(size, dtype=dtype)
        return buffer[:size]

    def close(self) -> None:
        self._buffers.clear()
        self._writer.shutdown(wait=True, cancel_futures=True)  # a write still running ends before its file closes
        self._writes.clear()
        self._file.close()


def batches(lengths: list[int]) -> Iterator[list[int]]:
    """Indices of prompts, shortest first (less padding), at most MAX_BATCH a batch and MAX_BATCH_TOKENS padded
    tokens (a prompt longer than that goes alone)."""
    batch: list[int] = []
    for index in sorted(range(len(lengths)), key=lengths.__getitem__):
        if batch and (len(batch) == MAX_BATCH or lengths[index] * (len(batch) + 1) > MAX_BATCH_TOKENS):
            yield batch
            batch = []
        batch.append(index)
    if batch:
        yield batch


def continue_all(
    model: Any,
    prompts: list[list[int]],
    n: int,
    stop: tuple[int, ...],
    spill: Spill,
    progress: Callable[[int], None] = lambda _: None,
) -> list[Continued]:
    """Every prompt's greedy continuation (up to n tokens, ending after a stop id) by a transformers causal LM
    (`model.model`: the base, `model.lm_head`), in input order; `progress` gets the count done so far, 0 before
    the first batch (a batch can take most of a minute: the stage shows its count from its start)."""
    done: dict[int, Continued] = {}
    progress(0)
    for batch in batches([len(p) for p in prompts]):
        for index, item in zip(batch, _decode([prompts[i] for i in batch], model, n, stop, spill)):
            done[index] = item
        progress(len(done))
    return [done[i] for i in range(len(prompts))]


def _decode(prompts: list[list[int]], model: Any, n: int, stop: tuple[int, ...], spill: Spill) -> list[Continued]:
    import torch

    width = max(len(p) for p in prompts)
    ids = torch.tensor([[PAD] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    segments: list[list[tuple[int, int]]] = []
    with torch.no_grad():
        from transformers import DynamicCache

        cache = DynamicCache()
        hidden = model.model(
            input_ids=ids, attention_mask=mask, position_ids=positions, cache=cache, use_cache=True
        ).last_hidden_state
        following = []
        for row, prompt in enumerate(prompts):  # the lm_head over one prompt's positions at a time
            logits = _logits(model, hidden[row, width - len(prompt) :])
            segments.append([spill.write(logits)])
            following.append(logits[-1])
        chosen = torch.stack(following).argmax(-1)
        tokens: list[list[int]] = [[] for _ in prompts]
        steps: list[list[Any]] = [[] for _ in prompts]
        last = positions[:, -1]
        while True:
            for row, token in enumerate(chosen.tolist()):
                if _open(tokens[row], n, stop):
                    tokens[row].append(token)
            if not any(_open(t, n, stop) for t in tokens):
                break
            mask = torch.cat([mask, torch.ones(len(prompts), 1, dtype=mask.dtype)], 1)
            last = last + 1
            hidden = model.model(
                input_ids=chosen[:, None], attention_mask=mask, position_ids=last[:, None], cache=cache, use_cache=True
            ).last_hidden_state
            logits = _logits(model, hidden[:, -1])
            for row in range(len(prompts)):
                if _open(tokens[row], n, stop):  # this row's latest token was fed: its row counts
                    steps[row].append(logits[row])
            chosen = logits.argmax(-1)
    for row in range(len(prompts)):
        if steps[row]:
            segments[row].append(spill.write(torch.stack(steps[row])))
    return [Continued(tuple(p), tuple(t), tuple(s)) for p, t, s in zip(prompts, tokens, segments)]


def _logits(model: Any, hidden: Any) -> Any:
    """The causal LM's logits of `hidden`: its lm_head, then the cap its forward applies where its config asks for
    one (final_logit_softcapping: cap * tanh(logits / cap)); the graph carries the cap, so the reference must too."""
    logits = model.lm_head(hidden)
    cap = getattr(model.config, "final_logit_softcapping", None)
    if cap:
        import torch

        logits = torch.tanh(logits / cap) * cap
    return logits


def _open(tokens: list[int], n: int, stop: tuple[int, ...]) -> bool:
    """Still decoding: fewer than n tokens and no stop id yet."""
    return len(tokens) < n and not (tokens and tokens[-1] in stop)
