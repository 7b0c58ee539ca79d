"""A release's stages and their typed results: what each stage hands the next, and the timed line it leaves in the
summary (the first failure stops the release with its line kept)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import PackagerError
from ..infra.progress import Progress
from ..spec.model import ReleaseSpec
from .signing import SigningPlan

if TYPE_CHECKING:
    from ..hub.publish import UploadResult


@dataclass(frozen=True)
class Stage:
    name: str
    ok: bool
    seconds: float
    detail: str
    warnings: tuple[str, ...] = ()  # what the stage warned of (convert: a position limit, an adapter's base, ...)


@dataclass(frozen=True)
class ReleaseResult:
    stages: tuple[Stage, ...]
    bundle: Path | None
    repo_id: str
    commit: str | None = None
    tag: str | None = None
    error: PackagerError | None = field(default=None, compare=False)
    dry_run: bool = False
    upload: UploadResult | None = None  # the upload's (dry run: the plan's) result, once that stage ran
    parity: dict[str, Any] | None = field(default=None, compare=False)  # the verify stage's figures, if it ran

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class ReleaseRequest:
    spec: ReleaseSpec
    bundle: Path | None = None
    out: Path | None = None
    endpoint: str | None = None
    private: bool = False
    token: str | None = field(default=None, repr=False)  # else HF_TOKEN or the huggingface login
    dry_run: bool = False  # every stage but the upload, which only plans: nothing changes on the Hub


@dataclass(frozen=True)
class Prepared:
    """What a release checks before any work: who signs, the verify prompts; the reports are checked, not kept."""

    signing: SigningPlan | None
    prompts: tuple[str, ...] | None


@dataclass(frozen=True)
class Done:
    """A stage that leaves nothing for the next one but its line in the summary."""

    detail: str
    warnings: tuple[str, ...] = ()


# What release says, in its summary and on the card, of a --bundle it has no source to verify against.
NOT_VERIFIED = (
    "not verified against its source: the release spec has no [convert] checkpoint to verify --bundle against"
)


@dataclass(frozen=True)
class Built:
    bundle: Path
    detail: str
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Verified:
    parity: dict[str, Any]  # the figures the card states
    detail: str


@dataclass(frozen=True)
class Published:
    """The upload (a dry run: its plan), and what it did to the collection: a result, or the failure after the
    verified commit (raised by the collection stage)."""

    upload: UploadResult
    collection: Any
    detail: str


Outcome = TypeVar("Outcome", Done, Built, Verified, Published)


class StageRunner:
    """Runs stages in order, each timed and said; the first failure stops the release with its line kept."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.done: list[Stage] = []

    def run(self, name: str, action: Callable[[], Outcome]) -> Outcome:
        self.progress(f"release: {name}")
        start = time.monotonic()
        try:
            outcome = action()
        except PackagerError as exc:
            self.done.append(Stage(name, False, time.monotonic() - start, exc.one_line()))
            raise
        warnings = outcome.warnings if isinstance(outcome, (Built, Done)) else ()
        self.done.append(Stage(name, True, time.monotonic() - start, outcome.detail, warnings))
        return outcome
