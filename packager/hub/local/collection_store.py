"""The local Hub's collections in SQLite (the store's database): one title per owner, one entry per item."""

from __future__ import annotations

import re
import secrets
import sqlite3
import threading
from typing import Any

from .rules import HubError

SCHEMA = """
CREATE TABLE IF NOT EXISTS collections (slug TEXT PRIMARY KEY, owner TEXT NOT NULL, title TEXT NOT NULL,
    description TEXT, private INTEGER NOT NULL, updated TEXT NOT NULL, UNIQUE (owner, title));
CREATE TABLE IF NOT EXISTS collection_items (oid TEXT PRIMARY KEY, slug TEXT NOT NULL, item_id TEXT NOT NULL,
    item_type TEXT NOT NULL, position INTEGER NOT NULL, note TEXT, UNIQUE (slug, item_type, item_id));
"""
COLUMNS = "slug, owner, title, description, private, updated"


def slug_of(owner: str, title: str) -> str:
    """owner/words-of-the-title-<24 hex>, as the Hub makes them."""
    words = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:60].strip("-") or "collection"
    return f"{owner}/{words}-{secrets.token_hex(12)}"


class Collections:
    def __init__(self, db: sqlite3.Connection, lock: threading.Lock) -> None:
        self._db, self._lock = db, lock
        with lock:
            db.executescript(SCHEMA)

    def create(self, owner: str, title: str, description: str | None, private: bool, now: str) -> tuple[bool, str]:
        """(created, slug): a new collection, or the slug of the owner's collection with this title."""
        with self._lock:
            row = self._db.execute("SELECT slug FROM collections WHERE owner=? AND title=?", (owner, title)).fetchone()
            if row:
                return False, row[0]
            slug = slug_of(owner, title)
            self._db.execute(
                f"INSERT INTO collections ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
                (slug, owner, title, description, int(private), now),
            )
            return True, slug

    def get(self, slug: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._db.execute(f"SELECT {COLUMNS} FROM collections WHERE slug=?", (slug,)).fetchone()
        return None if row is None else dict(zip(COLUMNS.split(", "), row))

    def owned_by(self, owners: list[str]) -> list[dict[str, Any]]:
        """Every collection of these owners (all collections when none is named), newest change first."""
        where = f" WHERE owner IN ({', '.join('?' * len(owners))})" if owners else ""
        with self._lock:
            rows = self._db.execute(
                f"SELECT {COLUMNS} FROM collections{where} ORDER BY updated DESC, slug", tuple(owners)
            ).fetchall()
        return [dict(zip(COLUMNS.split(", "), row)) for row in rows]

    def items(self, slug: str) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._db.execute(
                "SELECT oid, item_id, item_type, position, note FROM collection_items "
                "WHERE slug=? ORDER BY position, oid",
                (slug,),
            ).fetchall()
        return [{"oid": r[0], "id": r[1], "type": r[2], "position": r[3], "note": r[4]} for r in rows]

    def add(self, slug: str, item_id: str, item_type: str, note: str | None, now: str) -> bool:
        """False when the item is already in the collection (nothing changes then)."""
        with self._lock:
            if self._db.execute(
                "SELECT 1 FROM collection_items WHERE slug=? AND item_type=? AND item_id=?", (slug, item_type, item_id)
            ).fetchone():
                return False
            last = self._db.execute("SELECT MAX(position) FROM collection_items WHERE slug=?", (slug,)).fetchone()[0]
            self._db.execute(
                "INSERT INTO collection_items VALUES (?, ?, ?, ?, ?, ?)",
                (secrets.token_hex(12), slug, item_id, item_type, 0 if last is None else last + 1, note),
            )
            self._touch(slug, now)
            return True

    def update(self, slug: str, oid: str, changes: dict[str, Any], now: str) -> None:
        with self._lock:
            self._item(slug, oid)
            for column in ("note", "position"):
                if column in changes:
                    self._db.execute(f"UPDATE collection_items SET {column}=? WHERE oid=?", (changes[column], oid))
            self._touch(slug, now)

    def delete(self, slug: str, oid: str, now: str) -> None:
        with self._lock:
            self._item(slug, oid)
            self._db.execute("DELETE FROM collection_items WHERE oid=?", (oid,))
            self._touch(slug, now)

    def forget_repo(self, repo: str) -> None:
        """A deleted repo leaves every collection, as on the Hub."""
        with self._lock:
            self._db.execute("DELETE FROM collection_items WHERE item_type='model' AND item_id=?", (repo,))

    def _item(self, slug: str, oid: str) -> None:
        if not self._db.execute("SELECT 1 FROM collection_items WHERE slug=? AND oid=?", (slug, oid)).fetchone():
            raise HubError(404, "NotFound", f"item {oid[:40]} is not in the collection {slug}")

    def _touch(self, slug: str, now: str) -> None:
        self._db.execute("UPDATE collections SET updated=? WHERE slug=?", (now, slug))
