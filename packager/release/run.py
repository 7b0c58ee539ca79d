"""`release`: convert (or take a built bundle), validate, card, checksum, upload, verify, tag - stopping at
the first failure, with one summary of every stage."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..bundle.kinds import CARD, SIGNATURE
from ..convert.provenance import provenance_path
from ..errors import CardError, PackagerError, SpecError, shorten
from ..infra.progress import Progress
from ..spec.model import ReleaseSpec
from .signing import SigningPlan, sign_stage
from .signing import plan as plan_signing
from .stages import (
    NOT_VERIFIED,
    Built,
    Done,
    Prepared,
    Published,
    ReleaseRequest,
    ReleaseResult,
    StageRunner,
    Verified,
)

if TYPE_CHECKING:
    from ..hub.publish import UploadRequest


def _default_out(spec: ReleaseSpec) -> Path:
    release = spec.need("release")
    base = spec.path.parent if spec.path else Path.cwd()
    return base / "dist" / f"{release.repo_id.split('/')[-1]}-{release.version}"


def run(request: ReleaseRequest, progress: Progress = lambda _: None) -> ReleaseResult:
    spec = request.spec
    release = spec.need("release")
    prepared = _prepare(request)
    stages = StageRunner(progress)
    built, published, error = request.bundle, None, None
    parity: dict[str, Any] | None = None
    with ExitStack() as workspace:  # a dry run's copy of --bundle, removed when the release ends, however it ends
        try:
            bundle = built = stages.run("convert", lambda: _convert(request, progress)).bundle
            stages.run("validate", lambda: _validate(bundle))
            if spec.need("card").verify_report is not None:
                parity = stages.run("verify", lambda: _reuse_verify(spec, bundle)).parity
            elif spec.convert.checkpoint is not None:
                parity = stages.run("verify", lambda: _verify(spec, bundle, prepared.prompts, progress)).parity
            else:
                stages.run("verify", lambda: Done(NOT_VERIFIED, (NOT_VERIFIED,)))
            if request.dry_run and request.bundle is not None:
                # The card is the first stage that writes: a dry run of --bundle writes into a copy, so the user's
                # folder (and a signature they made) stay as they are; the card still states the provenance
                # beside the user's folder.
                users = request.bundle
                bundle = stages.run(
                    "card", lambda: _card_in_copy(spec, users, workspace, parity, prepared.signing)
                ).bundle
            else:
                stages.run("card", lambda: _card(spec, bundle, parity, prepared.signing))
            stages.run("checksum", lambda: _checksum(bundle))
            if prepared.signing is not None:
                signing = prepared.signing
                stages.run("sign", lambda: Done(sign_stage(signing, bundle)))
            if request.dry_run:
                published = stages.run("upload plan (dry run)", lambda: _plan(request, bundle, progress))
            else:
                published = stages.run(
                    "upload, verify, tag", lambda: _upload(request, bundle, prepared.signing, progress)
                )
            if release.collection is not None:
                found = published.collection
                stages.run(
                    "collection (dry run)" if request.dry_run else "collection",
                    lambda: _collection(found, request.dry_run),
                )
        except PackagerError as exc:
            error = exc
    upload = published.upload if published is not None else None
    return ReleaseResult(
        tuple(stages.done),
        built,
        release.repo_id,
        upload.commit if upload and not request.dry_run else None,
        upload.tag if upload and not request.dry_run else None,
        error=error,
        dry_run=request.dry_run,
        upload=upload,
        parity=parity,
    )


def _prepare(request: ReleaseRequest) -> Prepared:
    """Everything a release can refuse before any work: a bad key, a missing source, a bad prompts file, a
    missing, foreign or lossy report, or (--bundle) a report of other files. A bundle this release converts is
    compared with the reports' digests at the card stage, still before anything is sent."""
    spec = request.spec
    spec.need("model")
    card = spec.need("card")
    signing = plan_signing(spec)
    _check_source(spec)
    prompts = None
    if spec.verify_prompts is not None and spec.convert.checkpoint is not None:
        from ..measure.workload import spec_prompts

        prompts = spec_prompts(spec)
    built = request.bundle if request.bundle is not None and request.bundle.is_dir() else None  # else: validate says
    if built is not None and signing is None and (built / SIGNATURE).is_file():
        from ..trust.signature import check_current

        check_current(built)  # a model.sig already stale fails the upload: said now, not after the verify
    if card.pair_report is not None:
        from ..card.measurements import pairing_from_report

        pairing_from_report(card.pair_report, built)
    if card.verify_report is not None:  # a report of other files, or a failed one: said before any work
        from ..card.measurements import parity_from_report

        parity_from_report(card.verify_report, CardError, built)
    for report in card.speculate_reports:
        from ..card.measurements import speculation_from_report

        speculation_from_report(report, built, CardError)
    return Prepared(signing, prompts)


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
    """[convert] checkpoint, when set, is a folder (the release converts it, or verifies a --bundle against it)."""
    from ..errors import CheckpointNotFound

    source = spec.convert.checkpoint
    if source is None or source.is_dir():
        return
    problem = "is not a folder" if source.exists() else "does not exist"
    raise CheckpointNotFound(
        f"the release spec's [convert] checkpoint {shorten(str(source))} {problem}",
        "set [convert] checkpoint to the checkpoint folder (relative to the spec), or remove it "
        "to release a --bundle without verifying it",
    )


