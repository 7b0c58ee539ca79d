"""The upload plan: each local file against the Hub's own facts for the same path (size and LFS sha256, or
git blob id). A file is unchanged only when those match; the remote manifest's claims are not trusted.

Local sha256s come from huggingface_hub's `CommitOperationAdd.upload_info` (the same objects are then
committed, so every file is hashed once) and git blob ids from its `git_hash`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ..bundle.checksum import MANIFEST
from .remote import KEEP, RemoteFile

# add: not on the Hub; replace: on the Hub with other content; repair: other content although the Hub's
# manifest is ours (someone changed the file behind the manifest); restore: listed right, but the Hub's stored
# object is damaged or gone (sent again, no commit needed); delete: on the Hub, not in the bundle.
Action = Literal["add", "replace", "repair", "restore", "unchanged", "delete"]
SENT = ("add", "replace", "repair", "restore")
COMMITTED = ("add", "replace", "repair", "delete")


@dataclass(frozen=True)
class LocalFile:
    path: str
    size: int
    operation: Any = None  # CommitOperationAdd, with upload_info (sha256, size, sample)

    @property
    def sha256(self) -> str:
        return self.operation.upload_info.sha256.hex()


@dataclass(frozen=True)
class PlanRow:
    path: str
    action: Action
    size: int


def local_facts(bundle: Path, names: list[str]) -> dict[str, LocalFile]:
    from huggingface_hub import CommitOperationAdd

    return {
        name: LocalFile(
            name,
            (bundle / name).stat().st_size,
            CommitOperationAdd(path_in_repo=name, path_or_fileobj=str(bundle / name)),
        )
        for name in names
    }


def same(local: LocalFile, remote: RemoteFile | None, bundle: Path) -> bool:
    """The Hub holds exactly this file: same size, and same LFS sha256 or same git blob id."""
    from huggingface_hub.utils.sha import git_hash

    if remote is None or remote.size != local.size:
        return False
    if remote.sha256 is not None:
        return remote.sha256 == local.sha256
    return remote.blob_id == git_hash((bundle / local.path).read_bytes())


def plan(bundle: Path, local: dict[str, LocalFile], remote: dict[str, RemoteFile]) -> tuple[PlanRow, ...]:
    manifest_kept = MANIFEST in local and same(local[MANIFEST], remote.get(MANIFEST), bundle)
    rows = []
    for name, mine in local.items():
        theirs = remote.get(name)
        if same(mine, theirs, bundle):
            action: Action = "unchanged"
        elif theirs is None:
            action = "add"
        else:
            action = "repair" if manifest_kept else "replace"
        rows.append(PlanRow(name, action, mine.size))
    rows += [PlanRow(p, "delete", f.size) for p, f in sorted(remote.items()) if p not in local and p != KEEP]
    return tuple(rows)


def differences(bundle: Path, local: dict[str, LocalFile], remote: dict[str, RemoteFile]) -> list[str]:
    """What keeps `remote` from holding exactly the bundle (empty when it does)."""
    rows = plan(bundle, local, remote)
    return [
        f"{r.path}: {'not in the bundle' if r.action == 'delete' else 'missing' if r.action == 'add' else 'differs'}"
        for r in rows
        if r.action != "unchanged"
    ]


def lfs_unchanged(
    rows: tuple[PlanRow, ...], local: dict[str, LocalFile], remote: dict[str, RemoteFile]
) -> list[LocalFile]:
    """Files the plan keeps that the Hub stores as LFS objects (whose storage can be asked about)."""
    return [local[r.path] for r in rows if r.action == "unchanged" and remote[r.path].sha256 is not None]


def restore(rows: tuple[PlanRow, ...], paths: set[str]) -> tuple[PlanRow, ...]:
    return tuple(PlanRow(r.path, "restore", r.size) if r.path in paths else r for r in rows)
