"""The local Hub's shared state: configuration, the store, faults and counters; its HTTP error type."""

from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass, field
from pathlib import Path

import xxhash

from .faults import Faults
from .store import Store


@dataclass
class HubConfig:
    root: Path
    write_tokens: frozenset[str] = field(repr=False)
    read_tokens: frozenset[str] = field(default=frozenset(), repr=False)
    test_hooks: bool = False
    secret: str = field(default_factory=lambda: secrets.token_hex(16), repr=False)

    @property
    def known_tokens(self) -> frozenset[str]:
        """Every token the server accepts at all (writers and readers)."""
        return self.write_tokens | self.read_tokens


class Hub:
    """Everything a request handler needs: the store, tokens, faults, counters."""

    def __init__(self, config: HubConfig) -> None:
        self.config = config
        self.store = Store(config.root)
        self.faults = Faults()
        self.lfs_bytes_received = 0
        self.commits_received = 0
        self._lock = threading.Lock()

    def capability(self, repo: str, oid: str) -> str:
        return xxhash.xxh3_128_hexdigest(f"{self.config.secret}:{repo}:{oid}".encode())

    def count_bytes(self, n: int) -> None:
        with self._lock:
            self.lfs_bytes_received += n


class HubError(Exception):
    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers or {}
