"""Sphinx configuration of packager's documentation (make docs: warnings are errors)."""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path[:0] = [str(ROOT), str(DOCS / "_ext")]  # this checkout's packager, not an installed one

from packager import __version__  # noqa: E402

project = "packager"
author = "packager's authors"
copyright = "packager's authors"
release = version = __version__

extensions = ["myst_parser", "sphinx_click", "packager_docs"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 4  # [text](page.md#a-heading) links work as on GitHub
suppress_warnings: list[str] = []
nitpicky = True
smartquotes = False  # "--option" stays two hyphens

html_theme = "furo"
html_title = f"packager {release}"
html_static_path = ["_static"]
html_css_files = ["packager.css"]
html_show_sourcelink = False
