"""Speculative modes as a bundle states them: the engine each needs, the config keys that name their files, and
the graph's inputs and outputs they rely on."""

from __future__ import annotations

from typing import Any

from .engine import EngineRequirement, parse_version

# The first MNN release that runs each mode (generate.cpp's factory).
MIN_ENGINE = {"lookahead": "3.2.0", "mtp": "3.2.2", "eagle": "3.2.5", "dflash": "3.6.0"}
# Modes that verify drafts by argmax, so a sampling sampler changes what they produce.
ARGMAX_MODES = ("eagle", "mtp", "dflash")
EAGLE_KEYS = {"eagle_model": "eagle.mnn", "eagle_fc": "eagle_fc.mnn", "eagle_d2t": "eagle_d2t.mnn"}
# MNN 3.6.1's llmconfig.hpp defaults for the DFlash files (dflash_lmhead, a separate head, is read only when set).
DFLASH_KEYS = {"dflash_model": "dflash.mnn", "dflash_fc": "dflash_fc.mnn"}
# The DFlash graphs' inputs and outputs as DFlashGeneration::load names them (speculative_decoding/dflash.cpp).
DFLASH_FC_INPUTS, DFLASH_FC_OUTPUTS = ["target_hidden"], ["context_hidden"]
DFLASH_INPUTS = ["noise_embedding", "context_hidden", "attention_mask", "q_position_ids", "k_position_ids"]
DFLASH_OUTPUTS = ["logits"]


def graph_io(dump: Any) -> tuple[dict[str, list[int]], list[str]]:
    """The graph's inputs (name -> dims) and its output names, from llm.mnn.json."""
    inputs = {}
    for op in (dump.get("oplists") or []) if isinstance(dump, dict) else []:
        main = op.get("main") if isinstance(op.get("main"), dict) else {}
        if op.get("type") == "Input" and isinstance(op.get("name"), str):
            dims = main.get("dims")
            inputs[op["name"]] = list(dims) if isinstance(dims, list) else []
    outputs = dump.get("outputName") if isinstance(dump, dict) else None
    return inputs, [o for o in outputs if isinstance(o, str)] if isinstance(outputs, list) else []


def mode_requirement(mode: Any) -> tuple[EngineRequirement, ...]:
    """The engine a speculative_type needs (none for plain decoding or a value MNN does not know)."""
    if not isinstance(mode, str) or mode not in MIN_ENGINE:
        return ()
    return (
        EngineRequirement(
            parse_version(MIN_ENGINE[mode]), (f"speculative_type {mode} first runs in MNN {MIN_ENGINE[mode]}",)
        ),
    )
