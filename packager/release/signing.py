"""Signing inside `release`: who signs (a key from the spec or PACKAGER_SIGNING_KEY, or keyless sigstore), what
the card says about it, the signing stage, and the check of the signature against the Hub after the upload."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import SpecError
from ..spec.model import ReleaseSpec
from ..trust.keys import KEY_ENV, key_id, load_key, public_pem, read_passphrase

ISSUER_GITHUB = "https://token.actions.githubusercontent.com"


@dataclass(frozen=True)
class SigningPlan:
    key: Path | None = None
    key_id: str | None = None  # sha256 of the public key's PEM: what model-signing records as the key hint
    public_pem: bytes | None = None
    identity: str | None = None
    issuer: str | None = None

    def card_facts(self, repo_id: str, version: str) -> dict[str, Any]:
        return {
            "key_id": self.key_id,
            "identity": self.identity,
            "issuer": self.issuer,
            "repo_id": repo_id,
            "version": version,
        }


def plan(spec: ReleaseSpec) -> SigningPlan | None:
    """How this release is signed (None: unsigned); a bad key is refused here, before any work."""
    release = spec.need("release")
    from_env = os.environ.get(KEY_ENV)
    key = Path(from_env) if from_env else None
    if key is None and release.signing_key:
        key = (spec.path.parent / release.signing_key) if spec.path else Path(release.signing_key)
    if key is not None and release.signing_identity and not from_env:
        raise SpecError("[release] has both signing_key and signing_identity", "sign with a key or keyless, not both")
    if key is not None:
        private = load_key(key, read_passphrase(None))
        pem = public_pem(private)
        return SigningPlan(key=key, key_id=key_id(pem), public_pem=pem)
    if release.signing_identity:
        if not release.signing_issuer:
            raise SpecError(
                "[release] signing_identity needs signing_issuer",
                f'for GitHub Actions: signing_issuer = "{ISSUER_GITHUB}"',
            )
        return SigningPlan(identity=release.signing_identity, issuer=release.signing_issuer)
    return None


def with_card_facts(
    spec: ReleaseSpec, measurements: dict[str, Any] | None, signing: SigningPlan | None
) -> dict[str, Any] | None:
    """The card's measurements plus who signs (the card is written before, and covered by, model.sig)."""
    if signing is None:
        return measurements
    release = spec.need("release")
    return {**(measurements or {}), "signing": signing.card_facts(release.repo_id, release.version)}


def sign_stage(signing: SigningPlan, bundle: Path) -> str:
    from ..trust.sign import sign, sign_keyless

    if signing.key is not None:
        result = sign(bundle, signing.key, read_passphrase(None))
    else:
        result = sign_keyless(bundle)
    kept = "kept (already over these files)" if result.unchanged else "written"
    return f"model.sig {kept}, {len(result.files)} files, signer {result.key_id or signing.identity}"


def verify_uploaded(signing: SigningPlan, endpoint: str | None, token: str | None, repo_id: str, commit: str) -> str:
    """The Hub's copy at `commit`: its model.sig verifies for our key or identity, over the Hub's files."""
    from ..hub.check import _stream
    from ..hub.client import connect
    from ..hub.remote import files_at
    from ..hub.signed import check_uploaded
    from ..trust.signature import Trust

    hub = connect(endpoint, token)
    files = files_at(hub, repo_id, commit)

    def stream(name: str, size: int, sink: Any) -> None:
        _stream(hub, repo_id, commit, name, size, 30.0, sink)

    with tempfile.TemporaryDirectory(prefix="packager-pub-") as work:
        trust = Trust(identity=signing.identity, issuer=signing.issuer)
        if signing.public_pem is not None:
            (Path(work) / "key.pub").write_bytes(signing.public_pem)
            trust = Trust(public_key=Path(work) / "key.pub")
        signed = check_uploaded(hub, repo_id, commit, files, stream, trust)
    return f"signature verified on the Hub ({len(signed.digests)} files)"
