"""The graph cache: llmexport's graph, configs and tokenizer candidates, built once per shape and reused.

Every Qwen3 draft of one shape, tokenizer and quantization has the same graph, so it is built once (by
llmexport's own weightless export) and kept under the user's cache folder. An entry is written into a
temporary folder and renamed into place, so concurrent conversions never see half of one; its manifest of
xxh3-128 digests is checked on every use, and an entry that fails it is removed and rebuilt, never used.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...bundle.kinds import DFLASH_GRAPHS, EAGLE_FILES
from ...infra.hashing import xxh3_128_bytes, xxh3_128_file
from ...infra.progress import Progress as Report

FILES = ("llm.mnn", "llm.mnn.json", "llm_config.json", "tokenizer.mtok", "meta.json")
# An entry of another kind: a DFlash draft's two graphs (their weights inside), keyed by the draft's bytes
# (convert.dflash.export).
DRAFT_ENTRY = (*DFLASH_GRAPHS, "meta.json")
# Files an entry may hold beside FILES: the text-format tokenizer (for the families it is right for) and an
# EAGLE-3 head's, exported with the target's graph.
EXTRA = ("tokenizer-text.txt", *EAGLE_FILES)
MANIFEST = "manifest.json"
MAX_ENTRIES = 16  # a few shapes x quantizations; the oldest-used entries go first


@dataclass(frozen=True)
class Entry:
    key: str
    path: Path
    size: int
    last_used: float
    describe: str


def home() -> Path:
    """packager's cache folder, which holds `graphs` and the target cache's `targets` side by side:
    $PACKAGER_CACHE_DIR, else $XDG_CACHE_HOME/packager, else ~/.cache/packager."""
    if os.environ.get("PACKAGER_CACHE_DIR"):
        return Path(os.environ["PACKAGER_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")) / "packager"


def root() -> Path:
    """home()/graphs. Entries an older packager kept directly in $PACKAGER_CACHE_DIR move in there on first use
    (a rename each: a warm cache stays warm)."""
    base = home() / "graphs"
    if os.environ.get("PACKAGER_CACHE_DIR"):
        _adopt(home(), base)
    return base


def _adopt(old: Path, new: Path) -> None:
    """Move the entries of the old layout ($PACKAGER_CACHE_DIR/<key>) into `new`; best effort, never fatal: an
    entry that cannot move stays where it was (and is a miss), and nothing else in the folder is touched."""
    try:
        found = [folder for folder in old.iterdir() if not folder.name.startswith(".") and _ours(folder)]
    except OSError:
        return
    for folder in found:
        try:
            new.mkdir(parents=True, exist_ok=True)
            os.rename(folder, new / folder.name)
        except OSError:
            pass  # another process moved it first, or the folder is not ours to change


def key(fields: dict[str, Any]) -> str:
    return xxh3_128_bytes(json.dumps(fields, sort_keys=True, ensure_ascii=True).encode("ascii"))


def lookup(entry_key: str, report: Report = lambda _: None) -> Path | None:
    """The entry's folder if it is present and intact; a damaged entry is removed (and reported)."""
    folder = root() / entry_key
    if not folder.is_dir():
        return None
    if not _intact(folder):
        report(f"graph cache entry {entry_key[:12]} is damaged; removed it and rebuilding")
        shutil.rmtree(folder, ignore_errors=True)
        return None
    os.utime(folder)
    return folder


def contents(folder: Path) -> tuple[str, ...]:
    """The files of an intact entry (FILES, then the EXTRA ones it holds; or a DFlash draft's, DRAFT_ENTRY)."""
    if not (folder / FILES[0]).exists() and (folder / DRAFT_ENTRY[0]).exists():
        return DRAFT_ENTRY
    return (*FILES, *(name for name in EXTRA if (folder / name).is_file()))


def store(entry_key: str, files: dict[str, Path], meta: dict[str, Any]) -> Path:
    """Add an entry atomically (a concurrent writer's identical entry wins), then trim the cache."""
    if not set(files) <= set(FILES) | set(EXTRA) and set(files) != set(DFLASH_GRAPHS):
        raise ValueError(f"a graph cache entry holds only {FILES + EXTRA}, or {DFLASH_GRAPHS}")
    base = root()
    base.mkdir(parents=True, exist_ok=True)
    temp = Path(tempfile.mkdtemp(prefix=".incoming-", dir=base))
    try:
        for name, source in files.items():
            shutil.copyfile(source, temp / name)
        (temp / "meta.json").write_text(json.dumps(meta, ensure_ascii=False), encoding="utf-8")
        digests = {name: xxh3_128_file(temp / name) for name in contents(temp)}
        (temp / MANIFEST).write_text(json.dumps(digests), encoding="utf-8")
        try:
            os.rename(temp, base / entry_key)
        except OSError:
            pass  # another conversion stored the same entry first
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    _trim(base)
    return base / entry_key


def _ours(folder: Path) -> bool:
    """Only folders this cache made are ever listed or removed (the cache folder may be anything the user set)."""
    name = folder.name
    entry = len(name) == 32 and all(c in "0123456789abcdef" for c in name) and (folder / "meta.json").is_file()
    return folder.is_dir() and not folder.is_symlink() and (entry or name.startswith(".incoming-"))


def entries() -> list[Entry]:
    base = root()
    found = []
    for folder in sorted(base.iterdir()) if base.is_dir() else []:
        if folder.name.startswith(".") or not _ours(folder):
            continue
        size = sum(p.stat().st_size for p in folder.iterdir() if p.is_file())
        found.append(Entry(folder.name, folder, size, folder.stat().st_mtime, _describe(folder)))
    return sorted(found, key=lambda e: -e.last_used)


def clear() -> int:
    """Remove every entry (and any leftover incoming folder); returns how many entries there were."""
    count = len(entries())
    base = root()
    for folder in base.iterdir() if base.is_dir() else []:
        if _ours(folder):
            shutil.rmtree(folder, ignore_errors=True)
    return count


def _intact(folder: Path) -> bool:
    try:
        digests = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
        # contents() is FILES and the EXTRA files present: the manifest must name exactly those
        return set(digests) == set(contents(folder)) and all(xxh3_128_file(folder / n) == d for n, d in digests.items())
    except (OSError, ValueError, AttributeError):
        return False


def _describe(folder: Path) -> str:
    try:
        meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
        return str(meta.get("describe", ""))
    except (OSError, ValueError):
        return "(unreadable)"


def _trim(base: Path) -> None:
    for entry in entries()[MAX_ENTRIES:]:
        shutil.rmtree(entry.path, ignore_errors=True)
    cutoff = time.time() - 24 * 3600
    for folder in base.glob(".incoming-*"):  # left by a killed conversion
        if _ours(folder) and folder.stat().st_mtime < cutoff:
            shutil.rmtree(folder, ignore_errors=True)
