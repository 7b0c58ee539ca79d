"""The local Hub's metadata: repos, commits and refs in SQLite; content through `Objects`, per repo.

A commit is one SQLite transaction, so it lands whole or not at all; a restart loses nothing. A new repo
starts with an initial commit holding `.gitattributes`, as on the Hub, so every later commit has a parent.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import sqlite3
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import xxhash
from huggingface_hub.utils.sha import git_hash

from .collection_store import Collections
from .objects import Objects
from .rules import HubError

SCHEMA = """
CREATE TABLE IF NOT EXISTS repos (id TEXT PRIMARY KEY, private INTEGER NOT NULL, created TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS commits (oid TEXT PRIMARY KEY, repo TEXT NOT NULL, parent TEXT, title TEXT NOT NULL,
    message TEXT NOT NULL, date TEXT NOT NULL, tree TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS refs (repo TEXT NOT NULL, kind TEXT NOT NULL, name TEXT NOT NULL, target TEXT NOT NULL,
    PRIMARY KEY (repo, kind, name));
CREATE TABLE IF NOT EXISTS lfs (repo TEXT NOT NULL, oid TEXT NOT NULL, size INTEGER NOT NULL,
    PRIMARY KEY (repo, oid));
CREATE TABLE IF NOT EXISTS gating (repo TEXT PRIMARY KEY, mode TEXT NOT NULL);
"""
POINTER = "version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize {size}\n"
GITATTRIBUTES = "".join(
    f"*.{ext} filter=lfs diff=lfs merge=lfs -text\n"
    for ext in ("bin", "gguf", "h5", "mnn", "onnx", "pt", "pth", "safetensors", "weight", "zip")
)


@dataclass(frozen=True)
class Entry:
    path: str
    size: int
    oid: str  # git blob sha1 (of the content, or of the LFS pointer)
    lfs: str | None  # sha256 for LFS files

    def as_json(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size, "oid": self.oid, "lfs": self.lfs}


def regular_entry(path: str, data: bytes) -> Entry:
    return Entry(path=path, size=len(data), oid=git_hash(data), lfs=None)


def lfs_entry(path: str, oid: str, size: int) -> Entry:
    return Entry(path=path, size=size, oid=git_hash(POINTER.format(oid=oid, size=size).encode()), lfs=oid)


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


class Store:
    def __init__(self, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.objects = Objects(root)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(root / "hub.sqlite3", check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(SCHEMA)
        self.collections = Collections(self._db, self._lock)

    def _read(self, sql: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    # -- repos -------------------------------------------------------------------------------------------
    def create_repo(self, repo: str, private: bool) -> bool:
        """A new repo with its initial commit; False if it exists."""
        attributes = regular_entry(".gitattributes", GITATTRIBUTES.encode())
        self.objects.write_blob(repo, attributes.oid, GITATTRIBUTES.encode())
        with self._lock:
            if self._db.execute("SELECT 1 FROM repos WHERE id=?", (repo,)).fetchone():
                return False
            with self._transaction():
                self._db.execute("INSERT INTO repos VALUES (?, ?, ?)", (repo, int(private), now()))
                self._insert_commit(repo, "main", None, "initial commit", "", {attributes.path: attributes})
            return True

    def repo(self, repo: str) -> dict[str, Any] | None:
        rows = self._read("SELECT id, private, created FROM repos WHERE id=?", (repo,))
        return None if not rows else {"id": rows[0][0], "private": bool(rows[0][1]), "created": rows[0][2]}

    def repos(self) -> list[dict[str, Any]]:
        rows = self._read("SELECT id, private, created FROM repos ORDER BY id", ())
        return [{"id": repo, "private": bool(private), "created": created} for repo, private, created in rows]

    def set_private(self, repo: str, private: bool) -> None:
        with self._lock:
            self._db.execute("UPDATE repos SET private=? WHERE id=?", (int(private), repo))

    def gated(self, repo: str) -> str | bool:
        """'auto' or 'manual' for a gated repo, else False (the Hub's model-info `gated`)."""
        rows = self._read("SELECT mode FROM gating WHERE repo=?", (repo,))
        return rows[0][0] if rows else False

    def set_gated(self, repo: str, mode: str | bool) -> None:
        with self._lock:
            self._db.execute("DELETE FROM gating WHERE repo=?", (repo,))
            if mode:
                self._db.execute("INSERT INTO gating VALUES (?, ?)", (repo, mode))

    def delete_repo(self, repo: str) -> None:
        with self._lock:
            for table in ("repos", "commits", "refs", "lfs", "gating"):
                self._db.execute(f"DELETE FROM {table} WHERE {'id' if table == 'repos' else 'repo'}=?", (repo,))
        self.collections.forget_repo(repo)
        self.objects.delete_repo(repo)

    # -- refs and commits --------------------------------------------------------------------------------
    def resolve(self, repo: str, rev: str) -> str | None:
        """A branch, a tag or a commit oid -> commit oid (None for `main` of a repo without commits)."""
        for kind in ("branch", "tag"):
            rows = self._read("SELECT target FROM refs WHERE repo=? AND kind=? AND name=?", (repo, kind, rev))
            if rows:
                return rows[0][0]
        if self._read("SELECT 1 FROM commits WHERE repo=? AND oid=?", (repo, rev)):
            return rev
        if rev == "main":
            return None
        raise HubError(404, "RevisionNotFound", f"Invalid rev id: {rev}")

    def refs(self, repo: str) -> dict[str, list[dict[str, str]]]:
        rows = self._read("SELECT kind, name, target FROM refs WHERE repo=? ORDER BY name", (repo,))
        prefix = {"branch": "refs/heads/", "tag": "refs/tags/"}
        out: dict[str, list[dict[str, str]]] = {"branches": [], "tags": [], "converts": []}
        for kind, name, target in rows:
            out["branches" if kind == "branch" else "tags"].append(
                {"name": name, "ref": prefix[kind] + name, "targetCommit": target}
            )
        return out

    def tree(self, commit: str | None) -> dict[str, Entry]:
        if commit is None:
            return {}
        rows = self._read("SELECT tree FROM commits WHERE oid=?", (commit,))
        return {p: Entry(**e) for p, e in json.loads(rows[0][0]).items()}

    def commit_info(self, commit: str) -> dict[str, Any]:
        oid, parent, title, message, date = self._read(
            "SELECT oid, parent, title, message, date FROM commits WHERE oid=?", (commit,)
        )[0]
        return {"id": oid, "parent": parent, "title": title, "message": message, "date": date}

    def history(self, commit: str | None) -> list[dict[str, Any]]:
        items = []
        while commit:
            info = self.commit_info(commit)
            items.append(info)
            commit = info["parent"]
        return items

    def add_ref(self, repo: str, kind: str, name: str, commit: str) -> None:
        with self._lock:
            if self._db.execute("SELECT 1 FROM refs WHERE repo=? AND kind=? AND name=?", (repo, kind, name)).fetchone():
                raise HubError(409, f"{kind.title()}Conflict", f"{kind} {name} already exists")
            self._db.execute("INSERT INTO refs VALUES (?, ?, ?, ?)", (repo, kind, name, commit))

    # -- LFS bookkeeping ---------------------------------------------------------------------------------
    def has_lfs(self, repo: str, oid: str, size: int) -> bool:
        rows = self._read("SELECT size FROM lfs WHERE repo=? AND oid=?", (repo, oid))
        return bool(rows) and rows[0][0] == size and self.objects.sound(self.objects.lfs_path(repo, oid), size)

    def record_lfs(self, repo: str, oid: str, size: int) -> None:
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO lfs VALUES (?, ?, ?)", (repo, oid, size))

    def content_path(self, repo: str, entry: Entry) -> Path:
        return self.objects.lfs_path(repo, entry.lfs) if entry.lfs else self.objects.blob_path(repo, entry.oid)

    # -- commits -----------------------------------------------------------------------------------------
    def commit(
        self,
        repo: str,
        branch: str,
        parent_expected: str | None,
        title: str,
        message: str,
        changes: list[tuple[str, Entry | None]],
        blobs: dict[str, bytes],
    ) -> str:
        """Apply adds (Entry) and deletes (None) on top of the branch head in one transaction."""
        for key, data in blobs.items():
            self.objects.write_blob(repo, key, data)
        with self._lock:
            head = self._db.execute(
                "SELECT target FROM refs WHERE repo=? AND kind='branch' AND name=?", (repo, branch)
            ).fetchone()
            if head is None and branch != "main":
                raise HubError(404, "RevisionNotFound", f"Invalid rev id: {branch}")
            head = head[0] if head else None
            if parent_expected is not None and parent_expected != head:
                raise HubError(412, "PreconditionFailed", f"parentCommit {parent_expected} is not the head {head}")
            row = self._db.execute("SELECT tree FROM commits WHERE oid=?", (head,)).fetchone() if head else None
            tree = {p: Entry(**e) for p, e in json.loads(row[0]).items()} if row else {}
            for path, entry in changes:
                if entry is None:
                    removed = [p for p in tree if p == path.rstrip("/") or p.startswith(path.rstrip("/") + "/")]
                    if not removed:
                        raise HubError(404, "EntryNotFound", f"{path} does not exist")
                    for p in removed:
                        del tree[p]
                    continue
                if entry.lfs:
                    stored = self._db.execute(
                        "SELECT size FROM lfs WHERE repo=? AND oid=?", (repo, entry.lfs)
                    ).fetchone()
                    if (
                        not stored
                        or stored[0] != entry.size
                        or not self.objects.sound(self.objects.lfs_path(repo, entry.lfs), entry.size)
                    ):
                        raise HubError(422, "LfsObjectMissing", f"the LFS object of {path} was not uploaded")
                tree[path] = entry
            with self._transaction():
                return self._insert_commit(repo, branch, head, title, message, tree)

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        self._db.execute("BEGIN")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def _insert_commit(
        self, repo: str, branch: str, head: str | None, title: str, message: str, tree: dict[str, Entry]
    ) -> str:
        date = now()
        entries = {p: e.as_json() for p, e in sorted(tree.items())}
        body = json.dumps(
            {"repo": repo, "parent": head, "tree": entries, "title": title, "message": message, "date": date},
            sort_keys=True,
        ).encode()
        oid = xxhash.xxh3_128_hexdigest(body) + xxhash.xxh32_hexdigest(body)
        self._db.execute(
            "INSERT INTO commits VALUES (?, ?, ?, ?, ?, ?, ?)",
            (oid, repo, head, title, message, date, json.dumps(entries)),
        )
        self._db.execute("INSERT OR REPLACE INTO refs VALUES (?, 'branch', ?, ?)", (repo, branch, oid))
        return oid
