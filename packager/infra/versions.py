"""Installed versions of packager's engines, read from package metadata (nothing is imported)."""

from __future__ import annotations

from importlib import metadata

# What a bundle's bytes or a release depend on.
ENGINES = ("mnn", "llmexport", "huggingface_hub", "torch", "transformers", "peft", "tokenizers", "onnx")
NOT_INSTALLED = "not installed"


def installed(names: tuple[str, ...] = ENGINES) -> dict[str, str]:
    found = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = NOT_INSTALLED
    return found


# The distributions of packager's [convert] extra that convert cannot start without (pyproject.toml).
CONVERT_EXTRA = ("torch", "transformers", "mnn", "llmexport")


def missing(names: tuple[str, ...] = CONVERT_EXTRA) -> tuple[str, ...]:
    """Which of `names` are not installed."""
    return tuple(name for name, version in installed(names).items() if version == NOT_INSTALLED)
