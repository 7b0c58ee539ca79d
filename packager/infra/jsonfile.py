"""JSON files packager reads: at most MAX_JSON_BYTES (a device or a sparse file is read no further), one error
class of the caller's for every problem."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .userfile import JSON_BYTES, read_text

# Larger than any config, tokenizer or report packager reads (tokenizer.json is about 11 MB).
MAX_JSON_BYTES = JSON_BYTES


def read_json(path: Path, error: type[Exception]) -> Any:
    """A JSON file of at most MAX_JSON_BYTES (read no further, whatever size it claims); `error` for any problem."""
    text = read_text(path, MAX_JSON_BYTES, what="JSON file", unreadable=error, too_large=error)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(f"{path} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise error(f"{path} is nested too deeply to be a real JSON file of its kind") from None
