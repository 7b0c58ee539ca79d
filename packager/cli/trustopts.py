"""The options that say whom a user trusts as a bundle's signer (pull, verify-signature, verify-remote)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from . import _path


def trust_options(command: Any) -> Any:
    """--public-key, or --identity with --issuer (keyless sigstore)."""
    for option in reversed(
        [
            click.option(
                "--public-key", metavar="FILE", type=_path(dir_okay=False), help="The publisher's EC public key (PEM)."
            ),
            click.option(
                "--identity", metavar="IDENTITY", help="Keyless: the signer's identity, e.g. a GitHub workflow URL."
            ),
            click.option(
                "--issuer",
                metavar="URL",
                help="Keyless: the identity's OIDC issuer, e.g. https://token.actions.githubusercontent.com.",
            ),
        ]
    ):
        command = option(command)
    return command


def _trust(public_key: Path | None, identity: str | None, issuer: str | None) -> Any:
    from ..trust.signature import Trust

    return Trust(public_key=public_key, identity=identity, issuer=issuer)
