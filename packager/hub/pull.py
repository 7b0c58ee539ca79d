"""`packager pull`: what an app (or its release engineer) runs to fetch a bundle it can trust.

Every file taken is checked whole against the revision's xxh3-128 manifest and, when the release is signed,
against its `model.sig` (a partial pull checks the subset it took). DIR is written only when everything
passed: a refused pull leaves nothing in it. DIR holds the manifest too: the release's for a full pull, its lines
of the files taken for an app's pull.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ..bundle.checksum import MANIFEST, SIGNATURE, parse_manifest
from ..bundle.checksum import render as render_manifest
from ..bundle.engine import parse_version
from ..bundle.kinds import OPTIONAL, kind_from_names
from ..errors import ContentMismatch, EngineTooOld, InvalidOption, SignatureMalformed, SignatureUntrusted, shorten
from ..infra.hashing import xxh3_128_file
from ..infra.progress import Progress
from ..trust.signature import MAX_SIGNATURE_BYTES, Signed, Trust, check_coverage, mismatched, read_signed

if TYPE_CHECKING:
    from .client import Hub
    from .fetch import Meter, Staging

ENGINE_FILE = "runtime_config.json"  # declares the oldest MNN engine the bundle runs on


@dataclass(frozen=True)
class PullRequest:
    repo_id: str
    dest: Path
    revision: str = "main"
    files: Literal["app", "all"] = "app"
    trust: Trust = Trust()
    require_signature: bool = False
    engine: str | None = None  # the app's MNN version: a bundle needing a newer one is refused
    endpoint: str | None = None
    token: str | None = None
    timeout: float = 30.0  # seconds a download may deliver nothing before it is retried (then fails)


@dataclass(frozen=True)
class PullResult:
    repo_id: str
    revision: str
    commit: str
    dest: Path
    files: tuple[str, ...]
    signer: str | None  # the key id or identity the signature was verified against; None: not checked
    signed: bool  # the revision has a model.sig
    min_engine: str | None


def check_request(request: PullRequest) -> None:
    """What no download can fix, refused before the Hub is contacted."""
    from ..errors import HubBadTarget
    from .names import repo_id_problem, revision_problem

    if (problem := repo_id_problem(request.repo_id)) is not None:
        raise HubBadTarget(f"invalid repo id: {problem}", "give the repo as namespace/name[@revision]")
    if (problem := revision_problem(request.revision)) is not None:
        raise HubBadTarget(
            f"{shorten(request.repo_id)}@{shorten(request.revision)}: {problem}",
            "give the revision after @ (a branch, tag or commit id), or no @ for main",
        )
    if request.engine is not None:
        try:
            parse_version(request.engine)
        except ValueError as exc:
            raise InvalidOption(f"--engine: {exc}", "give the app's MNN version, e.g. --engine 3.6.1") from None
    request.trust.check()
    if request.require_signature and not request.trust.given:
        raise InvalidOption(
            "--require-signature needs whom to trust", "add --public-key KEY.pub (or --identity and --issuer)"
        )


def destination(dest: Path) -> Path:
    """DIR as an absolute path whose folders are resolved as the system resolves them (`new/../draft` is `draft`
    beside `new`, also when `new` does not exist yet), its last name kept (DIR itself a link is refused, not
    followed): a pull makes, and removes again, only the folders DIR lies in."""
    dest = dest.absolute()
    if dest.name == "..":
        return Path(os.path.realpath(dest))
    return Path(os.path.realpath(dest.parent)) / dest.name


def pull(request: PullRequest, progress: Progress = lambda _: None, meter: Meter | None = None) -> PullResult:
    """`meter` draws a byte progress bar for each large file (None: the stage lines only)."""
    from ..errors import HubError, HubVerificationFailed
    from .client import READING_HINTS, connect, with_retries
    from .fetch import download
    from .remote import KEEP, files_at, manifest_size
    from .staging import Staging, check_dest

    check_request(request)
    dest = destination(request.dest)
    check_dest(dest)
    hints = {
        **READING_HINTS,
        HubError: "rerun the same pull",
        HubVerificationFailed: "the Hub's copy is not what was released; tell the publisher (packager "
        "verify-remote names every damaged file)",
    }
    hub = connect(request.endpoint, request.token, hints)
    where = f"{request.repo_id}@{shorten(request.revision)}"
    commit = with_retries(
        hub, f"reading {where}", lambda: hub.api.repo_info(request.repo_id, revision=request.revision).sha
    )
    listing = files_at(hub, request.repo_id, commit)
    held = set(listing) - {KEEP, SIGNATURE}
    _check_listing(held, request.files, where)
    fetch: dict[str, Any] = {"timeout": request.timeout, "progress": progress, "meter": meter}
    with Staging(dest) as stage:
        signed = _signature(hub, stage, request, commit, listing, held, where, progress)
        path = download(
            hub, stage, request.repo_id, commit, MANIFEST, manifest_size(listing, where), fresh=True, **fetch
        )
        listed = parse_manifest(path.read_text(encoding="utf-8", errors="replace"), Path(MANIFEST))
        wanted = _wanted(request.files, listed, held, where)
        for name in wanted + ([ENGINE_FILE] if request.engine and ENGINE_FILE not in wanted else []):
            _fetch_checked(hub, stage, request, commit, name, listing[name].size, listed, signed, where, fetch)
        if signed is not None and mismatched(stage.files, signed, [MANIFEST]):
            raise ContentMismatch(f"{MANIFEST} of {where} differs from what {SIGNATURE} signed")
        min_engine = _engine_check(stage.path(ENGINE_FILE), request.engine, where) if request.engine else None
        # A full pull is the whole release, checkable again later; an app's pull is what it runs, with the manifest's
        # lines of those files: `xxhsum -c checksums.xxh128` and `packager validate` check either folder.
        keep = [*wanted, MANIFEST, *([SIGNATURE] if SIGNATURE in listing and request.files == "all" else [])]
        if request.files == "app":
            stage.write(MANIFEST, render_manifest({name: listed[name] for name in wanted}))
        stage.publish(keep)
    return PullResult(
        request.repo_id,
        request.revision,
        commit,
        dest,
        tuple(sorted(keep)),
        signer=signed.signer if signed else None,
        signed=SIGNATURE in listing,
        min_engine=min_engine,
    )


def _check_listing(held: set[str], files: str, where: str) -> None:
    """Before any download: the revision has what is asked for, and no path a flat bundle cannot hold."""
    from ..errors import HubVerificationFailed

    if files == "all" and (odd := sorted(n for n in held if "/" in n or "\\" in n)):
        raise ContentMismatch(
            f"{where} holds {shorten(odd[0], 120)}, which is no file of a flat bundle; nothing was downloaded"
        )
    needed = [MANIFEST, *(kind_from_names(held).app_files if files == "app" else ())]
    if absent := [name for name in needed if name not in held]:
        raise HubVerificationFailed(
            f"{where} lacks {', '.join(absent)}; nothing was downloaded", "pull a revision packager released"
        )


def _wanted(files: str, listed: dict[str, str], held: set[str], where: str) -> list[str]:
    """app: the seven runtime files; all: every file the manifest lists, which must be every file there is."""
    if files == "app":  # the kind's runtime files, and the optional ones the release holds
        return [*kind_from_names(held).app_files, *(name for name in OPTIONAL if name in held)]
    if unlisted := sorted(held - set(listed) - {MANIFEST}):
        raise ContentMismatch(
            f"{where} holds {', '.join(shorten(n, 60) for n in unlisted[:5])}, which its "
            f"{MANIFEST} does not list; nothing was written"
        )
    if absent := sorted(set(listed) - held):
        raise ContentMismatch(f"{where} lacks {', '.join(absent[:5])}, which its {MANIFEST} lists")
    return sorted(listed)


def _signature(
    hub: Hub,
    stage: Staging,
    request: PullRequest,
    commit: str,
    listing: dict,
    held: set[str],
    where: str,
    progress: Progress,
) -> Signed | None:
    """The revision's verified signature (before any large download), or None when there is none to check."""
    from .fetch import download

    if SIGNATURE not in listing:
        if request.trust.given or request.require_signature:
            raise SignatureUntrusted(
                f"{where} is not signed (no {SIGNATURE}); nothing was downloaded",
                "ask the publisher for a signed release, or pull without "
                "--require-signature/--public-key to accept an unsigned one",
            )
        return None
    size = listing[SIGNATURE].size
    if size > MAX_SIGNATURE_BYTES:
        raise SignatureMalformed(f"{SIGNATURE} of {where} is {size:,} bytes, more than any signature; not downloaded")
    # Small, and perhaps left by a run against another commit: always fetched afresh.
    path = download(
        hub,
        stage,
        request.repo_id,
        commit,
        SIGNATURE,
        size,
        fresh=True,
        timeout=request.timeout,
        progress=progress,
    )
    if not request.trust.given:
        return None
    signed = read_signed(path, request.trust)
    check_coverage(signed, held, where)
    return signed


