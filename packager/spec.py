"""The release spec (TOML): what only a person knows, checked against schemas/release.schema.json first."""

from __future__ import annotations

import datetime
import math
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

from . import resources
from .convert.presets import RuntimeOverrides
from .errors import SpecError, shorten


@dataclass(frozen=True)
class ConvertSettings:
    source: Path | None = None
    lora: Path | None = None
    quant_bits: int | None = None
    quant_block: int | None = None
    engine: str | None = None  # the oldest MNN the bundle must run on ("newest" or MAJOR.MINOR.PATCH)
    symmetric: bool | None = None
    algorithm: str | None = None  # plain | hqq
    lm_bits: int | None = None
    lm_block: int | None = None
    quant_sweep: Path | None = None  # the sweep's --json, shown on the card as the reason for the recipe


@dataclass(frozen=True)
class Release:
    repo_id: str
    title: str
    version: str
    license: str
    summary: str
    date: str | None = None
    publisher: str | None = None
    base_model_relation: str | None = None
    tags: tuple[str, ...] = ()
    signing_key: str | None = None  # EC private key (PEM), relative to the spec; PACKAGER_SIGNING_KEY wins
    signing_identity: str | None = None  # keyless (sigstore in CI): the identity the card tells users to trust
    signing_issuer: str | None = None


@dataclass(frozen=True)
class Model:
    base_model: str
    teacher: str | None = None
    parameters: str | None = None
    architecture: str | None = None


@dataclass(frozen=True)
class Training:
    method: str
    lora_r: int | None = None
    lora_alpha: float | None = None
    samples: int | None = None
    data: str | None = None
    loss_kl: float | None = None
    loss_ce: float | None = None
    temperature: float | None = None
    epochs: int | None = None
    batch_size: int | None = None
    grad_accum: int | None = None
    optimizer_steps: int | None = None
    final_kl: float | None = None
    acceptance_alpha: float | None = None
    hardware: str | None = None


@dataclass(frozen=True)
class Pairing:
    target: str
    uses: Literal["yes", "some chips", "no"]
    reason: str | None = None


@dataclass(frozen=True)
class Benchmark:
    device: str
    target: str
    ar_tok_s: float
    draft_tok_s: float
    draft_predict_length: int | None = None
    notes: str | None = None

    @property
    def uplift_percent(self) -> float:
        return (self.draft_tok_s / self.ar_tok_s - 1) * 100


@dataclass(frozen=True)
class CardText:
    runs_on: str
    limitations: tuple[str, ...]
    phone_class: str | None = None
    intended_use: str | None = None


@dataclass(frozen=True)
class Credit:
    name: str
    by: str
    license: str
    url: str | None = None
    role: str | None = None


@dataclass(frozen=True)
class ReleaseSpec:
    path: Path | None
    data: dict[str, Any]
    convert: ConvertSettings = field(default_factory=ConvertSettings)
    runtime: RuntimeOverrides = field(default_factory=RuntimeOverrides)
    release: Release | None = None
    model: Model | None = None
    training: Training | None = None
    pairing: tuple[Pairing, ...] = ()
    benchmarks: tuple[Benchmark, ...] = ()
    card: CardText | None = None
    credits: tuple[Credit, ...] = ()
    verify: dict[str, float] = field(default_factory=dict)  # thresholds
    verify_prompts: Path | None = None  # [verify] prompts: a prompts file instead of the built-in workload

    def need(self, table: str) -> Any:
        """A table the caller cannot do without; its absence fails with the table's name."""
        value = getattr(self, table)
        if value is None:
            raise SpecError(f"{self.path or 'the release spec'} has no [{table}] table, which this step needs")
        return value


def load(path: Path) -> ReleaseSpec:
    """Read and check a release spec; a wrong field fails with its dotted path."""
    try:
        data = parse(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpecError(f"release spec {path} does not exist", "pass the path of your release.toml") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"release spec {path} cannot be read ({shorten(str(exc))})") from None
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"release spec {path} is not valid TOML: {shorten(str(exc))}") from None
    except RecursionError:
        raise SpecError(f"release spec {path} is nested too deeply to be a release spec") from None
    check(data, str(path))
    return from_dict(data, path)


def parse(text: str) -> dict[str, Any]:
    """The spec's TOML as data, dates as YYYY-MM-DD text (as the schema and the card take them)."""
    return _dates_as_text(tomllib.loads(text))


