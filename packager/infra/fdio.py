"""Whole buffers to and from a file descriptor at an offset (pwrite and preadv may move fewer bytes than asked), and
byte ranges copied from file to file by the kernel."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, BinaryIO


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


def copy_range(source: Path, start: int, length: int, out: BinaryIO) -> bool:
    """`length` bytes of `source` from `start` appended to `out` (empty, opened for writing) by the kernel
    (copy_file_range: no copy through Python's buffers); False, `out` left empty, where the file system cannot or
    `source` ends first."""
    with open(source, "rb") as src:
        at, left = start, length
        try:
            while left:
                done = os.copy_file_range(src.fileno(), out.fileno(), left, at)
                if done == 0:
                    raise OSError(f"{source.name} ended before the range did")
                at, left = at + done, left - done
        except OSError:
            out.seek(0)
            out.truncate()
            return False
    return True
