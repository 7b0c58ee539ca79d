"""Reading and checking a `model.sig` through model-signing's API: who signed it (a public key or a sigstore
identity), which files it names, and whether files on disk are the ones it signed.

Verification is decided from the library's results (a returned manifest, raised errors), never from its CLI,
whose `verify` exits 0 on failure. The per-file comparison is ours so that a partial download can be checked
against the subset it took; the digests themselves are computed by the library.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, cast

from ..bundle.checksum import SIGNATURE
from ..errors import (
    BundleError,
    ContentMismatch,
    SignatureCoverage,
    SignatureMalformed,
    SignatureUnsafePath,
    SignatureUntrusted,
    SigstoreFailed,
    from_os_error,
    shorten,
)
from .keys import key_hint

MAX_SIGNATURE_BYTES = 1024 * 1024  # a key-signed bundle of twelve files is ~3 KB, a keyless one ~10 KB
HASH_TYPES = ("sha256", "blake2", "blake3")


@dataclass(frozen=True)
class Trust:
    """Whom the user trusts: a public key file, or a sigstore identity and its OIDC issuer."""

    public_key: Path | None = None
    identity: str | None = None
    issuer: str | None = None

    @property
    def given(self) -> bool:
        return self.public_key is not None or self.identity is not None

    def check(self) -> None:
        """Refuse a contradictory or half-given trust before anything is downloaded."""
        from ..errors import InvalidOption

        if self.public_key is not None and self.identity is not None:
            raise InvalidOption("--public-key and --identity both given", "trust either a key or a sigstore identity")
        if (self.identity is None) != (self.issuer is None):
            raise InvalidOption(
                "--identity and --issuer go together",
                "give both, e.g. --issuer https://token.actions.githubusercontent.com",
            )

    def describe(self) -> str:
        if self.public_key is not None:
            return f"the key {shorten(str(self.public_key), 120)}"
        return f"{shorten(self.identity or '', 120)} (issuer {shorten(self.issuer or '', 120)})"


@dataclass(frozen=True)
class Signed:
    """What a verified signature says: each file's digest, the hash it used and who signed it."""

    digests: dict[str, bytes]
    hash_type: str
    signer: str


def read_signature(path: Path) -> bytes:
    """model.sig's bytes, read once: opened without following a link (O_NOFOLLOW) nor waiting on a FIFO, and only
    when it is a regular file, so that what is checked is what was read (never a file a link points to)."""
    shown = shorten(str(path), 120)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise SignatureUntrusted(
            f"{shorten(str(path.parent), 120)} holds no {SIGNATURE} (it is not signed)",
            "sign it with packager sign, or ask its publisher for a signed release",
        ) from None
    except OSError as exc:
        if exc.errno != errno.ELOOP:  # ELOOP: the last component is a link
            raise from_os_error(exc, f"cannot read {SIGNATURE}") from None
        raise _not_regular(shown) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _not_regular(shown)
        if info.st_size > MAX_SIGNATURE_BYTES:
            raise SignatureMalformed(
                f"{SIGNATURE} is {info.st_size:,} bytes, more than any signature "
                f"({MAX_SIGNATURE_BYTES:,} at most); it was not read"
            )
        data = bytearray()
        while len(data) <= MAX_SIGNATURE_BYTES and (chunk := os.read(fd, MAX_SIGNATURE_BYTES + 1 - len(data))):
            data += chunk
    finally:
        os.close(fd)
    if len(data) > MAX_SIGNATURE_BYTES:  # it grew while being read
        raise SignatureMalformed(f"{SIGNATURE} is more than any signature ({MAX_SIGNATURE_BYTES:,} bytes at most)")
    return bytes(data)


def _not_regular(shown: str) -> BundleError:
    return BundleError(
        f"{shown} is not a regular file (a link, folder, FIFO or device); nothing was read from it",
        f"a signed bundle holds its {SIGNATURE} as a regular file: replace it with the publisher's, "
        "or sign again with packager sign",
    )


def _parsed(data: bytes) -> dict:
    try:
        document = json.loads(data)
    except (ValueError, RecursionError):
        raise SignatureMalformed(f"{SIGNATURE} is not JSON") from None
    if not isinstance(document, dict) or not isinstance(document.get("verificationMaterial"), dict):
        raise SignatureMalformed(f"{SIGNATURE} is JSON but no sigstore bundle (no verificationMaterial)")
    return document


