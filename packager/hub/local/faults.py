"""Fault injection for the local Hub's tests: answer a matching request with a status, or drop it."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Fault:
    method: str  # "*": any
    path: str  # substring of the request path
    status: int = 500
    times: int = 1
    every: int = 1  # answer only every Nth matching request (the others pass on): a share of a busy Hub's requests
    retry_after: int | None = None
    drop_after_bytes: int | None = None  # read this much of the body, then close the connection
    after: bool = False  # perform the operation, then answer with the fault (a lost answer)
    stall_after_bytes: int | None = None  # a download: send the headers and this much, then nothing more
    foreign: bool = False  # a commit lands with this summary but another uploader's description; then the fault
    barrier: int = 0  # hold matching requests until this many have arrived, then let them all through
    seen: int = field(default=0, init=False)  # matching requests so far (for `every`)

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)} if self.retry_after is not None else {}


class Faults:
    def __init__(self) -> None:
        self._rules: list[Fault] = []
        self._lock = threading.Lock()
        self._arrived: dict[int, tuple[int, asyncio.Event]] = {}

    def replace(self, rules: list[dict[str, Any]]) -> None:
        with self._lock:
            self._rules = [Fault(**rule) for rule in rules]  # a wrong key is a TypeError: the caller answers 400
            self._arrived = {}

    async def meet(self, rule: Fault, timeout: float = 120.0) -> None:
        """Wait until `rule.barrier` requests reached it (two uploads are then surely at the same step)."""
        count, event = self._arrived.get(id(rule), (0, asyncio.Event()))
        self._arrived[id(rule)] = (count + 1, event)
        if count + 1 >= rule.barrier:
            event.set()
        await asyncio.wait_for(event.wait(), timeout)

    def take(self, method: str, path: str) -> Fault | None:
        """The rule that answers this request, if one does; the test hooks' own routes are never faulted."""
        if path.startswith("/_"):
            return None
        with self._lock:
            for rule in self._rules:
                if rule.times > 0 and rule.method in (method, "*") and rule.path in path:
                    rule.seen += 1
                    if rule.seen % max(1, rule.every):
                        continue  # not this one: a later rule may still answer it
                    rule.times -= 1
                    return rule
        return None

    def left(self) -> int:
        with self._lock:
            return sum(rule.times for rule in self._rules)
