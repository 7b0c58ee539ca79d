"""Values read from a config a user names (a draft's, a head's), checked one by one."""

from __future__ import annotations

import math
from typing import Any

from ...errors import PackagerError, shorten


def positive(
    config: dict[str, Any], key: str, where: str, error: type[PackagerError], default: Any = None, kind: type = int
) -> Any:
    """config[key] (else `default`): a positive integer, or with `kind=float` a positive finite number (an integer
    too); anything else (a bool, a string, 0, NaN) raises `error`, naming `where` and what was found."""
    value = config.get(key, default)
    ok = isinstance(value, (int, float) if kind is float else int) and not isinstance(value, bool)
    if not ok or value <= 0 or (kind is float and not math.isfinite(value)):
        raise error(
            f"{where}: {key} must be a positive {'number' if kind is float else 'integer'}, "
            f"found {shorten(repr(value))}"
        )
    return value
