"""Large arrays from the MNN child to packager through shared memory instead of the reply pipe.

A prompt's logits are 26 MB at 43 positions x 152k (311 MB at 512 positions). Pickled through a pipe they cost a
pickling copy, the pipe's many small writes each switching between the two processes, and an unpickling copy:
about twice MNN's own forward on the trained miniature. Here the child writes the array's bytes once into an
anonymous memory file (memfd) the parent opened and handed down, and replies with its shape alone.

There are two such files, used in turn, so the child can write its next reply while the parent still works on
the last one (verify compares a prompt's rows while MNN computes the next prompt's). The parent either reads a
reply into an array of its own (take) or, where it is done with the rows before it asks for the reply after
next, maps the file and works on the child's bytes in place (borrow: no copy at all). Each file is as large as
the largest reply written to it: memory the parent would hold anyway as that array.

Where memfd is missing (not Linux) or a write fails (memory limits), the array takes the pipe: slower, the same
bytes."""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass

import numpy as np

from ..infra.fdio import read_into, write_all

THRESHOLD = 1 << 20  # bytes: smaller arrays are cheaper pickled with the reply
SLOTS = 2  # files used in turn: one being written by the child, one being read by the parent


@dataclass(frozen=True)
class SharedArray:
    """What the pipe carries instead of an array whose bytes are in the shared file `slot`."""

    shape: tuple[int, ...]
    dtype: str
    slot: int = 0

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize


def create() -> tuple[int, ...] | None:
    """SLOTS new anonymous shared files (closed on exec unless handed down), or None where there are none."""
    made: list[int] = []
    try:
        for _ in range(SLOTS):
            made.append(os.memfd_create("packager-replies", os.MFD_CLOEXEC))
    except (AttributeError, OSError):
        for fd in made:
            os.close(fd)
        return None
    return tuple(made)


class Writer:
    """In the child: puts large arrays into the shared files, one file after the other."""

    def __init__(self, fds: tuple[int, ...]) -> None:
        self.fds = fds
        self._turn = 0

    def put(self, value: object, owned: bool = True) -> object:
        """A large array's bytes written to the next file, and a SharedArray for the pipe; anything else (or an
        array whose write failed) as it is. An array that is not `owned` (a view of the runtime's own buffer,
        valid only until its next call) is copied when it has to take the pipe after all."""
        if self.fds and isinstance(value, np.ndarray) and value.nbytes >= THRESHOLD and not value.dtype.hasobject:
            array = np.ascontiguousarray(value)
            try:
                write_all(self.fds[self._turn], array, 0)
            except OSError:
                pass
            else:
                sent = SharedArray(tuple(array.shape), array.dtype.str, self._turn)
                self._turn = (self._turn + 1) % len(self.fds)
                return sent
        return value.copy() if isinstance(value, np.ndarray) and not owned else value


def take(fds: tuple[int, ...], shared: SharedArray) -> np.ndarray:
    """In the parent: the array the child put, read into memory of its own."""
    out = np.empty(shared.shape, dtype=np.dtype(shared.dtype))
    done = read_into(_fd(fds, shared), out, 0)
    if done != out.nbytes:
        raise OSError(f"the shared reply ended after {done} of {out.nbytes} bytes")
    return out


def borrow(fds: tuple[int, ...], shared: SharedArray) -> np.ndarray:
    """In the parent: the array the child put, in place in its file (mapped, no copy). It holds the child's bytes
    until the child writes to that file again, two replies later: the caller must be done with it by then. The
    mapping is writable and shared, so the caller must not write to it either."""
    fd, need = _fd(fds, shared), shared.nbytes
    size = os.fstat(fd).st_size
    if size < need:  # mapped past its end, the file would kill the process (SIGBUS) when read
        raise OSError(f"the shared reply ended after {size} of {need} bytes")
    mapped = mmap.mmap(fd, need, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0))
    return np.frombuffer(mapped, dtype=np.dtype(shared.dtype)).reshape(shared.shape)


def _fd(fds: tuple[int, ...], shared: SharedArray) -> int:
    """The file a reply names, after checking what the reply says of itself."""
    if not 0 <= shared.slot < len(fds):
        raise OSError(f"the shared reply names file {shared.slot} of {len(fds)}")
    if not shared.shape or any(not isinstance(n, int) or n < 0 for n in shared.shape) or shared.nbytes <= 0:
        raise OSError(f"the shared reply has no usable shape {shared.shape}")
    return fds[shared.slot]
