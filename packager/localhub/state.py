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


@dataclass(frozen=True)
class HubConfig:
    root: Path
    write_tokens: frozenset[str] = field(repr=False)
    read_tokens: frozenset[str] = field(default=frozenset(), repr=False)
    test_hooks: bool = False
    secret: str = field(default_factory=lambda: secrets.token_hex(16), repr=False)
    body_idle_seconds: float = BODY_IDLE_SECONDS

    def role(self, token: str) -> str | None:
        """'write', 'read' or None (unknown), compared in constant time."""
        def known(tokens: frozenset[str]) -> bool:
            return any(hmac.compare_digest(token.encode(), t.encode()) for t in tokens)

        return "write" if known(self.write_tokens) else "read" if known(self.read_tokens) else None


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
