"""The converter worker: runs llmexport and the MNN converter inside the sandbox fence.

Started by `launch.run_worker` as `python -m packager.convert.fence.worker JOB.json` with the work folder as its
current directory. It reports progress and its result as JSON lines on the file descriptor named by
PACKAGER_EVENTS_FD; everything the third-party code prints goes to the log file the parent gave it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import traceback
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ... import DISTRIBUTION
from ...bundle.engine import NO_C4_FUSION
from ...families import BY_NAME, Family
from ...infra.lifeline import die_with, exit_now
from ...infra.versions import installed
from . import patches
from .forked import Forked, Send
from .job import WorkerJob
from .sandbox import Fence

# The versions provenance records (those that shape the bundle's bytes).
WORKER_VERSIONS = ("mnn", "llmexport", "torch", "transformers", "peft", "tokenizers", "onnx")


class Events:
    def __init__(self, fd: int) -> None:
        self._out = os.fdopen(fd, "w", buffering=1, encoding="utf-8")

    def send(self, event: str, **data: Any) -> None:
        self._out.write(json.dumps({"event": event, **data}) + "\n")
        self._out.flush()


def _prepare_imports() -> None:
    # MNN.tools' log module runs `pip install` and phones home at import; mnnconvert treats a None logger
    # as "no telemetry", so a stub with mnn_logger = None turns both off without touching MNN.
    stub = types.ModuleType("MNN.tools.utils.log")
    stub.mnn_logger = None  # type: ignore[attr-defined]
    sys.modules["MNN.tools.utils.log"] = stub
    # llmexport 0.0.5 imports its own `utils` package by absolute name; its folder must lead sys.path.
    spec = importlib.util.find_spec("llmexport")
    if spec is None or spec.origin is None:
        raise RuntimeError(f"llmexport is not installed (pip install '{DISTRIBUTION}[convert]')")
    sys.path.insert(0, str(Path(spec.origin).parent))


def _wrap(owner: Any, name: str, label: str, events: Events) -> None:
    original = getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        events.send("stage", name=label)
        return original(*args, **kwargs)

    setattr(owner, name, wrapper)


# Work done beside a cold graph build yields the CPU to it (the graph is what a cold conversion waits for): the
# tokenizer copy a little (it is short, and ends the build when starved), the weight writers more (most slack).
TOKENIZER_NICE, BESIDE_NICE = 5, 10
# The stage a graph-only worker reports once its libraries are imported (the weight writers wait for it).
GRAPH_STAGE = "building the graph from config.json (llmexport, weights skipped)"

# llmexport quantizes a weight in row chunks once it exceeds this many elements (its own default is 256M,
# which makes lm_head one piece with several full-size temporaries). Rows quantize independently, so the
# bytes are the same; only the peak memory falls.
QUANT_CHUNK_ELEMENTS = 8 * 1024 * 1024


def _export(
    job: WorkerJob,
    source: Path,
    tokenizer_dir: Path,
    events: Events,
    tokenizer: bool = True,
    facts: Callable[[], dict[str, Any] | None] | None = None,
    fence: Fence | None = None,
) -> Path:
    """llmexport's export; without `tokenizer` it writes no tokenizer.mtok (a forked side job makes it, and
    sends the tokenizer's `facts` the graph reads). With `fence` (the graph-only worker), an EAGLE-3 head is
    exported by a forked copy beside the target (packager.convert.fence.headbeside)."""
    import llmexport  # the module llmexport/llmexport.py, first on sys.path
    import utils.torch_utils
    from utils.mnn_converter import MNNConverter

    from . import skeleton

    utils.torch_utils._QUANT_MAX_ELEMENTS = QUANT_CHUNK_ELEMENTS

    dst = job.workdir / "export"
    parser = llmexport.argparse.ArgumentParser()
    llmexport.build_args(parser)
    args = parser.parse_args(
        [
            "--path",
            str(source),
            "--tokenizer_path",
            str(tokenizer_dir),
            "--dst_path",
            str(dst),
            "--export",
            "mnn",
            "--quant_bit",
            str(job.quant_bits),
            "--quant_block",
            str(job.quant_block),
            # A path that does not exist makes llmexport use pymnn's converter in this process, not os.popen.
            "--mnnconvert",
            str(job.workdir / "no-native-mnnconvert"),
            # Graph only: llmexport builds the model from config.json alone and lays the weight file out
            # without computing it (packager's streaming writer fills it).
            *(["--skip_weight"] if job.graph_only else []),
            *(["--sym"] if job.symmetric else []),
            *(["--hqq"] if job.hqq else []),
            *(["--lm_quant_bit", str(job.lm_bits)] if job.lm_bits is not None else []),
            *(["--lm_quant_block", str(job.lm_block)] if job.lm_block is not None else []),
            *(["--eagle_path", str(job.eagle)] if job.eagle else []),
        ]
    )
    if job.eagle:
        patches.head_rope(float(job.eagle_rope_theta or 0), job.eagle_rope_scaling)
    patched = patches.apply(job.patches, source)
    if job.graph_only:
        skeleton.like_checkpoint(job.graph_dtype, dict(job.equal_tensors))
        skeleton.lengths_only(MNNConverter)
        skeleton.without_discarded_tokenizer()
        if facts is not None:
            skeleton.tokenizer_facts(facts)
    if not job.fuse_c4:
        _without_c4_fusion(MNNConverter)
    _wrap(MNNConverter, "onnx2mnn", "converting the ONNX graph with MNN", events)
    recipe = f"{job.quant_bits}-bit, block {job.quant_block}"
    # graph only: the weights are quantized beside it (convert's "quantizing weights (MB)" bar); this lays out theirs
    rebuilt = f"laying out the graph for {recipe} weights" if job.graph_only else f"quantizing weights ({recipe})"
    _wrap(MNNConverter, "rebuild", rebuilt, events)
    events.send("stage", name=GRAPH_STAGE if job.graph_only else "loading the checkpoint into llmexport")
    exporter = llmexport.LlmExporter(args)
    for name, changed in patched.items():  # never a graph with llmexport's own frequencies, unsaid
        if not changed:
            raise RuntimeError(f"the {name} patch did not reach the model llmexport built")
    exporter.tokenizer.stop_ids = list(job.stop_ids)
    if job.eagle and fence is not None:
        from .headbeside import export_head_beside

        export_head_beside(exporter, fence, job.workdir / "head-beside")
    _wrap(exporter, "export_onnx", "exporting the ONNX graph", events)
    if not tokenizer:
        exporter.export_tokenizer = lambda: None
    exporter.export("mnn")
    exporter.export_tokenizer = lambda: None  # the recipes below share this export's tokenizer candidates
    # The export swapped the model's linears for weightless stand-ins and kept the real ones in
    # exporter.unloaded_ops, which the converter only reads: later exports trace the same stand-ins and quantize
    # from the same real weights. (Swapping again would find no linears left to swap.)
    exporter.unload_param = lambda: None
    for number, extra in enumerate(job.also):
        events.send("stage", name=f"recipe {extra['name']}: exporting again from the loaded model")
        _export_again(exporter, extra, job.workdir / f"export-{number}")
    return dst


def _export_again(exporter: Any, recipe: dict[str, Any], dst: Path) -> None:
    """Another quantization recipe from the model already loaded: llmexport reads these arguments when it
    exports (each export makes its MNNConverter afresh), as a new process would from its command line.
    tests/test_quant_recipes.py checks the bytes equal a conversion of their own."""
    args = exporter.args
    args.quant_bit, args.quant_block = recipe["quant_bits"], recipe["quant_block"]
    args.sym, args.hqq = bool(recipe.get("symmetric")), bool(recipe.get("hqq"))
    args.lm_quant_bit = recipe["lm_bits"] if recipe.get("lm_bits") is not None else recipe["quant_bits"]
    args.lm_quant_block = recipe["lm_block"] if recipe.get("lm_block") is not None else recipe["quant_block"]
    args.dst_path = str(dst)
    exporter.onnx_path = str(dst / "onnx")
    (dst / "onnx").mkdir(parents=True)
    exporter.export("mnn")


# MNNConvert runs FuseTransformerC4 only in the MNN-to-MNN pass at --optimizeLevel=1 (llmexport's removeDupOps;
# tools/converter/source/common/cli.cpp, MNN 3.6.1), unless --transformerFuseC4 is 0.


def _without_c4_fusion(converter: Any) -> None:
    """Every MNNConvert run llmexport makes that would fuse attention to C4 gets --transformerFuseC4=0."""
    original = converter.convert

    def convert(self: Any, convert_args: list[str]) -> Any:
        if "--optimizeLevel=1" in convert_args:
            convert_args = [*convert_args, NO_C4_FUSION]
        return original(self, convert_args)

    converter.convert = convert


def _family(job: WorkerJob) -> Family:
    return BY_NAME[job.family]


def _text_tokenizer(job: WorkerJob, source: Path, work: Path | None = None) -> Path:
    from utils.tokenizer import LlmTokenizer

    # Without tokenizer.json llmexport writes the text (HUGGINGFACE, type 3) format instead of .mtok.
    work = work or job.workdir
    src = work / "tokenizer-text-source"
    src.mkdir()
    for name in ("vocab.json", "merges.txt", "tokenizer_config.json", "generation_config.json"):
        if (source / name).is_file():
            shutil.copy(source / name, src / name)
    tokenizer = LlmTokenizer.from_pretrained(str(src), model_type=_family(job).tokenizer_type())
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


def _encodings(export_dir: Path, tokenizer_file: Path, probe_dir: Path, corpus: list[str]) -> list[list[int]]:
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


def _pipeline_tokenizer(job: WorkerJob, source: Path, out: Path, send: Send | None = None) -> Path:
    """tokenizer.mtok as llmexport's own export writes it (its tokenizer, our stop ids); `send` gets the facts
    of the tokenizer the graph reads, as soon as it is loaded."""
    from utils.tokenizer import LlmTokenizer

    from . import skeleton

    tokenizer = LlmTokenizer.from_pretrained(str(source), model_type=_family(job).tokenizer_type())
    if send is not None:
        send(skeleton.facts_of(tokenizer))
    tokenizer.stop_ids = list(job.stop_ids)
    return Path(tokenizer.export(str(out)))


def _tokenizer_candidates(
    job: WorkerJob, source: Path, folder: Path, export_dir: Path, send: Send | None = None
) -> dict[str, Any]:
    """Both tokenizer candidates and MNN's ids for the corpus with each (graph-only jobs)."""
    folder.mkdir()
    candidates = {"pipeline": _pipeline_tokenizer(job, source, folder / "tokenizer-pipeline", send)}
    if "text" in _family(job).tokenizer_formats:
        candidates["text"] = _text_tokenizer(job, source, folder)
    encoded = {
        name: _encodings(export_dir, path, folder / f"probe-{name}", list(job.corpus))
        for name, path in candidates.items()
    }
    return {"tokenizers": {k: str(v) for k, v in candidates.items()}, "encodings": encoded}


