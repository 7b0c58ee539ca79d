"""Publish a bundle in one commit pinned to its parent, verified against the Hub's own file facts, then tagged.

Everything that can refuse the upload (bad names, a read-only token, a tag elsewhere, a revision that is not a
branch, a visibility other than asked) is checked before anything is sent.
"""

from __future__ import annotations

import itertools
import secrets
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from .. import __version__
from ..bundle.checksum import MANIFEST, SIGNATURE
from ..bundle.kinds import CARD, release_names
from ..errors import (
    BundleError,
    HubBadTarget,
    HubConflict,
    HubError,
    HubRevisionRefused,
    HubVerificationFailed,
    HubVisibilityRefused,
)
from ..infra.progress import Progress
from ..validate import validate
from .client import WHOLE_ATTEMPTS, Hub, configure_xet, connect, with_retries
from .collection import CollectionRequest, CollectionResult, check, place_after_commit
from .gating import gate
from .names import ref_problem, repo_id_problem
from .plan import COMMITTED, SENT, LocalFile, PlanRow, differences, lfs_unchanged, local_facts, plan, restore
from .remote import Repo, check_access, commits_on, files_at, missing_objects, read_repo

UPLOAD_ID = "packager-upload-id: "


@dataclass(frozen=True)
class UploadRequest:
    bundle: Path
    repo_id: str
    endpoint: str | None = None
    revision: str = "main"
    tag: str | None = None
    private: bool = False
    make_private: bool = False
    dry_run: bool = False
    message: str | None = None
    token: str | None = None
    collection: CollectionRequest | None = None  # put the repo into this collection once it is verified
    gated: Literal["auto", "manual"] | None = None  # gate downloads (before the commit, so never ungated)
    # Run on the verified commit before it is tagged (release: the signature against the Hub's files).
    check: Callable[[str], None] | None = None


@dataclass(frozen=True)
class UploadResult:
    repo_id: str
    endpoint: str
    revision: str
    plan: tuple[PlanRow, ...]
    commit: str | None
    committed: bool
    tag: str | None
    dry_run: bool
    verified: bool
    gated: str | bool = False  # the repo's gating as the Hub reports it (in a dry run: as it will be)
    collection: CollectionResult | None = None

    @property
    def bytes_to_send(self) -> int:
        return sum(row.size for row in self.plan if row.action in SENT)

    @property
    def repaired(self) -> tuple[str, ...]:
        return tuple(row.path for row in self.plan if row.action == "repair")


def local_files(bundle: Path) -> list[str]:
    """The release set: the ten files, the card and the manifest, which must match every file."""
    names = list(release_names(bundle, CARD, MANIFEST))
    missing = [n for n in names if not (bundle / n).is_file()]
    if missing:
        step = (
            "packager card" if CARD in missing else "packager checksum" if MANIFEST in missing else "packager convert"
        )
        raise BundleError(f"{bundle} lacks {', '.join(missing)}", f"run {step} first")
    if (bundle / SIGNATURE).is_file():  # model.sig, when signed: part of the one commit, never a stale one
        from ..trust.signature import check_current

        check_current(bundle)
        names.append(SIGNATURE)
    # validate() also checks every file against the manifest.
    report = validate(bundle)
    if report.errors:
        first = report.errors[0]
        step = "packager checksum" if first.file == MANIFEST else "packager validate"
        raise BundleError(
            f"{bundle} fails validation ({len(report.errors)} errors, first: {first.location}: {first.message})",
            f"run {step}",
        )
    return names


def check_names(repo_id: str, revision: str, tag: str | None) -> None:
    """Input problems, refused before the Hub is contacted (no rerun can fix them)."""
    if (problem := repo_id_problem(repo_id)) is not None:
        raise HubBadTarget(f"invalid repo id: {problem}", "give the repo as namespace/name")
    if (problem := ref_problem(revision)) is not None:
        raise HubRevisionRefused(f"--revision {revision[:100]!r}: {problem}")
    if tag is not None and (problem := ref_problem(tag)) is not None:
        raise HubBadTarget(f"--tag: {problem}", "choose a tag like v3 or 2026.12.01")


def _check_target(request: UploadRequest, repo: Repo) -> str | None:
    """The commit the upload builds on (None: a new repo); refusals for revision, visibility and tag."""
    revision = request.revision
    if revision in repo.tags:
        raise HubRevisionRefused(f"--revision {revision} is a tag of {request.repo_id}, not a branch")
    if repo.exists and request.private and not repo.private and not request.make_private:
        raise HubVisibilityRefused(f"{request.repo_id} exists and is public; --private will not upload into it")
    if not repo.exists:
        return None
    base = repo.branches.get(revision) or repo.branches.get("main")
    if base is None:
        raise HubError(
            f"{request.repo_id} has no main branch to start {revision} from",
            "create main on the Hub first, then upload",
        )
    return base


