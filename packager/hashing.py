"""Streaming xxh3-128 digests of files (no hashlib anywhere in packager)."""

from __future__ import annotations

from pathlib import Path

import xxhash

CHUNK = 8 * 1024 * 1024


def xxh3_128_file(path: Path) -> str:
    """Hex xxh3-128 of a file, read in 8 MiB chunks."""
    digest = xxhash.xxh3_128()
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def xxh3_128_bytes(data: bytes) -> str:
    return xxhash.xxh3_128_hexdigest(data)
