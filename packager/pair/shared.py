"""Large arrays from the MNN child to packager through shared memory instead of the reply pipe.

A prompt's logits are 26 MB at 43 positions x 152k (311 MB at 512 positions). Pickled through a pipe they cost a
pickling copy, the pipe's many small writes each switching between the two processes, and an unpickling copy:
about twice MNN's own forward on the trained miniature. Here the child writes the array's bytes once into an
anonymous memory file (memfd) the parent opened and handed down, and replies with its shape alone; the parent
reads them into an array of its own. The file holds one reply at a time (the protocol has at most one request in
flight), so it is as large as the largest reply so far: memory the parent would hold anyway as that array.

Where memfd is missing (not Linux) or a write fails (memory limits), the array takes the pipe: slower, the same
bytes."""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from ..fdio import read_into, write_all

THRESHOLD = 1 << 20  # bytes: smaller arrays are cheaper pickled with the reply


@dataclass(frozen=True)
class SharedArray:
    """What the pipe carries instead of an array whose bytes are in the shared file."""

    shape: tuple[int, ...]
    dtype: str


def create() -> int | None:
    """A new anonymous shared file (closed on exec unless handed down), or None where there is none."""
    try:
        return os.memfd_create("packager-replies", os.MFD_CLOEXEC)
    except (AttributeError, OSError):
        return None


def put(fd: int, value: object) -> object:
    """In the child: `value` if it stays in the pipe, else its bytes written to `fd` and a SharedArray."""
    if not isinstance(value, np.ndarray) or value.nbytes < THRESHOLD or value.dtype.hasobject:
        return value
    array = np.ascontiguousarray(value)
    try:
        write_all(fd, array, 0)
    except OSError:
        return value
    return SharedArray(tuple(array.shape), array.dtype.str)


def take(fd: int, shared: SharedArray) -> np.ndarray:
    """In the parent: the array the child put, read into memory of its own (the next reply reuses the file)."""
    out = np.empty(shared.shape, dtype=np.dtype(shared.dtype))
    done = read_into(fd, out, 0)
    if done != out.nbytes:
        raise OSError(f"the shared reply ended after {done} of {out.nbytes} bytes")
    return out
