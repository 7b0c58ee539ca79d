"""The converter worker: runs llmexport and the MNN converter inside the sandbox fence.

Started by `launch.run_worker` as `python -m packager.convert.fence.worker JOB.json` with the work folder as its
current directory. It reports progress and its result as JSON lines on the file descriptor named by
PACKAGER_EVENTS_FD; everything the third-party code prints goes to the log file the parent gave it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import traceback
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ... import DISTRIBUTION
from ...infra.lifeline import die_with, exit_now
from ...infra.versions import installed
from . import patches, tokenizer_files
from .forked import Forked
from .job import WorkerJob, WorkerResult
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
    dflash_traced = patches.dflash_hidden_states(job.dflash_layers) if job.dflash_layers else None
    patched = patches.apply(job.patches, source)
    if job.graph_only:
        skeleton.like_checkpoint(job.graph_dtype, dict(job.equal_tensors), patches.fills(job.patches))
        skeleton.lengths_only(MNNConverter)
        skeleton.without_discarded_tokenizer()
        if facts is not None:
            skeleton.tokenizer_facts(facts)
    if not job.fuse_c4:
        patches.without_c4_fusion(MNNConverter)
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
    if dflash_traced is not None and not dflash_traced:
        raise RuntimeError("the DFlash hidden-states patch did not reach the graph llmexport traced")
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


def _graph_only(job: WorkerJob, source: Path, tokenizer_dir: Path, events: Events, fence: Fence) -> WorkerResult:
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
        lambda send: tokenizer_files.tokenizer_candidates(job, tokenizer_dir, work / "tokenizers", config_only, send),
        nice=TOKENIZER_NICE,
    )
    export_dir = _export(job, source, tokenizer_dir, events, tokenizer=False, facts=side.early, fence=fence)
    tokenizers = side.result()
    if tokenizers is None:  # the copy failed (see the log): the same work here, with the graph at hand
        events.send("stage", name="writing both tokenizer candidates and measuring their agreement")
        tokenizers = tokenizer_files.tokenizer_candidates(job, tokenizer_dir, work / "tokenizers-again", export_dir)
    return WorkerResult(
        export_dir=export_dir,
        tokenizers={k: Path(v) for k, v in tokenizers["tokenizers"].items()},
        encodings=tokenizers["encodings"],
        versions=installed(WORKER_VERSIONS),
    )


def run(job: WorkerJob, events: Events, fence: Fence | None = None) -> WorkerResult:
    work = job.workdir
    source = job.source
    if job.adapter and not job.graph_only:
        from ..inspect.lora import merge

        events.send("stage", name="merging the LoRA adapter into the base (peft)")
        merged = work / "merged"
        merge(source, job.adapter, merged)
        source = merged
    tokenizer_dir = tokenizer_files.tokenizer_source(source, work / "tokenizer-source", job.left_out_tokens)
    if job.graph_only and fence is not None:
        return _graph_only(job, source, tokenizer_dir, events, fence)
    export_dir = _export(job, source, tokenizer_dir, events)
    candidates = {"pipeline": export_dir / "tokenizer.mtok"}
    if "text" in tokenizer_files.family(job).tokenizer_formats:
        events.send("stage", name="writing the text tokenizer candidate")
        candidates["text"] = tokenizer_files.text_tokenizer(job, tokenizer_dir)
    events.send("stage", name="measuring tokenizer agreement with the Hugging Face tokenizer")
    encoded = {
        name: tokenizer_files.encodings(export_dir, path, work / f"probe-{name}", list(job.corpus))
        for name, path in candidates.items()
    }
    return WorkerResult(
        export_dir=export_dir,
        tokenizers=candidates,
        encodings=encoded,
        versions=installed(WORKER_VERSIONS),
        also={extra["name"]: work / f"export-{number}" for number, extra in enumerate(job.also)},
    )


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
    job_file = Path(argv[1])
    fence = Fence(WorkerJob.from_json(job_file.read_text(encoding="utf-8")).workdir)
    _prepare_imports()
    fence.install()
    return serve(job_file, int(os.environ["PACKAGER_EVENTS_FD"]), fence)


def serve(job_file: Path, events_fd: int, fence: Fence) -> int:
    """The job in `job_file`, its events to `events_fd`, inside `fence` (installed): this process's, or a copy of
    a warm converter's (packager.convert.fence.warm)."""
    job = WorkerJob.from_json(job_file.read_text(encoding="utf-8"))
    events = Events(events_fd)
    try:
        result = run(job, events, fence)
    except BaseException as exc:
        traceback.print_exc()
        message = f"{type(exc).__name__}: {exc}" if not isinstance(exc, SystemExit) else "llmexport exited"
        os_error = _os_error(exc)
        events.send("error", message=message[:2000], blocked=fence.blocked, **os_error)
        return 1
    events.send("done", result=result.to_plain(), blocked=fence.blocked)
    return 0


if __name__ == "__main__":
    exit_now(main(sys.argv))  # every file is written and closed, the result sent
