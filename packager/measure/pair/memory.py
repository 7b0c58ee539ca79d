"""Will the pair fit? Estimated resident bytes of each model against the memory this process may use, checked
before anything is loaded (the out-of-memory killer gives no error line)."""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

from ...errors import NotEnoughMemory

GIB = 1024**3
# Activations, KV cache, the Python/torch or MNN runtime itself: measured on the tiny and 0.6B models as a few
# hundred MB, rounded up; plus a share of the weights for loading's transient copies.
FIXED_MARGIN = 768 * 1024**2
SHARE_MARGIN = 0.10
DTYPE_BYTES = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
}
MNN_FILES = ("llm.mnn", "llm.mnn.weight", "embeddings_bf16.bin", "embeddings_int8.bin", "embeddings_int4.bin")


@dataclass(frozen=True)
class Estimate:
    path: Path
    weight_bytes: int

    @property
    def total(self) -> int:
        return int(self.weight_bytes * (1 + SHARE_MARGIN)) + FIXED_MARGIN


def _safetensors_bytes(path: Path, as_float32: bool) -> int:
    """Parameters x bytes per parameter, from the header alone (the stored dtype, or 4 when computing in
    float32)."""
    with path.open("rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(length))
    total = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        count = 1
        for dim in info["shape"]:
            count *= int(dim)
        total += count * (4 if as_float32 else DTYPE_BYTES.get(info["dtype"], 4))
    return total


def estimate(path: Path, *, mnn: bool, as_float32: bool = False) -> Estimate:
    if mnn:
        return Estimate(path, sum((path / name).stat().st_size for name in MNN_FILES if (path / name).is_file()))
    return Estimate(path, sum(_safetensors_bytes(f, as_float32) for f in sorted(path.glob("*.safetensors"))))


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def available() -> int:
    """MemAvailable, or less when this process's cgroup (v2 or v1) has a lower limit left."""
    free = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            free = int(line.split()[1]) * 1024
    for limit_file, usage_file in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"),
    ):
        limit, usage = _read_int(Path(limit_file)), _read_int(Path(usage_file))
        if limit is not None and usage is not None and limit < 1 << 60:
            free = min(free, max(0, limit - usage))
    return free


def check(estimates: list[Estimate], free: int | None = None) -> None:
    """Refuse in one line when the models cannot fit, naming the route that does: a 4-bit MNN target."""
    need = sum(e.total for e in estimates)
    free = available() if free is None else free
    if need <= free:
        return
    parts = ", ".join(f"{e.path.name} {e.weight_bytes / GIB:.1f} GiB" for e in estimates)
    raise NotEnoughMemory(
        f"pairing needs about {need / GIB:.1f} GiB ({parts}, plus runtime margin) but only "
        f"{free / GIB:.1f} GiB of memory is available"
    )