def _fetch_checked(
    hub: Hub,
    stage: Staging,
    request: PullRequest,
    commit: str,
    name: str,
    size: int,
    listed: dict[str, str],
    signed: Signed | None,
    where: str,
    fetch: dict,
) -> None:
    """Download `name` and check it whole; a file from an interrupted run that fails is fetched once afresh."""
    from .fetch import download

    progress = fetch["progress"]
    if name not in listed:
        raise ContentMismatch(f"{name} of {where} is not in its {MANIFEST}, so it cannot be checked")
    for fresh in (False, True):
        path = download(
            hub,
            stage,
            request.repo_id,
            commit,
            name,
            size,
            fresh=fresh,
            **fetch,
        )
        problem = _problem(stage.files, path, name, listed, signed)
        if problem is None:
            return
        if fresh or not stage.resumed:
            break
        progress(f"{name}: the file resumed from an earlier run is not right; downloading it again from the start")
    raise ContentMismatch(f"{name} of {where} {problem}; nothing was written to {shorten(str(request.dest), 120)}")


def _problem(folder: Path, path: Path, name: str, listed: dict[str, str], signed: Signed | None) -> str | None:
    # The signature first: when a file and its manifest line were both replaced, only the signature can tell.
    if signed is not None and mismatched(folder, signed, [name]):
        return f"differs from what {SIGNATURE} signed"
    if xxh3_128_file(path) != listed[name]:
        return f"does not match its {MANIFEST} line"
    return None


def _engine_check(path: Path, engine: str, where: str) -> str | None:
    try:
        declared = json.loads(path.read_text(encoding="utf-8"))["min_mnn_engine"]["version"]
        needed = parse_version(str(declared))
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        raise EngineTooOld(
            f"{where} does not declare its minimum MNN engine ({ENGINE_FILE}), so --engine "
            f"{engine} cannot be checked; nothing was written",
            "pull without --engine",
        ) from None
    if needed > parse_version(engine):
        raise EngineTooOld(f"{where} needs MNN >= {declared}, newer than --engine {engine}; nothing was written")
    return str(declared)
