"""Signing keys: reading a private key (and its passphrase), its public half and the id model-signing records
for it. Both signing and checking a signature use these; neither imports the other for them."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..errors import PassphraseFileUnusable, SigningKeyCurve, SigningKeyInvalid, SigningKeyLocked, shorten

KEY_ENV = "PACKAGER_SIGNING_KEY"  # a path to the PEM private key, for CI
PASSPHRASE_ENV = "PACKAGER_SIGNING_KEY_PASSPHRASE"  # never a command-line flag: `ps` shows those
MAX_KEY_BYTES = 64 * 1024
CURVES = ("secp256r1", "secp384r1", "secp521r1")  # what model-signing (sigstore's protobuf specs) accepts


def load_key(path: Path, passphrase: bytes | None) -> object:
    """The private key, or the one error that says what is wrong with the file."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    from ..infra.userfile import read_bytes

    shown = shorten(str(path), 120)
    if not path.is_file():  # a folder, or a FIFO that would block the read
        raise SigningKeyInvalid(f"signing key {shown} is not a file")
    data = read_bytes(
        path, MAX_KEY_BYTES, what="signing key", unreadable=SigningKeyInvalid, too_large=SigningKeyInvalid
    )
    try:
        key = serialization.load_pem_private_key(data, passphrase)
    except TypeError:  # encrypted without a passphrase, or a passphrase for a key that has none
        if passphrase is None:
            raise SigningKeyLocked(f"signing key {shown} is protected by a passphrase and none was given") from None
        raise SigningKeyInvalid(
            f"signing key {shown} is not protected, yet a passphrase was given",
            f"unset {PASSPHRASE_ENV} or drop --passphrase-file",
        ) from None
    except ValueError:
        if b"ENCRYPTED" in data and passphrase is not None:
            raise SigningKeyLocked(f"the passphrase does not unlock signing key {shown}") from None
        kind = (
            "a public key"
            if b"PUBLIC KEY-----" in data
            else "a certificate"
            if b"CERTIFICATE" in data
            else "not a PEM private key"
        )
        raise SigningKeyInvalid(f"signing key {shown} is {kind}, not a private key") from None
    except Exception:
        raise SigningKeyInvalid(f"signing key {shown} is no private key packager can use") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise SigningKeyCurve(f"signing key {shown} is {type(key).__name__.removeprefix('_')}, not an EC key")
    if key.curve.name not in CURVES:
        raise SigningKeyCurve(f"signing key {shown} is on the curve {key.curve.name}")
    return key


def public_pem(private: object) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return bytes(
        private.public_key().public_bytes(  # type: ignore[attr-defined]
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


def key_id(pem: bytes) -> str:
    """The key's fingerprint as model-signing writes it (its hint): sha256 of the public PEM, by cryptography."""
    from cryptography.hazmat.primitives import hashes

    digest = hashes.Hash(hashes.SHA256())
    digest.update(pem)
    return digest.finalize().hex()


def read_passphrase(passphrase_file: Path | None) -> bytes | None:
    """--passphrase-file (its first line, read up to its newline and never further), else the environment
    variable, else none."""
    if passphrase_file is not None:
        from ..infra.userfile import PASSPHRASE_BYTES, read_bytes

        line = read_bytes(
            passphrase_file,
            PASSPHRASE_BYTES,
            what="--passphrase-file",
            first_line=True,
            unreadable=PassphraseFileUnusable,
            too_large=PassphraseFileUnusable,
        )
        return line.removesuffix(b"\r")  # a file saved with Windows line ends
    value = os.environ.get(PASSPHRASE_ENV)
    return value.encode("utf-8") if value else None


def key_hint(data: bytes) -> str:
    """The key id model-signing records in a key-signed bundle (sha256 of the public key's PEM), or ''."""
    try:
        material = json.loads(data)["verificationMaterial"]
        return str((material.get("publicKey") or {}).get("hint") or "")
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return ""
