"""Checks that span files: configs agree, paths exist, the graph, weights, tokenizer and settings fit together."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from ..bundle import folder as mnnfolder
from ..bundle.engine import C4_FUSION, OLDEST, WHY_OLDEST, format_version, parse_version
from ..bundle.graph import GraphFacts, Linear
from ..bundle.tokenizer_txt import MIN_ENGINE, TYPES, HeaderError, TokenizerHeader, read_header
from ..errors import shorten
from ..families import UnknownFamily, of_bundle
from ..report.findings import Collector, pointer, report_capped

Docs = dict[str, Any]  # file name -> parsed JSON object, or None when missing/unparsable
_PATH_DEFAULTS = {
    "llm_model": "llm.mnn",
    "llm_weight": "llm.mnn.weight",
    "tokenizer_file": "tokenizer.txt",
    "llm_config": "llm_config.json",
}


def check_draft_configs(docs: Docs, out: Collector) -> None:
    cpu, draft = docs.get("config_cpu.json"), docs.get("draft_config_cpu.json")
    if cpu is None or draft is None or cpu == draft:
        return
    for key in sorted(set(cpu) | set(draft)):
        if cpu.get(key) != draft.get(key):
            out.error(
                "draft_config_cpu.json",
                pointer([key]),
                f"differs from config_cpu.json "
                f"({_shown(draft.get(key))} vs {_shown(cpu.get(key))}); the two must be identical",
            )


def check_recommendation(docs: Docs, out: Collector) -> None:
    runtime, cpu, opencl = docs.get("runtime_config.json"), docs.get("config_cpu.json"), docs.get("config_opencl.json")
    rec = runtime.get("recommended") if isinstance(runtime, dict) else None
    if not isinstance(rec, dict):
        return
    pairs = []
    if cpu is not None:
        pairs += [
            ("draft_backend", "config_cpu.json", "backend_type", cpu.get("backend_type", "cpu")),
            ("draft_thread_num", "config_cpu.json", "thread_num", cpu.get("thread_num", 4)),
            ("draft_power", "config_cpu.json", "power", cpu.get("power", "normal")),
            ("draft_sampler_type", "config_cpu.json", "sampler_type", cpu.get("sampler_type", "mixed")),
        ]
    if opencl is not None:
        pairs.append(("target_backend", "config_opencl.json", "backend_type", opencl.get("backend_type", "cpu")))
        if "draft_predict_length" in opencl:
            pairs.append(
                ("draft_predict_length", "config_opencl.json", "draft_predict_length", opencl["draft_predict_length"])
            )
    for key, other, other_key, value in pairs:
        if key in rec and rec[key] != value:
            out.error(
                "runtime_config.json",
                pointer(["recommended", key]),
                f"recommends {_shown(rec[key])} but {other} has {other_key} {_shown(value)}",
            )


def check_paths(bundle: Path, docs: Docs, out: Collector) -> None:
    for name in ("config.json", "config_cpu.json", "draft_config_cpu.json", "config_opencl.json"):
        config = docs.get(name)
        if config is None:
            continue
        keys = dict(_PATH_DEFAULTS) if name == "config.json" else {}
        keys.update(
            {k: v for k, v in config.items() if k in _PATH_DEFAULTS or k in ("embedding_file", "draft_config_path")}
        )
        base = config.get("base_dir", "") if isinstance(config.get("base_dir", ""), str) else ""
        for key, value in sorted(keys.items()):
            if not isinstance(value, str):
                continue
            where = pointer([key]) if key in config else f"{pointer([key])} (default)"
            if key == "draft_config_path" and value.startswith("/"):
                out.warning(
                    name,
                    where,
                    f"{_shown(value)} is an absolute device path; a bundle should name "
                    "draft_config_cpu.json relative to itself",
                )
                continue
            problem = _path_problem(bundle, base + value)
            if problem:
                out.error(name, where, f"{_shown(value)} {problem}")


def _path_problem(bundle: Path, relative: str) -> str | None:
    """Why the engine could not open base_dir + value inside the bundle, or None."""
    try:
        target = (bundle / relative).resolve()
        if not target.is_relative_to(bundle.resolve()):
            return "leaves the bundle folder"
        return None if target.is_file() else "does not exist in the bundle"
    except RuntimeError:  # Python 3.11's pathlib on a loop of links
        return "cannot name a file in the bundle (a loop of symbolic links)"
    except (OSError, ValueError) as exc:  # a name too long, a loop of links, a NUL byte
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return f"cannot name a file in the bundle ({reason})"


def _shown(value: Any) -> str:
    return shorten(repr(value))


def check_model_settings(docs: Docs, graph: GraphFacts | None, weight_size: int | None, out: Collector) -> None:
    llm = docs.get("llm_config.json")
    if llm is None or graph is None:
        return
    for key, found in (("hidden_size", graph.hidden_size), ("layer_nums", graph.layers)):
        if isinstance(llm.get(key), int) and found is not None and llm[key] != found:
            out.error("llm_config.json", pointer([key]), f"{key} is {llm[key]} but the graph has {found}")
    try:
        tie = mnnfolder.tied_embedding(llm.get("tie_embeddings"))
    except mnnfolder.FolderConflict:  # its schema reports the malformed value
        return
    lm = graph.lm_head
    if tie is None or lm is None:
        return
    w, a, s, bits, block = tie.weight_offset, tie.alpha_offset, tie.alpha_size, tie.bits, tie.block
    hidden, vocab = lm.in_features, lm.out_features
    if a - w != vocab * hidden * bits // 8:
        out.error(
            "llm_config.json",
            "/tie_embeddings",
            f"weight span {a - w} bytes != vocab {vocab} x hidden "
            f"{hidden} x {bits} bits / 8 = {vocab * hidden * bits // 8}",
        )
    per_row = (hidden // block if block else 1) * (2 if lm.asymmetric else 1) * tie.alpha_bytes
    if s != vocab * per_row:
        out.error("llm_config.json", "/tie_embeddings", f"alpha size {s} != {vocab * per_row} for block {block}")
    if weight_size is not None and a + s > weight_size:
        out.error("llm_config.json", "/tie_embeddings", f"ends at byte {a + s}, past llm.mnn.weight ({weight_size})")
    # tie_embeddings declares the lm_head's bits and block (llmexport --lm_quant_bit/--lm_quant_block may give it
    # its own); every other linear shares one recipe, the one most of them have.
    rows = _differing(lm, bits, block, lm.asymmetric)
    body = [lin for lin in graph.linears if lin is not lm and lin.bits is not None]
    if body:
        bits_common, asym_common = Counter((lin.bits, lin.asymmetric) for lin in body).most_common(1)[0][0]
        # A block as wide as the input reads as per-channel (block 0), whose width differs per linear.
        blocked = Counter(lin.block for lin in body if lin.block is not None and lin.block < lin.in_features)
        block_common = blocked.most_common(1)[0][0] if blocked else 0
        rows += [row for lin in body for row in _differing(lin, bits_common, block_common, asym_common)]
    report_capped(out, "llm.mnn.json", rows, "linears that differ")


def _differing(lin: Linear, bits: int | None, block: int | None, asymmetric: bool) -> list[tuple[str, str]]:
    where = f"/oplists ({lin.name})"
    if lin.bits is not None and lin.bits != bits:
        return [(where, f"{lin.bits}-bit weights, the bundle declares {bits}")]
    if lin.block is not None and block and lin.block != block:
        return [(where, f"quant block {lin.block}, the bundle declares {block}")]
    if lin.bits is not None and lin.asymmetric != asymmetric:
        return [
            (
                where,
                f"{'a' if lin.asymmetric else ''}symmetric weights, the others are "
                f"{'a' if asymmetric else ''}symmetric",
            )
        ]
    return []


def check_weight_ranges(graph: GraphFacts, weight_size: int, out: Collector) -> None:
    """Every external range lies inside llm.mnn.weight, and together they cover it exactly, without overlap."""
    position, past = 0, []
    for name, offset, length in sorted(graph.ranges, key=lambda r: r[1]):
        if offset + length > weight_size:
            past.append(
                (f"/oplists ({name})", f"weight range {offset}+{length} ends past llm.mnn.weight ({weight_size} bytes)")
            )
        elif offset < position:
            out.error("llm.mnn.json", f"/oplists ({name})", f"weight range at {offset} overlaps the previous one")
        elif offset > position:
            out.error("llm.mnn.weight", "", f"bytes {position}..{offset} of llm.mnn.weight belong to no op")
        position = max(position, offset + length)
    report_capped(out, "llm.mnn.json", past, "ops whose weights end past the file")
    if position < weight_size:
        out.error(
            "llm.mnn.weight",
            "",
            f"{weight_size - position} trailing bytes belong to no op (the graph covers {position} of {weight_size})",
        )


def check_tokenizer(
    path: Path, graph: GraphFacts | None, out: Collector, llm_config: Any = None
) -> TokenizerHeader | None:
    try:
        header = read_header(path)
    except HeaderError as exc:
        out.error("tokenizer.txt", "", f"malformed header: {shorten(str(exc))}")
        return None
    if isinstance(llm_config, dict):
        try:
            family = of_bundle(llm_config)
        except UnknownFamily as exc:
            out.error("llm_config.json", "/model_type", f"{shorten(str(exc))}: not a family packager converts")
        else:
            missing = [i for i in family.known_stop_ids if i not in header.stop]
            if missing:
                names = ", ".join(f"{n} {i}" for n, i in zip(family.stop_tokens, family.known_stop_ids, strict=False))
                out.error(
                    "tokenizer.txt",
                    "",
                    f"stop ids {list(header.stop)} lack {missing} ({family.title} stops on {names})",
                )
    vocab = graph.lm_head.out_features if graph and graph.lm_head else None
    if vocab is not None:
        size = _text_vocab_size(path) if header.type == 3 else None
        top = max([*header.special, *header.stop, *header.prefix], default=-1) + 1
        if (size or top) > vocab:
            out.error("tokenizer.txt", "", f"the tokenizer has {size or top} ids but the graph's vocabulary is {vocab}")
    return header


def _text_vocab_size(path: Path) -> int | None:
    with open(path, "rb") as handle:
        for _ in range(3):
            handle.readline()
        parts = handle.readline().split()
    return int(parts[0]) if parts and parts[0].isdigit() else None


def check_engine(docs: Docs, graph: GraphFacts | None, header: TokenizerHeader | None, out: Collector) -> None:
    if docs.get("runtime_config.json") is None:
        return  # missing or unusable: reported already
    declared = docs["runtime_config.json"].get("min_mnn_engine", {})
    if not isinstance(declared, dict) or not isinstance(declared.get("version"), str):
        out.warning("runtime_config.json", "/min_mnn_engine", "the bundle does not declare its minimum MNN engine")
        return
    try:
        version = parse_version(declared["version"])
    except ValueError:
        return  # the schema reports the pattern
    needs = []
    if graph is not None and graph.c4:
        needs.append((C4_FUSION, "the graph uses C4-fused attention"))
    if header is not None and TYPES.get(header.type) == "pipeline":
        needs.append((MIN_ENGINE["pipeline"], "tokenizer.txt is in the PIPELINE format"))
    if version < OLDEST:  # --engine bundles: no C4 fusion and a text tokenizer still need a proven engine
        out.warning(
            "runtime_config.json",
            "/min_mnn_engine/version",
            f"declares {shorten(declared['version'])}, older than any engine a bundle is proven to load in "
            f"({format_version(OLDEST)}: {WHY_OLDEST})",
        )
    for need, why in needs:
        if version < need:
            out.error(
                "runtime_config.json",
                "/min_mnn_engine/version",
                f"declares {shorten(declared['version'])} but {why}, which needs {'.'.join(map(str, need))}",
            )


def check_graph_copy(bundle: Path, graph: GraphFacts | None, out: Collector) -> None:
    if graph is None or not isinstance(graph.uuid, str) or not graph.uuid or not (bundle / "llm.mnn").is_file():
        return
    if graph.uuid.encode("ascii", "replace") not in (bundle / "llm.mnn").read_bytes():
        out.error("llm.mnn.json", "/mnn_uuid", "llm.mnn.json does not describe llm.mnn (their mnn_uuid differ)")
