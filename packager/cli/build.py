"""Commands that build a bundle: convert, checksum."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from ..convert.recipe import DEFAULT_BITS, DEFAULT_BLOCK
from ..errors import CHECKSUM_MISMATCH
from ..families import FAMILIES
from . import StderrProgress, _emit, _path, cli, warn
from .options import (
    checkpoint_argument,
    json_option,
    load_spec,
    lora_option,
    option,
    quiet_option,
    spec_option,
)

NO_CORPUS = "\0"  # what --lookahead gives without a value (no path can hold a NUL byte)


@cli.command()
@checkpoint_argument(required=False)
@click.option("--out", "out", metavar="DIR", required=True, type=_path(), help="Bundle folder to create.")
@lora_option("peft LoRA adapter folder to merge into CHECKPOINT first.")
@spec_option("Release spec with [convert] and [runtime.*] (flags win over it).")
# The quantization defaults are None here (the spec's [convert] may set them); click shows what applies.
@option(
    "--quant-bits",
    type=int,
    metavar="BITS",
    show_default=f"the checkpoint's family's: {DEFAULT_BITS}"
    + "".join(f", {f.default_bits} for {f.title}" for f in FAMILIES if f.default_bits != DEFAULT_BITS),
    help="Weight bits, 4 or 8.",
)
@option(
    "--quant-block",
    type=int,
    metavar="N",
    show_default=f"the checkpoint's: {DEFAULT_BLOCK}, else the largest of 64 and 32 that divides its input sizes",
    help="Quantization block size; 0 means one block per row (per-channel).",
)
@option(
    "--sym/--asym",
    "symmetric",
    default=None,  # neither flag: the spec's [convert] symmetric, else asymmetric
    show_default="--asym",
    help="Symmetric quantization (scales only, llmexport --sym).",
)
@option(
    "--algorithm",
    type=click.Choice(["plain", "hqq", "awq"]),
    show_default="plain",
    help="plain round-to-nearest or hqq (llmexport --hqq); awq is refused (it calibrates on data it downloads).",
)
@option(
    "--lm-bits",
    type=int,
    metavar="BITS",
    show_default="--quant-bits",
    help="Bits of the lm_head, also the tied embedding table.",
)
@option("--lm-block", type=int, metavar="N", show_default="--quant-block", help="Block of the lm_head.")
@click.option(
    "--force",
    is_flag=True,
    help="Replace --out if it exists and is a packager bundle (only bundle files inside). Never replaces "
    "a folder holding anything else, nor one that is, contains or lies inside CHECKPOINT or the "
    "adapter, nor the current or home directory.",
)
@click.option(
    "--reference",
    is_flag=True,
    help="Let llmexport load the whole model and quantize it (slow; the path the default streaming "
    "conversion is tested byte for byte against).",
)
@option(
    "--engine",
    "engine",
    metavar="VERSION",
    show_default="newest",
    help="The oldest MNN engine the bundle must run on, e.g. 3.4.1 (3.1.0 to 3.6.1): packager picks the "
    "converter options (no C4 attention fusion before 3.6.1) and a tokenizer format that engine reads.",
)
@option(
    "--kind",
    type=click.Choice(["draft", "target", "target+eagle", "target+dflash"]),
    show_default="draft, or target+eagle with --eagle, target+dflash with --dflash",
    help="What to make: the ten-file draft bundle, a target bundle (upstream MNN runs it on its own; "
    "untied embeddings ship as embeddings_bf16.bin), a target with an EAGLE-3 head (--eagle) or with a DFlash "
    "draft (--dflash).",
)
@click.option(
    "--eagle",
    "eagle",
    type=_path(),
    metavar="HEAD",
    help="An EAGLE-3 head folder (SpecForge / AngelSlim layout) to export with the target: the bundle runs "
    "in MNN with speculative_type eagle.",
)
@click.option(
    "--dflash",
    "dflash",
    type=_path(),
    metavar="DRAFT",
    help="A DFlash draft folder (z-lab's DFlashDraftModel layout) to export with a Qwen3 or Llama 3.1 target: "
    "the bundle runs in MNN 3.6.x with speculative_type dflash.",
)
@click.option(
    "--allow-pickle-head",
    is_flag=True,
    help="Let an EAGLE head stored as pytorch_model.bin (a pickle) be read (weights only).",
)
@click.option(
    "--lookahead",
    "lookahead",
    is_flag=False,
    flag_value=NO_CORPUS,
    default=None,
    metavar="[CORPUS]",
    help="Configure the bundle (any kind but target+eagle) for MNN's lookahead, which drafts tokens from "
    "n-grams of the prompt and, given CORPUS, of that UTF-8 text (at most 8 MiB; shipped as "
    "lookup_file.txt). Write --lookahead=CORPUS, or put it after CHECKPOINT.",
)
@option(
    "--lookahead-length",
    type=click.IntRange(1, 16),
    metavar="N",
    show_default="3",
    help="Tokens lookahead drafts per step (draft_predict_length).",
)
@quiet_option
@json_option
def convert(
    checkpoint: Path,
    out: Path,
    lora: Path | None,
    spec_path: Path | None,
    quant_bits: int | None,
    quant_block: int | None,
    symmetric: bool | None,
    algorithm: str | None,
    lm_bits: int | None,
    lm_block: int | None,
    force: bool,
    reference: bool,
    engine: str | None,
    kind: str | None,
    eagle: Path | None,
    dflash: Path | None,
    allow_pickle_head: bool,
    lookahead: str | None,
    lookahead_length: int | None,
    quiet: bool,
    as_json: bool,
) -> None:
    """Convert a Hugging Face checkpoint (optionally + LoRA) into an MNN bundle: the ten-file draft bundle, a
    target bundle, or a target with its EAGLE-3 head or its DFlash draft.

    Without CHECKPOINT, the checkpoint and adapter are --spec's [convert] checkpoint and lora.

    Example: packager convert ./qwen3-draft --lora ./adapter --out ./bundle --quant-bits 4 --quant-block 128

    Example: packager convert ./qwen3-draft --out ./bundle-3.4 --engine 3.4.1

    Example: packager convert ./qwen3-draft --out ./bundle-hqq --algorithm hqq --lm-bits 8

    Example: packager convert --spec release.toml --out dist/bundle --force

    Example: packager convert ./qwen3-8b --eagle ./qwen3-8b-eagle3 --out ./bundle-eagle

    Example: packager convert ./qwen3-8b --dflash ./qwen3-8b-dflash --out ./bundle-dflash

    Example: packager convert ./qwen3-8b --kind target --lookahead=corpus.txt --out ./bundle-lookahead
    """
    from ..convert.pipeline import ConvertRequest
    from ..convert.pipeline import convert as run_convert

    spec = load_spec(spec_path) if spec_path else None
    if checkpoint is None:
        if lookahead is not None and lookahead != NO_CORPUS and Path(lookahead).is_dir():
            raise click.UsageError(
                f"--lookahead took {lookahead} as its corpus: write --lookahead=CORPUS, or put "
                "--lookahead after CHECKPOINT"
            )
        if spec is None or spec.convert.checkpoint is None:
            raise click.UsageError("give CHECKPOINT, or --spec with a [convert] checkpoint")
        checkpoint, lora = spec.convert.checkpoint, lora or spec.convert.lora
    with StderrProgress(quiet) as progress:
        result = run_convert(
            ConvertRequest(
                checkpoint=checkpoint,
                out=out,
                adapter=lora,
                spec=spec,
                quant_bits=quant_bits,
                quant_block=quant_block,
                force=force,
                reference=reference,
                engine=engine,
                symmetric=symmetric,
                algorithm=algorithm,
                lm_bits=lm_bits,
                lm_block=lm_block,
                kind=kind,
                eagle=eagle,
                dflash=dflash,
                allow_pickle_head=allow_pickle_head,
                lookahead=_lookahead(lookahead),
                lookahead_length=lookahead_length,
            ),
            progress=progress,
        )
    summary = {
        "bundle": str(result.out),
        "kind": result.kind.name,
        "files": result.sizes,
        "xxh3_128": result.digests,
        "quant": {"bits": result.quant_bits, "block": result.quant_block},
        "weights": result.path,
        "quant_recipe": {"name": result.recipe.name, **result.recipe.record()},
        "min_mnn_engine": result.engine.text,
        "min_mnn_engine_because": list(result.engine.reasons),
        "engine_target": {
            "requested": result.target.requested,
            "version": result.target.text,
            "converter_flags": list(result.target.converter_flags),
        },
        "tokenizer": {
            "format": result.tokenizer.format,
            "agreement": {a.format: f"{a.matched}/{a.total}" for a in result.tokenizer.agreements},
        },
        "graph_uuid": result.graph_uuid,
        "provenance": str(result.provenance),
        "sandbox_blocked": list(result.blocked),
        "warnings": list(result.warnings),
    }
    if result.head is not None and result.faithfulness is not None:
        f = result.faithfulness
        summary["eagle"] = {
            "head": str(result.head.path),
            "rope_theta": result.head.rope_theta,
            "draft_vocab_size": result.head.draft_vocab_size,
            "aux_layers": list(result.head.aux_layers),
            "checked_positions": f.positions,
            "state_error": round(f.hidden_error, 5),
            "logprob_error": round(f.logprob_error, 5),
            "top1_agreement": round(f.top1_agreement, 4),
            "state_error_at_theta_10000": None if f.other_theta_error is None else round(f.other_theta_error, 5),
        }
    if result.dflash is not None and result.dflash_check is not None:
        d, c = result.dflash, result.dflash_check
        summary["dflash"] = {
            "draft": str(d.path),
            "block_size": d.block_size,
            "mask_token_id": d.mask_token_id,
            "target_layer_ids": list(d.target_layer_ids),
            "rope_theta": d.rope_theta,
            "checked_positions": c.positions,
            "min_cosine": round(c.min_cosine, 5),
            "top1_agreement": round(c.top1_agreement, 4),
        }
    if result.lookahead is not None:
        summary["lookahead"] = result.lookahead.record()
    for warning in result.warnings:
        warn(warning)
    _emit(summary, as_json, _convert_text)


def _lookahead(value: str | None) -> bool | Path | None:
    """--lookahead alone is True (no corpus), --lookahead CORPUS that path, no flag None (the spec decides)."""
    return None if value is None else True if value == NO_CORPUS else Path(value)


def _convert_text(s: dict[str, Any]) -> str:
    total = sum(s["files"].values())
    agree = ", ".join(f"{k} {v}" for k, v in s["tokenizer"]["agreement"].items())
    lines = [
        f"bundle: {s['bundle']} ({s['kind']}, {len(s['files'])} files, {total / 1e6:.1f} MB)",
        f"quantization: {s['quant']['bits']}-bit, block {s['quant']['block']}",
        f"minimum MNN engine: {s['min_mnn_engine']}"
        + (
            ""
            if s["engine_target"]["requested"] == "newest"
            else f" (built for --engine {s['engine_target']['requested']})"
        ),
        f"tokenizer.txt format: {s['tokenizer']['format']} (agreement with HF: {agree})",
        f"provenance: {s['provenance']}",
    ]
    if "eagle" in s:
        e = s["eagle"]
        other = (
            ""
            if e["state_error_at_theta_10000"] is None
            else f", {e['state_error_at_theta_10000']:.2%} against llmexport's theta 10000"
        )
        lines.insert(
            1,
            f"EAGLE-3 head: rope theta {e['rope_theta']:g}, draft vocabulary {e['draft_vocab_size']}, "
            f"target layers {e['aux_layers']}; exported head matches the checkpoint's within "
            f"{e['state_error']:.2%} over {e['checked_positions']} positions{other}",
        )
    if "dflash" in s:
        d = s["dflash"]
        lines.insert(
            1,
            f"DFlash draft: block {d['block_size']}, mask token {d['mask_token_id']}, target layers "
            f"{d['target_layer_ids']}, rope theta {d['rope_theta']:g}; exported graphs match the torch reference "
            f"(least cosine {d['min_cosine']:.4f}, top-1 {d['top1_agreement']:.0%} over {d['checked_positions']} "
            "positions); lossless on each engine's first response only in MNN 3.6.1 (reload the engine per response)",
        )
    if "lookahead" in s:
        la, corpus = s["lookahead"]["settings"], s["lookahead"]["corpus"]
        lines.insert(
            1,
            f"lookahead: draft length {la['draft_predict_length']}, n-grams up to "
            f"{la['ngram_match_maxlen']} tokens; "
            + (
                f"corpus {corpus['file']} ({corpus['bytes']} bytes)"
                if corpus
                else "no corpus (the prompt's own n-grams)"
            ),
        )
    lines += [f"warning: the sandbox blocked {item}" for item in s["sandbox_blocked"]]
    return "\n".join(lines)


@cli.command()
@click.argument("bundle", type=_path())
@click.option("--check", is_flag=True, help="Verify the manifest instead of writing it.")
@json_option
@click.pass_context
def checksum(ctx: click.Context, bundle: Path, check: bool, as_json: bool) -> None:
    """Write (or --check) the bundle's xxh3-128 manifest checksums.xxh128, in `xxhsum --tag -H2` format.

    `cd BUNDLE && xxhsum -c checksums.xxh128` verifies it too.

    Example: packager checksum ./bundle && packager checksum --check ./bundle --json
    """
    from ..bundle.checksum import check_manifest, write_manifest

    if not check:
        manifest = write_manifest(bundle)
        written = {"ok": True, "bundle": str(bundle), "manifest": str(manifest.path), "files": len(manifest.digests)}
        _emit(written, as_json, lambda d: f"wrote {d['manifest']} ({d['files']} files)")
        return
    result = check_manifest(bundle)
    problems = {"mismatched": list(result.mismatched), "missing": list(result.missing), "extra": list(result.extra)}
    checked = {
        "ok": result.ok,
        "bundle": str(bundle),
        "manifest": str(result.manifest),
        "checked": result.checked,
        **problems,
    }
    _emit(checked, as_json, _checked_text)
    if not result.ok:
        if not as_json:
            click.echo(f"{bundle}: {sum(map(len, problems.values()))} problems", err=True)
        ctx.exit(CHECKSUM_MISMATCH)


def _checked_text(d: dict[str, Any]) -> str:
    labels = (("MISMATCH", d["mismatched"]), ("MISSING", d["missing"]), ("EXTRA", d["extra"]))
    lines = [f"{label:8} {name}" for label, names in labels for name in names]
    if d["ok"]:
        lines.append(f"{d['bundle']}: all {d['checked']} files match {Path(d['manifest']).name}")
    return "\n".join(lines)
