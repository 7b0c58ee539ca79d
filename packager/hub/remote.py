"""What the Hub holds, as facts from its own listings: repo visibility, branches, tags, and per file its size
and either its LFS sha256 or its git blob id. Nothing here trusts a manifest stored in the repo."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..bundle.checksum import MANIFEST, MAX_MANIFEST_BYTES
from ..errors import HubBadTarget, HubForbidden, HubNotFound, InputTooLarge
from .client import Hub, with_retries

KEEP = ".gitattributes"  # every Hub repo has it from its initial commit; packager never adds or deletes it


@dataclass(frozen=True)
class RemoteFile:
    path: str
    size: int
    blob_id: str  # git blob id (of the content, or of the LFS pointer)
    sha256: str | None  # LFS files only


@dataclass(frozen=True)
class Repo:
    exists: bool
    private: bool = False
    gated: str | bool = False  # "auto", "manual" or False
    branches: dict[str, str] = field(default_factory=dict)  # name -> commit
    tags: dict[str, str] = field(default_factory=dict)


def check_access(hub: Hub, *, write: bool) -> None:
    """Before anything is sent: the endpoint answers like a Hub and, for writes, the token may write."""
    if hub.token is None:
        return
    try:
        me = with_retries(hub, f"asking {hub.endpoint} who the token belongs to", lambda: hub.api.whoami())
    except HubNotFound:
        raise HubBadTarget(f"{hub.endpoint} does not answer like a Hugging Face Hub (no whoami-v2)") from None
    if not isinstance(me, dict) or "name" not in me:
        raise HubBadTarget(f"{hub.endpoint} does not answer like a Hugging Face Hub (whoami)")
    role = ((me.get("auth") or {}).get("accessToken") or {}).get("role")
    if write and role == "read":
        raise HubForbidden(
            f"the token for {hub.endpoint} is read-only; nothing was sent",
            "use a token with write access (hf auth login, HF_TOKEN or --token-file)",
        )


def read_repo(hub: Hub, repo_id: str) -> Repo:
    from huggingface_hub.errors import RepositoryNotFoundError

    def info() -> Any:
        try:
            return hub.api.repo_info(repo_id)
        except RepositoryNotFoundError:
            return None

    # Two requests, each retried on its own: retried as a pair, both would have to get through in one attempt.
    found = with_retries(hub, f"reading {repo_id}", info)
    if found is None:
        return Repo(exists=False)
    refs = with_retries(hub, f"reading {repo_id}'s branches and tags", lambda: hub.api.list_repo_refs(repo_id))
    return Repo(
        exists=True,
        private=bool(found.private),
        gated=found.gated or False,
        branches={b.name: b.target_commit for b in refs.branches},
        tags={t.name: t.target_commit for t in refs.tags},
    )


def files_at(hub: Hub, repo_id: str, commit: str) -> dict[str, RemoteFile]:
    """Every file (not folder) of `commit`, as the Hub lists it."""

    def listing() -> dict[str, RemoteFile]:
        return {
            f.path: _fact(f)
            for f in hub.api.list_repo_tree(repo_id, revision=commit, recursive=True)
            if getattr(f, "size", None) is not None
        }

    return with_retries(hub, f"listing {repo_id}@{commit[:12]}", listing)


def manifest_size(files: dict[str, RemoteFile], where: str) -> int:
    """The size of the revision's manifest, which pull and verify-remote read whole: one larger than any bundle's
    is refused (26) before it is downloaded."""
    size = files[MANIFEST].size
    if size > MAX_MANIFEST_BYTES:
        raise InputTooLarge(
            f"{MANIFEST} of {where} is {size:,} bytes, more than any bundle's manifest (at most "
            f"{MAX_MANIFEST_BYTES:,}); not downloaded",
            "the revision is not a release packager made; tell its publisher",
        )
    return size


def _fact(entry: Any) -> RemoteFile:
    lfs = getattr(entry, "lfs", None)
    return RemoteFile(
        path=entry.path, size=entry.size, blob_id=entry.blob_id, sha256=lfs.sha256 if lfs is not None else None
    )


def commits_on(hub: Hub, repo_id: str, revision: str) -> list[Any]:
    """The history ending at `revision`, newest first."""
    return with_retries(
        hub, f"reading the history of {repo_id}", lambda: list(hub.api.list_repo_commits(repo_id, revision=revision))
    )


def missing_objects(hub: Hub, repo_id: str, revision: str, files: list[Any]) -> set[str]:
    """Paths among `files` (LocalFile) whose LFS object the Hub asks for again: absent or damaged in its store."""
    from huggingface_hub.lfs import post_lfs_batch_info

    if not files:
        return set()
    infos = [f.operation.upload_info for f in files]
    objects, _, _ = with_retries(
        hub,
        f"asking {repo_id} which stored objects are whole",
        lambda: post_lfs_batch_info(infos, hub.token, "model", repo_id, revision=revision, endpoint=hub.endpoint),
    )
    wanted = {o.get("oid") for o in objects if o.get("actions")}
    return {f.path for f in files if f.sha256 in wanted}