def _graph_only(job: WorkerJob, source: Path, tokenizer_dir: Path, events: Events, fence: Fence) -> dict[str, Any]:
    """The graph, with the tokenizer candidates made meanwhile by a forked copy of this worker.

    The tokenizer needs nothing of the graph: MNN's probe reads only the tokenizer file (the probe's
    llm_config.json is empty). So the copy is forked once the tokenizer's own libraries are imported (torch and
    transformers, shared with this worker); it loads the tokenizer while this worker imports the rest of
    llmexport, and sends the three facts of it the graph reads, which spares the graph's own load (about a
    second on its critical path; bench/RESULTS.md).
    """
    import MNN.llm  # noqa: F401 - the same
    from utils.tokenizer import LlmTokenizer  # noqa: F401 - imported before the fork, so the copy shares it

    work = job.workdir
    config_only = work / "probe-config"
    config_only.mkdir()
    (config_only / "llm_config.json").write_text("{}", encoding="utf-8")
    events.send("stage", name="writing both tokenizer candidates and measuring their agreement (beside the graph)")
    side = Forked(
        fence,
        lambda send: _tokenizer_candidates(job, tokenizer_dir, work / "tokenizers", config_only, send),
        nice=TOKENIZER_NICE,
    )
    export_dir = _export(job, source, tokenizer_dir, events, tokenizer=False, facts=side.early, fence=fence)
    tokenizers = side.result()
    if tokenizers is None:  # the copy failed (see the log): the same work here, with the graph at hand
        events.send("stage", name="writing both tokenizer candidates and measuring their agreement")
        tokenizers = _tokenizer_candidates(job, tokenizer_dir, work / "tokenizers-again", export_dir)
    return {"export_dir": str(export_dir), **tokenizers, "merged_source": None, "versions": installed(WORKER_VERSIONS)}


