"""Write llm.mnn.weight straight from the safetensors files: memory-mapped, tensor by tensor, in parallel.

Each task quantizes a slice of rows of one tensor (rows are independent) and writes its bytes at the offsets
the graph names, so workers never share a byte of the output. A LoRA adapter is merged per tensor on the
way, in float32 with torch exactly as peft's merge_and_unload does, so the bytes equal the reference path's.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import BinaryIO

import numpy as np

from ...infra.fdio import copy_range
from ...infra.lifeline import die_with
from ...infra.progress import Progress, Step
from ..inspect.safetensors_header import TensorRef, tensor_refs
from .layout import EMBED, Region
from .quant import QuantSpec, quantize

# Rows per task: enough work to amortize a task, small enough to balance two cores and bound memory.
TASK_ELEMENTS = 8 * 1024 * 1024
_DTYPES = {"BF16": ("bfloat16", np.uint16), "F16": ("float16", np.float16), "F32": ("float32", np.float32)}


class StreamingUnsupported(Exception):
    """The checkpoint or adapter needs the reference (whole-model) path."""


@dataclass(frozen=True)
class Lora:
    """One adapted module: the merged weight is base + (B @ A) * scaling, in float32."""

    a: TensorRef
    b: TensorRef
    scaling: float


@dataclass(frozen=True)
class Task:
    region: Region
    source: TensorRef
    rows: tuple[int, int]
    lora: Lora | None
    float32: bool  # an adapter's merged model is float32 throughout, so every tensor is quantized as float32
    bias: TensorRef | None = None  # the linear's bias, written (float32) by the task that writes row 0


def index(files: tuple[Path, ...]) -> dict[str, TensorRef]:
    found: dict[str, TensorRef] = {}
    for file in files:
        found.update(tensor_refs(file))
    return found


def equality_classes(refs: dict[str, TensorRef], unique: AbstractSet[str] = frozenset()) -> tuple[tuple[str, int], ...]:
    """Tensor name -> class, one class per set of byte-equal vectors of one dtype and shape (the traced graph
    depends on it); names in `unique` (LoRA-merged tensors, whose values are new) get a class of their own.

    Only vectors (norms, biases) are compared: a matrix's values never reach the graph (llmexport traces every
    linear as a FakeLinear and the embedding is not in it), so each matrix is a class of its own and is not
    read, which keeps this cheap and its memory flat in the model's size.
    """
    import xxhash

    seen: dict[tuple[str, tuple[int, ...], str], int] = {}
    classes = []
    handles: dict[Path, int] = {}
    try:
        for name in sorted(refs):
            ref = refs[name]
            if name in unique or ref.nbytes == 0 or len(ref.shape) != 1:
                key = ("own", ref.shape, name)
            else:  # one open file per checkpoint file: a memory map per vector cost 5 ms each
                if ref.file not in handles:
                    handles[ref.file] = os.open(ref.file, os.O_RDONLY)
                data = os.pread(handles[ref.file], ref.nbytes, ref.start)
                key = (ref.dtype, ref.shape, xxhash.xxh3_128_hexdigest(data))
            classes.append((name, seen.setdefault(key, len(seen))))
    finally:
        for fd in handles.values():
            os.close(fd)
    return tuple(classes)


def plan(
    layout: tuple[Region, ...],
    source: dict[str, TensorRef],
    saved: dict[str, TensorRef],
    loras: dict[str, Lora],
    adapted: bool,
    zero_biases: AbstractSet[str] = frozenset(),
) -> list[Task]:
    """Tasks for every region; saved modules (modules_to_save) replace base tensors; largest work first. A bias
    in `zero_biases` is left as the zero-filled file has it (the graph's bias of a projection that has none)."""
    tasks = []
    for region in layout:
        ref = saved.get(region.tensor) or source.get(region.tensor)
        if ref is None:
            raise StreamingUnsupported(f"the checkpoint has no tensor {region.tensor}")
        if ref.dtype not in _DTYPES:
            raise StreamingUnsupported(f"{region.tensor} is stored as {ref.dtype}")
        lora = loras.get(region.tensor)
        bias = None
        zeros = region.bias in zero_biases and region.bias not in source and region.bias not in saved
        if region.bias and not zeros:
            if region.bias in loras:
                raise StreamingUnsupported(f"the adapter changes {region.bias}")
            bias = saved.get(region.bias) or source.get(region.bias)
            if bias is None or bias.dtype not in _DTYPES or bias.shape != (region.out_features,):
                raise StreamingUnsupported(f"the checkpoint has no bias {region.bias} of {region.out_features} values")
        rows = ref.shape[0] if region.kind == "linear" else 1
        step = rows if lora else max(1, TASK_ELEMENTS // max(1, region.in_features))
        tasks += [
            Task(region, ref, (start, min(rows, start + step)), lora, adapted, bias) for start in range(0, rows, step)
        ]
    return sorted(tasks, key=lambda t: -(t.rows[1] - t.rows[0]) * max(1, t.region.in_features))


def write(
    path: Path,
    layout_size: int,
    tasks: list[Task],
    spec: QuantSpec,
    workers: int,
    progress: Progress,
    nice: int = 0,
    widen: threading.Event | None = None,
    stop: threading.Event | None = None,
) -> bool:
    """Fill `path` (created at its final size) by running the tasks on `workers` processes, `nice` lower in
    priority than this one (while something more urgent runs beside them).

    Until `widen` is set, one core is left to the caller's other work (one process on two cores); once `stop`
    is set no further task starts and False is returned (the file is then incomplete)."""
    with open(path, "wb") as handle:
        handle.truncate(layout_size)
    total = sum(t.source.nbytes * (t.rows[1] - t.rows[0]) // max(1, t.source.shape[0]) for t in tasks)
    done, start, shown = 0, time.monotonic(), 0.0
    pending = list(reversed(tasks))
    running: set[Future[int]] = set()
    with ProcessPoolExecutor(
        max_workers=workers, mp_context=get_context("spawn"), initializer=_start_writer, initargs=(os.getpid(), nice)
    ) as pool:
        while pending or running:
            if stop is not None and stop.is_set():
                for future in running:
                    future.cancel()
                return False
            limit = workers if widen is None or widen.is_set() else max(1, workers - 1)
            while pending and len(running) < limit:
                running.add(pool.submit(_run, (str(path), pending.pop(), spec)))
            finished, running = wait(running, timeout=0.1, return_when=FIRST_COMPLETED)
            for future in finished:
                done += future.result()
            now = time.monotonic()
            if finished and (now - shown >= 1.0 or done == total):
                shown = now
                rate = done / max(now - start, 1e-6) / 1e6
                progress(
                    Step(
                        f"quantizing weights: {done / 1e6:.0f} / {total / 1e6:.0f} MB of source weights "
                        f"({rate:.0f} MB/s on {limit} processes)",
                        round(done / 1e6),
                        round(total / 1e6),
                        "quantizing weights (MB)",
                    )
                )
    return True


def _start_writer(parent: int, nice: int) -> None:
    die_with(parent)  # a killed packager leaves no writer behind (they would wait on their queue forever)
    if nice:
        os.nice(nice)


def _run(item: tuple[str, Task, QuantSpec]) -> int:
    path, task, spec = item
    fd = os.open(path, os.O_WRONLY)
    try:
        for data, offset in _encode(task, spec):
            os.pwrite(fd, data, offset)
    finally:
        os.close(fd)
    return task.source.nbytes * (task.rows[1] - task.rows[0]) // max(1, task.source.shape[0])


def _encode(task: Task, spec: QuantSpec) -> list[tuple[bytes, int]]:
    region, (first, last) = task.region, task.rows
    name, _ = _DTYPES[task.source.dtype]
    if region.kind == "norm":
        gamma = _as_float32(_read(task.source), task.source.dtype).astype(np.float32)
        if region.norm_offset:  # float32 arithmetic, as the graph's (offset + w) was computed by torch
            gamma = np.float32(region.norm_offset) + gamma
        return [(gamma.tobytes() + np.zeros_like(gamma).tobytes(), region.offset)]
    weight = _read(task.source, first, last)
    if task.lora is not None:
        weight = _merge(task.source, weight, task.lora)
        convert: Callable[[np.ndarray], np.ndarray] = _unchanged
    else:
        dtype = task.source.dtype

        def convert(x: np.ndarray) -> np.ndarray:
            return _as_float32(x, dtype)

    # llmexport turns every non-Linear module to float32; the tied embedding is one Parameter with lm_head, so
    # lm_head is quantized from float32 values too.
    name = "float32" if task.float32 or region.tensor == EMBED else name
    packed, alpha = quantize(weight, name, spec, convert)
    header = spec.header(region.out_features, region.in_features)
    row_packed = region.in_features * spec.bits // 8
    row_alpha = (region.in_features // spec.block_size(region.in_features)) * 8
    parts = [
        (packed, region.offset + len(header) + first * row_packed),
        (alpha, region.offset + region.lengths[0] + first * row_alpha),
    ]
    if first == 0:
        parts.append((header, region.offset))
        if task.bias is not None:  # llmexport writes bias.float(): exact from any stored dtype
            values = _as_float32(_read(task.bias), task.bias.dtype).astype(np.float32).reshape(-1)
            parts.append((values.tobytes(), region.offset + region.lengths[0] + region.lengths[1]))
    return parts


def _read(ref: TensorRef, first: int = 0, last: int | None = None) -> np.ndarray:
    _, dtype = _DTYPES[ref.dtype]
    shape = ref.shape if len(ref.shape) > 1 else (1, *ref.shape)
    last = shape[0] if last is None else last
    row_bytes = ref.nbytes // shape[0]
    data = np.memmap(
        ref.file, dtype=dtype, mode="r", offset=ref.start + first * row_bytes, shape=(last - first, *shape[1:])
    )
    return np.array(data) if len(ref.shape) > 1 else np.array(data).reshape(-1)


def _as_float32(x: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "BF16":
        return (x.astype(np.uint32) << np.uint32(16)).view(np.float32)
    return x.astype(np.float32)


def _merge(base: TensorRef, weight: np.ndarray, lora: Lora) -> np.ndarray:
    """peft's merge: base (as float32) += (B @ A) * scaling, computed by torch as peft computes it."""
    import torch

    merged = torch.from_numpy(_as_float32(weight, base.dtype).copy())
    a = torch.from_numpy(_as_float32(_read(lora.a), lora.a.dtype).astype(np.float32))
    b = torch.from_numpy(_as_float32(_read(lora.b), lora.b.dtype).astype(np.float32))
    merged += (b @ a) * lora.scaling
    return merged.numpy()


def lora_scaling(alpha: float, rank: int, rslora: bool) -> float:
    return alpha / math.sqrt(rank) if rslora else alpha / rank


def write_embeddings(path: Path, ref: TensorRef, rows_per_chunk: int = 0) -> None:
    """The untied embedding table as llmexport writes `embeddings_bf16.bin`: row-major bfloat16, rounded to
    nearest even from float32 as torch rounds (bfloat16 weights are copied as they are)."""
    if ref.dtype not in _DTYPES or len(ref.shape) != 2:
        raise StreamingUnsupported(f"the embedding is stored as {ref.dtype} {list(ref.shape)}")
    rows = ref.shape[0]
    step = rows_per_chunk or max(1, TASK_ELEMENTS // max(1, ref.shape[1]))
    with open(path, "wb") as out:
        if ref.dtype == "BF16" and not rows_per_chunk and _copy_range(ref, out):
            return
        for first in range(0, rows, step):
            chunk = _read(ref, first, min(rows, first + step))
            out.write(chunk.tobytes() if ref.dtype == "BF16" else _to_bfloat16(_as_float32(chunk, ref.dtype)))


def _copy_range(ref: TensorRef, out: BinaryIO) -> bool:
    """bfloat16 rows as they are, copied by the kernel from the checkpoint's file (311 MB of a 0.6B target's
    embedding: 1.9 s through Python's buffers); False, `out` left empty, where the file system cannot."""
    return copy_range(ref.file, ref.start, ref.nbytes, out)


def _to_bfloat16(values: np.ndarray) -> bytes:
    """float32 -> bfloat16 bits, rounded to nearest even as torch rounds (which NaN bits torch's vectorized
    conversion gives is not pinned down, so a NaN weight takes the reference path)."""
    if np.isnan(values).any():
        raise StreamingUnsupported("the embedding holds NaN")
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    return rounded.astype(np.uint16).tobytes()


def _unchanged(x: np.ndarray) -> np.ndarray:
    return x
