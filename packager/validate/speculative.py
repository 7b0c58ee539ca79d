"""Target bundles: the embeddings an untied target needs, and what MNN's speculative modes need to run at all.

MNN 3.6.1 runs a speculative mode only when the graph has the `logits_index` input with dims (Llm::
setSpeculativeConfig, canSpecDecode); otherwise, and for any other speculative_type, it decodes plainly without
a word. Lookahead (any kind of bundle) reads its corpus, lookup_file, at every generate() and skips one it cannot
open without a word, so a corpus the config names must be in the bundle and be text. EAGLE also needs the graph's
`hidden_states` output (config.json hidden_states: true), its three files (EagleGeneration::load has no null
checks: a missing one crashes the app), a d2t of the head's draft vocabulary mapping into the target's, and
greedy sampling: it verifies its tree by argmax while the first token comes from the sampler. DFlash (3.6.x) needs
the same hidden_states output, now the outputs of the layers dflash_target_layer_ids names (each below the target's
depth), its two graphs (dflash.mnn, dflash_fc.mnn), a mask token with an embedding row, and graphs that take the
configured block: the draft graph is loaded and run on one block, as the engine's first step does.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from ..bundle.graph import GraphFacts
from ..bundle.kinds import DFLASH_FILES, DRAFT, EAGLE_FILES, LOOKUP, TARGET_DFLASH, TARGET_EAGLE, BundleKind
from ..bundle.lookahead import MAX_CORPUS, MIB, WARN_CORPUS, text_problem
from ..bundle.modes import (
    ARGMAX_MODES,
    DFLASH_FC_INPUTS,
    DFLASH_FC_OUTPUTS,
    DFLASH_INPUTS,
    DFLASH_KEYS,
    DFLASH_LMHEAD_INPUTS,
    DFLASH_LMHEAD_KEY,
    DFLASH_LMHEAD_OUTPUTS,
    EAGLE_KEYS,
    dflash_draft_outputs,
    graph_io,
)
from ..report.findings import Collector


def check(
    bundle: Path, kind: BundleKind, docs: dict[str, Any], facts: GraphFacts | None, usable: list[str], out: Collector
) -> None:
    config = docs.get("config.json")
    llm = docs.get("llm_config.json")
    if kind is not DRAFT and isinstance(llm, dict) and isinstance(config, dict) and "tie_embeddings" not in llm:
        _check_embeddings(bundle, config, llm, out)
    mode = config.get("speculative_type") if isinstance(config, dict) else None
    if isinstance(config, dict):
        _check_lookahead(bundle, config, mode, usable, out)
    if kind is TARGET_EAGLE and mode != "eagle":
        out.error(
            "config.json",
            "/speculative_type",
            f'is {mode!r}, but the bundle holds an EAGLE-3 head; MNN then decodes without it (set "eagle")',
        )
    if kind is TARGET_DFLASH and mode != "dflash":
        out.error(
            "config.json",
            "/speculative_type",
            f'is {mode!r}, but the bundle holds a DFlash draft; MNN then decodes without it (set "dflash")',
        )
    if not isinstance(config, dict) or not isinstance(mode, str) or not mode:  # mode is config's: a dict's
        return
    dump = docs.get("llm.mnn.json")
    inputs, outputs = graph_io(dump) if dump is not None else ({}, [])
    if dump is not None and not inputs.get("logits_index"):
        out.error(
            "llm.mnn.json",
            "",
            f"the graph has no logits_index input with dims, so MNN runs "
            f"speculative_type {mode!r} as plain decoding (re-export with llmexport 0.0.5+)",
        )
    if mode in ARGMAX_MODES and config.get("sampler_type", "greedy") != "greedy":
        out.error(
            "config.json",
            "/sampler_type",
            f"is {config.get('sampler_type')!r}; {mode} verifies drafts by "
            "argmax, so only greedy sampling keeps its output the target's",
        )
    if mode == "eagle":
        _check_eagle(bundle, config, facts, inputs, outputs, dump is not None, usable, out)
    if mode == "dflash":
        _check_dflash(bundle, config, facts, outputs, dump is not None, usable, out)


def _check_lookahead(bundle: Path, config: dict[str, Any], mode: Any, usable: list[str], out: Collector) -> None:
    """The corpus lookahead reads: named inside the bundle, present, text; a corpus no mode reads is unused."""
    if mode != "lookahead":
        if LOOKUP in usable:
            out.warning(
                LOOKUP,
                "",
                f'unused: MNN reads a lookahead corpus only with speculative_type "lookahead" '
                f"(config.json has {mode!r})",
            )
        return
    named = config.get("lookup_file")
    if named is not None and (not isinstance(named, str) or not _inside(named)):
        return  # the schema reports it
    if named not in (None, LOOKUP):
        out.error(
            "config.json",
            "/lookup_file",
            f"names {named[:120]!r}; a bundle carries its corpus as {LOOKUP}, "
            "the one name checksum, sign and upload ship",
        )
        return
    if LOOKUP not in usable:
        if named is not None and not (bundle / LOOKUP).is_symlink() and not (bundle / LOOKUP).exists():
            out.error(
                "config.json",
                "/lookup_file",
                f"names {LOOKUP}, which is missing: MNN then decodes without the corpus, without a word",
            )
        return  # a link or another kind of entry: the file checks report it
    try:
        with open(bundle / LOOKUP, "rb") as handle:
            data = handle.read(MAX_CORPUS + 1)
    except OSError as exc:
        out.error(LOOKUP, "", f"cannot be read: {exc.strerror or type(exc).__name__}")
        return
    problem = text_problem(data)
    if problem:
        out.error(LOOKUP, "", f"the lookahead corpus {problem}")
    elif len(data) > WARN_CORPUS:
        out.warning(
            LOOKUP,
            "",
            f"{len(data) / MIB:.1f} MiB: MNN tokenizes all of the corpus at every generate() call "
            "(1 MiB took 0.4 s on a desktop core)",
        )


def _inside(name: str) -> bool:
    """A path MNN's base_dir + name keeps in the bundle: relative, no drive, no '..' (the schema's pattern)."""
    return (
        not name.startswith(("/", "\\")) and not re.match(r"[A-Za-z]:", name) and ".." not in re.split(r"[/\\]", name)
    )


def _check_embeddings(bundle: Path, config: dict[str, Any], llm: dict[str, Any], out: Collector) -> None:
    name = config.get("embedding_file", "embeddings_bf16.bin")
    if not isinstance(name, str):
        return  # the schema reports it
    path = bundle / name
    where = "config.json" if "embedding_file" in config else "llm_config.json"
    if not path.is_file():
        out.error(
            where,
            "/embedding_file" if where == "config.json" else "/tie_embeddings",
            f"the embeddings are not tied to lm_head and {name} is missing; MNN cannot embed a token without it",
        )
        return
    hidden = llm.get("hidden_size")
    if isinstance(hidden, int) and hidden > 0 and path.stat().st_size % (2 * hidden):
        out.error(name, "", f"{path.stat().st_size} bytes is not a whole number of {hidden}-wide bf16 rows")


def _check_hidden_states(
    config: dict[str, Any], outputs: list[str], have_graph: bool, mode: str, export: str, out: Collector
) -> None:
    """The graph's hidden_states output, on in config.json (MNN asks the graph for it only then) and in the graph."""
    if config.get("hidden_states") is not True:
        out.error(
            "config.json",
            "/hidden_states",
            f"must be true: {mode} reads the target's hidden states, which MNN asks the graph for only then",
        )
    if have_graph and "hidden_states" not in outputs:
        out.error(
            "llm.mnn.json",
            "",
            f"the graph has no hidden_states output; export the target together with its {export}",
        )


