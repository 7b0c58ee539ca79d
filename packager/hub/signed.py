"""A remote revision's `model.sig`, checked against what the Hub holds: the signature verified with whom the
user trusts, its file list against the Hub's listing, and each file's digest against the Hub's bytes (or, after
an upload, the sha256 the Hub itself keys its LFS objects by). The digests are model-signing's."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..bundle.checksum import SIGNATURE
from ..errors import ContentMismatch, SignatureMalformed, SignatureUntrusted
from ..trust.signature import MAX_SIGNATURE_BYTES, Signed, Trust, check_coverage, read_signed
from .client import Hub
from .remote import KEEP, RemoteFile

Stream = Callable[[str, int, Callable[[bytes], None]], None]  # (path, size, sink): the file's bytes into sink


def hasher(hash_type: str) -> Any:
    """model-signing's streaming engine for the signature's hash."""
    from model_signing._hashing import memory

    engines = {"sha256": memory.SHA256, "blake2": memory.BLAKE2}
    if hash_type not in engines:
        raise SignatureMalformed(
            f"{SIGNATURE} uses {hash_type}, which packager checks only on local files",
            "pull with --files all and run packager verify-signature on the folder",
        )
    return engines[hash_type]()


def remote_signed(files: dict[str, RemoteFile], stream: Stream, trust: Trust, where: str) -> Signed:
    """The revision's signature, verified with `trust`, naming exactly the files the revision holds."""
    if SIGNATURE not in files:
        raise SignatureUntrusted(f"{where} holds no {SIGNATURE}", "sign the bundle (packager sign) and upload it")
    size = files[SIGNATURE].size
    if size > MAX_SIGNATURE_BYTES:
        raise SignatureMalformed(f"{SIGNATURE} of {where} is {size:,} bytes, more than any signature; not read")
    parts: list[bytes] = []
    stream(SIGNATURE, size, parts.append)
    with tempfile.TemporaryDirectory(prefix="packager-sig-") as work:
        path = Path(work) / SIGNATURE
        path.write_bytes(b"".join(parts))
        signed = read_signed(path, trust)
    check_coverage(signed, set(files) - {KEEP, SIGNATURE}, where)
    return signed


def check_uploaded(
    hub: Hub, repo_id: str, commit: str, files: dict[str, RemoteFile], stream: Stream, trust: Trust
) -> Signed:
    """After an upload: every LFS file's Hub sha256 is the signed digest; the small files are read back whole."""
    where = f"{repo_id}@{commit[:12]}"
    signed = remote_signed(files, stream, trust, where)
    bad = []
    for name in sorted(signed.digests):
        fact = files[name]
        if fact.sha256 is not None and signed.hash_type == "sha256":
            same = bytes.fromhex(fact.sha256) == signed.digests[name]
        else:
            engine = hasher(signed.hash_type)
            stream(name, fact.size, engine.update)
            same = engine.compute().digest_value == signed.digests[name]
        if not same:
            bad.append(name)
    if bad:
        raise ContentMismatch(f"{', '.join(bad)} on {where} differ from what {SIGNATURE} signed")
    return signed
