"""Where test fixtures are cached across sessions (this user's cache folder), and how one is built at most once
at a time and appears whole or not at all. Light: the standard library only, so that any test helper can use it."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def cache_root() -> Path:
    configured = os.environ.get("PACKAGER_FIXTURE_DIR")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "packager" / "trained-fixtures"


def built_once(out: Path, marker: str, build_it: Callable[[], object]) -> None:
    """Build `out` unless it holds `marker`, one process at a time: parallel test workers (pytest -n) wait for
    the first one's build instead of training the same models again beside it."""
    import fcntl

    with open(out.parent / f".{out.name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / marker).is_file():
            build_it()


@contextmanager
def staged(out: Path, marker: str, log: Callable[[str], None]) -> Iterator[Path]:
    """A hidden folder beside `out` to build in, renamed to `out` when the block succeeds and removed in any
    case; if another build's folder (one holding `marker`) got there first, that one is kept."""
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=out.parent))
    try:
        yield tmp
        try:
            tmp.rename(out)
        except OSError:
            if not (out / marker).is_file():
                raise
            log(f"another build finished first; using {out}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def fixture_main(doc: str | None, build: Callable[..., Any], argv: list[str] | None = None) -> None:
    """The command line of a fixture module (`python -m tests.trained_eagle [--out DIR]`): builds or finds the
    fixture with `build(out, log=...)`, prints its metrics to stderr and its folder to stdout."""
    import argparse
    import json
    import sys

    parser = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="cache folder  [default: $PACKAGER_FIXTURE_DIR or XDG cache]")
    args = parser.parse_args(argv)
    found = build(args.out, log=lambda line: print(line, file=sys.stderr, flush=True))
    print(json.dumps({k: v for k, v in found.metrics.items() if k != "recipe"}, indent=2), file=sys.stderr)
    print(found.root)