def _check_eagle(
    bundle: Path,
    config: dict[str, Any],
    facts: GraphFacts | None,
    inputs: dict[str, list[int]],
    outputs: list[str],
    have_graph: bool,
    usable: list[str],
    out: Collector,
) -> None:
    _check_hidden_states(
        config, outputs, have_graph, "EAGLE", "head (llmexport --eagle_path, or packager convert --eagle)", out
    )
    files = {key: config.get(key, default) for key, default in EAGLE_KEYS.items()}
    for key, name in files.items():
        if not isinstance(name, str) or not (bundle / name).is_file():
            out.error(
                "config.json",
                f"/{key}",
                f"{name!r} is not a file in the bundle; MNN 3.6.1 crashes loading an EAGLE bundle without it",
            )
            return
    if not all(name in usable for name in EAGLE_FILES if (bundle / name).exists()):
        return  # links or non-regular files, already reported
    _check_head_graphs(bundle, files, facts, out)


def _check_head_graphs(bundle: Path, files: dict[str, str], facts: GraphFacts | None, out: Collector) -> None:
    """Load the head's graphs in MNN and run one position through each (what the engine will do first)."""
    from ..runtime.mnn import quiet_stdout

    hidden = facts.hidden_size if facts is not None else None
    if not hidden:
        return
    try:
        with quiet_stdout():
            import MNN.expr as F
            import MNN.nn as nn

            from ..runtime.eagle_head import EAGLE_INPUTS, EAGLE_OUTPUTS, causal_mask, const
    except ImportError as exc:  # base dependencies only (the pre-commit hook): nothing is known of the head
        missing = (exc.name or "MNN").split(".")[0]
        out.note(
            files["eagle_model"],
            "",
            f"the engine check was skipped: {missing} is not installed here, so the "
            "EAGLE-3 head was not loaded and run in MNN (install packager with its "
            "full dependencies to run it)",
        )
        return
    try:
        with quiet_stdout():
            d2t_var = F.load_as_list(str(bundle / files["eagle_d2t"]))
            d2t = np.array(d2t_var[0].read(), dtype=np.int64).reshape(-1) if d2t_var else np.zeros(0, np.int64)
            fc = nn.load_module_from_file(str(bundle / files["eagle_fc"]), ["fc_hidden"], ["hidden_states"])
            state = fc.forward([const(np.zeros((1, 1, 3 * hidden), np.float32))])[0]
            width = int(np.array(state.read()).size)
            head = nn.load_module_from_file(str(bundle / files["eagle_model"]), EAGLE_INPUTS, EAGLE_OUTPUTS)
            logits, _ = head.forward(
                [
                    const(np.zeros((1, hidden), np.float32)),
                    const(np.zeros((1, 1, hidden), np.float32)),
                    const(causal_mask(1)[None, None]),
                    const(np.zeros((1, 1)), "int"),
                    const(np.array([0]), "int"),
                ]
            )
            draft_vocab = int(np.array(logits.read()).size)
    except Exception as exc:  # MNN raises plain RuntimeError/ValueError for a graph it cannot load or run
        out.error(
            files["eagle_model"],
            "",
            f"MNN cannot load or run the EAGLE-3 head ({type(exc).__name__}: {str(exc)[:160]})",
        )
        return
    if width != hidden:
        out.error(
            files["eagle_fc"],
            "",
            f"maps the target's three hidden states to width {width}, not the target's hidden size {hidden}",
        )
    if d2t.size != draft_vocab:
        out.error(
            files["eagle_d2t"], "", f"holds {d2t.size} entries, but the head scores a draft vocabulary of {draft_vocab}"
        )
        return
    vocab = facts.lm_head.out_features if facts is not None and facts.lm_head is not None else 0
    mapped = np.arange(d2t.size) + d2t
    outside = int(((mapped < 0) | (mapped >= vocab)).sum()) if vocab else 0
    if outside:
        out.error(files["eagle_d2t"], "", f"maps {outside} draft id(s) outside the target vocabulary of {vocab}")


