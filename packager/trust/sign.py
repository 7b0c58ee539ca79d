"""`packager sign`: an OpenSSF model-signing signature (`model.sig`, a sigstore bundle holding an in-toto
statement with the digest of every file) over the whole release set, made through model-signing's API.

The library does the hashing; we only check the key first, so that each way a key can be wrong is its own
one-line error instead of a cryptography traceback.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..bundle.kinds import FILES, release_names
from ..bundle.checksum import MANIFEST, SIGNATURE, check_manifest
from ..errors import BundleError, PackagerError, shorten
from .signature import SigstoreFailed
from ..bundle.staging import write_atomic

CARD = "README.md"
RELEASE_SET = (*FILES, CARD, MANIFEST)  # what the signature covers, exactly
KEY_ENV = "PACKAGER_SIGNING_KEY"  # a path to the PEM private key, for CI
PASSPHRASE_ENV = "PACKAGER_SIGNING_KEY_PASSPHRASE"  # never a command-line flag: `ps` shows those
MAX_KEY_BYTES = 64 * 1024
CURVES = ("secp256r1", "secp384r1", "secp521r1")  # what model-signing (sigstore's protobuf specs) accepts


class SigningKeyInvalid(PackagerError):
    exit_code = 70
    hint = "pass an EC private key in PEM (openssl ecparam -name prime256v1 -genkey -noout -out key.pem)"


class SigningKeyCurve(PackagerError):
    exit_code = 71
    hint = "sign with an EC key on P-256 (prime256v1), P-384 or P-521"


class SigningKeyLocked(PackagerError):
    exit_code = 72
    hint = f"put the key's passphrase in {PASSPHRASE_ENV} or a file given with --passphrase-file"


@dataclass(frozen=True)
class SignResult:
    signature: Path
    files: tuple[str, ...]
    key_id: str  # sha256 of the public key (PEM), as model-signing records it in the bundle
    unchanged: bool = False  # the bundle's model.sig was already this key's signature over these very files


def load_key(path: Path, passphrase: bytes | None) -> object:
    """The private key, or the one error that says what is wrong with the file."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    from ..infra.userfile import read_bytes

    shown = shorten(str(path), 120)
    if not path.is_file():  # a folder, or a FIFO that would block the read
        raise SigningKeyInvalid(f"signing key {shown} is not a file")
    data = read_bytes(path, MAX_KEY_BYTES, what="signing key", unreadable=SigningKeyInvalid,
                      too_large=SigningKeyInvalid)
    try:
        key = serialization.load_pem_private_key(data, passphrase)
    except TypeError:  # encrypted without a passphrase, or a passphrase for a key that has none
        if passphrase is None:
            raise SigningKeyLocked(f"signing key {shown} is protected by a passphrase and none was given") from None
        raise SigningKeyInvalid(f"signing key {shown} is not protected, yet a passphrase was given",
                                f"unset {PASSPHRASE_ENV} or drop --passphrase-file") from None
    except ValueError:
        if b"ENCRYPTED" in data and passphrase is not None:
            raise SigningKeyLocked(f"the passphrase does not unlock signing key {shown}") from None
        kind = "a public key" if b"PUBLIC KEY-----" in data else "a certificate" if b"CERTIFICATE" in data else \
            "not a PEM private key"
        raise SigningKeyInvalid(f"signing key {shown} is {kind}, not a private key") from None
    except Exception:  # noqa: BLE001 - cryptography's UnsupportedAlgorithm and the like: still not usable
        raise SigningKeyInvalid(f"signing key {shown} is no private key packager can use") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise SigningKeyCurve(f"signing key {shown} is {type(key).__name__.removeprefix('_')}, not an EC key")
    if key.curve.name not in CURVES:
        raise SigningKeyCurve(f"signing key {shown} is on the curve {key.curve.name}")
    return key


def public_pem(private: object) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return bytes(private.public_key().public_bytes(  # type: ignore[attr-defined]
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))


def key_id(pem: bytes) -> str:
    """The key's fingerprint as model-signing writes it (its hint): sha256 of the public PEM, by cryptography."""
    from cryptography.hazmat.primitives import hashes

    digest = hashes.Hash(hashes.SHA256())
    digest.update(pem)
    return digest.finalize().hex()


class PublicKeyInvalid(SigningKeyInvalid):
    """A --public-key file that cannot be read or is larger than any key (exit 70, as a bad signing key)."""

    hint = "pass the publisher's key.pub"


class PassphraseFileUnusable(SigningKeyInvalid):
    """--passphrase-file cannot be read, or its first line is longer than any passphrase (exit 70, as a bad key)."""

    hint = "put the key's passphrase on the first line of a small text file"


def read_passphrase(passphrase_file: Path | None) -> bytes | None:
    """--passphrase-file (its first line, read up to its newline and never further), else the environment
    variable, else none."""
    if passphrase_file is not None:
        from ..infra.userfile import PASSPHRASE_BYTES, read_bytes

        line = read_bytes(passphrase_file, PASSPHRASE_BYTES, what="--passphrase-file", first_line=True,
                          unreadable=PassphraseFileUnusable, too_large=PassphraseFileUnusable)
        return line.removesuffix(b"\r")  # a file saved with Windows line ends
    value = os.environ.get(PASSPHRASE_ENV)
    return value.encode("utf-8") if value else None


def check_release_set(bundle: Path) -> None:
    """Only a complete release whose manifest matches is signed: a signature must not vouch for a stray file."""
    if not bundle.is_dir():
        raise BundleError(f"bundle folder {shorten(str(bundle), 120)} does not exist", "pass the folder to sign")
    present = {p.name for p in bundle.iterdir()} - {SIGNATURE}
    wanted = release_names(bundle, CARD, MANIFEST)
    missing = sorted(set(wanted) - present)
    extra = sorted(present - set(wanted))
    if missing:
        raise BundleError(f"{bundle} lacks {', '.join(missing)}; nothing was signed",
                          "sign after packager card and packager checksum")
    if extra:
        raise BundleError(f"{bundle} holds {', '.join(shorten(n, 60) for n in extra[:5])}, which no release has; "
                          "nothing was signed", "move it out of the bundle folder")
    for name in (*wanted, *([SIGNATURE] if os.path.lexists(bundle / SIGNATURE) else [])):
        if (bundle / name).is_symlink() or not (bundle / name).is_file():
            raise BundleError(f"{shorten(str(bundle / name), 120)} is not a regular file; nothing was signed",
                              "a release holds regular files only: replace it with the file itself (an old "
                              f"{SIGNATURE}: delete it, sign writes a new one)")
    result = check_manifest(bundle)
    if not result.ok:
        raise BundleError(f"{bundle} does not match its {MANIFEST} (changed: {', '.join(result.mismatched) or '-'}); "
                          "nothing was signed", "rewrite it with packager checksum, then sign")


def sign(bundle: Path, key: Path, passphrase: bytes | None = None) -> SignResult:
    """Write `model.sig` over the release set (atomically: a failed signing leaves the old one, or none);
    keep it when it already is this key's signature over these files."""
    private = load_key(key, passphrase)
    check_release_set(bundle)
    if (kept := _still_valid(bundle, private)) is not None:
        return kept
    from model_signing import signing

    config = signing.Config().set_hashing_config(_hashing(bundle))
    # model-signing types the password as str but hands it to cryptography, which wants bytes.
    config.use_elliptic_key_signer(private_key=key, password=passphrase)  # type: ignore[arg-type]
    return _write(bundle, config)


def _still_valid(bundle: Path, private: object) -> SignResult | None:
    """An existing model.sig by this key over exactly these files is kept: ECDSA signatures differ each time,
    and a new one would make an unchanged re-release commit again."""
    from .signature import Trust, key_hint, read_signature, verify_folder

    if not os.path.lexists(bundle / SIGNATURE):
        return None
    with tempfile.TemporaryDirectory(prefix="packager-pub-") as work:
        public = Path(work) / "key.pub"
        public.write_bytes(public_pem(private))
        try:
            verify_folder(bundle, Trust(public_key=public))
        except PackagerError:  # no longer valid (files changed, another key): signed anew
            return None
    data = read_signature(bundle / SIGNATURE)
    return SignResult(signature=bundle / SIGNATURE, files=release_names(bundle, CARD, MANIFEST), key_id=key_hint(data),
                      unchanged=True)


def sign_keyless(bundle: Path, identity_token: str | None = None) -> SignResult:
    """Keyless sigstore signing with CI's OIDC identity (e.g. GitHub Actions with `id-token: write`), or an
    explicit token. Everything before sigstore's services is checked here; they need the network."""
    check_release_set(bundle)
    token = _identity_token(identity_token)
    from model_signing import signing

    try:
        config = signing.Config().set_hashing_config(_hashing(bundle))
        config.use_sigstore_signer(use_ambient_credentials=False, identity_token=token)
        return _write(bundle, config)
    except PackagerError:
        raise
    except Exception as exc:  # noqa: BLE001 - sigstore's trust root, Fulcio and Rekor failures are many kinds
        raise SigstoreFailed(f"keyless signing failed: {type(exc).__name__}: {shorten(str(exc), 160)}; "
                             "nothing was signed") from None


def _identity_token(given: str | None) -> str:
    """The OIDC token: the one given, else the CI's ambient one; checked as a sigstore identity offline."""
    from sigstore import oidc

    try:
        token = given or oidc.detect_credential()
    except Exception as exc:  # noqa: BLE001 - id's AmbientCredentialError and the like
        raise SigstoreFailed(f"no OIDC identity: {shorten(str(exc), 160)}; nothing was signed") from None
    if not token:
        raise SigstoreFailed("no OIDC identity token (no --identity-token-file, and no CI identity "
                             "detected); nothing was signed")
    try:
        oidc.IdentityToken(token.strip())
    except Exception as exc:  # noqa: BLE001 - IdentityError on a malformed or non-sigstore token
        raise SigstoreFailed(f"the OIDC identity token is not usable: {shorten(str(exc), 160)}; "
                             "nothing was signed") from None
    return token.strip()


def _hashing(bundle: Path) -> object:
    """sha256 of every file but model.sig. The ignore goes through add_ignored_paths: model-signing 1.1.1
    records use_file_serialization's ignore_paths in the statement but does not apply them, so a signature
    made over a folder that already held a model.sig would otherwise sign the old signature too."""
    from model_signing import hashing

    config = hashing.Config().use_file_serialization(hashing_algorithm="sha256", allow_symlinks=False,
                                                     ignore_paths=[Path(SIGNATURE)])
    config.add_ignored_paths(model_path=bundle, paths=[SIGNATURE])
    return config


def _write(bundle: Path, config: object) -> SignResult:
    from .signature import key_hint

    with tempfile.TemporaryDirectory(prefix="packager-sign-") as work:
        unsigned = Path(work) / SIGNATURE
        config.sign(bundle, unsigned)  # type: ignore[attr-defined]
        data = unsigned.read_bytes()
    write_atomic(bundle / SIGNATURE, data)
    return SignResult(signature=bundle / SIGNATURE, files=release_names(bundle, CARD, MANIFEST), key_id=key_hint(data))