def _keyless(document: dict) -> bool:
    """Whether a bundle was signed keyless: its verification material holds a certificate (sigstore) rather than
    a public key's hint. Holding neither (or both), it is no signature model-signing made."""
    material = document["verificationMaterial"]
    key = "publicKey" in material
    certificate = "certificate" in material or "x509CertificateChain" in material
    if key == certificate:
        held = "both a public key and a certificate" if key else "neither a public key nor a certificate"
        raise SignatureMalformed(f"{SIGNATURE}'s verificationMaterial holds {held}, so it names no signer")
    return certificate


def _verifier(trust: Trust, keyless: bool) -> object:
    if trust.public_key is not None:
        if keyless:
            raise SignatureUntrusted(
                f"{SIGNATURE} was signed keyless (sigstore), not with a key; nothing was trusted",
                "verify it with --identity and --issuer",
            )
        from model_signing._signing import sign_ec_key

        return sign_ec_key.Verifier(_public_key(trust.public_key))
    if not keyless:
        raise SignatureUntrusted(f"{SIGNATURE} was signed with a key, not keyless", "verify it with --public-key")
    from model_signing._signing import sign_sigstore

    try:
        return sign_sigstore.Verifier(identity=trust.identity or "", oidc_issuer=trust.issuer or "")
    except Exception as exc:
        raise SigstoreFailed(
            f"sigstore's trust root could not be loaded to verify {SIGNATURE}: "
            f"{type(exc).__name__}: {shorten(str(exc), 160)}"
        ) from None


def _public_key(path: Path) -> Path:
    """The file, once it is known to hold an EC public key model-signing accepts."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    from ..errors import PublicKeyInvalid, SigningKeyCurve, SigningKeyInvalid
    from ..infra.userfile import read_bytes
    from .keys import CURVES, MAX_KEY_BYTES

    shown = shorten(str(path), 120)
    if not path.is_file():  # a folder, or a FIFO that would block the read
        raise SigningKeyInvalid(f"public key {shown} is not a PEM public key file", "pass the publisher's key.pub")
    data = read_bytes(path, MAX_KEY_BYTES, what="public key", unreadable=PublicKeyInvalid, too_large=PublicKeyInvalid)
    try:
        key = serialization.load_pem_public_key(data)
    except Exception:
        raise SigningKeyInvalid(f"public key {shown} is not a PEM public key", "pass the publisher's key.pub") from None
    if not isinstance(key, ec.EllipticCurvePublicKey) or key.curve.name not in CURVES:
        raise SigningKeyCurve(f"public key {shown} is not an EC key on P-256, P-384 or P-521")
    return path


def read_signed(path: Path, trust: Trust) -> Signed:
    """Verify the signature's envelope with `trust`; what it signed. No file of the bundle is read here."""
    data = read_signature(path)
    keyless = _keyless(_parsed(data))
    verifier = _verifier(trust, keyless)
    from model_signing._signing import sign_sigstore, sign_sigstore_pb

    kind = sign_sigstore.Signature if keyless else sign_sigstore_pb.Signature
    try:
        with tempfile.TemporaryDirectory(prefix="packager-sig-") as work:  # the library reads a path: these bytes
            copy = Path(work) / SIGNATURE
            copy.write_bytes(data)
            signature = kind.read(copy)
    except Exception:
        raise SignatureMalformed(f"{SIGNATURE} is JSON but not a sigstore bundle model-signing can read") from None
    try:
        manifest = verifier.verify(signature)  # type: ignore[attr-defined]
    except Exception as exc:
        reason = shorten(str(exc).split(". ")[0], 120) or type(exc).__name__
        raise SignatureUntrusted(f"{SIGNATURE} is not signed by {trust.describe()} ({reason})") from None
    return _signed(manifest, key_hint(data) or (trust.identity or ""))


