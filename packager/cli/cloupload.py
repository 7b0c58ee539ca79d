"""cloup, imported without importlib.metadata.

cloup reads click's version once, when it is imported, through importlib.metadata.version("click"). Importing
importlib.metadata (email, zipfile, csv, ...) costs about 20 ms, more than the rest of cloup and a third of what
`packager --help` took before cloup. While cloup is imported, `importlib.metadata` is a stand-in that answers that
one question from the name of click's dist-info folder, and is removed at once: any later `import importlib.metadata`
is the real module. Anything else asked of the stand-in, or a click installed without a dist-info folder beside it,
gets the real module, as without this file."""

from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path
from typing import Any

import click

NAME = "importlib.metadata"


def click_version() -> str | None:
    """click's version from its one dist-info folder beside the package (pip's layout); None if not exactly one."""
    found = list(Path(click.__file__).parent.parent.glob("click-*.dist-info"))
    return found[0].name.removeprefix("click-").removesuffix(".dist-info") if len(found) == 1 else None


def _real() -> Any:
    """The real importlib.metadata, the stand-in put aside first."""
    if not isinstance(sys.modules.get(NAME), _StandIn):
        return importlib.import_module(NAME)
    del sys.modules[NAME]
    return importlib.import_module(NAME)


class _StandIn(types.ModuleType):
    def __init__(self, click_version: str) -> None:
        super().__init__(NAME)
        self.click_version = click_version

    def version(self, name: str) -> str:
        return self.click_version if name == "click" else str(_real().version(name))

    def __getattr__(self, attribute: str) -> Any:
        return getattr(_real(), attribute)


def load() -> types.ModuleType:
    """Import cloup (once) and return it."""
    version = None if NAME in sys.modules or "cloup" in sys.modules else click_version()
    if version is None:
        import cloup

        return cloup
    stand_in = _StandIn(version)
    sys.modules[NAME] = stand_in
    importlib.metadata = stand_in  # `import importlib.metadata` reads the attribute
    try:
        import cloup
    finally:
        if sys.modules.get(NAME) is stand_in:
            del sys.modules[NAME]
        if getattr(importlib, "metadata", None) is stand_in:
            del importlib.metadata
    return cloup
