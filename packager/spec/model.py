"""The release spec (TOML): what only a person knows, checked against schemas/release.schema.json first."""

from __future__ import annotations

import datetime
import os
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal

from ..bundle.presets import RuntimeOverrides
from ..errors import SpecError, shorten
from ..infra.userfile import SPEC_BYTES, read_text
from .rules import problems


@dataclass(frozen=True)
class ConvertSettings:
    checkpoint: Path | None = None  # [convert] checkpoint, or its old name source
    lora: Path | None = None
    quant_bits: int | None = None
    quant_block: int | None = None
    engine: str | None = None  # the oldest MNN the bundle must run on ("newest" or MAJOR.MINOR.PATCH)
    symmetric: bool | None = None
    algorithm: str | None = None  # plain | hqq
    lm_bits: int | None = None
    lm_block: int | None = None
    quant_sweep: Path | None = None  # the sweep's --json, shown on the card as the reason for the recipe
    kind: str | None = None  # draft | target | target+eagle | target+dflash
    eagle: Path | None = None  # an EAGLE-3 head folder, exported with the target
    dflash: Path | None = None  # a DFlash draft folder (z-lab layout), exported with the target
    lookahead: bool | Path | None = None  # true: MNN's lookahead over the prompt; a path: with that corpus


@dataclass(frozen=True)
class Release:
    repo_id: str
    title: str
    version: str
    summary: str
    license: str | None = None  # None: the bundle's family's (packager.card.family)
    date: str | None = None
    publisher: str | None = None
    base_model_relation: str | None = None
    tags: tuple[str, ...] = ()
    signing_key: str | None = None  # EC private key (PEM), relative to the spec; PACKAGER_SIGNING_KEY wins
    signing_identity: str | None = None  # keyless (sigstore in CI): the identity the card tells users to trust
    signing_issuer: str | None = None
    collection: str | None = None  # a Hub collection title, in collection_owner's (default: repo_id's namespace)
    collection_owner: str | None = None
    collection_note: str | None = None
    gated: Literal["auto", "manual"] | None = None

    @property
    def owner(self) -> str:
        """Whose collection it is: collection_owner, else the repo's namespace."""
        return self.collection_owner or self.repo_id.split("/")[0]


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
class App:
    name: str
    download_name: str  # what the app calls this download
    platforms: tuple[str, ...]  # whose app downloads it
    not_downloaded_on: tuple[str, ...] = ()


@dataclass(frozen=True)
class CardText:
    runs_on: str
    limitations: tuple[str, ...]
    phone_class: str | None = None
    intended_use: str | None = None
    usage: tuple[str, ...] = ()
    links: tuple[tuple[str, str], ...] = ()  # (name, http(s) URL), in the spec's order
    app: App | None = None
    pair_report: Path | None = None  # a `pair --json` report, relative to the spec
    verify_report: Path | None = None  # a passing `verify --json` report of the bundle, relative to the spec
    pair_target: str | None = None  # the Hub id of the target pair measured (the card never names a local folder)
    speculate_reports: tuple[Path, ...] = ()  # `speculate --json` reports of the bundle, relative to the spec


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
    data = read(path)
    if "matrix" in data:
        raise SpecError(
            f"release spec {path} is a matrix ([matrix]): it is many bundles, not one",
            "packager plan SPEC lists its jobs; packager release SPEC releases them all",
        )
    check(data, str(path))
    return from_dict(data, path)


def read(path: Path) -> dict[str, Any]:
    """A spec's TOML as data, unchecked; a missing, unreadable or broken file is one SpecError line."""
    if not os.path.lexists(path):
        raise SpecError(f"release spec {shorten(str(path), 120)} does not exist", "pass the path of your release.toml")
    text = read_text(path, SPEC_BYTES, what="release spec", unreadable=SpecError)
    try:
        data = parse(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"release spec {path} is not valid TOML: {shorten(str(exc))}") from None
    except RecursionError:
        raise SpecError(f"release spec {path} is nested too deeply to be a release spec") from None
    return data