def _convert(request: ReleaseRequest, progress: Progress) -> Built:
    if request.bundle is not None:
        return Built(request.bundle, f"using the built bundle {request.bundle}")
    from ..convert.pipeline import ConvertRequest, convert

    settings = request.spec.convert
    if settings.checkpoint is None:
        raise SpecError(
            "the release spec has no [convert] checkpoint and no --bundle was given",
            'set [convert] checkpoint = "path/to/checkpoint" or pass --bundle',
        )
    out = request.out or _default_out(request.spec)
    result = convert(
        ConvertRequest(checkpoint=settings.checkpoint, out=out, adapter=settings.lora, spec=request.spec, force=True),
        progress=progress,
    )
    return Built(result.out, f"{result.out} ({result.recipe.name}, MNN >= {result.engine.text})", result.warnings)


def _validate(bundle: Path) -> Done:
    from ..errors import BundleError
    from ..validate import validate

    report = validate(bundle)
    if report.subset is not None:
        raise BundleError(
            f"{bundle} holds only the files an app runs (as packager pull takes them), not the whole bundle",
            "release the folder packager convert wrote",
        )
    if report.errors:
        first = report.errors[0]
        raise BundleError(
            f"validation found {len(report.errors)} errors, first {first.location}: {first.message}",
            "run packager validate for all of them",
        )
    return Done(f"ok ({len(report.warnings)} warnings)")


def _verify(spec: ReleaseSpec, bundle: Path, prompts: tuple[str, ...] | None, progress: Progress) -> Verified:
    from ..errors import VerifyFailed
    from ..measure.verify import Thresholds, verify

    assert spec.convert.checkpoint is not None
    report = verify(
        bundle,
        spec.convert.checkpoint,
        prompts=prompts,
        thresholds=Thresholds.from_spec(spec.verify),
        progress=progress,
    )
    decisive = "n/a" if report.top1_decisive is None else f"{report.top1_decisive:.3f}"
    figures = (
        f"tokenizer {report.tokenizer_matched}/{report.tokenizer_total}, KL {report.mean_kl:.4f}, "
        f"decisive top-1 {decisive}, top-1 {report.top1_agreement:.3f}, greedy {report.greedy_agreement:.3f}"
    )
    if not report.ok:
        raise VerifyFailed(f"verify failed ({'; '.join(report.failures)}); measured {figures}")
    parity = {
        "prompts": report.prompts,
        "positions": report.positions,
        "min_cosine": report.min_cosine,
        "mean_cosine": report.mean_cosine,
        "top1_agreement": report.top1_agreement,
        "greedy_agreement": report.greedy_agreement,
        "mean_kl": report.mean_kl,
        "decisive_positions": report.decisive_positions,
        "top1_decisive": report.top1_decisive,
    }
    return Verified(parity, figures)


def _card_in_copy(
    spec: ReleaseSpec, users: Path, workspace: ExitStack, parity: dict[str, Any] | None, signing: SigningPlan | None
) -> Built:
    copy = workspace.enter_context(_dry_run_copy(users))
    record = provenance_path(users.absolute())  # the copy has another name: the record beside --bundle, if any
    done = _card(spec, copy, parity, signing, record if os.path.exists(record) else None)
    return Built(copy, f"{done.detail} in a copy (a dry run writes nothing in --bundle)")


def _reuse_verify(spec: ReleaseSpec, bundle: Path) -> Verified:
    """[card] verify_report instead of verifying again: a passing report of these very files (their digests)."""
    from ..card.measurements import parity_from_report

    report = spec.need("card").verify_report
    assert report is not None
    parity = parity_from_report(report, CardError, bundle)
    return Verified(parity, f"reused {shorten(str(report))} (a passing verify of these very files)")