def _check_dflash(
    bundle: Path,
    config: dict[str, Any],
    facts: GraphFacts | None,
    outputs: list[str],
    have_graph: bool,
    usable: list[str],
    out: Collector,
) -> None:
    _check_hidden_states(config, outputs, have_graph, "DFlash", "draft (packager convert --dflash)", out)
    files = {key: config.get(key, default) for key, default in DFLASH_KEYS.items()}
    if config.get(DFLASH_LMHEAD_KEY):
        files[DFLASH_LMHEAD_KEY] = config[DFLASH_LMHEAD_KEY]
    missing = False
    for key, name in files.items():
        if not isinstance(name, str) or not (bundle / name).is_file():
            out.error("config.json", f"/{key}", f"{name!r} is not a file in the bundle; MNN's DFlash mode loads it")
            missing = True
    block, mask, layers = (
        config.get(k) for k in ("dflash_block_size", "dflash_mask_token_id", "dflash_target_layer_ids")
    )
    for key, value in (("dflash_block_size", block), ("dflash_mask_token_id", mask)):
        if not isinstance(value, int) or isinstance(value, bool):
            out.error(
                "config.json",
                f"/{key}",
                f"is missing: MNN then uses its default ({16 if key == 'dflash_block_size' else 0}), "
                "which is no draft's by chance",
            )
    depth = facts.layers if facts is not None else 0
    if isinstance(layers, list) and depth:
        outside = [i for i in layers if isinstance(i, int) and not 0 <= i < depth]
        if outside:
            out.error(
                "config.json",
                "/dflash_target_layer_ids",
                f"names layer(s) {outside} of a target with {depth} layers",
            )
    hidden = facts.hidden_size if facts is not None else None
    rows = _embedding_rows(bundle, config, hidden, facts)
    if isinstance(mask, int) and not isinstance(mask, bool) and rows and mask >= rows:
        out.error(
            "config.json",
            "/dflash_mask_token_id",
            f"is {mask}, past the target's {rows} embedding rows: the engine would embed memory past the table",
        )
    if missing or not hidden or not isinstance(block, int) or isinstance(block, bool) or block < 2:
        return
    if not all(name in usable for name in files.values() if (bundle / name).exists()):
        return  # links or non-regular files, already reported
    width = len(layers) * hidden if isinstance(layers, list) else 0
    if DFLASH_LMHEAD_KEY in files and not _check_dflash_head(bundle, files[DFLASH_LMHEAD_KEY], facts, usable, out):
        return  # MNN would run a truncated head on whatever it reads past the end, without a word
    _check_dflash_graphs(bundle, files, hidden, width, block, rows, out)


