"""Read and check a safetensors file's header without loading any tensor."""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

from ...errors import CorruptWeights

_MAX_HEADER = 100 * 1024 * 1024
_DTYPE_BYTES = {
    "F64": 8,
    "I64": 8,
    "U64": 8,
    "F32": 4,
    "I32": 4,
    "U32": 4,
    "F16": 2,
    "BF16": 2,
    "I16": 2,
    "U16": 2,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
}


@dataclass(frozen=True)
class TensorRef:
    """Where one tensor's bytes lie in a safetensors file."""

    file: Path
    dtype: str
    shape: tuple[int, ...]
    start: int  # absolute byte offset of the data in the file
    nbytes: int


def tensor_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """Every tensor's shape; raises CorruptWeights for a truncated or malformed file."""
    return {name: ref.shape for name, ref in tensor_refs(path).items()}


def tensor_refs(path: Path) -> dict[str, TensorRef]:
    """Every tensor's dtype, shape and byte range; raises CorruptWeights for a truncated or malformed file."""
    size = path.stat().st_size
    with open(path, "rb") as handle:
        head = handle.read(8)
        if len(head) < 8:
            raise CorruptWeights(f"{path.name} is truncated ({size} bytes, no safetensors header)")
        (length,) = struct.unpack("<Q", head)
        if length > min(_MAX_HEADER, size - 8):
            raise CorruptWeights(
                f"{path.name} is not a valid safetensors file (header length {length} exceeds the file size {size})"
            )
        raw = handle.read(length)
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise CorruptWeights(f"{path.name} has a corrupt safetensors header") from None
    if not isinstance(header, dict):
        raise CorruptWeights(f"{path.name} has a corrupt safetensors header")
    refs: dict[str, TensorRef] = {}
    end = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        shape = _check_entry(path, name, info)
        start, stop = info["data_offsets"]
        refs[name] = TensorRef(
            file=path, dtype=info["dtype"], shape=shape, start=8 + length + start, nbytes=stop - start
        )
        end = max(end, stop)
    if 8 + length + end != size:
        state = "truncated" if 8 + length + end > size else "longer than its header says"
        raise CorruptWeights(f"{path.name} is {state}: header describes {8 + length + end} bytes, file has {size}")
    return refs


def _check_entry(path: Path, name: str, info: object) -> tuple[int, ...]:
    try:
        dtype, shape, (start, stop) = info["dtype"], info["shape"], info["data_offsets"]  # type: ignore[index]
        count = 1
        for dim in shape:
            count *= int(dim)
        width = _DTYPE_BYTES[dtype]
    except (KeyError, TypeError, ValueError):
        raise CorruptWeights(f"{path.name}: tensor {name} has a malformed header entry") from None
    if not 0 <= start <= stop or stop - start != count * width:
        raise CorruptWeights(f"{path.name}: tensor {name} has data offsets that do not match its shape")
    return tuple(int(dim) for dim in shape)
