"""`release`: convert (or take a built bundle), validate, card, checksum, upload, verify, tag - stopping at
the first failure, with one summary of every stage."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from ..bundle.kinds import CARD
from ..errors import PackagerError, SpecError
from ..spec.model import ReleaseSpec
from ..infra.progress import Progress

if TYPE_CHECKING:
    from ..hub.publish import UploadRequest, UploadResult



@dataclass(frozen=True)
class Stage:
    name: str
    ok: bool
    seconds: float
    detail: str


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


def _default_out(spec: ReleaseSpec) -> Path:
    release = spec.need("release")
    base = spec.path.parent if spec.path else Path.cwd()
    return base / "dist" / f"{release.repo_id.split('/')[-1]}-{release.version}"


def run(request: ReleaseRequest, progress: Progress = lambda _: None) -> ReleaseResult:
    spec = request.spec
    release = spec.need("release")
    spec.need("model")
    spec.need("card")
    stages: list[Stage] = []
    state: dict[str, Any] = {"bundle": request.bundle, "signing": _signing_plan(spec)}  # a bad key: refused now
    _check_source(spec)  # converted or verified against: a source that is not there is refused before any work
    if spec.verify_prompts is not None and spec.convert.source is not None:
        from ..measure.verify import prompts_from_file

        state["prompts"] = prompts_from_file(spec.verify_prompts)  # a bad file is refused before any work
    # A missing, foreign or lossy report, or (--bundle) one of other files, is refused before any work; a bundle
    # this release converts is compared with the reports' digests at the card stage, still before anything is sent.
    built = request.bundle if request.bundle is not None and request.bundle.is_dir() else None  # else: validate says
    if spec.need("card").pair_report is not None:
        from ..card.render import pairing_from_report

        pairing_from_report(spec.need("card").pair_report, built)
    for report in spec.need("card").speculate_reports:
        from ..errors import CardError
        from ..card.measurements import speculation_from_report

        speculation_from_report(report, built, CardError)

    def stage(name: str, action: Callable[[], str]) -> None:
        progress(f"release: {name}")
        start = time.monotonic()
        try:
            detail = action()
        except PackagerError as exc:
            stages.append(Stage(name, False, time.monotonic() - start, exc.one_line()))
            raise
        stages.append(Stage(name, True, time.monotonic() - start, detail))

    workspace = ExitStack()  # a dry run's copy of --bundle, removed when the release ends, however it ends

    def card() -> str:
        if not (request.dry_run and request.bundle is not None):
            return _card(spec, state["bundle"], state.get("parity"), state["signing"])
        # The first stage that writes: the user's folder (and the signature they made) stay as they are. The
        # card still states the provenance beside the user's folder.
        from ..convert.pipeline import provenance_path

        state["bundle"] = workspace.enter_context(_dry_run_copy(request.bundle))
        detail = _card(spec, state["bundle"], state.get("parity"), state["signing"],
                       provenance_path(request.bundle.absolute()))
        return f"{detail} in a copy (a dry run writes nothing in --bundle)"

    try:
        stage("convert", lambda: _convert(request, state, progress))
        stage("validate", lambda: _validate(state["bundle"]))
        if spec.convert.source is not None:
            stage("verify", lambda: _verify(spec, state, progress))
        stage("card", card)
        stage("checksum", lambda: _checksum(state["bundle"]))
        if state["signing"] is not None:
            stage("sign", lambda: _sign(state["signing"], state["bundle"]))
        if request.dry_run:
            stage("upload plan (dry run)", lambda: _plan(request, state, progress))
        else:
            stage("upload, verify, tag", lambda: _upload(request, state, progress))
        if release.collection is not None:
            stage("collection (dry run)" if request.dry_run else "collection",
                  lambda: _collection(state, request.dry_run))
        error = None
    except PackagerError as exc:
        error = exc
    finally:
        workspace.close()
    return ReleaseResult(tuple(stages), request.bundle if request.dry_run and request.bundle else state["bundle"],
                         release.repo_id, state.get("commit"), state.get("tag"), error=error,
                         dry_run=request.dry_run, upload=state.get("upload"))


@contextmanager
def _dry_run_copy(bundle: Path) -> Iterator[Path]:
    """A validated bundle's files in a temporary folder, for a dry run's card, manifest and signature. The large
    files are hard links where the folder is on the same file system (no stage writes into a file: the card,
    manifest and signature are new files renamed over the old), else copies; the small ones a stage replaces are
    copies."""
    from ..bundle.kinds import RELEASE_EXTRAS
    from ..errors import from_os_error

    with tempfile.TemporaryDirectory(prefix="packager-dry-run-") as work:
        copy = Path(work) / bundle.name
        try:
            copy.mkdir()
            for source in sorted(bundle.iterdir()):  # validated: regular files only
                if source.name in RELEASE_EXTRAS:
                    shutil.copyfile(source, copy / source.name)
                    continue
                try:
                    os.link(source, copy / source.name, follow_symlinks=False)
                except OSError:  # another file system, or one without hard links
                    shutil.copyfile(source, copy / source.name)
        except OSError as exc:
            raise from_os_error(exc, "copying the bundle for the dry run") from None
        yield copy


def _check_source(spec: ReleaseSpec) -> None:
    """[convert] source, when set, is a folder (the release converts it, or verifies a --bundle against it)."""
    from ..errors import CheckpointNotFound, shorten

    source = spec.convert.source
    if source is None or source.is_dir():
        return
    problem = "is not a folder" if source.exists() else "does not exist"
    raise CheckpointNotFound(f"the release spec's [convert] source {shorten(str(source))} {problem}",
                             "set [convert] source to the checkpoint folder (relative to the spec), or remove it "
                             "to release a --bundle without verifying it")


def _convert(request: ReleaseRequest, state: dict[str, Any], progress: Progress) -> str:
    if request.bundle is not None:
        return f"using the built bundle {request.bundle}"
    from ..convert.pipeline import ConvertRequest, convert

    settings = request.spec.convert
    if settings.source is None:
        raise SpecError("the release spec has no [convert] source and no --bundle was given",
                        "set [convert] source = \"path/to/checkpoint\" or pass --bundle")
    out = request.out or _default_out(request.spec)
    result = convert(ConvertRequest(checkpoint=settings.source, out=out, adapter=settings.lora, spec=request.spec,
                                    force=True), progress=progress)
    state["bundle"] = result.out
    return f"{result.out} ({result.recipe.name}, MNN >= {result.engine.text})"


def _validate(bundle: Path) -> str:
    from ..errors import BundleError
    from ..validate import validate

    report = validate(bundle)
    if report.errors:
        first = report.errors[0]
        raise BundleError(f"validation found {len(report.errors)} errors, first {first.location}: {first.message}",
                          "run packager validate for all of them")
    return f"ok ({len(report.warnings)} warnings)"


def _verify(spec: ReleaseSpec, state: dict[str, Any], progress: Progress) -> str:
    from ..measure.verify import Thresholds, verify
    from ..errors import VerifyFailed

    assert spec.convert.source is not None
    report = verify(state["bundle"], spec.convert.source, prompts=state.get("prompts"),
                    thresholds=Thresholds.from_spec(spec.verify), progress=progress)
    decisive = "n/a" if report.top1_decisive is None else f"{report.top1_decisive:.3f}"
    figures = (f"tokenizer {report.tokenizer_matched}/{report.tokenizer_total}, KL {report.mean_kl:.4f}, "
               f"decisive top-1 {decisive}, top-1 {report.top1_agreement:.3f}, greedy {report.greedy_agreement:.3f}")
    if not report.ok:
        raise VerifyFailed(f"verify failed ({'; '.join(report.failures)}); measured {figures}")
    state["parity"] = {"prompts": report.prompts, "positions": report.positions, "min_cosine": report.min_cosine,
                       "mean_cosine": report.mean_cosine, "top1_agreement": report.top1_agreement,
                       "greedy_agreement": report.greedy_agreement, "mean_kl": report.mean_kl,
                       "decisive_positions": report.decisive_positions, "top1_decisive": report.top1_decisive}
    return figures


def _signing_plan(spec: ReleaseSpec) -> Any:
    from .signing import plan

    return plan(spec)


def _sign(signing: Any, bundle: Path) -> str:
    from .signing import sign_stage

    return sign_stage(signing, bundle)


def _card(spec: ReleaseSpec, bundle: Path, parity: dict[str, Any] | None = None, signing: Any = None,
          provenance: Path | None = None) -> str:
    from ..card.render import gather_measurements, render
    from .signing import with_card_facts
    from ..bundle.staging import write_atomic

    measurements = with_card_facts(spec, gather_measurements(bundle, provenance=provenance, parity=parity,
                                                             pair_report=spec.need("card").pair_report,
                                                             speculate_reports=spec.need("card").speculate_reports),
                                   signing)
    card = render(bundle, spec, measurements=measurements)
    write_atomic(bundle / CARD, card.text.encode("utf-8"))
    return f"README.md ({len(card.text):,} characters)"


def _checksum(bundle: Path) -> str:
    from ..bundle.checksum import write_manifest

    manifest = write_manifest(bundle)
    return f"{manifest.path.name} ({len(manifest.digests)} files)"


def _upload_request(request: ReleaseRequest, bundle: Path, check: Callable[[str], None] | None = None
                    ) -> UploadRequest:
    from .. import __version__
    from ..hub.collection import CollectionRequest
    from ..hub.publish import UploadRequest

    release = request.spec.need("release")
    collection = (CollectionRequest(release.collection, release.owner, release.collection_note)
                  if release.collection else None)
    return UploadRequest(bundle=bundle, repo_id=release.repo_id, endpoint=request.endpoint, tag=release.version,
                         private=request.private, dry_run=request.dry_run, token=request.token,
                         message=f"Release {release.version}: {release.title} (packager {__version__})",
                         collection=collection, gated=release.gated, check=check)


def _upload(request: ReleaseRequest, state: dict[str, Any], progress: Progress) -> str:
    from ..errors import CollectionNotUpdated
    from ..hub.plan import SENT
    from ..hub.publish import upload

    release = request.spec.need("release")
    signed: list[str] = []

    def check_signature(commit: str) -> None:  # before the tag: a release whose signature fails is not tagged
        from .signing import verify_uploaded

        progress(f"verifying model.sig against {release.repo_id}@{commit[:12]}")
        signed.append(verify_uploaded(state["signing"], request.endpoint, request.token, release.repo_id, commit))

    check = check_signature if state["signing"] is not None else None
    try:
        result = upload(_upload_request(request, state["bundle"], check), progress=progress)
    except CollectionNotUpdated as exc:
        if exc.upload is None:  # refused before anything was sent
            raise
        # The commit is verified and tagged: this stage passed, the collection stage did not.
        result, state["collection"] = exc.upload, exc
    else:
        state["collection"] = result.collection
    state["commit"], state["tag"], state["upload"] = result.commit, result.tag, result
    sent = sum(r.action in SENT for r in result.plan)
    what = f"committed {sent} file(s)" if result.committed else "unchanged, no commit"
    if result.repaired:
        what += f", repaired {', '.join(result.repaired)}"
    what += "".join(f"; {line}" for line in signed)
    gated = f", gated ({result.gated})" if result.gated else ""
    return f"{what}; {release.repo_id}@{(result.commit or '')[:12]} verified, tagged {release.version}{gated}"


def _plan(request: ReleaseRequest, state: dict[str, Any], progress: Progress) -> str:
    from ..hub.publish import upload

    release = request.spec.need("release")
    result = upload(_upload_request(request, state["bundle"]), progress=progress)
    state["upload"], state["collection"] = result, result.collection
    changes = sum(r.action != "unchanged" for r in result.plan)
    gated = f", gated ({result.gated}) once released" if result.gated else ""
    return (f"{changes} of {len(result.plan)} file(s) would change, {result.bytes_to_send:,} bytes sent, tag "
            f"{release.version}{gated}; nothing changed on {result.endpoint}")


def _collection(state: dict[str, Any], dry_run: bool) -> str:
    """What the upload did to the collection (a dry run: would do); a failure after its commit is raised here."""
    from ..errors import CollectionNotUpdated
    from ..hub.collection import describe

    found = state["collection"]
    if isinstance(found, CollectionNotUpdated):
        raise found
    return describe(found, dry_run) + ("; nothing changed on the Hub" if dry_run else "")
