"""Weights that cannot be right, found without reading the whole file: the quant header of every linear, and
sampled windows of its packed weights and scales, at the offsets the graph's `external` fields give.

Layout (llmexport `build_weight` / `write_header`): per linear, a header (0x02, the dims [oc, ic] as int16,
or int32 when shapeInt32, then the int8 weight map), the packed weights, then the alpha: float32 per
(oc, block), as (zero point, scale) pairs when asymmetric. A norm op holds float32 gamma and beta.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..bundle.graph import GraphFacts, Linear
from ..report.findings import Collector, report_capped

WEIGHT = "llm.mnn.weight"
WINDOW = 512  # bytes per sampled window
FILE_WINDOWS = 64
Span = tuple[int, int]  # (offset, length) in the file


def check(path: Path, graph: GraphFacts, size: int, out: Collector) -> None:
    if size == 0:
        out.error(WEIGHT, "", "is empty")
        return
    with _Reader(path) as reader:
        byte = _one_byte(reader, size)
        if byte is not None:
            out.error(
                WEIGHT,
                "",
                f"all {FILE_WINDOWS} blocks sampled across its {size} bytes are the byte "
                f"0x{byte:02x} repeated: the weights were zeroed or overwritten; reconvert",
            )
            return
        linears = [lin for lin in graph.linears if _quantized(lin) and _inside(lin.external[:3], size)]
        wrong = [lin for lin in linears if reader[lin.external[0] : lin.external[0] + _header_len(lin)] != _header(lin)]
        _report(
            out,
            wrong,
            lambda lin: (
                f"quant header does not match the graph ({lin.out_features}x{lin.in_features}"
                f", {lin.bits}-bit) at offset {lin.external[0]}: these bytes are not this "
                "tensor's weights"
            ),
        )
        skip = {id(lin) for lin in wrong}
        sound = [lin for lin in linears if id(lin) not in skip]
        _check_packed(reader, sound, out)
        _check_scales(reader, sound, out)
        norms = [
            (name, offset, length)
            for name, offset, length in graph.norms
            if length >= 8 and _inside((offset, length), size)
        ]
        floats = _sample(reader, [[(offset, min(length, WINDOW) // 8 * 8)] for _, offset, length in norms], "<f4")
        _report(
            out,
            [name for (name, _, _), bad in zip(norms, floats.any_not_finite()) if bad],
            lambda _: "norm weights hold NaN or infinity",
        )


class _Reader:
    """Byte ranges of a file by slicing, one pread each (cheaper than a map's page faults for a few hundred)."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_RDONLY)

    def __getitem__(self, span: slice) -> bytes:
        return os.pread(self.fd, span.stop - span.start, span.start)

    def __enter__(self) -> _Reader:
        return self

    def __exit__(self, *_: object) -> None:
        os.close(self.fd)


class _Samples:
    """Sampled windows of several tensors, concatenated, with each tensor's segment."""

    def __init__(self, values: np.ndarray, sizes: list[int]) -> None:
        self.values = values
        self.sizes = np.array(sizes, dtype=np.int64)
        self.starts = np.concatenate([[0], np.cumsum(self.sizes)[:-1]]).astype(np.int64)

    def low_high(self) -> tuple[np.ndarray, np.ndarray]:
        if not self.values.size:
            return np.zeros(0), np.zeros(0)
        return np.minimum.reduceat(self.values, self.starts), np.maximum.reduceat(self.values, self.starts)

    def any_not_finite(self) -> np.ndarray:
        if not self.values.size:
            return np.zeros(0, dtype=bool)
        return np.logical_or.reduceat(~np.isfinite(self.values), self.starts)


def _sample(reader: _Reader, spans: Sequence[list[Span]], dtype: str) -> _Samples:
    itemsize = np.dtype(dtype).itemsize
    raw = b"".join(reader[a : a + n] for tensor in spans for a, n in tensor)
    return _Samples(np.frombuffer(raw, dtype), [sum(n for _, n in tensor) // itemsize for tensor in spans])


def _one_byte(reader: _Reader, size: int) -> int | None:
    width = min(WINDOW, size)
    raw = b"".join(reader[int(a) : int(a) + width] for a in np.linspace(0, size - width, FILE_WINDOWS))
    return raw[0] if raw.count(raw[:1]) == len(raw) else None


def _inside(span: Sequence[int], size: int) -> bool:
    """Offset and lengths in the file (ranges outside it are check_weight_ranges' findings)."""
    return min(span) >= 0 and sum(span) <= size


def _quantized(lin: Linear) -> bool:
    return lin.bits in (2, 4, 8) and len(lin.external) >= 3 and lin.external[1] > _header_len(lin)


def _header_len(lin: Linear) -> int:
    return 1 + (8 if lin.shape_int32 else 4) + (1 << (lin.bits or 0)) + 1


def _header(lin: Linear) -> bytes:
    return _expected_header(lin.out_features, lin.in_features, lin.bits or 0, lin.shape_int32)


@lru_cache(maxsize=64)
def _expected_header(oc: int, ic: int, bits: int, int32: bool) -> bytes:
    try:  # astype wraps like llmexport's own header writer; a dim beyond int64 fits no header
        dims = np.array([oc, ic], dtype=np.int64).astype("<i4" if int32 else "<i2")
    except OverflowError:
        return b""
    weight_map = list(range(-(1 << (bits - 1)), 1 << (bits - 1)))
    weight_map.insert(0, 0 if len(weight_map) == 256 else len(weight_map))
    return b"\x02" + dims.tobytes() + np.array(weight_map, dtype=np.int8).tobytes()


def _windows(start: int, length: int, align: int, count: int) -> list[Span]:
    """`count` windows spread over a region (its start first), each a multiple of `align` bytes in."""
    width = min(WINDOW, length) // align * align
    if width == 0:
        return []
    last = (length - width) // align
    return [(start + at * align, width) for at in sorted({last * i // max(1, count - 1) for i in range(count)})]


def _check_packed(reader: _Reader, linears: list[Linear], out: Collector) -> None:
    spans = [_windows(lin.external[0] + _header_len(lin), lin.external[1] - _header_len(lin), 1, 2) for lin in linears]
    low, high = _sample(reader, spans, "u1").low_high()
    _report(
        out,
        [lin for lin, lo, hi in zip(linears, low, high) if lo == hi],
        lambda lin: "packed weights are one byte repeated in every sampled block: they were overwritten",
    )


def _check_scales(reader: _Reader, linears: list[Linear], out: Collector) -> None:
    """Scales (every second float when asymmetric) of two sampled alpha windows per linear."""
    alpha = _sample(reader, [_windows(sum(lin.external[:2]), lin.external[2], 8, 2) for lin in linears], "<f4")
    bad = alpha.any_not_finite()
    _report(
        out,
        [lin for lin, b in zip(linears, bad) if b],
        lambda _: "quantization scales or zero points hold NaN or infinity",
    )
    keep = [i for i, b in enumerate(bad) if not b]
    scales = [
        alpha.values[alpha.starts[i] + 1 : alpha.starts[i] + alpha.sizes[i] : 2]
        if linears[i].asymmetric
        else alpha.values[alpha.starts[i] : alpha.starts[i] + alpha.sizes[i]]
        for i in keep
    ]
    joined = _Samples(np.concatenate(scales) if scales else np.zeros(0, np.float32), [len(s) for s in scales])
    low, high = joined.low_high()
    rest = [(linears[i], lo, hi) for i, lo, hi, n in zip(keep, low, high, joined.sizes) if n > 1]
    _report(
        out,
        [lin for lin, lo, _ in rest if lo < 0],
        lambda _: "negative quantization scales (the quantizer writes (max - min) / levels >= 0)",
    )
    same = {lin.name: float(lo) for lin, lo, hi in rest if lo == hi and lo >= 0}
    _report(
        out,
        [lin for lin, _, _ in rest if lin.name in same],
        lambda lin: (
            "every sampled quantization scale is 0: the tensor dequantizes to a constant"
            if same[lin.name] == 0
            else f"every sampled quantization scale is {same[lin.name]:.6g}: real weights never give identical scales"
        ),
    )


def _report(out: Collector, bad: list, message: Callable) -> None:
    """One finding per tensor, named."""
    rows = [(f"tensor {item if isinstance(item, str) else item.name}", message(item)) for item in bad]
    report_capped(out, WEIGHT, rows, "tensors with the same problem")