# Spec keys renamed (issue 34): (table, old key) -> new key. The old key is still read, with a deprecation line.
RENAMED_KEYS = {("convert", "source"): "checkpoint"}


def deprecated_keys(data: dict[str, Any]) -> list[tuple[str, str]]:
    """("[convert] source", "[convert] checkpoint") for each old key the spec still uses."""
    return [
        (f"[{table}] {old}", f"[{table}] {new}")
        for (table, old), new in RENAMED_KEYS.items()
        if isinstance(data.get(table), dict) and old in data[table]
    ]


def parse(text: str) -> dict[str, Any]:
    """The spec's TOML as data, dates as YYYY-MM-DD text (as the schema and the card take them)."""
    return _dates_as_text(tomllib.loads(text))


def _dates_as_text(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _dates_as_text(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_dates_as_text(v) for v in node]
    return node.isoformat() if isinstance(node, (datetime.date, datetime.datetime)) else node


def check(data: dict[str, Any], where: str) -> None:
    found = problems(data)
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise SpecError(f"{where}: {found[0].dotted}: {found[0].message}{more}")


def _build(cls: type, data: dict[str, Any] | None) -> Any:
    if data is None:
        return None
    names = {f.name for f in fields(cls)}
    return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items() if k in names})


def _relative(base: Path | None, value: str | None) -> Path | None:
    if value is None:
        return None
    return (base.parent / value) if base is not None else Path(value)


def _lookahead(base: Path | None, value: bool | str | None) -> bool | Path | None:
    return _relative(base, value) if isinstance(value, str) else value


def _card(data: dict[str, Any] | None, path: Path | None) -> CardText | None:
    if data is None:
        return None
    plain = {
        k: v for k, v in data.items() if k not in ("links", "app", "pair_report", "verify_report", "speculate_reports")
    }
    card: CardText = _build(CardText, plain)
    app = _build(App, data.get("app"))
    links = tuple((name, url) for name, url in data.get("links", {}).items())
    reports = tuple(
        (path.parent / item) if path is not None else Path(item) for item in data.get("speculate_reports", ())
    )
    return replace(
        card,
        app=app,
        links=links,
        pair_report=_relative(path, data.get("pair_report")),
        verify_report=_relative(path, data.get("verify_report")),
        speculate_reports=reports,
    )


def from_dict(data: dict[str, Any], path: Path | None = None) -> ReleaseSpec:
    convert = data.get("convert", {})
    runtime = data.get("runtime", {})
    verify = data.get("verify", {})
    return ReleaseSpec(
        path=path,
        data=data,
        convert=ConvertSettings(
            checkpoint=_relative(path, convert.get("checkpoint", convert.get("source"))),
            lora=_relative(path, convert.get("lora")),
            quant_bits=convert.get("quant_bits"),
            quant_block=convert.get("quant_block"),
            engine=convert.get("engine"),
            symmetric=convert.get("symmetric"),
            algorithm=convert.get("algorithm"),
            lm_bits=convert.get("lm_bits"),
            lm_block=convert.get("lm_block"),
            quant_sweep=_relative(path, convert.get("quant_sweep")),
            kind=convert.get("kind"),
            eagle=_relative(path, convert.get("eagle")),
            dflash=_relative(path, convert.get("dflash")),
            lookahead=_lookahead(path, convert.get("lookahead")),
        ),
        runtime=RuntimeOverrides(
            main=runtime.get("main", {}),
            draft=runtime.get("draft", {}),
            opencl=runtime.get("opencl", {}),
            compatible_targets=runtime.get("compatible_targets"),
            notes=runtime.get("notes"),
        ),
        release=_build(Release, data.get("release")),
        model=_build(Model, data.get("model")),
        training=_build(Training, data.get("training")),
        pairing=tuple(_build(Pairing, p) for p in data.get("pairing", [])),
        benchmarks=tuple(_build(Benchmark, b) for b in data.get("benchmarks", [])),
        card=_card(data.get("card"), path),
        credits=tuple(_build(Credit, c) for c in data.get("credits", [])),
        verify={k: v for k, v in verify.items() if k != "prompts"},
        verify_prompts=_relative(path, verify.get("prompts")),
    )
