"""The local Hub's storage: repos, commits, refs in SQLite; LFS objects and regular blobs on disk, per repo.

A commit is one SQLite transaction, so it lands whole or not at all; a restart loses nothing.
Protocol hashes (sha256 of LFS objects, git blob sha1) come from huggingface_hub's own helpers.
"""

from __future__ import annotations

import datetime
import json
import os
import sqlite3
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import xxhash
from huggingface_hub.utils.sha import git_hash, sha_fileobj

SCHEMA = """
CREATE TABLE IF NOT EXISTS repos (id TEXT PRIMARY KEY, private INTEGER NOT NULL, created TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS commits (oid TEXT PRIMARY KEY, repo TEXT NOT NULL, parent TEXT, title TEXT NOT NULL,
    message TEXT NOT NULL, date TEXT NOT NULL, tree TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS refs (repo TEXT NOT NULL, kind TEXT NOT NULL, name TEXT NOT NULL, target TEXT NOT NULL,
    PRIMARY KEY (repo, kind, name));
CREATE TABLE IF NOT EXISTS lfs (repo TEXT NOT NULL, oid TEXT NOT NULL, size INTEGER NOT NULL,
    PRIMARY KEY (repo, oid));
"""
POINTER = "version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize {size}\n"


class StoreError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


@dataclass(frozen=True)
class Entry:
    path: str
    size: int
    oid: str  # git blob sha1 (of the content, or of the LFS pointer)
    lfs: str | None  # sha256 for LFS files

    def as_json(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size, "oid": self.oid, "lfs": self.lfs}


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")


