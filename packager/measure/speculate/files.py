"""The files MNN reads to run a bundle's speculative mode, checked before the engine is started: each one named
inside the bundle, present, a regular file that is not empty (a link only to a file inside the bundle), and the
weights as long as the graph says. MNN itself opens base_dir + each name without a word about where it leads, and
runs a truncated weight file on whatever bytes it finds (or generates nothing at all)."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any

from ...bundle.kinds import DFLASH_LMHEAD, EMBEDDINGS, LOOKUP
from ...bundle.modes import DFLASH_KEYS, DFLASH_LMHEAD_KEY, EAGLE_KEYS
from ...errors import PackagerError, shorten

# config.json's keys for the files every mode reads, with the engine's defaults.
CORE = {
    "llm_model": "llm.mnn",
    "llm_weight": "llm.mnn.weight",
    "llm_config": "llm_config.json",
    "tokenizer_file": "tokenizer.txt",
}
_RESTORE = "restore the file (packager pull, or convert again); packager validate names every problem of the bundle"
_VALIDATE = "run packager validate on the bundle"


def read_by_engine(bundle: Path, config: dict[str, Any], mode: str) -> dict[str, str]:
    """config.json key (or the file's own name) -> the name MNN opens for `mode`, inside the bundle folder."""
    keys = dict(CORE)
    if "embedding_file" in config or (bundle / EMBEDDINGS).exists():
        keys["embedding_file"] = EMBEDDINGS
    if mode == "eagle":
        keys.update(EAGLE_KEYS)
    if mode == "dflash":
        keys.update(DFLASH_KEYS)
        if config.get(DFLASH_LMHEAD_KEY):
            keys[DFLASH_LMHEAD_KEY] = DFLASH_LMHEAD
    if mode == "lookahead" and ("lookup_file" in config or os.path.lexists(bundle / LOOKUP)):
        keys["lookup_file"] = LOOKUP
    base = config.get("base_dir", "")
    names = {key: config.get(key, default) for key, default in keys.items()}
    for key, name in names.items():
        if not isinstance(base, str) or not isinstance(name, str):
            raise _unavailable(
                f"{shorten(str(bundle), 120)}'s config.json gives {key} or base_dir as no text", _VALIDATE
            )
        if not _inside(base + name):
            raise _unavailable(
                f"{shorten(str(bundle), 120)}'s config.json names {key} {shorten(base + name, 120)!r}, "
                "a path outside the bundle folder (MNN would read it, and a report's digests would "
                "leave it out)",
                _VALIDATE,
            )
    found = {key: base + name for key, name in names.items()}
    if mode == "eagle":  # each head graph's weights beside it, where MNN loads them from
        found.update(
            {
                f"{key} weights": f"{found[key]}.weight"
                for key in ("eagle_model", "eagle_fc")
                if os.path.lexists(bundle / f"{found[key]}.weight")
            }
        )
    if mode == "dflash":
        found.update(
            {
                f"{key} weights": f"{found[key]}.weight"
                for key in (*DFLASH_KEYS, DFLASH_LMHEAD_KEY)
                if key in found and os.path.lexists(bundle / f"{found[key]}.weight")
            }
        )
    return found


def check(bundle: Path, config: dict[str, Any], mode: str, dump: Any) -> tuple[str, ...]:
    """Refuse (exit 82) the first file MNN would read that is outside the bundle, missing, no regular file, empty
    or (the weights) shorter than the graph; the names it reads."""
    names = read_by_engine(bundle, config, mode)
    for name in names.values():
        _check_file(bundle, name)
    weights = names["llm_weight"]
    end = _weights_end(dump)
    size = (bundle / weights).stat().st_size
    if end is not None and size < end:
        raise _unavailable(
            f"{shorten(str(bundle / weights), 120)} is truncated: {size:,} bytes, but the graph "
            f"(llm.mnn.json) places weights up to byte {end:,}",
            _RESTORE,
        )
    return tuple(dict.fromkeys(names.values()))


def _check_file(bundle: Path, name: str) -> None:
    path = bundle / name
    shown = shorten(str(path), 120)
    try:
        info = path.lstat()
        if stat.S_ISLNK(info.st_mode):
            if not path.resolve().is_relative_to(bundle.resolve()):
                raise _unavailable(
                    f"{shown} is a link to a file outside the bundle folder (MNN would read it, and a "
                    "report's digests would not be of the bundle)",
                    "put the file itself in the bundle",
                )
            info = path.stat()
    except FileNotFoundError:
        raise _unavailable(
            f"{shorten(str(bundle), 120)} is missing {shorten(name, 120)}, which MNN reads to run it", _RESTORE
        ) from None
    except OSError as exc:  # a loop of links, a name too long
        raise _unavailable(f"{shown} cannot be read ({exc.strerror or type(exc).__name__})", _RESTORE) from None
    if not stat.S_ISREG(info.st_mode):
        raise _unavailable(f"{shown} is not a regular file (a folder, FIFO or device)", _RESTORE)
    if info.st_size == 0:
        raise _unavailable(f"{shown} is empty", _RESTORE)


def _weights_end(dump: Any) -> int | None:
    """Where the graph's last external weight range ends in llm.mnn.weight; None without a usable dump (validate
    reports a damaged one)."""
    from ...bundle.graph import read

    if not isinstance(dump, dict):
        return None
    try:
        ranges = read(dump).ranges
    except (TypeError, ValueError, AttributeError):
        return None
    return max((offset + length for _, offset, length in ranges), default=None)


def _inside(name: str) -> bool:
    """A relative path that stays in the folder: no drive, no leading separator, no '..' part (MNN concatenates
    base_dir and the name)."""
    return (
        bool(name)
        and "\0" not in name
        and not name.startswith(("/", "\\"))
        and not re.match(r"[A-Za-z]:", name)
        and ".." not in re.split(r"[/\\]", name)
    )


def _unavailable(message: str, hint: str) -> PackagerError:
    from ...errors import SpeculationUnavailable

    return SpeculationUnavailable(message, hint)
