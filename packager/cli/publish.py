"""Commands that publish: upload, verify-remote, release."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal

import click

from ..errors import CHECKSUM_MISMATCH, InvalidOption
from . import StderrProgress, _emit, _path, cli, warn
from .matrix import matrix_options
from .options import (
    endpoint_option,
    hub_token,
    json_option,
    load_spec,
    option,
    output_option,
    quiet_option,
    spec_argument,
    target_revision,
    timeout_option,
    token_option,
)
from .trustopts import _trust, trust_options


@cli.command()
@click.argument("bundle", type=_path())
@click.argument("repo_id")
@endpoint_option
@option(
    "--revision",
    default="main",
    show_default=True,
    help="Branch to commit to (made from main's head if new); tags and commit ids are refused.",
)
@click.option("--tag", help="Tag the release commit (refused before anything is sent if it points elsewhere).")
@click.option("--private", is_flag=True, help="Create the repo private; refuse to upload into a public one.")
@click.option("--make-private", is_flag=True, help="Change an existing public repo to private, then upload.")
@click.option("--message", help="Commit message.")
@click.option("--dry-run", is_flag=True, help="Print the plan (add / replace / unchanged / delete); change nothing.")
@click.option(
    "--collection",
    metavar="TITLE",
    help="After the commit is verified, put the repo into this collection (created when missing; the "
    "repo is added once however often you upload).",
)
@option(
    "--collection-owner", metavar="NAMESPACE", show_default="the namespace of REPO_ID", help="Whose collection it is."
)
@click.option("--collection-note", metavar="TEXT", help="The note shown under the repo in the collection.")
@option(
    "--gated",
    type=click.Choice(["auto", "manual"]),
    show_default="leave the repo's setting",
    help="Gate downloads: auto (access granted on request) or manual (you approve each request); set "
    "before the commit.",
)
@json_option
@quiet_option
@token_option
def upload(
    bundle: Path,
    repo_id: str,
    endpoint: str | None,
    revision: str,
    tag: str | None,
    private: bool,
    make_private: bool,
    message: str | None,
    dry_run: bool,
    collection: str | None,
    collection_owner: str | None,
    collection_note: str | None,
    gated: Literal["auto", "manual"] | None,  # click's Choice holds it to these
    as_json: bool,
    quiet: bool,
    token_file: Path | None,
) -> None:
    """Publish BUNDLE (ten files, README.md, checksums.xxh128) to REPO_ID in one verified commit.

    Files the Hub already holds (same size and sha256 or git blob id, as the Hub lists them) are not sent;
    an unchanged bundle makes no commit. The token comes from --token-file, HF_TOKEN or your huggingface
    login and is never printed.

    Example: packager upload ./bundle me/qwen3-draft-mnn --tag v3

    Example: packager upload ./bundle tokforge/qwen3-draft-mnn --tag v3 --collection "TokForge Draft Models"
    """
    from dataclasses import asdict

    from ..hub.publish import UploadRequest
    from ..hub.publish import upload as run_upload

    wanted = _collection_request(repo_id, collection, collection_owner, collection_note)
    with StderrProgress(quiet) as progress:
        result = run_upload(
            UploadRequest(
                bundle=bundle,
                repo_id=repo_id,
                endpoint=endpoint,
                revision=revision,
                tag=tag,
                private=private or make_private,
                make_private=make_private,
                dry_run=dry_run,
                message=message,
                token=hub_token(token_file),
                collection=wanted,
                gated=gated,
            ),
            progress=progress,
        )
    data = {
        "repo_id": result.repo_id,
        "endpoint": result.endpoint,
        "revision": result.revision,
        "commit": result.commit,
        "committed": result.committed,
        "tag": result.tag,
        "dry_run": result.dry_run,
        "verified": result.verified,
        "bytes_to_send": result.bytes_to_send,
        "repaired": list(result.repaired),
        "gated": result.gated,
        "collection": asdict(result.collection) if result.collection else None,
        "plan": [{"path": r.path, "action": r.action, "size": r.size} for r in result.plan],
    }
    _emit(data, as_json, _upload_text)


def _collection_request(repo_id: str, title: str | None, owner: str | None, note: str | None) -> Any:
    """The collection flags, checked like the spec's [release] collection keys (the same schema), and named as
    the flags they are."""
    from ..hub.collection import CollectionRequest
    from ..spec.model import problems

    if title is None:
        if owner is not None or note is not None:
            raise InvalidOption("--collection-owner and --collection-note need --collection TITLE")
        return None
    fields = {
        "collection": title,
        **({"collection_owner": owner} if owner else {}),
        **({"collection_note": note} if note else {}),
    }
    found = problems(
        {"release": {"repo_id": repo_id, "title": "t", "version": "v", "license": "x", "summary": "s", **fields}}
    )
    if found:
        flag = "--" + found[0].dotted.removeprefix("release.").replace("_", "-")
        raise InvalidOption(f"{flag}: {found[0].message}", "fix the value of that flag")
    return CollectionRequest(title, owner or repo_id.split("/")[0], note)


def _upload_text(d: dict[str, Any]) -> str:
    lines = [f"{r['action']:9} {r['path']} ({r['size']:,} B)" for r in d["plan"]]
    fixed = [r["path"] for r in d["plan"] if r["action"] in ("repair", "restore")]
    if fixed and not d["dry_run"]:
        lines.append(f"repaired on the Hub: {', '.join(fixed)} (its content there was not what the bundle holds)")
    tagged = f", tagged {d['tag']}" if d["tag"] else ""
    if d["dry_run"]:
        lines.append(f"dry run: nothing changed on {d['endpoint']}; {d['bytes_to_send']:,} bytes would be sent")
    elif d["committed"]:
        lines.append(f"committed {d['repo_id']}@{d['commit']} (verified){tagged}")
    else:
        lines.append(f"unchanged: {d['repo_id']}@{d['commit']} already holds this bundle (verified, no commit){tagged}")
    if d["gated"]:
        lines.append(f"gated: {d['gated']}" + (" (after the upload)" if d["dry_run"] else ""))
    if d["collection"]:
        lines.append(_collection_text(d["collection"], d["dry_run"]))
    return "\n".join(lines)


def _collection_text(c: dict[str, Any], dry_run: bool) -> str:
    from ..hub.collection import CollectionResult, describe

    return describe(CollectionResult(**c), dry_run)


@cli.command("verify-remote")
@click.argument("target", metavar="REPO_ID[@REV]")
@endpoint_option
@timeout_option("Seconds a download may deliver nothing before it fails, naming the file.")
@json_option
@quiet_option
@trust_options
@token_option
@click.pass_context
def verify_remote(
    ctx: click.Context,
    target: str,
    endpoint: str | None,
    timeout: float,
    as_json: bool,
    quiet: bool,
    public_key: Path | None,
    identity: str | None,
    issuer: str | None,
    token_file: Path | None,
) -> None:
    """Download every file of a remote revision and check it against its xxh3-128 manifest (and its model.sig,
    when signed and you say whom you trust).

    Exit 31 names every mismatching, missing or extra file; 78 every file that is not what model.sig signed
    (whatever the manifest says); 40 a file that could not be read; 77 the signer is not whom you trust.

    Example: packager verify-remote me/qwen3-draft-mnn@v3
    """
    from ..errors import ContentMismatch
    from ..hub.check import verify_remote as run_verify

    repo_id, revision = target_revision(target)
    with StderrProgress(quiet) as progress:
        result = run_verify(
            repo_id,
            revision,
            endpoint=endpoint,
            token=hub_token(token_file),
            timeout=timeout,
            progress=progress,
            trust=_trust(public_key, identity, issuer),
        )
    data = {
        "repo_id": result.repo_id,
        "revision": result.revision,
        "commit": result.commit,
        "ok": result.ok,
        "checked": result.checked,
        "mismatched": list(result.mismatched),
        "missing": list(result.missing),
        "extra": list(result.extra),
        "signature": result.signature,
        "signer": result.signer,
        "not_as_signed": list(result.not_as_signed),
    }
    signer = f" (signer {result.signer})" if result.signer else ""
    if result.tampered:  # the signature decides, not a manifest that may have been replaced along with a file
        signature = (
            f"signature: FAILED{signer}: {', '.join(result.not_as_signed)} differ"
            f"{'s' if len(result.not_as_signed) == 1 else ''} from what model.sig signed"
        )
        verdict = "is NOT what its publisher signed; do not use it"
    else:
        signature = f"signature: {result.signature}{signer}"
        verdict = f"all {result.checked} files match" if result.ok else "does NOT match its manifest"
    text = "\n".join(
        [
            *(f"MISMATCH {n}" for n in result.mismatched),
            *(f"MISSING  {n}" for n in result.missing),
            *(f"EXTRA    {n}" for n in result.extra),
            *(f"NOT AS SIGNED {n}" for n in result.not_as_signed),
            signature,
            f"{repo_id}@{result.commit}: {verdict}",
        ]
    )
    click.echo(json.dumps(data, indent=2) if as_json else text)
    if not result.ok:
        ctx.exit(ContentMismatch.exit_code if result.tampered else CHECKSUM_MISMATCH)


@cli.command()
@spec_argument()
@click.option(
    "--bundle",
    metavar="DIR",
    type=_path(),
    help="Release this built bundle instead of converting [convert] checkpoint.",
)
@option(
    "--out", metavar="DIR", type=_path(), show_default="dist/NAME-VERSION beside the spec", help="Where to convert to."
)
@endpoint_option
@click.option("--private", is_flag=True, help="Create the repo private; refuse to upload into a public one.")
@click.option(
    "--dry-run",
    is_flag=True,
    help="Every stage but the upload, which only plans (add / replace / "
    "unchanged / delete, the tag, the gating, the collection): nothing "
    "changes on the Hub.",
)
@matrix_options
@json_option
@output_option(
    "Also write the JSON summary to this file, also when the release fails (a CI artifact; "
    "schemas/release_summary.schema.json).",
    old=("--summary",),
)
@quiet_option
@token_option
@click.pass_context
def release(
    ctx: click.Context,
    spec_path: Path,
    bundle: Path | None,
    out: Path | None,
    endpoint: str | None,
    private: bool,
    dry_run: bool,
    jobs: int,
    only: tuple[str, ...],
    backend: str,
    flavor: str,
    gather_from: Path | None,
    as_json: bool,
    output: Path | None,
    quiet: bool,
    token_file: Path | None,
) -> None:
    """Convert, validate, write the card and manifest, upload in one commit, verify, tag, then put the repo into
    [release] collection; stop at the first failure.

    Stages, in order: convert (or take --bundle); validate; verify against [convert] checkpoint, or reuse the
    passing report [card] verify_report names (its digests must be these files'), or say it is not verified; card;
    checksum; sign (when the spec signs); upload in one commit, check it on the Hub, tag; collection. What can be
    refused is refused before the first: the spec, the source, the prompts, every report named, a model.sig that no
    longer matches its files.

    Example: packager release release.toml --endpoint http://127.0.0.1:8765

    A matrix spec ([matrix]) releases every job (packager plan lists them), --jobs at a time, into --out (default
    dist/matrix-NAME beside the spec) with a journal there: run again after a failure or a kill, it finishes what
    is missing and redoes nothing released. It prints the matrix's summary (also in --out: summary.json,
    summary.md), updates [release] collection once at the end, and exits 63 naming the failed jobs.

    Example: packager release release.toml --dry-run -o dist/release-summary.json

    Example: packager release matrix.toml --jobs 2
    """
    from ..errors import PackagerError
    from ..release.run import ReleaseRequest, run
    from ..release.summary import as_text, summary
    from .matrix import matrix_release

    summary_path = output
    if summary_path is not None:
        _writable(summary_path)  # before any work: a release must not end unable to say what it did
    token = hub_token(token_file)
    common = (jobs, only, backend, flavor, gather_from, out, endpoint, private, token, as_json, output, quiet)
    if matrix_release(ctx, spec_path, bundle, dry_run, *common):
        return
    spec = None
    try:
        spec = load_spec(spec_path)
        with StderrProgress(quiet) as progress:
            result = run(
                ReleaseRequest(
                    spec=spec,
                    bundle=bundle,
                    out=out,
                    endpoint=endpoint,
                    private=private,
                    token=token,
                    dry_run=dry_run,
                ),
                progress=progress,
            )
    except PackagerError as exc:  # refused before the first stage: the artifact still says why
        if summary_path is not None:
            _write_summary(
                summary_path, summary(None, spec_path, dry_run=dry_run, endpoint=endpoint, error=exc, spec=spec)
            )
        raise
    data = summary(result, spec_path, dry_run=dry_run, endpoint=endpoint, spec=spec)
    if summary_path is not None:
        _write_summary(summary_path, data)
    for stage in result.stages:
        for warning in stage.warnings:
            warn(warning)
    click.echo(json.dumps(data, indent=2) if as_json else as_text(data))
    if result.error is not None:
        ctx.exit(result.error.exit_code)


def _writable(path: Path) -> None:
    from ..errors import from_os_error

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if not os.access(path.parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
            raise PermissionError(13, "Permission denied", str(path))
    except OSError as exc:
        raise from_os_error(exc, "--output cannot be written") from None


def _write_summary(path: Path, data: dict[str, Any]) -> None:
    from ..bundle.staging import write_atomic

    write_atomic(path, (json.dumps(data, indent=2) + "\n").encode("utf-8"))