class Store:
    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(root / "hub.sqlite3", check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(SCHEMA)

    # -- repos -------------------------------------------------------------------------------------------
    def create_repo(self, repo: str, private: bool) -> bool:
        with self._lock:
            if self._db.execute("SELECT 1 FROM repos WHERE id=?", (repo,)).fetchone():
                return False
            self._db.execute("INSERT INTO repos VALUES (?, ?, ?)", (repo, int(private), now()))
            return True

    def repo(self, repo: str) -> dict[str, Any] | None:
        row = self._db.execute("SELECT id, private, created FROM repos WHERE id=?", (repo,)).fetchone()
        return None if row is None else {"id": row[0], "private": bool(row[1]), "created": row[2]}

    def delete_repo(self, repo: str) -> None:
        with self._lock:
            for table in ("repos", "commits", "refs", "lfs"):
                self._db.execute(f"DELETE FROM {table} WHERE {'id' if table == 'repos' else 'repo'}=?", (repo,))

    # -- refs and commits --------------------------------------------------------------------------------
    def resolve(self, repo: str, rev: str) -> str | None:
        """A branch, a tag or a commit oid -> commit oid (None for a repo without commits on `main`)."""
        for kind in ("branch", "tag"):
            row = self._db.execute("SELECT target FROM refs WHERE repo=? AND kind=? AND name=?",
                                   (repo, kind, rev)).fetchone()
            if row:
                return row[0]
        row = self._db.execute("SELECT oid FROM commits WHERE repo=? AND oid=?", (repo, rev)).fetchone()
        if row:
            return row[0]
        if rev == "main":
            return None
        raise StoreError(404, "RevisionNotFound", f"Invalid rev id: {rev}")

    def refs(self, repo: str) -> dict[str, list[dict[str, str]]]:
        rows = self._db.execute("SELECT kind, name, target FROM refs WHERE repo=? ORDER BY name", (repo,)).fetchall()
        prefix = {"branch": "refs/heads/", "tag": "refs/tags/"}
        out: dict[str, list[dict[str, str]]] = {"branches": [], "tags": [], "converts": []}
        for kind, name, target in rows:
            out["branches" if kind == "branch" else "tags"].append(
                {"name": name, "ref": prefix[kind] + name, "targetCommit": target})
        return out

    def tree(self, commit: str | None) -> dict[str, Entry]:
        if commit is None:
            return {}
        row = self._db.execute("SELECT tree FROM commits WHERE oid=?", (commit,)).fetchone()
        return {p: Entry(**e) for p, e in json.loads(row[0]).items()}

    def commit_info(self, commit: str) -> dict[str, Any]:
        oid, parent, title, message, date = self._db.execute(
            "SELECT oid, parent, title, message, date FROM commits WHERE oid=?", (commit,)).fetchone()
        return {"id": oid, "parent": parent, "title": title, "message": message, "date": date}

    def history(self, commit: str | None) -> list[dict[str, Any]]:
        items = []
        while commit:
            info = self.commit_info(commit)
            items.append(info)
            commit = info["parent"]
        return items

    def tag(self, repo: str, name: str, commit: str) -> None:
        with self._lock:
            row = self._db.execute("SELECT target FROM refs WHERE repo=? AND kind='tag' AND name=?",
                                   (repo, name)).fetchone()
            if row:
                raise StoreError(409, "TagConflict", f"Tag {name} already exists (at {row[0]})")
            self._db.execute("INSERT INTO refs VALUES (?, 'tag', ?, ?)", (repo, name, commit))

    def branch(self, repo: str, name: str, commit: str | None) -> None:
        with self._lock:
            if self._db.execute("SELECT 1 FROM refs WHERE repo=? AND kind='branch' AND name=?",
                                (repo, name)).fetchone():
                raise StoreError(409, "BranchConflict", f"Branch {name} already exists")
            if commit is None:
                raise StoreError(400, "BadRequest", "cannot branch from an empty repo")
            self._db.execute("INSERT INTO refs VALUES (?, 'branch', ?, ?)", (repo, name, commit))

    def commit(self, repo: str, branch: str, parent_expected: str | None, title: str, message: str,
               changes: list[tuple[str, Entry | None]], blobs: dict[str, bytes]) -> str:
        """Apply adds (Entry) and deletes (None) on top of the branch head in one transaction."""
        with self._lock:
            head = self.resolve(repo, branch)
            if parent_expected is not None and parent_expected != head:
                raise StoreError(412, "PreconditionFailed", f"parentCommit {parent_expected} is not the head {head}")
            tree = {p: e for p, e in self.tree(head).items()}
            for path, entry in changes:
                if entry is None:
                    removed = [p for p in tree if p == path or p.startswith(path.rstrip("/") + "/")]
                    if not removed:
                        raise StoreError(404, "EntryNotFound", f"{path} does not exist")
                    for p in removed:
                        del tree[p]
                else:
                    if entry.lfs and not self.has_lfs(repo, entry.lfs, entry.size):
                        raise StoreError(422, "LfsObjectMissing", f"LFS object {entry.lfs} of {path} was not uploaded")
                    tree[path] = entry
            for key, data in blobs.items():
                self._write_blob(repo, key, data)
            date = now()
            body = json.dumps({"parent": head, "tree": {p: e.as_json() for p, e in sorted(tree.items())},
                               "title": title, "message": message, "date": date}, sort_keys=True).encode()
            oid = xxhash.xxh3_128_hexdigest(body) + xxhash.xxh32_hexdigest(body)
            self._db.execute("BEGIN")
            try:
                self._db.execute("INSERT INTO commits VALUES (?, ?, ?, ?, ?, ?, ?)",
                                 (oid, repo, head, title, message, date,
                                  json.dumps({p: e.as_json() for p, e in tree.items()})))
                self._db.execute("INSERT OR REPLACE INTO refs VALUES (?, 'branch', ?, ?)", (repo, branch, oid))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            return oid

    # -- content -----------------------------------------------------------------------------------------
    def _repo_dir(self, repo: str) -> Path:
        return self.root / "objects" / repo.replace("/", "--")

    def lfs_path(self, repo: str, oid: str) -> Path:
        return self._repo_dir(repo) / "lfs" / oid[:2] / oid

    def has_lfs(self, repo: str, oid: str, size: int | None = None) -> bool:
        row = self._db.execute("SELECT size FROM lfs WHERE repo=? AND oid=?", (repo, oid)).fetchone()
        return row is not None and (size is None or row[0] == size) and self.lfs_path(repo, oid).is_file()

    def put_lfs(self, repo: str, oid: str, size: int, body: BinaryIO) -> None:
        """Store an upload only if it is complete and its sha256 is the announced oid."""
        target = self.lfs_path(repo, oid)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".upload-")
        try:
            with os.fdopen(fd, "w+b") as handle:
                remaining = size
                while remaining:
                    chunk = body.read(min(remaining, 8 * 1024 * 1024))
                    if not chunk:
                        raise StoreError(400, "IncompleteUpload", f"upload of {oid} ended after {size - remaining} bytes")
                    handle.write(chunk)
                    remaining -= len(chunk)
                handle.seek(0)
                if sha_fileobj(handle).hex() != oid:
                    raise StoreError(400, "ShaMismatch", f"uploaded bytes do not hash to {oid}")
            os.replace(tmp, target)
        finally:
            Path(tmp).unlink(missing_ok=True)
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO lfs VALUES (?, ?, ?)", (repo, oid, size))

    def _blob_path(self, repo: str, key: str) -> Path:
        return self._repo_dir(repo) / "blobs" / key[:2] / key

    def _write_blob(self, repo: str, key: str, data: bytes) -> None:
        path = self._blob_path(repo, key)
        if not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_bytes(data)
            os.replace(tmp, path)

    def content_path(self, repo: str, entry: Entry) -> Path:
        return self.lfs_path(repo, entry.lfs) if entry.lfs else self._blob_path(repo, entry.oid)


def regular_entry(path: str, data: bytes) -> Entry:
    return Entry(path=path, size=len(data), oid=git_hash(data), lfs=None)


def lfs_entry(path: str, oid: str, size: int) -> Entry:
    return Entry(path=path, size=size, oid=git_hash(POINTER.format(oid=oid, size=size).encode()), lfs=oid)
