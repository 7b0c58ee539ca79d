"""Sphinx directives that write reference pages from the code itself, so they cannot drift from it.

- ``packager-exit-codes``: every exit code, read from packager/errors.py: the error classes (name, exit_code,
  docstring, hint) and the module's integer constants documented with a ``#:`` comment (outcomes that are no
  error class: success, usage errors, a failed report, interrupts).
- ``packager-schema FILE``: a JSON Schema of schemas/ as tables of its keys (title, type, description), one
  section per table of the release spec.
- ``packager-import-layers``: the import-linter contracts of pyproject.toml (the layers of the house).
- ``packager-config-keys``: each family's config-key table (packager/families/configkeys.py and the family
  modules): every key transformers' modeling code reads, carried, refused or irrelevant.
"""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path
from typing import Any, ClassVar

from docutils import nodes
from docutils.parsers.rst import directives
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.pycode import ModuleAnalyzer
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "schemas"


def literal(text: str) -> str:
    """Docstring or schema text as one line of Markdown for a table cell: `code` kept, other markup escaped."""
    parts = re.split(r"(`[^`]+`)", " ".join(text.split()))
    out = []
    for part in parts:
        if part.startswith("`") and part.endswith("`") and len(part) > 1:
            out.append(part.replace("|", "\\|"))
        else:
            out.append(re.sub(r"([\\|*_<>\[\]#])", r"\\\1", part))
    return "".join(out)


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown (GFM) table; the directives are used in MyST pages, so their text is parsed as Markdown."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell or " " for cell in row) + " |" for row in rows]
    return [*lines, ""]


# --- exit codes ------------------------------------------------------------------------------------------------


def exit_codes() -> list[tuple[int, str, str, str]]:
    """(code, name, meaning, hint) of every outcome packager/errors.py defines, ordered by code."""
    from packager import errors

    rows: list[tuple[int, str, str, str]] = []
    for name, obj in vars(errors).items():
        if inspect.isclass(obj) and issubclass(obj, errors.PackagerError) and obj is not errors.PackagerError:
            doc = vars(obj).get("__doc__") or ""
            rows.append((obj.exit_code, name, doc, obj.hint))
    attr_docs = ModuleAnalyzer.for_module("packager.errors").find_attr_docs()
    for (_, name), doc_lines in attr_docs.items():
        value = getattr(errors, name, None)
        if isinstance(value, int) and not isinstance(value, bool):
            rows.append((value, name, " ".join(doc_lines), ""))
    return sorted(rows, key=lambda row: (row[0], row[1]))


class ExitCodes(SphinxDirective):
    """The table of exit codes, one row per error class or documented constant."""

    def run(self) -> list[nodes.Node]:
        rows = [
            [f"`{code}`", f"`{name}`", literal(meaning) or "(no docstring)", literal(hint)]
            for code, name, meaning, hint in exit_codes()
        ]
        self.env.note_dependency(str(ROOT / "packager" / "errors.py"))
        return self._parse(table(["code", "error", "meaning", "what to do"], rows))

    def _parse(self, lines: list[str]) -> list[nodes.Node]:
        container = nodes.container()
        nested_parse_with_titles(self.state, StringList(lines, source="packager/errors.py"), container)
        return container.children


# --- config keys -----------------------------------------------------------------------------------------------


class ConfigKeys(SphinxDirective):
    """One section per family: its config.json keys, what packager does with each, and why."""

    def run(self) -> list[nodes.Node]:
        from packager.families import FAMILIES

        lines: list[str] = []
        for family in FAMILIES:
            lines += [f"## {family.title}", "", f"model_type {', '.join(f'`{t}`' for t in family.model_types)}.", ""]
            rows = [[f"`{key.name}`", key.role, literal(key.how)] for key in family.config_keys]
            lines += table(["key", "packager", "how, or why"], rows)
        self.env.note_dependency(str(ROOT / "packager" / "families" / "configkeys.py"))
        container = nodes.container()
        nested_parse_with_titles(self.state, StringList(lines, source="packager/families"), container)
        return container.children


# --- JSON Schemas ----------------------------------------------------------------------------------------------


def resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    """Follows local $refs (#/$defs/...), keeping the referring node's own title and description."""
    seen = 0
    while "$ref" in node and node["$ref"].startswith("#/") and seen < 10:
        target: Any = schema
        for part in node["$ref"][2:].split("/"):
            target = target[part]
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        seen += 1
    return node


