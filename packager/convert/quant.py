"""llmexport's asymmetric block quantization, in numpy, giving the same bytes as its torch code.

llmexport 0.0.5 (`utils/torch_utils._quant_on_device`, no AWQ/HQQ, asymmetric) quantizes a Linear weight in
the checkpoint's own dtype. torch evaluates every bf16/fp16 operation in float32 and rounds the result to
the storage type, so each step here is the float32 operation followed by that same rounding
(round-to-nearest-even). tests/test_streaming.py checks the bytes against llmexport's own function for every
dtype, bit width and block size packager offers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal

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
        return b"\x02" + np.array([out_features, in_features], shape_dtype).tobytes() + \
            np.array(value_map, np.int8).tobytes()

    def sizes(self, out_features: int, in_features: int) -> tuple[int, int]:
        """(header + packed weight bytes, alpha bytes) of one quantized Linear."""
        blocks = in_features // self.block_size(in_features)
        packed = (out_features * in_features * self.bits + 7) // 8
        return len(self.header(out_features, in_features)) + packed, out_features * blocks * 2 * 4


def _round_bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> nearest bfloat16 (ties to even), kept as float32."""
    bits = x.view(np.uint32)
    bits = (bits + (np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1)))) & np.uint32(0xFFFF0000)
    return bits.view(np.float32)


def _round_f16(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float16).astype(np.float32)


def _identity(x: np.ndarray) -> np.ndarray:
    return x


ROUNDING: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "bfloat16": _round_bf16, "float16": _round_f16, "float32": _identity}


def quantize_rows(rows: np.ndarray, dtype: str, spec: QuantSpec) -> tuple[bytes, bytes]:
    """Packed weight bytes and alpha (zero, scale per block, float32) of rows given as exact float32 values."""
    rnd = ROUNDING[dtype]
    out_features, in_features = rows.shape
    size = spec.block_size(in_features)
    w = rows.reshape(out_features, in_features // size, size)
    offset = 1 << (spec.bits - 1)
    clip_min, clip_max = -offset, offset - 1
    low = w.min(axis=-1, keepdims=True)
    high = w.max(axis=-1, keepdims=True)
    scale = rnd(rnd(high - low) / np.float32(clip_max - clip_min))
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.rint(rnd(rnd(w - low) / scale))
    q = np.clip(q + np.float32(clip_min), clip_min, clip_max) + np.float32(offset)
    packed = np.where(np.isnan(q), 0, q).astype(np.uint8).reshape(-1)  # torch turns NaN (0/0) into 0
    zeros = rnd(low - rnd(scale * np.float32(clip_min)))
    alpha = np.stack([zeros.reshape(-1), scale.reshape(-1)], axis=-1).astype(np.float32)
    if spec.bits == 4:
        pairs = packed.reshape(-1, 2)
        packed = (pairs[:, 0] << np.uint8(4)) | pairs[:, 1]
    elif spec.bits != 8:
        raise ValueError(f"{spec.bits}-bit weights are not supported")
    return packed.tobytes(), alpha.tobytes()


def quantize(weight: np.ndarray, dtype: str, spec: QuantSpec,
             to_float32: Callable[[np.ndarray], np.ndarray]) -> tuple[bytes, bytes]:
    """Quantize a whole [out, in] weight a few rows at a time (rows are independent, so the bytes are the same)."""
    out_features, in_features = weight.shape
    step = max(1, ROW_CHUNK_ELEMENTS // in_features)
    packed, alpha = [], []
    for start in range(0, out_features, step):
        p, a = quantize_rows(to_float32(weight[start:start + step]), dtype, spec)
        packed.append(p)
        alpha.append(a)
    return b"".join(packed), b"".join(alpha)
