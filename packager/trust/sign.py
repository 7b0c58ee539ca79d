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
from typing import Any

from ..bundle.checksum import MANIFEST, SIGNATURE, check_manifest
from ..bundle.kinds import CARD, FILES, release_names
from ..bundle.staging import write_atomic
from ..errors import BundleError, PackagerError, SigstoreFailed, shorten
from .keys import load_key, public_pem

RELEASE_SET = (*FILES, CARD, MANIFEST)  # what the signature covers, exactly


@dataclass(frozen=True)
class SignResult:
    signature: Path
    files: tuple[str, ...]
    key_id: str  # sha256 of the public key (PEM), as model-signing records it in the bundle
    unchanged: bool = False  # the bundle's model.sig was already this key's signature over these very files


def check_release_set(bundle: Path) -> None:
    """Only a complete release whose manifest matches is signed: a signature must not vouch for a stray file."""
    if not bundle.is_dir():
        raise BundleError(f"bundle folder {shorten(str(bundle), 120)} does not exist", "pass the folder to sign")
    present = {p.name for p in bundle.iterdir()} - {SIGNATURE}
    wanted = release_names(bundle, CARD, MANIFEST)
    missing = sorted(set(wanted) - present)
    extra = sorted(present - set(wanted))
    if missing:
        raise BundleError(
            f"{bundle} lacks {', '.join(missing)}; nothing was signed", "sign after packager card and packager checksum"
        )
    if extra:
        raise BundleError(
            f"{bundle} holds {', '.join(shorten(n, 60) for n in extra[:5])}, which no release has; nothing was signed",
            "move it out of the bundle folder",
        )
    for name in (*wanted, *([SIGNATURE] if os.path.lexists(bundle / SIGNATURE) else [])):
        if (bundle / name).is_symlink() or not (bundle / name).is_file():
            raise BundleError(
                f"{shorten(str(bundle / name), 120)} is not a regular file; nothing was signed",
                "a release holds regular files only: replace it with the file itself (an old "
                f"{SIGNATURE}: delete it, sign writes a new one)",
            )
    result = check_manifest(bundle)
    if not result.ok:
        raise BundleError(
            f"{bundle} does not match its {MANIFEST} (changed: {', '.join(result.mismatched) or '-'}); "
            "nothing was signed",
            "rewrite it with packager checksum, then sign",
        )


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
    from .keys import key_hint
    from .signature import Trust, read_signature, verify_folder

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
    return SignResult(
        signature=bundle / SIGNATURE, files=release_names(bundle, CARD, MANIFEST), key_id=key_hint(data), unchanged=True
    )


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
    except Exception as exc:
        raise SigstoreFailed(
            f"keyless signing failed: {type(exc).__name__}: {shorten(str(exc), 160)}; nothing was signed"
        ) from None


def _identity_token(given: str | None) -> str:
    """The OIDC token: the one given, else the CI's ambient one; checked as a sigstore identity offline."""
    from sigstore import oidc

    try:
        token = given or oidc.detect_credential()
    except Exception as exc:
        raise SigstoreFailed(f"no OIDC identity: {shorten(str(exc), 160)}; nothing was signed") from None
    if not token:
        raise SigstoreFailed(
            "no OIDC identity token (no --identity-token-file, and no CI identity detected); nothing was signed"
        )
    try:
        oidc.IdentityToken(token.strip())
    except Exception as exc:
        raise SigstoreFailed(
            f"the OIDC identity token is not usable: {shorten(str(exc), 160)}; nothing was signed"
        ) from None
    return token.strip()


def _hashing(bundle: Path) -> Any:  # model_signing.hashing.Config
    """sha256 of every file but model.sig. The ignore goes through add_ignored_paths: model-signing 1.1.1
    records use_file_serialization's ignore_paths in the statement but does not apply them, so a signature
    made over a folder that already held a model.sig would otherwise sign the old signature too."""
    from model_signing import hashing

    config = hashing.Config().use_file_serialization(
        hashing_algorithm="sha256", allow_symlinks=False, ignore_paths=[Path(SIGNATURE)]
    )
    config.add_ignored_paths(model_path=bundle, paths=[SIGNATURE])
    return config


def _write(bundle: Path, config: object) -> SignResult:
    from .keys import key_hint

    with tempfile.TemporaryDirectory(prefix="packager-sign-") as work:
        unsigned = Path(work) / SIGNATURE
        config.sign(bundle, unsigned)  # type: ignore[attr-defined]
        data = unsigned.read_bytes()
    write_atomic(bundle / SIGNATURE, data)
    return SignResult(signature=bundle / SIGNATURE, files=release_names(bundle, CARD, MANIFEST), key_id=key_hint(data))
