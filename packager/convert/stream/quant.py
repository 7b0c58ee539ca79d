"""llmexport's asymmetric block quantization, in numpy, giving the same bytes as its torch code.

llmexport 0.0.5 (`utils/torch_utils._quant_on_device`, no AWQ/HQQ, asymmetric) quantizes a Linear weight in
the checkpoint's own dtype. torch evaluates every bf16/fp16 operation in float32 and rounds the result to
the storage type, so each step here is the float32 operation followed by that same rounding
(round-to-nearest-even). tests/test_streaming.py checks the bytes against llmexport's own function for every
dtype, bit width and block size packager offers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np

Dtype = Literal["bfloat16", "float16", "float32"]
# Rows quantized at once: small enough that the temporaries stay in cache, large enough for numpy.
ROW_CHUNK_ELEMENTS = 1 << 16


@dataclass(frozen=True)
class QuantSpec:
    bits: int
    block: int  # 0 = one block per row (per-channel)

    def block_size(self, in_features: int) -> int:
        return in_features if self.block == 0 else self.block

    def header(self, out_features: int, in_features: int) -> bytes:
        """The bytes llmexport writes before a quantized weight: dims, shape and the value map."""
        shape_dtype = np.int32 if out_features > 65535 or in_features > 65535 else np.int16
        offset = 1 << (self.bits - 1)
        value_map = list(range(-offset, offset))
        value_map.insert(0, 0 if len(value_map) == 256 else len(value_map))
        return (
            b"\x02"
            # llmexport casts with astype: a dimension of 32,768-65,535 (SmolLM2's 49,152 rows) wraps in int16, and
            # MNN reads the two bytes back unsigned (IDSTDecoder), so the bytes are the same either way.
            + np.array([out_features, in_features], np.int64).astype(shape_dtype).tobytes()
            + np.array(value_map, np.int8).tobytes()
        )

    def sizes(self, out_features: int, in_features: int) -> tuple[int, int]:
        """(header + packed weight bytes, alpha bytes) of one quantized Linear."""
        blocks = in_features // self.block_size(in_features)
        packed = (out_features * in_features * self.bits + 7) // 8
        return len(self.header(out_features, in_features)) + packed, out_features * blocks * 2 * 4


_HIGH_HALF = np.uint32(0xFFFF0000)
_HALF_LSB = np.uint32(0x7FFF)


def _round_bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> nearest bfloat16 (ties to even), kept as float32."""
    return _round_bf16_in_place(np.array(x, np.float32), np.empty(np.size(x), np.uint32))


def _round_bf16_in_place(x: np.ndarray, scratch: np.ndarray) -> np.ndarray:
    """_round_bf16 without temporaries: `x` is overwritten, `scratch` is a uint32 array of x's size."""
    bits = x.view(np.uint32)
    carry = scratch.reshape(bits.shape)
    np.right_shift(bits, np.uint32(16), out=carry)
    np.bitwise_and(carry, np.uint32(1), out=carry)
    np.add(carry, _HALF_LSB, out=carry)
    np.add(bits, carry, out=bits)
    np.bitwise_and(bits, _HIGH_HALF, out=bits)
    return x


def _round_f16(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float16).astype(np.float32)


def _identity(x: np.ndarray) -> np.ndarray:
    return x


ROUNDING: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "bfloat16": _round_bf16,
    "float16": _round_f16,
    "float32": _identity,
}


def quantize_rows(rows: np.ndarray, dtype: str, spec: QuantSpec) -> tuple[bytes, bytes]:
    """Packed weight bytes and alpha (zero, scale per block, float32) of rows given as exact float32 values.

    The full-size steps run in place, without a temporary per operation (1.2-1.4x the throughput); the
    clip to [0, 2^bits - 1] equals torch's clip to [-2^(bits-1), 2^(bits-1) - 1] followed by the offset, since
    the values are whole numbers, infinities or NaN there.
    """
    rnd = ROUNDING[dtype]
    out_features, in_features = rows.shape
    size = spec.block_size(in_features)
    w = rows.reshape(out_features, in_features // size, size)
    offset = 1 << (spec.bits - 1)
    clip_min, clip_max = -offset, offset - 1
    low = w.min(axis=-1, keepdims=True)
    high = w.max(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", over="ignore"):
        scale = rnd(rnd(high - low) / np.float32(clip_max - clip_min))
        q = np.subtract(w, low)
    if dtype == "bfloat16":
        scratch = np.empty(q.size, np.uint32)
        in_place: Callable[[np.ndarray], np.ndarray] = lambda x: _round_bf16_in_place(x, scratch)  # noqa: E731
    else:
        in_place = rnd
    q = in_place(q)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        np.divide(q, scale, out=q)
    q = in_place(q)
    np.rint(q, out=q)
    np.clip(q, 0, 2 * offset - 1, out=q)
    # NaN (0/0 in a constant block, or a NaN weight) becomes 0, as torch's cast gives; a block with finite ends
    # and a positive scale has none, so the full-size check runs only when a block is degenerate.
    if not (np.isfinite(low).all() and np.isfinite(high).all() and np.isfinite(scale).all() and (scale > 0).all()):
        q[np.isnan(q)] = 0
    packed = q.astype(np.uint8).reshape(-1)
    with np.errstate(invalid="ignore", over="ignore"):
        zeros = rnd(low - rnd(scale * np.float32(clip_min)))
    alpha = np.stack([zeros.reshape(-1), scale.reshape(-1)], axis=-1).astype(np.float32)
    if spec.bits == 4:  # each pair of 4-bit values (first, second) -> one byte (first << 4) | second
        pairs = packed.view(np.dtype("<u2"))  # first in the low byte: the byte is (pair << 4 | pair >> 8) & 0xFF
        packed = ((pairs << np.uint16(4)) | (pairs >> np.uint16(8))).astype(np.uint8)
    elif spec.bits != 8:
        raise ValueError(f"{spec.bits}-bit weights are not supported")
    return packed.tobytes(), alpha.tobytes()


def quantize(
    weight: np.ndarray, dtype: str, spec: QuantSpec, to_float32: Callable[[np.ndarray], np.ndarray]
) -> tuple[bytes, bytes]:
    """Quantize a whole [out, in] weight a few rows at a time (rows are independent, so the bytes are the same)."""
    out_features, in_features = weight.shape
    step = max(1, ROW_CHUNK_ELEMENTS // in_features)
    packed, alpha = [], []
    for start in range(0, out_features, step):
        p, a = quantize_rows(to_float32(weight[start : start + step]), dtype, spec)
        packed.append(p)
        alpha.append(a)
    return b"".join(packed), b"".join(alpha)