def _signed(manifest: object, signer: str) -> Signed:
    kind = manifest.serialization_type  # type: ignore[attr-defined]
    hash_type = kind.get("hash_type")
    if kind.get("method") != "files" or hash_type not in HASH_TYPES:
        raise SignatureMalformed(
            f"{SIGNATURE} signs {shorten(str(kind.get('method')), 40)!r} serialization with "
            f"{shorten(str(hash_type), 40)!r}; packager signs and checks whole files"
        )
    digests: dict[str, bytes] = {}
    for item in manifest.resource_descriptors():  # type: ignore[attr-defined]
        name = item.identifier
        if name in ("", ".", "..") or "/" in name or "\\" in name or "\x00" in name:
            where = "outside the bundle folder" if ".." in name.split("/") else "not a file of the flat bundle"
            raise SignatureUnsafePath(f"{SIGNATURE} names {shorten(name, 120)!r}, {where}")
        digests[name] = item.digest.digest_value
    return Signed(digests=digests, hash_type=hash_type, signer=signer)


def unverified(path: Path) -> Signed:
    """What a signature claims to sign, read without checking who signed it: only to catch a model.sig that no
    longer matches its files (before an upload), never to trust one."""
    import base64

    data = read_signature(path)
    document = _parsed(data)
    from model_signing._signing import signing

    try:
        payload = json.loads(base64.b64decode(document["dsseEnvelope"]["payload"]))
        manifest = signing.dsse_payload_to_manifest(payload)
    except Exception:
        raise SignatureMalformed(f"{SIGNATURE} holds no in-toto statement model-signing can read") from None
    return _signed(manifest, key_hint(data))


def check_current(folder: Path) -> None:
    """A bundle's model.sig still signs exactly its files as they are now (re-sign after any change)."""
    signed = unverified(folder / SIGNATURE)
    held = {p.name for p in folder.iterdir() if p.name not in (SIGNATURE, ".gitattributes")}
    check_coverage(signed, held, str(folder))
    if bad := mismatched(folder, signed, sorted(held)):
        raise ContentMismatch(
            f"{SIGNATURE} in {shorten(str(folder), 120)} no longer matches {', '.join(bad[:5])}",
            "sign the bundle again (packager sign, or release with a signing key), or delete "
            f"{SIGNATURE} to publish it unsigned",
        )


def check_coverage(signed: Signed, held: set[str], where: str) -> None:
    """The signature names exactly the files `where` holds (besides itself and git's .gitattributes)."""
    unknown = sorted(set(signed.digests) - held)
    if unknown:
        raise SignatureCoverage(
            f"{SIGNATURE} names {', '.join(shorten(n, 60) for n in unknown[:5])}, which {where} does not hold"
        )
    unsigned = sorted(held - set(signed.digests))
    if unsigned:
        raise SignatureCoverage(f"{SIGNATURE} leaves out {', '.join(shorten(n, 60) for n in unsigned[:5])} of {where}")


def mismatched(folder: Path, signed: Signed, names: list[str]) -> list[str]:
    """Which of `names` (files in `folder`) differ from what was signed; the library hashes them."""
    from model_signing import hashing

    algorithm = cast("Literal['sha256', 'blake2', 'blake3']", signed.hash_type)  # one of HASH_TYPES: read_signed checks
    config = hashing.Config().use_file_serialization(hashing_algorithm=algorithm, allow_symlinks=False)
    actual = config.hash(folder, files_to_hash=[folder / name for name in names])
    found = {item.identifier: item.digest.digest_value for item in actual.resource_descriptors()}
    return [name for name in names if found.get(name) != signed.digests.get(name)]


def verify_folder(folder: Path, trust: Trust) -> Signed:
    """A local bundle against its own model.sig: trusted signer, exact coverage, every file as signed."""
    from ..errors import BundleError

    path = folder / SIGNATURE
    if not folder.is_dir():
        raise BundleError(f"{shorten(str(folder), 120)} is not a folder", "pass the bundle folder")
    read_signature(path)  # absent: not signed; a link, FIFO or folder: refused as such, before any other check
    odd = sorted(p.name for p in folder.iterdir() if p.is_symlink() or not p.is_file())
    if odd:
        raise BundleError(
            f"{shorten(odd[0], 120)} in {shorten(str(folder), 120)} is not a regular file",
            "a signed bundle holds only regular files",
        )
    signed = read_signed(path, trust)
    held = {p.name for p in folder.iterdir() if p.name not in (SIGNATURE, ".gitattributes")}
    check_coverage(signed, held, str(folder))
    bad = mismatched(folder, signed, sorted(held))
    if bad:
        verb = "differs" if len(bad) == 1 else "differ"
        raise ContentMismatch(f"{', '.join(bad)} in {shorten(str(folder), 120)} {verb} from what {SIGNATURE} signed")
    return signed
