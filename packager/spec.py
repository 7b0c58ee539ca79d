"""The release spec (TOML): what only a person knows, checked against schemas/release.schema.json first."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import resources
from .convert.presets import RuntimeOverrides
from .errors import SpecError


@dataclass(frozen=True)
class ConvertSettings:
    quant_bits: int | None = None
    quant_block: int | None = None


@dataclass(frozen=True)
class ReleaseSpec:
    path: Path | None
    data: dict[str, Any]
    convert: ConvertSettings = field(default_factory=ConvertSettings)
    runtime: RuntimeOverrides = field(default_factory=RuntimeOverrides)


def load(path: Path) -> ReleaseSpec:
    """Read and check a release spec; a wrong field fails with its dotted path."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpecError(f"release spec {path} does not exist", "pass the path of your release.toml") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"release spec {path} cannot be read ({exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"release spec {path} is not valid TOML: {exc}") from None
    check(data, str(path))
    return from_dict(data, path)


def check(data: dict[str, Any], where: str) -> None:
    validator = resources.validator("release")
    errors = sorted(validator.iter_errors(data), key=lambda e: (list(e.absolute_path), e.message))
    if errors:
        first = errors[0]
        location = ".".join(str(p) for p in first.absolute_path) or "(top level)"
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise SpecError(f"{where}: {location}: {first.message}{more}")


def from_dict(data: dict[str, Any], path: Path | None = None) -> ReleaseSpec:
    convert = data.get("convert", {})
    runtime = data.get("runtime", {})
    return ReleaseSpec(
        path=path, data=data,
        convert=ConvertSettings(quant_bits=convert.get("quant_bits"), quant_block=convert.get("quant_block")),
        runtime=RuntimeOverrides(main=runtime.get("main", {}), draft=runtime.get("draft", {}),
                                 opencl=runtime.get("opencl", {}),
                                 compatible_targets=runtime.get("compatible_targets"),
                                 notes=runtime.get("notes")))
