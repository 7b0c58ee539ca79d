"""A quantized linear's weights as the engine computes with them, read back from its weight file.

llmexport's layout of one quantized Linear (packager's streaming writer writes the same bytes: convert.stream.quant):
a header (b"\\x02", the two dims as int16 or int32, the value map), the packed unsigned values (two 4-bit values a
byte, first in the high half; or one 8-bit value a byte), then per output row and block either (zero, scale) pairs
(asymmetric) or scales (symmetric), float32 (float16 where the graph says scaleStorage FP16, as MNN's exporter after
llmexport 0.0.5 writes them). A value q stands for zero + scale * (q - 2^(bits-1)), or
scale * (q - 2^(bits-1)) when symmetric.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from .graph import Linear

ROWS_AT_ONCE = 8192  # rows dequantized per step: the temporaries stay small whatever the vocabulary


def header_size(linear: Linear) -> int:
    bits = linear.bits or 0
    return 1 + (8 if linear.shape_int32 else 4) + (1 << bits) + 1


def dequantized(weight_file: Path, linear: Linear) -> np.ndarray:
    """The [out_features, in_features] float32 weights `linear` holds in `weight_file` (its `external` range)."""
    out = np.empty((linear.out_features, linear.in_features), np.float32)
    for first, rows in dequantized_rows(weight_file, linear):
        out[first : first + rows.shape[0]] = rows
    return out


def dequantized_rows(
    weight_file: Path, linear: Linear, rows_at_once: int = ROWS_AT_ONCE
) -> Iterator[tuple[int, np.ndarray]]:
    """(first row, float32 rows) of `linear`, a few rows at a time, in one buffer reused for each step (use a step's
    rows before asking for the next): a vocabulary-sized head is never whole in memory."""
    bits, block = linear.bits, linear.block
    if bits not in (4, 8) or not block or len(linear.external) < 3:
        raise ValueError(f"{linear.name} is not a 4- or 8-bit block-quantized linear with external weights")
    rows, cols = linear.out_features, linear.in_features
    blocks = cols // block
    pairs = 2 if linear.asymmetric else 1
    packed_size = rows * cols * bits // 8
    scales = np.float16 if linear.scale_bytes == 2 else np.float32
    header = header_size(linear)
    if linear.external[1] != header + packed_size or linear.external[2] != rows * blocks * pairs * linear.scale_bytes:
        raise ValueError(f"{linear.name}'s byte ranges do not match its shape, bits and blocks")
    raw = np.memmap(weight_file, np.uint8, "r", offset=linear.external[0], shape=(sum(linear.external[1:3]),))
    values = raw[header : header + packed_size]
    alpha = raw[linear.external[1] :].view(scales).reshape(rows, blocks, pairs)
    offset = np.float32(1 << (bits - 1))
    step = max(1, rows_at_once)
    buffer = np.empty((min(step, rows), blocks, block), np.float32)
    unpacked = np.empty(min(step, rows) * cols, np.uint8)
    per_row = cols * bits // 8
    for first in range(0, rows, step):
        last = min(rows, first + step)
        n = last - first
        chunk = np.asarray(values[first * per_row : last * per_row])
        if bits == 4:
            q = unpacked[: n * cols]
            np.right_shift(chunk, 4, out=q[0::2])
            np.bitwise_and(chunk, 15, out=q[1::2])
        else:
            q = chunk
        w = buffer[:n]
        np.subtract(q.reshape(n, blocks, block), offset, out=w, dtype=np.float32)
        a = alpha[first:last].astype(np.float32)
        w *= a[..., -1:]
        if pairs == 2:
            w += a[..., :1]
        yield first, w.reshape(n, cols)
