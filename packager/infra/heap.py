"""Give the C heap's freed pages back to the operating system.

Parsing tokenizer.json (11 MB of JSON) or loading it into the `tokenizers` library leaves 35-110 MB of freed
heap in the process that glibc keeps for reuse; in a long conversion that memory stays counted against the
process for nothing.
"""

from __future__ import annotations

import ctypes


def give_back() -> None:
    """glibc's malloc_trim(0) over every arena; nothing where the C library has no such call."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass
