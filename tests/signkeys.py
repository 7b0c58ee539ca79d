"""EC signing keys made per test session: the publisher's, another publisher's, a wrong-curve one and a
passphrase-protected one (no key material is checked in)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

PASSPHRASE = b"correct horse battery staple"


@dataclass(frozen=True)
class Keys:
    private: Path
    public: Path
    other_private: Path
    other_public: Path
    wrong_curve: Path
    locked: Path
    rsa: Path


def _write(folder: Path, name: str, key: object, encryption: object = None) -> tuple[Path, Path]:
    from cryptography.hazmat.primitives import serialization

    private = folder / f"{name}.pem"
    private.write_bytes(
        key.private_bytes(  # type: ignore[attr-defined]
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption or serialization.NoEncryption()
        )
    )
    public = folder / f"{name}.pub"
    public.write_bytes(
        key.public_key().public_bytes(  # type: ignore[attr-defined]
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return private, public


@pytest.fixture(scope="session")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    folder = tmp_path_factory.mktemp("keys")
    private, public = _write(folder, "publisher", ec.generate_private_key(ec.SECP256R1()))
    other_private, other_public = _write(folder, "other", ec.generate_private_key(ec.SECP256R1()))
    wrong_curve, _ = _write(folder, "k1", ec.generate_private_key(ec.SECP256K1()))
    locked, _ = _write(
        folder, "locked", ec.generate_private_key(ec.SECP256R1()), serialization.BestAvailableEncryption(PASSPHRASE)
    )
    rsa_key, _ = _write(folder, "rsa", rsa.generate_private_key(public_exponent=65537, key_size=2048))
    return Keys(private, public, other_private, other_public, wrong_curve, locked, rsa_key)


def forge_signature(bundle: Path, key: Path, extra: dict[str, bytes]) -> None:
    """A validly signed model.sig whose statement also names `extra` paths (as a hostile publisher could)."""
    from pathlib import PurePosixPath

    from model_signing import hashing, manifest
    from model_signing._hashing.hashing import Digest
    from model_signing._signing import sign_ec_key, signing

    real = hashing.Config().use_file_serialization(ignore_paths=[Path("model.sig")]).hash(bundle)
    items = [
        manifest.FileManifestItem(path=PurePosixPath(d.identifier), digest=d.digest)
        for d in real.resource_descriptors()
    ]
    items += [
        manifest.FileManifestItem(path=PurePosixPath(name), digest=Digest("sha256", digest))
        for name, digest in extra.items()
    ]
    forged = manifest.Manifest(bundle.name, items, real._serialization_type)
    sign_ec_key.Signer(key).sign(signing.Payload(forged)).write(bundle / "model.sig")