def run(job: WorkerJob, events: Events, fence: Fence | None = None) -> dict[str, Any]:
    work = job.workdir
    source = job.source
    if job.adapter and not job.graph_only:
        from ..inspect.lora import merge

        events.send("stage", name="merging the LoRA adapter into the base (peft)")
        merged = work / "merged"
        merge(source, job.adapter, merged)
        source = merged
    tokenizer_dir = tokenizer_source(source, work / "tokenizer-source", job.left_out_tokens)
    if job.graph_only and fence is not None:
        return _graph_only(job, source, tokenizer_dir, events, fence)
    export_dir = _export(job, source, tokenizer_dir, events)
    candidates = {"pipeline": export_dir / "tokenizer.mtok"}
    if "text" in _family(job).tokenizer_formats:
        events.send("stage", name="writing the text tokenizer candidate")
        candidates["text"] = _text_tokenizer(job, tokenizer_dir)
    events.send("stage", name="measuring tokenizer agreement with the Hugging Face tokenizer")
    encoded = {
        name: _encodings(export_dir, path, work / f"probe-{name}", list(job.corpus))
        for name, path in candidates.items()
    }
    return {
        "export_dir": str(export_dir),
        "tokenizers": {k: str(v) for k, v in candidates.items()},
        "encodings": encoded,
        "merged_source": str(source) if job.adapter else None,
        "versions": installed(WORKER_VERSIONS),
        "also": {extra["name"]: str(work / f"export-{number}") for number, extra in enumerate(job.also)},
    }


