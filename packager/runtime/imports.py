"""Importing the large libraries (torch, transformers) without Python's cyclic garbage collector walking them.

Importing torch and transformers creates several hundred thousand long-lived objects (modules, functions,
classes), and every few hundred allocations the collector runs; its older generations walk everything alive
again and again. On the trained miniature that was 0.6-1.0 s of verify's 2.8 s start, spent finding no garbage.
Paused during the imports, then frozen (moved to the generation the collector never walks), those objects cost
no collection now or later; whatever is allocated afterwards is collected as usual.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def without_collection() -> Iterator[None]:
    """The collector paused for the block (restored as it was, also on an error); what is alive at its end is
    frozen (gc.freeze), so later collections skip it."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()
