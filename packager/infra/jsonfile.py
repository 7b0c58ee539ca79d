"""JSON files packager reads: at most their limit (a device or a sparse file is read no further), one error class
of the caller's for every problem."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import shorten
from .userfile import JSON_BYTES, read_text

# Larger than any config, tokenizer or report packager reads (tokenizer.json is about 11 MB).
MAX_JSON_BYTES = JSON_BYTES


def read_json(
    path: Path,
    error: type[Exception],
    limit: int = MAX_JSON_BYTES,
    what: str | None = None,
    too_large: type[Exception] | None = None,
) -> Any:
    """A JSON file of at most `limit` bytes (read no further, whatever size it claims); `error` for any problem
    (`too_large`, when given, for a file over the limit), its line naming the file (after what it is, e.g. "pair
    report", when `what` is given)."""
    text = read_text(path, limit, what=what or "JSON file", unreadable=error, too_large=too_large or error)
    shown = f"{what} {shorten(str(path), 120)}" if what else str(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(f"{shown} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise error(f"{shown} is nested too deeply to be a real JSON file of its kind") from None