def _check_dflash_head(bundle: Path, name: str, facts: GraphFacts | None, usable: list[str], out: Collector) -> bool:
    """The separate head's weights are the target's lm_head, byte for byte (packager copies them: the draft scores
    with the head the target verifies with); False when they are missing, no regular file, cut short or another
    head's."""
    weights = f"{name}.weight"
    head = facts.lm_head if facts is not None else None
    if weights in DFLASH_FILES and weights not in usable:  # missing, a link or no regular file: reported already
        return False
    if not (bundle / weights).is_file() or (bundle / weights).is_symlink():
        out.error(
            weights,
            "",
            f"is missing or no regular file: {name} reads its weights from it (MNN would run the head on nothing)",
        )
        return False
    if head is None or len(head.external) < 3 or "llm.mnn.weight" not in usable:
        return True  # no target head to compare with (reported where the target graph is checked)
    start, length = head.external[0], sum(head.external[1:])
    size = (bundle / weights).stat().st_size
    if size != length:
        out.error(
            weights,
            "",
            f"holds {size:,} bytes, not the {length:,} of the target's lm_head ({head.name}) it copies: cut short or "
            "another head's (convert the bundle again)",
        )
        return False
    with open(bundle / weights, "rb") as mine, open(bundle / "llm.mnn.weight", "rb") as target:
        target.seek(start)
        at = 0
        while at < length:
            chunk = mine.read(1 << 22)
            theirs = target.read(len(chunk))
            if chunk != theirs or not chunk:
                first = at + next((i for i, (a, b) in enumerate(zip(chunk, theirs)) if a != b), len(theirs))
                out.error(
                    weights,
                    "",
                    f"is not the target's lm_head ({head.name}): its byte {first:,} differs from the head's in "
                    "llm.mnn.weight (convert the bundle again)",
                )
                return False
            at += len(chunk)
    return True