def properties(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    node = resolve(schema, node)
    if node.get("type") == "array" and isinstance(node.get("items"), dict):
        node = resolve(schema, node["items"])
    return node.get("properties") or {}


def type_of(schema: dict[str, Any], node: dict[str, Any]) -> str:
    node = resolve(schema, node)
    if "const" in node:
        return f"`{json.dumps(node['const'])}`"
    if "enum" in node:
        return ", ".join(f"`{json.dumps(v)}`" for v in node["enum"])
    kind = node.get("type")
    if kind is None:
        options = node.get("oneOf") or node.get("anyOf")
        return " or ".join(type_of(schema, o) for o in options) if options else "any"
    text = " or ".join(kind) if isinstance(kind, list) else kind
    if kind == "array" and isinstance(node.get("items"), dict):
        text = f"array of {type_of(schema, node['items'])}"
    bounds = [
        f"{word} {node[key]}"
        for key, word in (("minimum", ">="), ("maximum", "<="), ("exclusiveMinimum", ">"))
        if key in node
    ]
    return text + (f" ({', '.join(bounds)})" if bounds else "")


def key_rows(schema: dict[str, Any], node: dict[str, Any]) -> list[list[str]]:
    node = resolve(schema, node)
    if node.get("type") == "array" and isinstance(node.get("items"), dict):
        node = resolve(schema, node["items"])
    required = set(node.get("required", []))
    rows = []
    for key, sub in (node.get("properties") or {}).items():
        sub = resolve(schema, sub)
        about = ": ".join(x for x in (sub.get("title", ""), sub.get("description", "")) if x)
        rows.append(
            [f"`{key}`", type_of(schema, sub).replace("|", "\\|"), "yes" if key in required else "", literal(about)]
        )
    return rows


class Schema(SphinxDirective):
    """A schema of schemas/ as tables. The release spec (an object of tables) gets a section per table."""

    required_arguments = 1
    option_spec: ClassVar[dict[str, Any]] = {
        "sections": directives.flag,
        "keys": directives.unchanged,
        "level": directives.positive_int,
    }

    def run(self) -> list[nodes.Node]:
        path = SCHEMAS / self.arguments[0]
        self.env.note_dependency(str(path))
        schema = json.loads(path.read_text(encoding="utf-8"))
        lines = [literal(schema.get("description", "")), ""]
        if "sections" in self.options:
            hashes = "#" * self.options.get("level", 2)
            for key, sub in schema["properties"].items():
                sub = resolve(schema, sub)
                is_array = sub.get("type") == "array"
                heading = f"[[{key}]]" if is_array else f"[{key}]"
                lines += [f"{hashes} {heading}", "", literal(sub.get("description", "")), ""]
                nested = {k: v for k, v in properties(schema, sub).items() if properties(schema, v)}
                rows = key_rows(schema, sub)
                if rows:
                    lines += table(["key", "type", "required", "meaning"], rows)
                for name, inner in nested.items():
                    inner = resolve(schema, inner)
                    lines += [f"`[{key}.{name}]`: {literal(inner.get('description', ''))}", ""]
                    lines += table(["key", "type", "required", "meaning"], key_rows(schema, inner))
        else:
            node = schema
            if "keys" in self.options:  # the runtime config schemas keep their keys in $defs
                node = schema["$defs"][self.options["keys"]]
                node = {"properties": node} if "properties" not in node else node
            required = schema.get("required")
            if required:
                lines += ["Required: " + ", ".join(f"`{k}`" for k in required) + ".", ""]
            lines += table(["key", "type", "required", "meaning"], key_rows(schema, node))
        container = nodes.container()
        nested_parse_with_titles(self.state, StringList(lines, source=str(path)), container)
        return container.children


# --- the import-linter contracts ------------------------------------------------------------------------------


class ImportLayers(SphinxDirective):
    """The contracts `make lint` holds, read from pyproject.toml's [tool.importlinter]: the layers, highest first."""

    def run(self) -> list[nodes.Node]:
        import tomllib

        path = ROOT / "pyproject.toml"
        self.env.note_dependency(str(path))
        config = tomllib.loads(path.read_text(encoding="utf-8"))["tool"]["importlinter"]
        lines = []
        for contract in config["contracts"]:
            lines += [f"**{literal(contract['name'])}** (`{contract['type']}`):", ""]
            if contract["type"] == "layers":
                lines += [f"{i}. `{layer}`" for i, layer in enumerate(contract["layers"], 1)] + [""]
            for key in ("ancestors", "skip_descendants"):
                if key in contract:
                    lines += [f"- {key}: " + ", ".join(f"`{name}`" for name in contract[key])]
            lines.append("")
        container = nodes.container()
        nested_parse_with_titles(self.state, StringList(lines, source=str(path)), container)
        return container.children


# --- the CLI reference -----------------------------------------------------------------------------------------

RST_MARKUP = re.compile(r"([\\*`|_])")


def plain_help(app: Sphinx, ctx: Any, lines: list[str]) -> None:
    """click's help texts are plain text, not reStructuredText: sphinx-click's lines are escaped so that a `*` in
    `mnn_packager-*.whl` or a `name_` is shown as written (its own directive and field lines are left alone)."""
    for i, line in enumerate(lines):
        body = line.lstrip()
        if body.startswith(("..", ":")) or not body:
            continue
        bar = "| " if body.startswith("| ") else ""  # a line block sphinx-click made of click's \\b paragraphs
        lines[i] = line[: len(line) - len(body)] + bar + RST_MARKUP.sub(r"\\\1", body[len(bar) :])


def setup(app: Sphinx) -> dict[str, Any]:
    # packager imports a command's module only when it is used; sphinx-click documents the commands `cli` holds
    # once any is loaded, so every one is loaded before it looks.
    from packager.cli import load_all

    load_all()
    app.add_directive("packager-exit-codes", ExitCodes)
    app.add_directive("packager-schema", Schema)
    app.add_directive("packager-import-layers", ImportLayers)
    app.add_directive("packager-config-keys", ConfigKeys)
    for event in ("description", "options", "arguments", "epilog"):
        app.connect(f"sphinx-click-process-{event}", plain_help)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
