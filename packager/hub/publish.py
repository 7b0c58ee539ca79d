"""Publish a bundle in one verified commit; check a remote revision file by file against its manifest."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal

from .. import __version__
from ..bundle import FILES
from ..checksum import MANIFEST, parse_manifest, read_manifest
from ..errors import BundleError
from ..hashing import xxh3_128_file
from ..validate import validate
from .client import (Hub, HubConflict, HubError, HubVerificationFailed, configure_xet, connect, translate,
                     with_retries)

CARD = "README.md"
Action = Literal["add", "unchanged", "delete"]
Progress = Callable[[str], None]


@dataclass(frozen=True)
class PlanRow:
    path: str
    action: Action
    size: int


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

    @property
    def bytes_to_send(self) -> int:
        return sum(row.size for row in self.plan if row.action == "add")


@dataclass(frozen=True)
class Remote:
    head: str | None
    files: dict[str, Any]  # path -> RepoFile
    manifest: bytes | None


def local_files(bundle: Path) -> list[str]:
    """The release set: the ten files, the card and the manifest, which must match every file."""
    names = [*FILES, CARD, MANIFEST]
    missing = [n for n in names if not (bundle / n).is_file()]
    if missing:
        step = "packager card" if CARD in missing else "packager checksum" if MANIFEST in missing else "packager convert"
        raise BundleError(f"{bundle} lacks {', '.join(missing)}", f"run {step} first")
    # validate() also checks every file against the manifest, so the bundle is hashed once.
    report = validate(bundle)
    if report.errors:
        first = report.errors[0]
        step = "packager checksum" if first.file == MANIFEST else "packager validate"
        raise BundleError(f"{bundle} fails validation ({len(report.errors)} errors, first: {first.location}: "
                          f"{first.message})", f"run {step}")
    return names


def _files_at(hub: Hub, repo_id: str, revision: str) -> dict[str, Any]:
    """path -> RepoFile for every file (not folder) of the revision."""
    try:
        return {f.path: f for f in hub.api.list_repo_tree(repo_id, revision=revision, recursive=True)
                if getattr(f, "size", None) is not None}
    except Exception as exc:  # noqa: BLE001
        raise translate(hub, exc, f"listing {repo_id}@{revision[:12]}") from None


def _download(hub: Hub, repo_id: str, path: str, revision: str, folder: str) -> Path:
    from huggingface_hub import hf_hub_download

    try:
        return Path(hf_hub_download(repo_id, path, revision=revision, local_dir=folder, endpoint=hub.endpoint,
                                    token=hub.token))
    except Exception as exc:  # noqa: BLE001
        raise translate(hub, exc, f"downloading {path}") from None


def _remote(hub: Hub, repo_id: str, revision: str) -> Remote:
    from huggingface_hub.errors import RepositoryNotFoundError, RevisionNotFoundError

    try:
        head = hub.api.repo_info(repo_id, revision=revision).sha
    except (RepositoryNotFoundError, RevisionNotFoundError):
        return Remote(head=None, files={}, manifest=None)
    except Exception as exc:  # noqa: BLE001
        raise translate(hub, exc, f"reading {repo_id}") from None
    if head is None:
        return Remote(head=None, files={}, manifest=None)
    files = _files_at(hub, repo_id, head)
    manifest = None
    if MANIFEST in files:
        with tempfile.TemporaryDirectory() as tmp:
            manifest = _download(hub, repo_id, MANIFEST, head, tmp).read_bytes()
    return Remote(head=head, files=files, manifest=manifest)


def plan(bundle: Path, names: list[str], remote: Remote) -> tuple[PlanRow, ...]:
    """What a commit must change. Files whose xxh3-128 matches the remote manifest (and size) stay."""
    from huggingface_hub.utils.sha import git_hash

    ours = read_manifest(bundle / MANIFEST)
    theirs: dict[str, str] = {}
    if remote.manifest is not None:
        try:
            theirs = parse_manifest(remote.manifest.decode("utf-8"), Path(MANIFEST))
        except Exception:  # noqa: BLE001 - a foreign or broken remote manifest just means "compare nothing"
            theirs = {}
    rows = []
    for name in names:
        path = bundle / name
        size = path.stat().st_size
        found = remote.files.get(name)
        if found is None or found.size != size:
            same = False
        elif name == MANIFEST:
            same = remote.manifest == path.read_bytes()
        elif getattr(found, "lfs", None) is None:
            same = found.blob_id == git_hash(path.read_bytes())
        else:
            same = theirs.get(name) == ours.get(name)
        rows.append(PlanRow(name, "unchanged" if same else "add", size))
    rows += [PlanRow(p, "delete", f.size) for p, f in sorted(remote.files.items()) if p not in names]
    return tuple(rows)


def upload(bundle: Path, repo_id: str, *, endpoint: str | None = None, revision: str = "main",
           tag: str | None = None, private: bool = False, dry_run: bool = False, message: str | None = None,
           progress: Progress = lambda _: None, sleep: Callable[[float], None] | None = None) -> UploadResult:
    """One commit with every changed file (none if nothing changed), then verify, then tag."""
    import time

    from huggingface_hub import CommitOperationAdd, CommitOperationDelete

    names = local_files(bundle)
    hub = connect(endpoint)
    progress(f"reading {repo_id}@{revision} on {hub.endpoint}")
    remote = _remote(hub, repo_id, revision)
    rows = plan(bundle, names, remote)
    changed = [r for r in rows if r.action != "unchanged"]
    result = dict(repo_id=repo_id, endpoint=hub.endpoint, revision=revision, plan=rows, tag=tag)
    if dry_run:
        return UploadResult(**result, commit=remote.head, committed=False, dry_run=True, verified=False)
    pause = sleep or time.sleep
    with_retries(hub, f"creating {repo_id}", lambda: hub.api.create_repo(repo_id, private=private, exist_ok=True),
                 sleep=pause)
    configure_xet(hub, repo_id)
    if revision != "main" and remote.head is None:
        _branch(hub, repo_id, revision, pause)
    commit, operations = remote.head, []
    if changed:
        operations = [CommitOperationAdd(path_in_repo=r.path, path_or_fileobj=str(bundle / r.path))
                      if r.action == "add" else CommitOperationDelete(path_in_repo=r.path) for r in changed]
        text = message or f"packager {__version__}: upload bundle{' ' + tag if tag else ''}"
        progress(f"committing {sum(r.action == 'add' for r in changed)} file(s), "
                 f"{sum(r.size for r in changed if r.action == 'add') / 1e6:.1f} MB")
        commit = _commit(hub, repo_id, revision, remote.head, operations, text, pause)
    if commit is None:
        raise HubError(f"{repo_id} has no commit to verify")
    progress(f"verifying {repo_id}@{commit[:12]}")
    _verify_commit(hub, repo_id, commit, bundle, names, operations)
    if tag:
        _tag(hub, repo_id, tag, commit, pause)
    return UploadResult(**result, commit=commit, committed=bool(changed), dry_run=False, verified=True)


def _commit(hub: Hub, repo_id: str, revision: str, parent: str | None, operations: list[Any], text: str,
            sleep: Callable[[float], None]) -> str:
    def attempt() -> str:
        return hub.api.create_commit(repo_id, operations=operations, commit_message=text, revision=revision,
                                     parent_commit=parent).oid

    def landed() -> str | None:
        # The client does not retry a commit; before we do, make sure the failed one did not land.
        head = hub.api.repo_info(repo_id, revision=revision).sha
        if head == parent:
            return None
        latest = hub.api.list_repo_commits(repo_id, revision=head)[0]
        if latest.title == text:
            return head
        raise HubConflict(f"{repo_id}@{revision} moved to {head[:12]} ({latest.title!r}) while uploading")

    return with_retries(hub, f"committing to {repo_id}", attempt, before_retry=landed, sleep=sleep)


def _branch(hub: Hub, repo_id: str, branch: str, sleep: Callable[[float], None]) -> None:
    """A new branch starts from main (a repo without any commit cannot branch: commit to main first)."""
    existing = {b.name for b in hub.api.list_repo_refs(repo_id).branches}
    if branch in existing:
        return
    if "main" not in existing:
        raise HubError(f"{repo_id} has no commit on main to start the branch {branch} from",
                       "upload to main first, then to the branch")
    with_retries(hub, f"creating the branch {branch} of {repo_id}",
                 lambda: hub.api.create_branch(repo_id, branch=branch, revision="main", exist_ok=True), sleep=sleep)


def _tag(hub: Hub, repo_id: str, tag: str, commit: str, sleep: Callable[[float], None]) -> None:
    refs = hub.api.list_repo_refs(repo_id)
    existing = {t.name: t.target_commit for t in refs.tags}
    if existing.get(tag) == commit:
        return
    if tag in existing:
        raise HubConflict(f"tag {tag} already points at {existing[tag][:12]}, not {commit[:12]}",
                          "choose a new tag for a new release")
    with_retries(hub, f"tagging {repo_id}@{commit[:12]} as {tag}",
                 lambda: hub.api.create_tag(repo_id, tag=tag, revision=commit), sleep=sleep)


def _verify_commit(hub: Hub, repo_id: str, commit: str, bundle: Path, names: list[str],
                   operations: list[Any]) -> None:
    """The remote revision pinned to `commit` holds exactly our files, sizes and uploaded LFS sha256."""
    from huggingface_hub.utils.sha import git_hash

    files = _files_at(hub, repo_id, commit)
    problems = []
    if set(files) != set(names):
        problems.append(f"files differ (missing {sorted(set(names) - set(files))}, extra {sorted(set(files) - set(names))})")
    sha = {op.path_in_repo: op.upload_info.sha256.hex() for op in operations if hasattr(op, "upload_info")}
    for name in set(files) & set(names):
        remote, local = files[name], bundle / name
        if remote.size != local.stat().st_size:
            problems.append(f"{name}: size {remote.size} != {local.stat().st_size}")
        elif remote.lfs is None and remote.blob_id != git_hash(local.read_bytes()):
            problems.append(f"{name}: content differs")
        elif remote.lfs is not None and name in sha and remote.lfs.sha256 != sha[name]:
            problems.append(f"{name}: LFS sha256 {remote.lfs.sha256[:12]} != uploaded {sha[name][:12]}")
    if problems:
        raise HubVerificationFailed(f"{repo_id}@{commit[:12]}: {'; '.join(problems)}")


@dataclass(frozen=True)
class RemoteCheck:
    repo_id: str
    revision: str
    commit: str
    checked: int
    mismatched: tuple[str, ...]
    missing: tuple[str, ...]
    extra: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not (self.mismatched or self.missing or self.extra)


def verify_remote(repo_id: str, revision: str = "main", endpoint: str | None = None,
                  progress: Progress = lambda _: None) -> RemoteCheck:
    """Download every file of the revision and check it against the revision's own xxh3-128 manifest."""
    hub = connect(endpoint)
    try:
        commit = hub.api.repo_info(repo_id, revision=revision).sha
    except Exception as exc:  # noqa: BLE001
        raise translate(hub, exc, f"reading {repo_id}@{revision}") from None
    paths = sorted(_files_at(hub, repo_id, commit))
    if MANIFEST not in paths:
        raise HubVerificationFailed(f"{repo_id}@{revision} has no {MANIFEST}", "upload the bundle with packager upload")
    with tempfile.TemporaryDirectory() as tmp:
        for path in paths:
            progress(f"downloading {path}")
            _download(hub, repo_id, path, commit, tmp)
        listed = read_manifest(Path(tmp) / MANIFEST)
        present = set(paths) - {MANIFEST}
        mismatched = tuple(sorted(n for n in set(listed) & present if xxh3_128_file(Path(tmp) / n) != listed[n]))
    return RemoteCheck(repo_id=repo_id, revision=revision, commit=commit, checked=len(set(listed) & present),
                       mismatched=mismatched, missing=tuple(sorted(set(listed) - present)),
                       extra=tuple(sorted(present - set(listed))))
