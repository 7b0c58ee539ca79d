"""How a stage reports progress: a callback taking one line (the CLI prints it, a test collects it, a quiet run
drops it). The library never prints."""

from __future__ import annotations

from collections.abc import Callable

Progress = Callable[[str], None]
