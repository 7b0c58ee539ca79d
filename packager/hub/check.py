"""verify-remote: stream every file of a remote revision and check it against that revision's own xxh3-128
manifest, in bounded time: a stalled, short or refused download fails naming the file."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import xxhash

from ..bundle.checksum import MANIFEST, SIGNATURE, parse_manifest
from ..errors import HubBadTarget, HubError, HubVerificationFailed, Unreadable, shorten
from ..infra.progress import Progress, Step
from ..trust.signature import Trust
from .client import READING_HINTS, Hub, connect, translate, with_retries
from .names import repo_id_problem, revision_problem
from .remote import KEEP, files_at, manifest_size

MIN_RATE = 1_000_000  # bytes/s: below this average a download is abandoned, however it trickles


@dataclass(frozen=True)
class RemoteCheck:
    repo_id: str
    revision: str
    commit: str
    checked: int
    mismatched: tuple[str, ...]
    missing: tuple[str, ...]
    extra: tuple[str, ...]
    # none | verified | failed (a file differs from what it signed) | not checked (no --public-key / --identity)
    signature: str = "none"
    signer: str | None = None
    not_as_signed: tuple[str, ...] = ()  # files whose bytes differ from what model.sig signed

    @property
    def ok(self) -> bool:
        return not (self.mismatched or self.missing or self.extra or self.not_as_signed)

    @property
    def tampered(self) -> bool:
        """A signed file differs from what the trusted signer signed (whatever the manifest says)."""
        return bool(self.not_as_signed)


def _stream(
    hub: Hub, repo_id: str, commit: str, path: str, size: int, timeout: float, sink: Callable[[bytes], None]
) -> None:
    """GET the file, feeding `sink`; at most `timeout` s without data and MIN_RATE on average."""
    import httpx2
    from huggingface_hub import hf_hub_url
    from huggingface_hub.utils import build_hf_headers, get_session

    url = hf_hub_url(repo_id, path, revision=commit, endpoint=hub.endpoint)
    deadline = time.monotonic() + timeout + size / MIN_RATE
    received = 0
    try:
        with get_session().stream(
            "GET", url, headers=build_hf_headers(token=hub.token), timeout=timeout, follow_redirects=True
        ) as response:
            if response.status_code in (401, 403):  # the credentials, not the Hub's copy: as pull says it
                from huggingface_hub.utils import hf_raise_for_status

                response.read()
                try:
                    hf_raise_for_status(response)
                except Exception as exc:
                    raise translate(hub, exc, f"reading {path} of {repo_id}") from None
            if response.status_code != 200:
                raise Unreadable(
                    f"could not read {path}: the Hub answered {response.status_code}{_reason(hub, response)}"
                )
            for chunk in response.iter_bytes():
                received += len(chunk)
                if received > size:
                    raise Unreadable(f"could not read {path}: the Hub sends more than the {size:,} bytes it lists")
                sink(chunk)
                if time.monotonic() > deadline:
                    raise Unreadable(
                        f"could not read {path}: only {received:,} of {size:,} bytes in "
                        f"{timeout + size / MIN_RATE:.0f} s"
                    )
    except httpx2.TimeoutException:
        raise Unreadable(
            f"could not read {path}: no data for {timeout:g} s after {received:,} of {size:,} bytes"
        ) from None
    except (httpx2.HTTPError, ConnectionError) as exc:
        raise Unreadable(f"could not read {path}: {type(exc).__name__} after {received:,} of {size:,} bytes") from None
    if received != size:
        raise Unreadable(f"could not read {path}: got {received:,} bytes, the Hub lists {size:,}")


def _reason(hub: Hub, response: Any) -> str:
    """(the Hub's error message)", or nothing when the answer has none."""
    try:
        message = response.read() and response.json().get("error", "")
    except Exception:
        return ""
    return f" ({hub.redact(str(message))[:200]})" if message else ""


def verify_remote(
    repo_id: str,
    revision: str = "main",
    endpoint: str | None = None,
    token: str | None = None,
    timeout: float = 30.0,
    progress: Progress = lambda _: None,
    trust: Trust = Trust(),
) -> RemoteCheck:
    """Check every file of the revision against the revision's own xxh3-128 manifest and, when it is signed and
    `trust` says by whom, against its model.sig (the same bytes feed both)."""
    from .signed import hasher, remote_signed

    if (problem := repo_id_problem(repo_id)) is not None:
        raise HubBadTarget(f"invalid repo id: {problem}", "give the repo as namespace/name[@revision]")
    where = f"{repo_id}@{shorten(revision)}"
    if (problem := revision_problem(revision)) is not None:
        raise HubBadTarget(
            f"{where}: {problem}", "give the revision after @ (a branch, tag or commit id), or no @ for main"
        )
    trust.check()
    hub = connect(endpoint, token, {**READING_HINTS, HubError: "rerun the same command"})
    commit = with_retries(hub, f"reading {where}", lambda: hub.api.repo_info(repo_id, revision=revision).sha)
    files = files_at(hub, repo_id, commit)
    if MANIFEST not in files:
        raise HubVerificationFailed(f"{where} has no {MANIFEST}", "upload the bundle with packager upload")
    size = manifest_size(files, where)  # before anything is downloaded

    def stream(name: str, size: int, sink: Callable[[bytes], None]) -> None:
        _stream(hub, repo_id, commit, name, size, timeout, sink)

    signed = remote_signed(files, stream, trust, where) if trust.given else None
    parts: list[bytes] = []
    stream(MANIFEST, size, parts.append)
    listed = parse_manifest(b"".join(parts).decode("utf-8", errors="replace"), Path(MANIFEST))
    present = set(files) - {MANIFEST, KEEP, SIGNATURE}
    mismatched, not_as_signed = [], []
    if signed is not None and not _as_signed(signed, MANIFEST, parts, hasher):
        not_as_signed.append(MANIFEST)
    checked = sorted(set(listed) & present)
    for number, name in enumerate(checked):
        progress(Step(f"checking {name}", number, len(checked), "checking files"))
        digest = xxhash.xxh3_128()
        engines = [digest] + ([hasher(signed.hash_type)] if signed is not None else [])
        stream(name, files[name].size, _feeding(engines))
        if digest.hexdigest() != listed[name]:
            mismatched.append(name)
        if signed is not None and engines[1].compute().digest_value != signed.digests.get(name):
            not_as_signed.append(name)
    return RemoteCheck(
        repo_id=repo_id,
        revision=revision,
        commit=commit,
        checked=len(set(listed) & present),
        mismatched=tuple(mismatched),
        missing=tuple(sorted(set(listed) - present)),
        extra=tuple(sorted(present - set(listed))),
        signature=("failed" if not_as_signed else "verified")
        if signed
        else "not checked"
        if SIGNATURE in files
        else "none",
        signer=signed.signer if signed else None,
        not_as_signed=tuple(sorted(not_as_signed)),
    )


def _as_signed(signed: Any, name: str, parts: list[bytes], hasher: Callable[[str], Any]) -> bool:
    engine = hasher(signed.hash_type)
    for part in parts:
        engine.update(part)
    return bool(engine.compute().digest_value == signed.digests.get(name))


def _feeding(engines: list[Any]) -> Callable[[bytes], None]:
    """A sink that feeds each chunk to every hash engine."""

    def feed(chunk: bytes) -> None:
        for engine in engines:
            engine.update(chunk)

    return feed
