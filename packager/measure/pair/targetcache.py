"""The target's side of acceptance, cached: its greedy continuation of a prompt and its argmax at every position
of it, content-addressed by the digests of the target's files, the prompt's token ids and every setting that
changes them (tokens, stop ids, dtype, threads, runtime versions). A second draft, or a second quant-sweep recipe,
against the same target decodes nothing of the target again.

One small JSON file per prompt, written to a temporary name and renamed into place (two runs at once both
succeed), with a digest of its own content checked on every read: a damaged or foreign entry is a miss, removed,
never used. Writing is best effort: a cache folder that cannot be written costs the reuse, never the result."""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...convert.stream import graphcache
from ...convert.stream.graphcache import Entry
from ...infra.hashing import xxh3_128_bytes, xxh3_128_file
from ...infra.versions import installed

FORMAT = 1
MAX_ENTRIES = 20000  # about 60 prompt sets of the built-in workload; least recently used go first
# Files a runtime reads (an MNN folder or a checkpoint); anything else in the folder does not change a result.
MNN_FILES = (
    "llm.mnn",
    "llm.mnn.weight",
    "llm_config.json",
    "config.json",
    "tokenizer.txt",
    "tokenizer.mtok",
    "embeddings_bf16.bin",
    "embeddings_int8.bin",
    "embeddings_int4.bin",
)
CHECKPOINT_GLOBS = (
    "config.json",
    "generation_config.json",
    "*.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
)


@dataclass(frozen=True)
class TargetRun:
    continuation: tuple[int, ...]  # the target's greedy tokens after the prompt
    argmax: tuple[int, ...]  # its argmax at each continuation position, from one teacher-forced pass


def root() -> Path:
    """`targets` beside the graph cache's `graphs`: $PACKAGER_CACHE_DIR/targets, else
    $XDG_CACHE_HOME/packager/targets, else ~/.cache/packager/targets."""
    return graphcache.home() / "targets"


def identity(target: Path, bundle: bool, settings: dict[str, Any]) -> str:
    """What a target run depends on, as one digest (reads every model file once)."""
    files = (
        [target / n for n in MNN_FILES if (target / n).is_file()]
        if bundle
        else sorted({p for pattern in CHECKPOINT_GLOBS for p in target.glob(pattern) if p.is_file()})
    )
    return graphcache.key(
        {
            "format": FORMAT,
            "files": {f.name: xxh3_128_file(f) for f in files},
            "settings": settings,
            "versions": installed(("mnn", "torch", "transformers")),
        }
    )


class TargetCache:
    """The cache for one target identity; `describe` names the target in `packager cache ls`."""

    def __init__(self, target_identity: str, describe: str) -> None:
        self.identity, self.describe = target_identity, describe
        self.hits = 0
        self.write_error: str | None = None

    def _key(self, ids: list[int]) -> str:
        return xxh3_128_bytes(json.dumps([self.identity, ids]).encode("ascii"))

    def get(self, ids: list[int]) -> TargetRun | None:
        path = root() / f"{self._key(ids)}.json"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            body = data["body"]
            if data["check"] != _check(body) or body["identity"] != self.identity or body["ids"] != ids:
                raise ValueError("damaged")
            run = TargetRun(tuple(int(t) for t in body["continuation"]), tuple(int(t) for t in body["argmax"]))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
            _remove(path)
            return None
        try:
            os.utime(path)
        except OSError:
            pass
        self.hits += 1
        return run

    def put(self, ids: list[int], run: TargetRun) -> None:
        body = {
            "identity": self.identity,
            "ids": ids,
            "continuation": list(run.continuation),
            "argmax": list(run.argmax),
            "describe": self.describe,
        }
        base = root()
        try:
            base.mkdir(parents=True, exist_ok=True)
            handle, temp = tempfile.mkstemp(prefix=".incoming-", suffix=".json", dir=base)
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                json.dump({"check": _check(body), "body": body}, out)
            os.replace(temp, base / f"{self._key(ids)}.json")
        except OSError as exc:
            self.write_error = f"{exc.strerror or exc.__class__.__name__}: {exc.filename or base}"


def _check(body: dict[str, Any]) -> str:
    return xxh3_128_bytes(json.dumps(body, sort_keys=True).encode("utf-8"))


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


def _ours(path: Path) -> bool:
    stem = path.name[: -len(".json")] if path.name.endswith(".json") else ""
    return (
        path.is_file()
        and not path.is_symlink()
        and ((len(stem) == 32 and all(c in "0123456789abcdef" for c in stem)) or path.name.startswith(".incoming-"))
    )


def _entry_paths() -> list[tuple[Path, os.stat_result]]:
    """Every entry file (not the incoming ones), most recently used first; reads no entry."""
    base = root()
    found = [
        (path, path.stat())
        for path in (base.iterdir() if base.is_dir() else [])
        if not path.name.startswith(".") and _ours(path)
    ]
    return sorted(found, key=lambda item: -item[1].st_mtime)


def entries() -> list[Entry]:
    return [Entry(path.name[:32], path, stat.st_size, stat.st_mtime, _describe(path)) for path, stat in _entry_paths()]


def _describe(path: Path) -> str:
    try:
        return str(json.loads(path.read_text(encoding="utf-8"))["body"].get("describe", ""))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return "(unreadable)"


def clear() -> int:
    count = len(_entry_paths())
    base = root()
    for path in list(base.iterdir()) if base.is_dir() else []:
        if _ours(path):
            _remove(path)
    return count


def trim() -> None:
    """Keep the MAX_ENTRIES most recently used; remove incoming files a killed run left a day ago."""
    for path, _ in _entry_paths()[MAX_ENTRIES:]:  # by modification time alone: no entry is read
        _remove(path)
    cutoff = time.time() - 24 * 3600
    for path in root().glob(".incoming-*") if root().is_dir() else []:
        if _ours(path) and path.stat().st_mtime < cutoff:
            _remove(path)