def _check_tag(request: UploadRequest, repo: Repo, base: str | None, changes: bool) -> None:
    """An existing tag is fine only where this upload ends: on `base` when nothing changes."""
    if request.tag is None or request.tag not in repo.tags:
        return
    at = repo.tags[request.tag]
    if changes or at != base:
        raise HubConflict(
            f"tag {request.tag} already points at {at[:12]}, which is not what this upload makes; nothing was sent",
            "choose a new tag for a new release",
        )


def upload(
    request: UploadRequest, progress: Progress = lambda _: None, sleep: Callable[[float], None] = time.sleep
) -> UploadResult:
    """Check everything, then one pinned commit with every changed file (none if nothing changed), verify, tag."""
    check_names(request.repo_id, request.revision, request.tag)
    local = local_facts(request.bundle, local_files(request.bundle))
    progress("hashing the bundle (sha256, as the Hub identifies files) while reading the Hub")
    with ThreadPoolExecutor(max_workers=2) as pool:  # hashlib lets go of the GIL: the requests overlap it
        hashing = [pool.submit(_sha256_of, f) for f in local.values()]
        hub = connect(request.endpoint, request.token)
        check_access(hub, write=not request.dry_run)
        progress(f"reading {request.repo_id} on {hub.endpoint}")
        repo = read_repo(hub, request.repo_id)
        base = _check_target(request, repo)
        remote = files_at(hub, request.repo_id, base) if base else {}
        for done in hashing:
            done.result()
    rows = plan(request.bundle, local, remote)
    _check_tag(request, repo, base, changes=any(r.action != "unchanged" for r in rows))
    planned = check(hub, request.collection, request.repo_id) if request.collection else None
    result = UploadResult(
        repo_id=request.repo_id,
        endpoint=hub.endpoint,
        revision=request.revision,
        plan=rows,
        commit=repo.branches.get(request.revision),
        committed=False,
        tag=request.tag,
        dry_run=request.dry_run,
        verified=False,
        gated=request.gated or repo.gated,
        collection=planned,
    )
    if request.dry_run:
        return result
    parent, gated = _prepare(hub, request, repo, base, sleep)
    if parent != base:  # a repo made just now: plan on its initial commit
        remote = files_at(hub, request.repo_id, parent)
        rows = plan(request.bundle, local, remote)
    rows = restore(rows, missing_objects(hub, request.repo_id, request.revision, lfs_unchanged(rows, local, remote)))
    commit = _publish(hub, request, rows, local, parent, progress, sleep)
    if request.check is not None:
        request.check(commit)
    if request.tag and repo.tags.get(request.tag) != commit:
        with_retries(
            hub,
            f"tagging {request.repo_id}@{commit[:12]} as {request.tag}",
            lambda: hub.api.create_tag(request.repo_id, tag=request.tag, revision=commit),
            sleep=sleep,
        )
    result = replace(
        result, plan=rows, commit=commit, committed=commit != parent, verified=True, gated=gated, collection=None
    )  # the plan's collection until placed: a failure carries none
    if request.collection is None:
        return result
    return replace(result, collection=place_after_commit(hub, request.collection, result, request.private, sleep))


def _publish(
    hub: Hub,
    request: UploadRequest,
    rows: tuple[PlanRow, ...],
    local: dict[str, LocalFile],
    parent: str,
    progress: Progress,
    sleep: Callable[[float], None],
) -> str:
    """Send what the plan says and verify it; the commit the bundle is now at."""
    if not any(r.action in SENT or r.action == "delete" for r in rows):
        return parent
    configure_xet(hub, request.repo_id)
    progress(
        f"sending {sum(r.action in SENT for r in rows)} file(s), "
        f"{sum(r.size for r in rows if r.action in SENT) / 1e6:.1f} MB, onto {parent[:12]}"
    )
    commit = _send(hub, request, rows, local, parent, sleep)
    progress(f"verifying {request.repo_id}@{commit[:12]}")
    _verify(hub, request, rows, local, commit)
    return commit


