"""The bundle's JSON files: syntax (line:column), schema violations and unknown keys with suggestions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .. import resources
from ..errors import MAX_SHOWN, shorten
from ..infra.userfile import JSON_BYTES as MAX_JSON_BYTES
from ..infra.userfile import read_at_most
from ..report.findings import Collector, pointer, suggest

# File -> schema name. llm.mnn.json is the graph dump: parsed for syntax, checked by the graph checks.
SCHEMA_FOR = {
    "config.json": "config",
    "config_cpu.json": "draft_config",
    "draft_config_cpu.json": "draft_config",
    "config_opencl.json": "config_opencl",
    "llm_config.json": "llm_config",
    "runtime_config.json": "runtime_config",
}
JSON_FILES = (*SCHEMA_FOR, "llm.mnn.json")
APP_SPECIFIC = {"draft_config_path"}
RUNTIME_FILES = ("config.json", "config_cpu.json", "draft_config_cpu.json", "config_opencl.json")
MAX_DEPTH = 32  # the configs nest 2-4 levels; jsonschema and our checks recurse per level


def runtime_keys() -> set[str]:
    return set(resources.schema("mnn_runtime")["$defs"]["properties"]) - {"jinja"}


def load_json(path: Path, name: str, out: Collector) -> Any:
    """The parsed document, or None after reporting why it cannot be used (MNN would silently ignore it)."""
    text = _read(path, name, out)
    if text is None:
        return None
    duplicates: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        for key, value in items:
            if key in seen:
                duplicates.append(key)
            seen[key] = value
        return seen

    try:
        # The graph dump is machine-written and large; duplicate keys are a hand-editing hazard.
        data = json.loads(text) if name == "llm.mnn.json" else json.loads(text, object_pairs_hook=pairs)
    except json.JSONDecodeError as exc:
        out.error(
            name,
            "",
            f"invalid JSON: {exc.msg} (MNN ignores an unparsable file and runs on defaults)",
            line=exc.lineno,
            column=exc.colno,
        )
        return None
    except RecursionError:  # the C parser's own depth guard: this is no config MNN or packager wrote
        out.error(name, "", "nested too deeply to parse; a bundle file is a few levels deep")
        return None
    for key in duplicates:
        out.warning(name, pointer([key]), f"key {shorten(repr(key))} appears more than once; only the last counts")
    return data if _usable(data, name, out) else None


def _read(path: Path, name: str, out: Collector) -> str | None:
    try:
        data = read_at_most(path, MAX_JSON_BYTES)  # a device or a sparse file claims any size: read no further
        if len(data) > MAX_JSON_BYTES:
            out.error(name, "", f"is over {MAX_JSON_BYTES >> 20} MiB, too large to be a bundle file of its kind")
            return None
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        out.error(name, "", f"not UTF-8 text ({exc.reason} at byte {exc.start})")
    except OSError as exc:
        out.error(name, "", f"cannot be read: {exc.strerror or type(exc).__name__}")
    return None


def _usable(data: Any, name: str, out: Collector) -> bool:
    if not isinstance(data, dict):
        out.error(name, "", f"the top level is a JSON {type(data).__name__}, expected an object")
        return False
    if name in SCHEMA_FOR and depth(data) > MAX_DEPTH:
        out.error(name, "", f"nested more than {MAX_DEPTH} levels deep; a bundle config is a few levels deep")
        return False
    return True


def depth(value: Any) -> int:
    """How deeply objects and arrays nest (without recursion; stops counting past MAX_DEPTH)."""
    deepest, stack = 0, [(value, 1)]
    while stack and deepest <= MAX_DEPTH:
        node, level = stack.pop()
        deepest = max(deepest, level)
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        stack.extend((child, level + 1) for child in children if isinstance(child, (dict, list)))
    return deepest


def check_schema(name: str, data: dict[str, Any], out: Collector) -> None:
    validator = resources.validator(SCHEMA_FOR[name])
    for error in sorted(validator.iter_errors(data), key=lambda e: (list(map(str, e.absolute_path)), e.message)):
        where = list(error.absolute_path)
        if error.validator == "additionalProperties" and isinstance(error.instance, dict):
            allowed = set(error.schema.get("properties", {}))
            for key in sorted(set(error.instance) - allowed):
                _unknown_key(name, where + [key], key, sorted(allowed), out)
        elif error.validator == "enum" and error.instance == "draftmodel":
            out.error(
                name,
                pointer(where),
                "speculative_type 'draftmodel' is app-specific (upstream MNN falls back "
                "to plain decoding) and belongs only in config_opencl.json",
            )
        elif error.validator == "enum" and isinstance(error.instance, str):
            options = [str(o) for o in error.validator_value]
            close = suggest(error.instance, options) if len(error.instance) <= MAX_SHOWN else None
            hint = f"; did you mean {close!r}?" if close else f"; allowed: {', '.join(map(repr, options))}"
            out.error(name, pointer(where), f"{shorten(repr(error.instance))} is not an allowed value{hint}")
        elif error.validator == "pattern" and error.validator_value == _inside_pattern():
            out.error(
                name,
                pointer(where),
                f"{shorten(repr(error.instance))} is not a path inside the bundle: MNN "
                "opens base_dir + this value, so it must be relative, without '..'",
            )
        elif error.validator == "type":
            out.error(name, pointer(where), f'{_message(error)} (MNN silently reads a wrong type as 0/false/"")')
        else:
            out.error(name, pointer(where), _message(error))


def _inside_pattern() -> str:
    """The schemas' pattern of a file path inside the bundle (every path key has it)."""
    return str(resources.schema("mnn_runtime")["$defs"]["properties"]["llm_model"]["pattern"])


def _message(error: Any) -> str:
    """jsonschema's message with the offending value shortened (it quotes the whole value)."""
    text = error.message
    if isinstance(error.instance, (str, list, dict)) and len(text) > MAX_SHOWN:
        shown = repr(error.instance)
        text = text.replace(shown, shorten(shown)) if shown in text else shorten(text)
    return text


def _unknown_key(name: str, where: list[Any], key: str, allowed: list[str], out: Collector) -> None:
    at = pointer(where)
    if name == "llm_config.json" and key in runtime_keys():
        out.error(
            name, at, f"runtime key {key!r} in llm_config.json silently overrides config.json; move it to config.json"
        )
    elif key in APP_SPECIFIC:
        out.error(name, at, f"{key!r} is app-specific (TokForge) and belongs only in config_opencl.json")
    else:
        close = suggest(key, allowed, cutoff=0.75) if len(key) <= MAX_SHOWN else None
        if close:
            out.error(name, at, f"unknown key {key!r} (MNN ignores it); did you mean {close!r}?")
        else:
            out.warning(name, at, f"unknown key {shorten(repr(key))}; MNN ignores it")