def _dates_as_text(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _dates_as_text(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_dates_as_text(v) for v in node]
    return node.isoformat() if isinstance(node, (datetime.date, datetime.datetime)) else node


TODO = "TODO"  # `packager init` writes what only a person knows as "TODO: ..."; the schema refuses it


@dataclass(frozen=True)
class SpecProblem:
    path: tuple[str | int, ...]  # where in the spec, e.g. ("release", "title"); () for the top level
    message: str
    placeholder: bool = False  # a TODO that packager init wrote is still there

    @property
    def dotted(self) -> str:
        return ".".join(str(p) for p in self.path) or "(top level)"


def problems(data: dict[str, Any]) -> list[SpecProblem]:
    """Every schema violation and broken figure rule of a parsed spec, in the spec's order of paths."""
    validator = resources.validator("release")
    errors = sorted(validator.iter_errors(data), key=lambda e: (list(map(str, e.absolute_path)), e.message))
    found = [SpecProblem(tuple(e.absolute_path), _message(e), _placeholder(e)) for e in errors]
    todo = {p.path for p in found if p.placeholder}  # a TODO also fails the field's own rules: say it once
    found = [p for p in found if p.placeholder or p.path not in todo]
    if not any(p.path[:1] == ("training",) for p in found):  # the figure rules need well-typed figures
        found += _training_problems(data.get("training"))
    return found


def _placeholder(error: Any) -> bool:
    return isinstance(error.instance, str) and error.instance.startswith(TODO) and error.validator == "not"


def _message(error: Any) -> str:
    if _placeholder(error):
        return f"still the placeholder {shorten(repr(error.instance))}: fill in what only you know"
    return error.message


def check(data: dict[str, Any], where: str) -> None:
    found = problems(data)
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise SpecError(f"{where}: {found[0].dotted}: {found[0].message}{more}")


def _training_problems(training: dict[str, Any] | None) -> list[SpecProblem]:
    if not training:
        return []
    found = []
    parts = [training.get(k) for k in ("samples", "batch_size", "grad_accum", "epochs")]
    steps = training.get("optimizer_steps")
    if steps is not None and all(p is not None for p in parts):
        samples, batch, accum, epochs = parts
        expected = math.ceil(samples / (batch * accum)) * epochs
        if steps != expected:
            found.append(SpecProblem(("training", "optimizer_steps"), f"{steps} != ceil(samples / (batch_size x "
                                     f"grad_accum)) x epochs = {expected}"))
    if training.get("loss_kl") is not None and training.get("loss_ce") is not None:
        if abs(training["loss_kl"] + training["loss_ce"] - 1) > 1e-9:
            found.append(SpecProblem(("training", "loss_ce"), f"loss_kl + loss_ce must be 1, they add up to "
                                     f"{training['loss_kl'] + training['loss_ce']:g}"))
    return found


def _build(cls: type, data: dict[str, Any] | None) -> Any:
    if data is None:
        return None
    names = {f.name for f in fields(cls)}
    return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items() if k in names})


def _relative(base: Path | None, value: str | None) -> Path | None:
    if value is None:
        return None
    return (base.parent / value) if base is not None else Path(value)


def from_dict(data: dict[str, Any], path: Path | None = None) -> ReleaseSpec:
    convert = data.get("convert", {})
    runtime = data.get("runtime", {})
    verify = data.get("verify", {})
    return ReleaseSpec(
        path=path, data=data,
        convert=ConvertSettings(source=_relative(path, convert.get("source")), lora=_relative(path, convert.get("lora")),
                                quant_bits=convert.get("quant_bits"), quant_block=convert.get("quant_block"),
                                engine=convert.get("engine"), symmetric=convert.get("symmetric"),
                                algorithm=convert.get("algorithm"), lm_bits=convert.get("lm_bits"),
                                lm_block=convert.get("lm_block"),
                                quant_sweep=_relative(path, convert.get("quant_sweep"))),
        runtime=RuntimeOverrides(main=runtime.get("main", {}), draft=runtime.get("draft", {}),
                                 opencl=runtime.get("opencl", {}),
                                 compatible_targets=runtime.get("compatible_targets"),
                                 notes=runtime.get("notes")),
        release=_build(Release, data.get("release")), model=_build(Model, data.get("model")),
        training=_build(Training, data.get("training")),
        pairing=tuple(_build(Pairing, p) for p in data.get("pairing", [])),
        benchmarks=tuple(_build(Benchmark, b) for b in data.get("benchmarks", [])),
        card=_build(CardText, data.get("card")),
        credits=tuple(_build(Credit, c) for c in data.get("credits", [])),
        verify={k: v for k, v in verify.items() if k != "prompts"},
        verify_prompts=_relative(path, verify.get("prompts")))
