"""Streaming xxh3-128 digests of files (no hashlib anywhere in packager)."""

from __future__ import annotations

from pathlib import Path

import xxhash

CHUNK = 8 * 1024 * 1024


def xxh3_128_file(path: Path) -> str:
    """Hex xxh3-128 of a file, streamed through one reused 8 MiB buffer (no per-chunk allocation)."""
    digest = xxhash.xxh3_128()
    buffer = bytearray(CHUNK)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as handle:
        while count := handle.readinto(buffer):
            digest.update(view[:count])
    return digest.hexdigest()


def xxh3_128_bytes(data: bytes) -> str:
    return xxhash.xxh3_128_hexdigest(data)
