"""Whole buffers to and from a file descriptor at an offset (pwrite and preadv may move fewer bytes than asked)."""

from __future__ import annotations

import os
from typing import Any


def write_all(fd: int, buffer: Any, offset: int) -> None:
    """Every byte of `buffer` (anything with the buffer protocol, C-contiguous) at `offset`."""
    data = memoryview(buffer).cast("B")
    done = 0
    while done < len(data):
        done += os.pwrite(fd, data[done:], offset + done)


def read_into(fd: int, buffer: Any, offset: int) -> int:
    """Fill `buffer` from `offset`; the bytes read (fewer only where the file ends first)."""
    data = memoryview(buffer).cast("B")
    done = 0
    while done < len(data):
        got = os.preadv(fd, [data[done:]], offset + done)
        if got == 0:
            break
        done += got
    return done