def _os_error(exc: BaseException) -> dict[str, Any]:
    """errno, reason and file of the OS error behind `exc` (it may be wrapped by the library that met it)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno:
            return {
                "errno": seen.errno,
                "strerror": seen.strerror or os.strerror(seen.errno),
                "filename": str(seen.filename) if seen.filename is not None else None,
            }
        seen = seen.__cause__ or seen.__context__
    return {}


def main(argv: list[str]) -> int:
    die_with(int(os.environ.get("PACKAGER_PARENT_PID", os.getppid())))
    job = WorkerJob.from_json(Path(argv[1]).read_text(encoding="utf-8"))
    events = Events(int(os.environ["PACKAGER_EVENTS_FD"]))
    fence = Fence(job.workdir)
    _prepare_imports()
    fence.install()
    try:
        result = run(job, events, fence)
    except BaseException as exc:
        traceback.print_exc()
        message = f"{type(exc).__name__}: {exc}" if not isinstance(exc, SystemExit) else "llmexport exited"
        os_error = _os_error(exc)
        events.send("error", message=message[:2000], blocked=fence.blocked, **os_error)
        return 1
    events.send("done", result=result, blocked=fence.blocked)
    return 0


if __name__ == "__main__":
    exit_now(main(sys.argv))  # every file is written and closed, the result sent
