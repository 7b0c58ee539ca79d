"""The one place that reads package data (schemas, templates, corpora) through importlib.resources."""

from __future__ import annotations

import json
from functools import cache
from importlib.resources import files
from pathlib import Path
from typing import Any


def package_root() -> Path:
    """The folder holding the `packager` package (a checkout or site-packages): what a child process puts first
    on sys.path so that it imports this very packager, wherever the package itself lives."""
    return Path(__file__).resolve().parent.parent


def _read_text(package: str, name: str) -> str:
    return files(package).joinpath(name).read_text(encoding="utf-8")


@cache
def schema(name: str) -> dict[str, Any]:
    """The JSON Schema `schemas/<name>.schema.json`."""
    return json.loads(_read_text("packager.schemas", f"{name}.schema.json"))


SCHEMA_NAMES = (
    "mnn_runtime",
    "config",
    "draft_config",
    "config_opencl",
    "runtime_config",
    "llm_config",
    "provenance",
    "release",
    "release_summary",
    "matrix",
)


@cache
def registry() -> Any:
    """A referencing.Registry holding every schema under its $id, so relative $refs resolve offline."""
    from referencing import Registry, Resource

    return Registry().with_resources(
        (schema(name)["$id"], Resource.from_contents(schema(name))) for name in SCHEMA_NAMES
    )


@cache
def validator(name: str) -> Any:
    """A Draft 2020-12 validator for one of our schemas, with the others available to $ref."""
    from jsonschema import Draft202012Validator

    return Draft202012Validator(schema(name), registry=registry())


def template(name: str) -> str:
    """The Jinja2 template `templates/<name>`."""
    return _read_text("packager.templates", name)


@cache
def tokenizer_corpus() -> tuple[str, ...]:
    """The built-in multilingual corpus used to measure tokenizer agreement."""
    data = json.loads(_read_text("packager.data", "tokenizer_corpus.json"))
    return tuple(item["text"] for item in data["strings"])


@cache
def tokenizer_corpus_items() -> tuple[dict[str, str], ...]:
    """The corpus with each string's category, for per-category reports."""
    data = json.loads(_read_text("packager.data", "tokenizer_corpus.json"))
    return tuple(data["strings"])


@cache
def parity_prompts() -> tuple[str, ...]:
    """Prompts used to compare MNN's next-token logits with transformers'."""
    data = json.loads(_read_text("packager.data", "prompts.json"))
    return tuple(data["prompts"])


@cache
def pair_prompts() -> tuple[dict[str, Any], ...]:
    """The conversations `pair` measures acceptance on (category, language, messages)."""
    data = json.loads(_read_text("packager.data", "pair_prompts.json"))
    return tuple(data["prompts"])
