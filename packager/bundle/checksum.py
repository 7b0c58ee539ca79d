"""xxh3-128 checksum manifest of a bundle, in the format `xxhsum --tag -H2` prints, so `xxhsum -c` checks it."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import BundleError, ManifestError
from ..infra.hashing import xxh3_128_file
from ..infra.userfile import read_text
from .kinds import MANIFEST, SIGNATURE
from .staging import write_atomic

__all__ = ["MANIFEST", "SIGNATURE", "check_manifest", "read_manifest", "write_manifest"]
MAX_MANIFEST_BYTES = 1024 * 1024  # a bundle's manifest is ~700 bytes (one line per file)
_LINE = re.compile(r"^XXH128 \((?P<name>.+)\) = (?P<digest>[0-9a-f]{32})$")


@dataclass(frozen=True)
class Manifest:
    path: Path
    digests: dict[str, str]


@dataclass(frozen=True)
class ManifestCheck:
    manifest: Path
    mismatched: tuple[str, ...]
    missing: tuple[str, ...]
    extra: tuple[str, ...]
    checked: int

    @property
    def ok(self) -> bool:
        return not (self.mismatched or self.missing or self.extra)


def covered_files(bundle: Path) -> list[str]:
    """Every regular file of the bundle folder except the manifest itself and the signature over it, sorted."""
    if not bundle.is_dir():
        raise BundleError(f"bundle folder {bundle} does not exist", "pass the folder packager convert wrote")
    names = []
    for item in sorted(bundle.iterdir()):
        if item.name in (MANIFEST, SIGNATURE):
            continue
        if item.is_symlink() or not item.is_file():
            raise BundleError(f"{item} is not a regular file", "a bundle holds only regular files")
        names.append(item.name)
    return names


def render(digests: dict[str, str]) -> bytes:
    return "".join(f"XXH128 ({name}) = {digest}\n" for name, digest in sorted(digests.items())).encode("utf-8")


def write_manifest(bundle: Path) -> Manifest:
    """Hash every file (streaming) and write `checksums.xxh128` atomically."""
    digests = {name: xxh3_128_file(bundle / name) for name in covered_files(bundle)}
    path = bundle / MANIFEST
    write_atomic(path, render(digests))
    return Manifest(path=path, digests=digests)


def read_manifest(path: Path) -> dict[str, str]:
    """The manifest's name -> digest, read to MAX_MANIFEST_BYTES and no further (InputTooLarge, 26, past it)."""
    return parse_manifest(read_text(path, MAX_MANIFEST_BYTES, what=MANIFEST, unreadable=ManifestError), path)


def parse_manifest(text: str, path: Path) -> dict[str, str]:
    """name -> digest; `path` only names the manifest in errors."""
    digests: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        match = _LINE.match(line)
        if match is None:
            raise ManifestError(f"{path.name} line {number} is not 'XXH128 (NAME) = DIGEST'")
        name = match["name"]
        if "/" in name or name in (".", ".."):
            raise ManifestError(f"{path.name} line {number} names {name!r}, which is outside the bundle folder")
        if name in digests:
            raise ManifestError(f"{path.name} lists {name} twice")
        digests[name] = match["digest"]
    return digests


def check_manifest(bundle: Path) -> ManifestCheck:
    """Compare every file with the manifest; names every mismatching, missing and extra file."""
    path = bundle / MANIFEST
    if not path.is_file():
        what = "is not a regular file" if os.path.lexists(path) else "does not exist"
        raise ManifestError(f"{MANIFEST} of {bundle} {what}", "write one with: packager checksum BUNDLE")
    listed = read_manifest(path)
    present = set(covered_files(bundle))
    missing = tuple(sorted(set(listed) - present))
    extra = tuple(sorted(present - set(listed)))
    mismatched = tuple(name for name in sorted(set(listed) & present) if xxh3_128_file(bundle / name) != listed[name])
    return ManifestCheck(
        manifest=path, mismatched=mismatched, missing=missing, extra=extra, checked=len(set(listed) & present)
    )
