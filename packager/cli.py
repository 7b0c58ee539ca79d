"""The `packager` command line: flags in, library calls, results and exit codes out. The only click module."""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import click

from . import __version__
from .errors import CHECKSUM_MISMATCH, VALIDATION_FAILED, VERIFY_FAILED, PackagerError

INTERRUPTED = 130


class PackagerGroup(click.Group):
    """Maps PackagerError to its one line and exit code, Ctrl-C to 130; tracebacks only with --debug."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except PackagerError as exc:
            if _debug(ctx):
                traceback.print_exc()
                if exc.details:
                    click.echo(exc.details, err=True)
            click.echo(f"packager: error: {exc.one_line()}", err=True)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("packager: interrupted; nothing was left half-written", err=True)
            ctx.exit(INTERRUPTED)


def _debug(ctx: click.Context) -> bool:
    return bool((ctx.obj or {}).get("debug"))


class StderrProgress:
    """Prints each long step with the time since the command started."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.start = time.monotonic()

    def __call__(self, stage: str) -> None:
        if not self.quiet:
            click.echo(f"packager: [{time.monotonic() - self.start:6.1f}s] {stage}", err=True)


@click.group(cls=PackagerGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks and tool logs on errors.")
@click.version_option(__version__, prog_name="packager")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Build, check and publish MNN draft-model bundles.

    Example: packager convert ./my-qwen3-draft --out ./bundle
    """
    ctx.obj = {"debug": debug}


def _path(**kwargs: Any) -> click.Path:
    return click.Path(path_type=Path, **kwargs)


@cli.command()
@click.argument("checkpoint", type=_path())
@click.option("--out", "out", required=True, type=_path(), help="Bundle folder to create.")
@click.option("--lora", "lora", type=_path(), help="peft LoRA adapter folder to merge into CHECKPOINT first.")
@click.option("--spec", "spec_path", type=_path(), help="Release spec (TOML) with [convert] and [runtime.*].")
@click.option("--quant-bits", type=int, default=None, help="Weight bits, 4 or 8.  [default: 4]")
@click.option("--quant-block", type=int, default=None, help="Quantization block size.  [default: 128]")
@click.option("--force", is_flag=True, help="Replace --out if it exists.")
@click.option("--quiet", is_flag=True, help="No progress on stderr.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def convert(checkpoint: Path, out: Path, lora: Path | None, spec_path: Path | None, quant_bits: int | None,
            quant_block: int | None, force: bool, quiet: bool, as_json: bool) -> None:
    """Convert a Qwen3 checkpoint (optionally + LoRA) into the ten-file MNN bundle.

    Example: packager convert ./qwen3-draft --lora ./adapter --out ./bundle --quant-bits 4 --quant-block 128
    """
    from . import spec as spec_module
    from .convert.pipeline import ConvertRequest
    from .convert.pipeline import convert as run_convert

    spec = spec_module.load(spec_path) if spec_path else None
    result = run_convert(ConvertRequest(checkpoint=checkpoint, out=out, adapter=lora, spec=spec,
                                        quant_bits=quant_bits, quant_block=quant_block, force=force),
                         progress=StderrProgress(quiet))
    summary = {
        "bundle": str(result.out), "files": result.sizes, "xxh3_128": result.digests,
        "quant": {"bits": result.quant_bits, "block": result.quant_block},
        "min_mnn_engine": result.engine.text, "min_mnn_engine_because": list(result.engine.reasons),
        "tokenizer": {"format": result.tokenizer.format,
                      "agreement": {a.format: f"{a.matched}/{a.total}" for a in result.tokenizer.agreements}},
        "graph_uuid": result.graph_uuid, "provenance": str(result.provenance),
        "sandbox_blocked": list(result.blocked),
    }
    _emit(summary, as_json, _convert_text)


@cli.command()
@click.argument("bundle", type=_path())
@click.option("--json", "as_json", is_flag=True, help="Print the findings as JSON.")
@click.option("--strict", is_flag=True, help="Fail on warnings too.")
@click.pass_context
def validate(ctx: click.Context, bundle: Path, as_json: bool, strict: bool) -> None:
    """Check a bundle: JSON syntax, schemas, unknown keys, completeness, cross-file consistency, checksums.

    Exit 0 when there is no error (warnings allowed unless --strict), 30 otherwise.

    Example: packager validate ./bundle --strict
    """
    from .validate import validate as run_validate
    from .validate.report import as_json as json_report
    from .validate.report import as_text

    report = run_validate(bundle)
    click.echo(json_report(report, strict) if as_json else as_text(report, strict))
    if not report.ok(strict):
        ctx.exit(VALIDATION_FAILED)


@cli.command()
@click.argument("bundle", type=_path())
@click.option("--check", is_flag=True, help="Verify the manifest instead of writing it.")
@click.pass_context
def checksum(ctx: click.Context, bundle: Path, check: bool) -> None:
    """Write (or --check) the bundle's xxh3-128 manifest checksums.xxh128, in `xxhsum --tag -H2` format.

    `cd BUNDLE && xxhsum -c checksums.xxh128` verifies it too.

    Example: packager checksum ./bundle && packager checksum --check ./bundle
    """
    from .checksum import check_manifest, write_manifest

    if not check:
        manifest = write_manifest(bundle)
        click.echo(f"wrote {manifest.path} ({len(manifest.digests)} files)")
        return
    result = check_manifest(bundle)
    for label, names in (("MISMATCH", result.mismatched), ("MISSING", result.missing), ("EXTRA", result.extra)):
        for name in names:
            click.echo(f"{label:8} {name}")
    if not result.ok:
        click.echo(f"{bundle}: {len(result.mismatched) + len(result.missing) + len(result.extra)} problems", err=True)
        ctx.exit(CHECKSUM_MISMATCH)
    click.echo(f"{bundle}: all {result.checked} files match {result.manifest.name}")


@cli.command()
@click.argument("bundle", type=_path())
@click.option("--spec", "spec_path", required=True, type=_path(), help="Release spec (TOML).")
@click.option("-o", "--output", type=_path(), help="Where to write the card.  [default: BUNDLE/README.md; - for stdout]")
@click.option("--template", type=_path(exists=True, dir_okay=False), help="Your own Jinja2 template.")
@click.option("--provenance", type=_path(exists=True, dir_okay=False),
              help="Conversion provenance with measurements.  [default: BUNDLE.provenance.json if present]")
def card(bundle: Path, spec_path: Path, output: Path | None, template: Path | None, provenance: Path | None) -> None:
    """Render the model card (README.md) from the release spec, the bundle's files and measurements.

    Example: packager card ./bundle --spec examples/release.toml
    """
    from . import spec as spec_module
    from .card import measurements_from_provenance, render
    from .convert import provenance as provenance_module
    from .convert.pipeline import provenance_path
    from .staging import write_atomic

    spec = spec_module.load(spec_path)
    record = provenance or provenance_path(bundle.absolute())
    measurements = measurements_from_provenance(provenance_module.read(record)) if record.is_file() else None
    rendered = render(bundle, spec, template=template, measurements=measurements)
    if output == Path("-"):
        click.echo(rendered.text, nl=False)
        return
    target = output or bundle / "README.md"
    write_atomic(target, rendered.text.encode("utf-8"))
    click.echo(f"wrote {target}")


@cli.command()
@click.argument("bundle", type=_path())
@click.argument("repo_id")
@click.option("--endpoint", help="Hub URL.  [default: $HF_ENDPOINT, else https://huggingface.co]")
@click.option("--revision", default="main", show_default=True, help="Branch to commit to.")
@click.option("--tag", help="Tag the release commit.")
@click.option("--private", is_flag=True, help="Create the repo private.")
@click.option("--message", help="Commit message.")
@click.option("--dry-run", is_flag=True, help="Print the plan (add / unchanged / delete) and change nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--quiet", is_flag=True, help="No progress on stderr.")
def upload(bundle: Path, repo_id: str, endpoint: str | None, revision: str, tag: str | None, private: bool,
           message: str | None, dry_run: bool, as_json: bool, quiet: bool) -> None:
    """Publish BUNDLE (ten files, README.md, checksums.xxh128) to REPO_ID in one verified commit.

    Unchanged files are not sent; an unchanged bundle makes no commit. The token comes from HF_TOKEN or
    your huggingface login and is never printed.

    Example: packager upload ./bundle me/qwen3-draft-mnn --tag v3
    """
    from .hub.publish import upload as run_upload

    result = run_upload(bundle, repo_id, endpoint=endpoint, revision=revision, tag=tag, private=private,
                        dry_run=dry_run, message=message, progress=StderrProgress(quiet))
    data = {"repo_id": result.repo_id, "endpoint": result.endpoint, "revision": result.revision,
            "commit": result.commit, "committed": result.committed, "tag": result.tag, "dry_run": result.dry_run,
            "verified": result.verified, "bytes_to_send": result.bytes_to_send,
            "plan": [{"path": r.path, "action": r.action, "size": r.size} for r in result.plan]}
    _emit(data, as_json, _upload_text)


def _upload_text(d: dict[str, Any]) -> str:
    lines = [f"{r['action']:9} {r['path']} ({r['size']:,} B)" for r in d["plan"]]
    if d["dry_run"]:
        lines.append(f"dry run: nothing changed on {d['endpoint']}; {d['bytes_to_send']:,} bytes would be sent")
    elif d["committed"]:
        lines.append(f"committed {d['repo_id']}@{d['commit']} (verified)" + (f", tagged {d['tag']}" if d["tag"] else ""))
    else:
        lines.append(f"unchanged: {d['repo_id']}@{d['commit']} already holds this bundle (verified, no commit)"
                     + (f", tagged {d['tag']}" if d["tag"] else ""))
    return "\n".join(lines)


@cli.command("verify-remote")
@click.argument("target", metavar="REPO_ID[@REV]")
@click.option("--endpoint", help="Hub URL.  [default: $HF_ENDPOINT, else https://huggingface.co]")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.pass_context
def verify_remote(ctx: click.Context, target: str, endpoint: str | None, as_json: bool) -> None:
    """Download every file of a remote revision and check it against its xxh3-128 manifest.

    Example: packager verify-remote me/qwen3-draft-mnn@v3
    """
    from .hub.publish import verify_remote as run_verify

    repo_id, _, revision = target.partition("@")
    result = run_verify(repo_id, revision or "main", endpoint=endpoint)
    data = {"repo_id": result.repo_id, "revision": result.revision, "commit": result.commit, "ok": result.ok,
            "checked": result.checked, "mismatched": list(result.mismatched), "missing": list(result.missing),
            "extra": list(result.extra)}
    text = "\n".join([*(f"MISMATCH {n}" for n in result.mismatched), *(f"MISSING  {n}" for n in result.missing),
                      *(f"EXTRA    {n}" for n in result.extra),
                      f"{repo_id}@{result.commit}: " + (f"all {result.checked} files match" if result.ok
                                                        else "does NOT match its manifest")])
    click.echo(json.dumps(data, indent=2) if as_json else text)
    if not result.ok:
        ctx.exit(CHECKSUM_MISMATCH)


@cli.group()
def hub() -> None:
    """A local Hub-compatible server, to rehearse releases offline.

    Example: packager hub serve --root ./hub-data --port 8765 --token secret
    """


@hub.command("serve")
@click.option("--root", type=_path(file_okay=False), default=Path("hub-data"), show_default=True,
              help="Where repos and objects are stored (kept across restarts).")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=8765, show_default=True, help="0 picks a free port.")
@click.option("--token", "tokens", multiple=True, envvar="PACKAGER_HUB_TOKEN",
              help="A token allowed to write (repeatable; also $PACKAGER_HUB_TOKEN).")
@click.option("--read-token", "read_tokens", multiple=True, help="A token allowed to read only (repeatable).")
@click.option("--test-hooks", is_flag=True, help="Enable /_faults and /_stats (fault injection for tests).")
def hub_serve(root: Path, host: str, port: int, tokens: tuple[str, ...], read_tokens: tuple[str, ...],
              test_hooks: bool) -> None:
    """Serve the Hub API on HOST:PORT until interrupted (plain LFS, no Xet).

    Example: packager hub serve --root ./hub-data --port 8765 --token secret
    """
    from .hub.server import HubConfig, make_server, url_of

    if not tokens:
        raise click.UsageError("give at least one --token (writes need one)")
    server = make_server(HubConfig(root=root, write_tokens=frozenset(tokens), read_tokens=frozenset(read_tokens),
                                   test_hooks=test_hooks), host, port)
    click.echo(f"packager hub: serving {url_of(server)} (root {root})")
    sys.stdout.flush()
    try:
        server.serve_forever()
    finally:
        server.server_close()


@cli.command()
@click.argument("spec_path", metavar="RELEASE_TOML", type=_path())
@click.option("--bundle", type=_path(), help="Release this built bundle instead of converting [convert] source.")
@click.option("--out", type=_path(), help="Where to convert to.  [default: dist/NAME-VERSION beside the spec]")
@click.option("--endpoint", help="Hub URL.  [default: $HF_ENDPOINT, else https://huggingface.co]")
@click.option("--private", is_flag=True, help="Create the repo private.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("--quiet", is_flag=True, help="No progress on stderr.")
@click.pass_context
def release(ctx: click.Context, spec_path: Path, bundle: Path | None, out: Path | None, endpoint: str | None,
            private: bool, as_json: bool, quiet: bool) -> None:
    """Convert, validate, write the card and manifest, upload in one commit, verify, tag; stop at the first failure.

    Example: packager release release.toml --endpoint http://127.0.0.1:8765
    """
    from . import spec as spec_module
    from .release import ReleaseRequest, run

    spec = spec_module.load(spec_path)
    result = run(ReleaseRequest(spec=spec, bundle=bundle, out=out, endpoint=endpoint, private=private),
                 progress=StderrProgress(quiet))
    data = {"ok": result.ok, "repo_id": result.repo_id, "bundle": str(result.bundle) if result.bundle else None,
            "commit": result.commit, "tag": result.tag,
            "stages": [{"name": s.name, "ok": s.ok, "seconds": round(s.seconds, 3), "detail": s.detail}
                       for s in result.stages],
            "error": result.error.one_line() if result.error else None}
    lines = [f"{'ok  ' if s['ok'] else 'FAIL'} {s['name']:20} {s['seconds']:7.2f}s  {s['detail']}" for s in data["stages"]]
    lines.append(f"released {result.repo_id}@{result.tag} ({result.commit})" if result.ok
                 else f"release stopped at {result.stages[-1].name if result.stages else 'start'}")
    click.echo(json.dumps(data, indent=2) if as_json else "\n".join(lines))
    if result.error is not None:
        ctx.exit(result.error.exit_code)


@cli.command()
@click.argument("bundle", type=_path(exists=True, file_okay=False))
@click.option("--source", required=True, type=_path(exists=True, file_okay=False), help="The source checkpoint.")
@click.option("--prompts", "prompts_file", type=_path(exists=True, dir_okay=False),
              help="Prompts, one per line (or JSON).  [default: the built-in set]")
@click.option("--spec", "spec_path", type=_path(), help="Release spec whose [verify] table sets thresholds.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--quiet", is_flag=True, help="No progress on stderr.")
@click.pass_context
def verify(ctx: click.Context, bundle: Path, source: Path, prompts_file: Path | None, spec_path: Path | None,
           as_json: bool, quiet: bool) -> None:
    """Check that BUNDLE (MNN) behaves like its source checkpoint (transformers). Exit 50 below a threshold.

    Reports tokenizer agreement on the built-in multilingual corpus, next-token top-1 agreement, logit cosine
    and KL over every prompt position, and greedy continuation agreement.

    Example: packager verify ./bundle --source ./qwen3-draft
    """
    from . import spec as spec_module
    from .verify import Thresholds, prompts_from_file
    from .verify import verify as run_verify

    thresholds = Thresholds.from_spec(spec_module.load(spec_path).verify if spec_path else None)
    report = run_verify(bundle, source, prompts_from_file(prompts_file) if prompts_file else None, thresholds,
                        progress=StderrProgress(quiet))
    data = {"ok": report.ok, "bundle": str(bundle), "source": str(source),
            "tokenizer": {"matched": report.tokenizer_matched, "total": report.tokenizer_total},
            "positions": report.positions, "top1_agreement": report.top1_agreement,
            "mean_cosine": report.mean_cosine, "min_cosine": report.min_cosine, "mean_kl": report.mean_kl,
            "greedy_agreement": report.greedy_agreement, "thresholds": thresholds.__dict__,
            "failures": list(report.failures)}
    text = "\n".join([
        f"tokenizer agreement: {report.tokenizer_matched}/{report.tokenizer_total}",
        f"top-1 agreement: {report.top1_agreement:.4f} over {report.positions} prompt positions",
        f"logit cosine: mean {report.mean_cosine:.4f}, min {report.min_cosine:.4f}; mean KL {report.mean_kl:.4f}",
        f"greedy continuation agreement: {report.greedy_agreement:.4f}",
        *(f"FAIL {f}" for f in report.failures), "verify: " + ("ok" if report.ok else "FAILED")])
    click.echo(json.dumps(data, indent=2) if as_json else text)
    if not report.ok:
        ctx.exit(VERIFY_FAILED)


@cli.command("pair")
@click.argument("draft", type=_path(exists=True, file_okay=False))
@click.argument("target", type=_path(exists=True, file_okay=False))
@click.option("--tokens", "new_tokens", type=int, default=32, show_default=True, help="Greedy tokens per prompt.")
@click.option("--prompts", "prompts_file", type=_path(exists=True, dir_okay=False),
              help="Prompts, one per line (or JSON).  [default: the built-in set]")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--quiet", is_flag=True, help="No progress on stderr.")
def pair_command(draft: Path, target: Path, new_tokens: int, prompts_file: Path | None, as_json: bool,
                 quiet: bool) -> None:
    """Measure how well DRAFT drafts for TARGET (bundles or checkpoints): compatibility, acceptance, speedup.

    Refuses (exit 51) before measuring when vocabulary, special or stop tokens, chat template or family
    differ. Then reports alpha, the mean accepted length for d = 1..6, the measured cost of a draft step and
    of a target verification on this CPU, and the expected speedup per d.

    Example: packager pair ./draft-bundle ./target-bundle
    """
    from .pair import pair as run_pair
    from .verify import prompts_from_file

    report = run_pair(draft, target, prompts_from_file(prompts_file) if prompts_file else None, new_tokens,
                      progress=StderrProgress(quiet))
    data = {"draft": str(draft), "target": str(target), "prompts": report.prompts, "new_tokens": report.new_tokens,
            "tokenizer_strings_compared": report.tokenizer_strings_compared, "alpha": report.alpha,
            "draft_step_s": report.draft_step_seconds, "target_step_s": report.target_step_seconds,
            "best_d": report.best.d, "depths": [d.__dict__ for d in report.depths]}
    lines = [f"alpha (per-token greedy acceptance): {report.alpha:.4f}",
             f"draft step {report.draft_step_seconds * 1e3:.2f} ms, target step {report.target_step_seconds * 1e3:.2f} ms",
             " d  accept  tokens/step  verify ms  speedup  (formula)"]
    lines += [f"{d.d:2}  {d.acceptance_rate:6.3f}  {d.mean_accepted_length:11.3f}  {d.verify_seconds * 1e3:9.2f}"
              f"  {d.speedup_measured_alpha:7.3f}  ({d.speedup_formula:.3f})" for d in report.depths]
    lines.append(f"best d: {report.best.d} (expected speedup {report.best.speedup_measured_alpha:.3f}x on this CPU)")
    click.echo(json.dumps(data, indent=2) if as_json else "\n".join(lines))


def _convert_text(s: dict[str, Any]) -> str:
    total = sum(s["files"].values())
    agree = ", ".join(f"{k} {v}" for k, v in s["tokenizer"]["agreement"].items())
    lines = [f"bundle: {s['bundle']} ({len(s['files'])} files, {total / 1e6:.1f} MB)",
             f"quantization: {s['quant']['bits']}-bit, block {s['quant']['block']}",
             f"minimum MNN engine: {s['min_mnn_engine']}",
             f"tokenizer.txt format: {s['tokenizer']['format']} (agreement with HF: {agree})",
             f"provenance: {s['provenance']}"]
    lines += [f"warning: the sandbox blocked {item}" for item in s["sandbox_blocked"]]
    return "\n".join(lines)


def _emit(data: dict[str, Any], as_json: bool, text: Callable[[dict[str, Any]], str]) -> None:
    click.echo(json.dumps(data, indent=2, ensure_ascii=False) if as_json else text(data))


def main() -> None:
    # huggingface_hub reads these at import: no telemetry call and no progress bars unless the user asks.
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    cli(prog_name="packager")


if __name__ == "__main__":
    sys.exit(main())
