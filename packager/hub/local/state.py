"""The local Hub's shared state: configuration, the store, faults and counters."""

from __future__ import annotations

import hmac
import secrets
import threading
from dataclasses import dataclass, field
from pathlib import Path

import xxhash

from .faults import Faults
from .store import Store

# Request bodies the API reads whole; LFS uploads stream to disk and are capped by their announced size.
JSON_CAP = 1_000_000
COMMIT_CAP = 64_000_000
LFS_CAP = 50_000_000_000
BODY_IDLE_SECONDS = 30.0  # a body that sends nothing for this long is abandoned (a Content-Length lie)
DEFAULT_USER = "local"  # whoever holds a token configured without a user name


@dataclass(frozen=True)
class HubConfig:
    root: Path
    write_tokens: frozenset[str] = field(repr=False)
    read_tokens: frozenset[str] = field(default=frozenset(), repr=False)
    test_hooks: bool = False
    run_jobs: bool = False  # answer the Jobs API by running each job's command here (hub/local/jobs.py)
    secret: str = field(default_factory=lambda: secrets.token_hex(16), repr=False)
    body_idle_seconds: float = BODY_IDLE_SECONDS

    def role(self, token: str) -> str | None:
        """'write', 'read' or None (unknown), compared in constant time."""
        found = self.identify(token)
        return found[1] if found else None

    def identify(self, token: str) -> tuple[str, str] | None:
        """(user, 'write' or 'read') for a known token, compared in constant time; None for an unknown one.
        A configured token is `SECRET` (the default user) or `USER:SECRET`."""
        for role, tokens in (("write", self.write_tokens), ("read", self.read_tokens)):
            for entry in tokens:
                user, _, secret = entry.rpartition(":")
                if hmac.compare_digest(token.encode(), secret.encode()):
                    return user or DEFAULT_USER, role
        return None

    @property
    def named_users(self) -> frozenset[str]:
        return frozenset(e.rpartition(":")[0] for e in self.write_tokens | self.read_tokens if ":" in e)

    def may_write(self, user: str, namespace: str) -> bool:
        """A named user writes only its own namespace; the default user every namespace no named user owns
        (it stands for the one person rehearsing releases, a member of every organization)."""
        if user != DEFAULT_USER:
            return namespace == user
        return namespace not in self.named_users

    def kind(self, namespace: str) -> str:
        """'user' for the default and the named users, 'org' for every other namespace."""
        return "user" if namespace == DEFAULT_USER or namespace in self.named_users else "org"


class Hub:
    """Everything a request handler needs: the store, tokens, faults, counters."""

    def __init__(self, config: HubConfig) -> None:
        self.config = config
        self.store = Store(config.root)
        self.faults = Faults()
        self.lfs_bytes_received = 0
        self.commits_received = 0
        self.unpinned_commits = 0  # commits sent without parentCommit (packager never sends one)
        self._lock = threading.Lock()

    def capability(self, repo: str, oid: str) -> str:
        """The upload URL's secret: LFS PUTs carry no token, so the URL itself must be unguessable."""
        return xxhash.xxh3_128_hexdigest(f"{self.config.secret}:{repo}:{oid}".encode())

    def count_bytes(self, n: int) -> None:
        with self._lock:
            self.lfs_bytes_received += n