def _embedding_rows(bundle: Path, config: dict[str, Any], hidden: int | None, facts: GraphFacts | None) -> int:
    """The rows of the table MNN embeds with: embeddings_bf16.bin's, else the (tied) lm_head's."""
    name = config.get("embedding_file", "embeddings_bf16.bin")
    if isinstance(name, str) and hidden and (bundle / name).is_file():
        return (bundle / name).stat().st_size // (2 * hidden)
    head = facts.lm_head if facts is not None else None
    return head.out_features if head is not None else 0


def _check_dflash_graphs(
    bundle: Path, files: dict[str, str], hidden: int, width: int, block: int, vocab: int, out: Collector
) -> None:
    """Load the draft's graphs in MNN and run them as the engine's first step does: dflash_fc on one position of
    the target's hidden states, dflash.mnn on one block of the configured size (its states then through
    dflash_lmhead when the config names one, as the engine then asks dflash.mnn for them)."""
    from ..runtime.mnn import quiet_stdout

    try:
        with quiet_stdout():
            import MNN.nn as nn

            from ..runtime.eagle_head import const
    except ImportError as exc:  # base dependencies only (the pre-commit hook)
        missing = (exc.name or "MNN").split(".")[0]
        out.note(
            files["dflash_model"],
            "",
            f"the engine check was skipped: {missing} is not installed here, so the DFlash draft was not loaded "
            "and run in MNN (install packager with its full dependencies to run it)",
        )
        return
    try:
        with quiet_stdout():
            fc = nn.load_module_from_file(str(bundle / files["dflash_fc"]), DFLASH_FC_INPUTS, DFLASH_FC_OUTPUTS)
            context = fc.forward([const(np.zeros((1, 1, width), np.float32))])
            got = int(np.array(context[0].read()).size)
    except Exception as exc:  # MNN raises plain RuntimeError/ValueError (or answers nothing) for what it cannot run
        out.error(
            files["dflash_fc"],
            "",
            f"MNN cannot run it on the hidden states of the {width // hidden} layers dflash_target_layer_ids names "
            f"({width} wide; {type(exc).__name__}: {str(exc)[:120]})",
        )
        return
    try:
        with quiet_stdout():
            separate = DFLASH_LMHEAD_KEY in files
            outputs = dflash_draft_outputs(separate)
            draft = nn.load_module_from_file(str(bundle / files["dflash_model"]), DFLASH_INPUTS, outputs)
            logits = draft.forward(
                [
                    const(np.zeros((1, block, hidden), np.float32)),
                    const(np.zeros((1, 1, hidden), np.float32)),
                    const(np.zeros((1, 1, block, block + 1), np.float32)),
                    const(np.arange(1, block + 1)[None], "int"),
                    const(np.arange(block + 1)[None], "int"),
                ]
            )
            size = int(np.array(logits[0].read()).size)
    except Exception as exc:
        out.error(
            files["dflash_model"],
            "",
            f"MNN cannot load or run the DFlash draft on a block of {block}, asked for {outputs[0]} "
            f"({type(exc).__name__}: {str(exc)[:160]})",
        )
        return
    if separate:
        if size != block * hidden:
            out.error(
                files["dflash_model"],
                "",
                f"gives {size} values for a block of {block}, not {block} states of the target's hidden size {hidden}",
            )
            return
        try:
            with quiet_stdout():
                head = nn.load_module_from_file(
                    str(bundle / files[DFLASH_LMHEAD_KEY]), DFLASH_LMHEAD_INPUTS, DFLASH_LMHEAD_OUTPUTS
                )
                size = int(np.array(head.forward([logits[0]])[0].read()).size)
        except Exception as exc:
            out.error(
                files[DFLASH_LMHEAD_KEY],
                "",
                f"MNN cannot load or run the draft's lm_head on {block} states "
                f"({type(exc).__name__}: {str(exc)[:160]})",
            )
            return
    if got != hidden:
        out.error(
            files["dflash_fc"],
            "",
            f"maps the target's hidden states ({width} wide) to width {got}, not the target's hidden size {hidden}",
        )
    if vocab and size != block * vocab:
        out.error(
            files[DFLASH_LMHEAD_KEY] if separate else files["dflash_model"],
            "",
            f"scores {size} logits for a block of {block}, not {block} x the target's vocabulary of {vocab}",
        )