def _card(
    spec: ReleaseSpec,
    bundle: Path,
    parity: dict[str, Any] | None,
    signing: SigningPlan | None,
    provenance: Path | None = None,
) -> Done:
    from ..bundle.staging import write_atomic
    from ..card.family import ship_license
    from ..card.measurements import gather_measurements
    from ..card.render import render
    from .signing import with_card_facts

    missing_license = ship_license(bundle, spec)
    if missing_license:  # published without it, the release would break the license it is under
        raise CardError(missing_license, "then release again")
    measurements = with_card_facts(
        spec,
        gather_measurements(
            bundle,
            provenance=provenance,
            parity=parity,
            pair_report=spec.need("card").pair_report,
            speculate_reports=spec.need("card").speculate_reports,
        ),
        signing,
    )
    card = render(bundle, spec, measurements=measurements)
    write_atomic(bundle / CARD, card.text.encode("utf-8"))
    return Done(f"{CARD} ({len(card.text):,} characters)")


def _checksum(bundle: Path) -> Done:
    from ..bundle.checksum import write_manifest

    manifest = write_manifest(bundle)
    return Done(f"{manifest.path.name} ({len(manifest.digests)} files)")


def _upload_request(request: ReleaseRequest, bundle: Path, check: Callable[[str], None] | None = None) -> UploadRequest:
    from .. import __version__
    from ..hub.collection import CollectionRequest
    from ..hub.publish import UploadRequest

    release = request.spec.need("release")
    collection = (
        CollectionRequest(release.collection, release.owner, release.collection_note) if release.collection else None
    )
    return UploadRequest(
        bundle=bundle,
        repo_id=release.repo_id,
        endpoint=request.endpoint,
        tag=release.version,
        private=request.private,
        dry_run=request.dry_run,
        token=request.token,
        message=f"Release {release.version}: {release.title} (packager {__version__})",
        collection=collection,
        gated=release.gated,
        check=check,
    )


def _upload(request: ReleaseRequest, bundle: Path, signing: SigningPlan | None, progress: Progress) -> Published:
    from ..errors import CollectionNotUpdated
    from ..hub.plan import SENT
    from ..hub.publish import upload

    release = request.spec.need("release")
    signed: list[str] = []

    def check_signature(commit: str) -> None:  # before the tag: a release whose signature fails is not tagged
        from .signing import verify_uploaded

        progress(f"verifying model.sig against {release.repo_id}@{commit[:12]}")
        assert signing is not None
        signed.append(verify_uploaded(signing, request.endpoint, request.token, release.repo_id, commit))

    check = check_signature if signing is not None else None
    collection: Any
    try:
        result = upload(_upload_request(request, bundle, check), progress=progress)
        collection = result.collection
    except CollectionNotUpdated as exc:
        if exc.upload is None:  # refused before anything was sent
            raise
        # The commit is verified and tagged: this stage passed, the collection stage did not.
        result, collection = exc.upload, exc
    sent = sum(r.action in SENT for r in result.plan)
    what = f"committed {sent} file(s)" if result.committed else "unchanged, no commit"
    if result.repaired:
        what += f", repaired {', '.join(result.repaired)}"
    what += "".join(f"; {line}" for line in signed)
    gated = f", gated ({result.gated})" if result.gated else ""
    return Published(
        result,
        collection,
        f"{what}; {release.repo_id}@{(result.commit or '')[:12]} verified, tagged {release.version}{gated}",
    )


def _plan(request: ReleaseRequest, bundle: Path, progress: Progress) -> Published:
    from ..hub.publish import upload

    release = request.spec.need("release")
    result = upload(_upload_request(request, bundle), progress=progress)
    changes = sum(r.action != "unchanged" for r in result.plan)
    gated = f", gated ({result.gated}) once released" if result.gated else ""
    return Published(
        result,
        result.collection,
        f"{changes} of {len(result.plan)} file(s) would change, "
        f"{result.bytes_to_send:,} bytes sent, tag {release.version}{gated}; nothing changed on "
        f"{result.endpoint}",
    )


def _collection(found: Any, dry_run: bool) -> Done:
    """What the upload did to the collection (a dry run: would do); a failure after its commit is raised here."""
    from ..errors import CollectionNotUpdated
    from ..hub.collection import describe

    if isinstance(found, CollectionNotUpdated):
        raise found
    return Done(describe(found, dry_run) + ("; nothing changed on the Hub" if dry_run else ""))
