"""Build each distinct test input once per test session, whichever xdist worker asks first.

A checkpoint a builder makes and a bundle a conversion makes are content-addressed: the key is the builder's name
and arguments, or the checkpoint's file digests plus the conversion's options. The first worker to ask builds the
thing under a file lock in the session's shared folder ($PACKAGER_TEST_SHARED, made by the controller in
tests/conftest.py and removed when the session ends); the others wait for the lock and take what it built. What
is shared is read-only by convention: a test that changes a checkpoint or a bundle works on a copy
(tests.models.copy_checkpoint, shutil.copytree).

`count()` says how many builds and conversions this session ran, for the figures in bench/RESULTS.md."""

from __future__ import annotations

import fcntl
import json
import os
import pickle
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import xxhash

T = TypeVar("T")
ROOT_VARIABLE = "PACKAGER_TEST_SHARED"


def root() -> Path:
    """The session's shared folder (a process run outside a test session gets one of its own)."""
    found = os.environ.get(ROOT_VARIABLE)
    if not found:
        found = os.environ[ROOT_VARIABLE] = tempfile.mkdtemp(prefix="packager-test-shared-")
    return Path(found)


def _digest(value: Any) -> str:
    return xxhash.xxh3_128_hexdigest(json.dumps(value, sort_keys=True, default=str).encode())


def folder_digest(folder: Path) -> str:
    """The digest of every file of a folder, by name and content."""
    hasher = xxhash.xxh3_128()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        hasher.update(str(path.relative_to(folder)).encode() + b"\0")
        with path.open("rb") as handle:
            while chunk := handle.read(1 << 20):
                hasher.update(chunk)
    return hasher.hexdigest()


def once(kind: str, key: Any, build: Callable[[Path], T]) -> T:
    """What `build(folder)` returns for `kind` and `key`, built once per session into a folder of its own."""
    entry = root() / f"{kind}-{_digest([kind, key])}"
    done = entry / "result.pickle"
    entry.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{entry}.lock", "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if done.is_file():
                result: T = pickle.loads(done.read_bytes())
                return result
            entry.mkdir(exist_ok=True)
            result = build(entry)
            done.write_bytes(pickle.dumps(result))
            with open(root() / "builds.log", "a", encoding="utf-8") as log:
                log.write(f"{kind}\n")
            return result
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def converted(checkpoint: Path, **options: Any) -> Any:
    """`packager.convert` of `checkpoint` with `options`, made once per session (keyed by the checkpoint's files and
    the options): its ConvertResult, whose bundle the tests copy before changing anything."""
    from packager.convert.pipeline import ConvertRequest, convert

    key = [folder_digest(checkpoint), sorted((k, str(v)) for k, v in options.items())]
    return once(
        "conversion", key, lambda d: convert(ConvertRequest(checkpoint=checkpoint, out=d / "bundle", **options))
    )


def count() -> dict[str, int]:
    """How many of each kind this session built (each once, whichever worker built it)."""
    log = root() / "builds.log"
    kinds = log.read_text(encoding="utf-8").split() if log.is_file() else []
    return {kind: kinds.count(kind) for kind in sorted(set(kinds))}
