"""Commands about who published a bundle: sign, verify-signature and pull."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import click

from . import StderrProgress, _emit, _path, cli
from .options import (
    endpoint_option,
    hub_token,
    json_option,
    option,
    quiet_option,
    target_revision,
    timeout_option,
    token_option,
)
from .trustopts import _trust, trust_options


@cli.command()
@click.argument("bundle", type=_path())
@option(
    "--key",
    metavar="FILE",
    type=_path(dir_okay=False),
    show_default="$PACKAGER_SIGNING_KEY",
    help="EC private key (PEM) to sign with.",
)
@option(
    "--passphrase-file",
    metavar="FILE",
    type=_path(dir_okay=False),
    show_default="$PACKAGER_SIGNING_KEY_PASSPHRASE",
    help="File whose first line unlocks the key.",
)
@click.option(
    "--keyless",
    is_flag=True,
    help=(
        "Sign with sigstore and CI's OIDC identity instead of a key (needs the network and e.g. GitHub Actions' "
        "id-token: write)."
    ),
)
@option(
    "--identity-token-file",
    metavar="FILE",
    type=_path(dir_okay=False),
    show_default="CI's ambient identity",
    help="Keyless: read the OIDC identity token from this file.",
)
@json_option
@quiet_option
def sign(
    bundle: Path,
    key: Path | None,
    passphrase_file: Path | None,
    keyless: bool,
    identity_token_file: Path | None,
    as_json: bool,
    quiet: bool,
) -> None:
    """Write BUNDLE/model.sig: an OpenSSF model-signing signature over every file of the release.

    Sign after `packager card` and `packager checksum`; the signature covers the ten files, README.md and
    checksums.xxh128.

    Example: packager sign ./bundle --key release-key.pem
    """
    from ..errors import FileSystemError, InvalidOption
    from ..infra.userfile import TOKEN_BYTES, read_text
    from ..trust.keys import KEY_ENV, read_passphrase
    from ..trust.sign import sign as run_sign
    from ..trust.sign import sign_keyless

    if keyless:
        if key is not None:
            raise InvalidOption("--key and --keyless both given", "sign with one of them")
        token = (
            read_text(identity_token_file, TOKEN_BYTES, what="--identity-token-file", unreadable=FileSystemError)
            if identity_token_file
            else None
        )
        with StderrProgress(quiet, lines=False) as progress:
            progress(f"signing {bundle} with sigstore (hashing every file)")
            result = sign_keyless(bundle, token)
    else:
        key = key or (Path(os.environ[KEY_ENV]) if os.environ.get(KEY_ENV) else None)
        if key is None:
            raise InvalidOption("no signing key", f"pass --key KEY.pem, set {KEY_ENV}, or use --keyless")
        passphrase = read_passphrase(passphrase_file)
        with StderrProgress(quiet, lines=False) as progress:
            progress(f"signing {bundle} (hashing every file)")
            result = run_sign(bundle, key, passphrase)
    data = {
        "signature": str(result.signature),
        "files": list(result.files),
        "key_id": result.key_id,
        "unchanged": result.unchanged,
    }
    _emit(
        data,
        as_json,
        lambda d: (
            ("kept: already signed, " if d["unchanged"] else "signed ")
            + f"{len(d['files'])} files: {d['signature']}"
            + (f" (key sha256 {d['key_id']})" if d["key_id"] else "")
        ),
    )


@cli.command("verify-signature")
@click.argument("bundle", type=_path())
@trust_options
@json_option
def verify_signature(
    bundle: Path, public_key: Path | None, identity: str | None, issuer: str | None, as_json: bool
) -> None:
    """Check BUNDLE's model.sig: signed by whom you trust, over exactly the bundle's files, none changed.

    Example: packager verify-signature ./bundle --public-key publisher.pub
    """
    from ..hub.pull import PullRequest, check_request
    from ..trust.signature import verify_folder

    trust = _trust(public_key, identity, issuer)
    check_request(PullRequest(repo_id="local/check", dest=bundle, trust=trust, require_signature=True))
    signed = verify_folder(bundle, trust)
    data = {"bundle": str(bundle), "signer": signed.signer, "files": sorted(signed.digests)}
    _emit(data, as_json, lambda d: f"{d['bundle']}: all {len(d['files'])} files are as signed by {d['signer']}")


@cli.command()
@click.argument("target", metavar="REPO_ID[@REV]")
@click.argument("dest", metavar="DIR", type=_path(file_okay=False))
@option(
    "--files",
    "which",
    type=click.Choice(["app", "all"]),
    default="app",
    help=(
        "app: the seven files an app runs (llm.mnn, llm.mnn.weight, llm_config.json, config.json, config_cpu.json, "
        "draft_config_cpu.json, tokenizer.txt); all: the whole release, manifest and signature included."
    ),
)
@trust_options
@click.option("--require-signature", is_flag=True, help="Refuse an unsigned release.")
@click.option("--engine", metavar="VERSION", help="The app's MNN version: refuse a bundle that needs a newer one.")
@endpoint_option
@timeout_option("Seconds a download may deliver nothing before it is retried (said in one line), then fails.")
@json_option
@quiet_option
@token_option
def pull(
    target: str,
    dest: Path,
    which: Literal["app", "all"],  # click's Choice holds it to these
    public_key: Path | None,
    identity: str | None,
    issuer: str | None,
    require_signature: bool,
    engine: str | None,
    endpoint: str | None,
    timeout: float,
    as_json: bool,
    quiet: bool,
    token_file: Path | None,
) -> None:
    """Download a release into DIR, every file checked against its manifest and its signature.

    DIR appears only when every check passed (a refused pull leaves nothing); an interrupted pull resumes on
    the next run, checking the resumed files whole.

    Example: packager pull me/qwen3-draft-mnn@v3 ./draft --public-key publisher.pub --require-signature
    """
    import sys

    from ..hub.fetch import terminal_bar
    from ..hub.pull import PullRequest
    from ..hub.pull import pull as run_pull

    repo_id, revision = target_revision(target)
    with StderrProgress(quiet, bars=False) as progress:  # pull draws a byte bar per large file instead
        result = run_pull(
            PullRequest(
                repo_id=repo_id,
                dest=dest,
                revision=revision,
                files=which,
                trust=_trust(public_key, identity, issuer),
                require_signature=require_signature,
                engine=engine,
                endpoint=endpoint,
                token=hub_token(token_file),
                timeout=timeout,
            ),
            progress=progress,
            meter=terminal_bar if not quiet and sys.stderr.isatty() else None,
        )
    data = {
        "repo_id": result.repo_id,
        "revision": result.revision,
        "commit": result.commit,
        "dir": str(result.dest),
        "files": list(result.files),
        "signed": result.signed,
        "signer": result.signer,
        "min_engine": result.min_engine,
    }
    _emit(data, as_json, _pull_text)


def _pull_text(d: dict[str, Any]) -> str:
    who = (
        f"signature verified (signer {d['signer']})"
        if d["signer"]
        else "signed, but the signature was NOT checked: pass --public-key or --identity/--issuer"
        if d["signed"]
        else "unsigned: only the manifest was checked"
    )
    return f"pulled {len(d['files'])} files of {d['repo_id']}@{d['commit']} into {d['dir']}; manifest matches; {who}"
