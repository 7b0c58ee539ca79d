"""The tokenizer files the converter worker makes: a folder llmexport reads them from (derived where a checkpoint
saved by transformers 5 lacks some), both tokenizer.txt candidates (PIPELINE .mtok and the text format, where the
family reads right in it) and MNN's ids for the corpus with each, which choose between them."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from ...families import BY_NAME, Family
from .forked import Send
from .job import WorkerJob


def family(job: WorkerJob) -> Family:
    return BY_NAME[job.family]


def text_tokenizer(job: WorkerJob, source: Path, work: Path | None = None) -> Path:
    from utils.tokenizer import LlmTokenizer

    # Without tokenizer.json llmexport writes the text (HUGGINGFACE, type 3) format instead of .mtok.
    work = work or job.workdir
    src = work / "tokenizer-text-source"
    src.mkdir()
    for name in ("vocab.json", "merges.txt", "tokenizer_config.json", "generation_config.json"):
        if (source / name).is_file():
            shutil.copy(source / name, src / name)
    tokenizer = LlmTokenizer.from_pretrained(str(src), model_type=family(job).tokenizer_type())
    tokenizer.stop_ids = list(job.stop_ids)
    out = work / "tokenizer-text"
    return Path(tokenizer.export(str(out)))


def tokenizer_source(source: Path, dst: Path, left_out: tuple[str, ...] = ()) -> Path:
    """A folder with every tokenizer file llmexport reads: the checkpoint itself when it has them all.

    transformers 5 saves only tokenizer.json, tokenizer_config.json (without added_tokens_decoder) and
    chat_template.jinja. The missing pieces are derived from those into `dst`, so such a checkpoint converts
    to the bytes the same tokenizer gives with the files present; the checkpoint itself is never written.
    The `left_out` special tokens (ids past the model's rows) are taken out of the derived files.
    """
    from ...errors import MissingTokenizer
    from ...infra.jsonfile import read_json
    from ..inspect.checkpoint import bpe_tables

    config = read_json(source / "tokenizer_config.json", MissingTokenizer)
    complete = (
        all((source / n).is_file() for n in ("vocab.json", "merges.txt"))
        and "added_tokens_decoder" in config
        and bool(config.get("chat_template"))
    )
    if complete and not left_out:
        return source
    dst.mkdir()
    for item in source.iterdir():
        if item.is_file() and not item.name.endswith(".safetensors"):
            shutil.copy(item, dst / item.name)
    data = read_json(source / "tokenizer.json", MissingTokenizer)
    if left_out:
        data, config = _without_tokens(data, config, set(left_out))
        (dst / "tokenizer.json").write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    vocab, merges, added = bpe_tables(data, source)
    if not (dst / "vocab.json").is_file():
        (dst / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    if not (dst / "merges.txt").is_file():
        (dst / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{m}\n" for m in merges), encoding="utf-8")
    if "added_tokens_decoder" not in config:
        keys = ("content", "lstrip", "normalized", "rstrip", "single_word", "special")
        config["added_tokens_decoder"] = {str(t["id"]): {k: t[k] for k in keys if k in t} for t in added}
    if not config.get("chat_template") and (source / "chat_template.jinja").is_file():
        config["chat_template"] = (source / "chat_template.jinja").read_text(encoding="utf-8")
    (dst / "tokenizer_config.json").write_text(json.dumps(config, ensure_ascii=False, indent=2), encoding="utf-8")
    return dst


def _without_tokens(data: Any, config: dict[str, Any], tokens: set[str]) -> tuple[Any, dict[str, Any]]:
    """tokenizer.json and tokenizer_config.json without the added `tokens`, and without the config's names for
    them (Gemma 3's `image_token`, also under `extra_special_tokens`), which would make transformers add them back."""
    data = {**data, "added_tokens": [t for t in data.get("added_tokens") or [] if t.get("content") not in tokens]}
    decoder = config.get("added_tokens_decoder")
    config = {k: v for k, v in config.items() if not (isinstance(v, str) and v in tokens)}
    if isinstance(decoder, dict):
        config["added_tokens_decoder"] = {
            k: v for k, v in decoder.items() if not (isinstance(v, dict) and v.get("content") in tokens)
        }
    extra = config.get("extra_special_tokens")
    if isinstance(extra, dict):
        config["extra_special_tokens"] = {k: v for k, v in extra.items() if v not in tokens}
    return data, config


def encodings(export_dir: Path, tokenizer_file: Path, probe_dir: Path, corpus: list[str]) -> list[list[int]]:
    """MNN's ids for every corpus string, with `tokenizer_file` as the bundle's tokenizer.txt.

    MNN 3.6.1 builds the tokenizer before it reads the graph, so a probe with empty stand-in graph files
    gets a working tokenizer without loading the weights (load() then reports the missing graph). If that
    ever stops working, the probe loads the real graph instead.
    """
    import MNN.llm as mnn_llm

    probe_dir.mkdir()
    shutil.copy(tokenizer_file, probe_dir / "tokenizer.txt")
    shutil.copy(export_dir / "llm_config.json", probe_dir / "llm_config.json")
    config = {
        "llm_model": "llm.mnn",
        "llm_weight": "llm.mnn.weight",
        "tokenizer_file": "tokenizer.txt",
        "backend_type": "cpu",
        "thread_num": 1,
    }
    (probe_dir / "config.json").write_text(json.dumps(config), encoding="utf-8")
    for name in ("llm.mnn", "llm.mnn.weight"):
        (probe_dir / name).write_bytes(b"")
    llm = mnn_llm.create(str(probe_dir / "config.json"))
    llm._c_obj.load()
    if not list(llm.tokenizer_encode("Hello world")):
        for name in ("llm.mnn", "llm.mnn.weight"):
            (probe_dir / name).unlink()
            os.symlink(export_dir / name, probe_dir / name)
        llm = mnn_llm.create(str(probe_dir / "config.json"))
        if not llm._c_obj.load():
            raise RuntimeError(f"MNN could not load the exported model with {tokenizer_file.name}")
    return [list(llm.tokenizer_encode(text)) for text in corpus]


def pipeline_tokenizer(job: WorkerJob, source: Path, out: Path, send: Send | None = None) -> Path:
    """tokenizer.mtok as llmexport's own export writes it (its tokenizer, our stop ids); `send` gets the facts
    of the tokenizer the graph reads, as soon as it is loaded."""
    from utils.tokenizer import LlmTokenizer

    from . import skeleton

    tokenizer = LlmTokenizer.from_pretrained(str(source), model_type=family(job).tokenizer_type())
    if send is not None:
        send(skeleton.facts_of(tokenizer))
    tokenizer.stop_ids = list(job.stop_ids)
    return Path(tokenizer.export(str(out)))


def tokenizer_candidates(
    job: WorkerJob, source: Path, folder: Path, export_dir: Path, send: Send | None = None
) -> dict[str, Any]:
    """Both tokenizer candidates and MNN's ids for the corpus with each (graph-only jobs)."""
    folder.mkdir()
    candidates = {"pipeline": pipeline_tokenizer(job, source, folder / "tokenizer-pipeline", send)}
    if "text" in family(job).tokenizer_formats:
        candidates["text"] = text_tokenizer(job, source, folder)
    encoded = {
        name: encodings(export_dir, path, folder / f"probe-{name}", list(job.corpus))
        for name, path in candidates.items()
    }
    return {"tokenizers": {k: str(v) for k, v in candidates.items()}, "encodings": encoded}