def _verify(
    hub: Hub, request: UploadRequest, rows: tuple[PlanRow, ...], local: dict[str, LocalFile], commit: str
) -> None:
    """The commit holds exactly the bundle (the Hub's listing), and restored objects are now stored whole."""
    problems = differences(request.bundle, local, files_at(hub, request.repo_id, commit))
    restored = [local[r.path] for r in rows if r.action == "restore"]
    problems += [
        f"{p}: stored object still damaged"
        for p in sorted(missing_objects(hub, request.repo_id, request.revision, restored))
    ]
    if problems:
        raise HubVerificationFailed(f"{request.repo_id}@{commit[:12]}: {'; '.join(problems)}")


def _prepare(
    hub: Hub, request: UploadRequest, repo: Repo, base: str | None, sleep: Callable[[float], None]
) -> tuple[str, str | bool]:
    """Create the repo (as private as asked), switch visibility and gating if told to, start a new branch; the
    parent and the repo's gating."""
    repo_id = request.repo_id
    if not repo.exists:
        # exist_ok: a concurrent first upload may have created it; then its visibility is checked again.
        with_retries(
            hub,
            f"creating {repo_id}",
            lambda: hub.api.create_repo(repo_id, private=request.private, exist_ok=True),
            sleep=sleep,
        )
        repo = read_repo(hub, repo_id)
        if request.private and not repo.private:
            raise HubVisibilityRefused(f"{repo_id} was created public by someone else meanwhile; nothing was sent")
        base = repo.branches.get(request.revision) or repo.branches.get("main")
        if base is None:
            raise HubError(f"{repo_id} was created without a first commit on main; nothing was sent")
    elif request.make_private and not repo.private:
        with_retries(
            hub, f"making {repo_id} private", lambda: hub.api.update_repo_settings(repo_id, private=True), sleep=sleep
        )
    assert base is not None
    gated = gate(hub, request.repo_id, request.gated, repo, sleep)
    if request.revision not in repo.branches:
        with_retries(
            hub,
            f"creating the branch {request.revision} of {repo_id} at {base[:12]}",
            lambda: hub.api.create_branch(repo_id, branch=request.revision, revision=base),
            sleep=sleep,
        )
    return base, gated


def _send(
    hub: Hub,
    request: UploadRequest,
    rows: tuple[PlanRow, ...],
    local: dict[str, LocalFile],
    parent: str,
    sleep: Callable[[float], None],
) -> str:
    """Send what the plan says: one commit pinned to `parent`, or only re-stored objects (no commit)."""
    if not any(r.action in COMMITTED for r in rows):
        additions = [local[r.path].operation for r in rows if r.action == "restore"]
        with_retries(
            hub,
            f"re-sending damaged objects to {request.repo_id}",
            lambda: hub.api.preupload_lfs_files(request.repo_id, additions=additions, revision=request.revision),
            sleep=sleep,
        )
        return parent
    return _commit(hub, request, rows, local, parent, sleep)


def _commit(
    hub: Hub,
    request: UploadRequest,
    rows: tuple[PlanRow, ...],
    local: dict[str, LocalFile],
    parent: str,
    sleep: Callable[[float], None],
) -> str:
    """The commit, pinned to `parent`, carrying a unique upload id so a lost answer can be recognised."""
    from huggingface_hub import CommitOperationDelete

    # Restored objects ride along: the client uploads them, then drops them from the commit as unchanged.
    operations: list[Any] = [
        local[r.path].operation if r.action in SENT else CommitOperationDelete(r.path)
        for r in rows
        if r.action != "unchanged"
    ]
    upload_id = secrets.token_hex(12)
    title = request.message or f"packager {__version__}: upload bundle{' ' + request.tag if request.tag else ''}"
    description = f"{UPLOAD_ID}{upload_id}"

    def attempt() -> str:
        return hub.api.create_commit(
            request.repo_id,
            operations=operations,
            commit_message=title,
            commit_description=description,
            revision=request.revision,
            parent_commit=parent,
        ).oid

    def landed() -> str | None:
        # The client does not retry a commit; before we do, find out whether the failed one landed: only a
        # commit whose parent is ours and whose description carries our upload id counts.
        history = commits_on(hub, request.repo_id, request.revision)
        for newer, older in itertools.pairwise(history):
            if older.commit_id == parent and description in (newer.message or ""):
                return newer.commit_id
        if history and history[0].commit_id != parent:
            raise HubConflict(
                f"{request.repo_id}@{request.revision} moved to {history[0].commit_id[:12]} "
                f"({history[0].title!r}) while uploading; nothing of this upload landed"
            )
        return None

    return with_retries(
        hub, f"committing to {request.repo_id}", attempt, attempts=WHOLE_ATTEMPTS, before_retry=landed, sleep=sleep
    )


def _sha256_of(local: LocalFile) -> str:
    return local.sha256
