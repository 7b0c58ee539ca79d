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
DFLASH_LMHEAD_KEY = "dflash_lmhead"
# The DFlash graphs' inputs and outputs as DFlashGeneration::load names them (speculative_decoding/dflash.cpp):
# the draft graph gives the block's logits, or, when dflash_lmhead names a file, its final states, which that
# graph (the separate lm_head) turns into logits.
DFLASH_FC_INPUTS, DFLASH_FC_OUTPUTS = ["target_hidden"], ["context_hidden"]
DFLASH_INPUTS = ["noise_embedding", "context_hidden", "attention_mask", "q_position_ids", "k_position_ids"]
DFLASH_OUTPUTS = ["logits"]
DFLASH_STATES_OUTPUTS = ["hidden_states"]  # the draft graph's output beside a separate lm_head
DFLASH_LMHEAD_INPUTS, DFLASH_LMHEAD_OUTPUTS = ["hidden_states"], ["logits"]


def dflash_draft_outputs(separate_head: bool) -> list[str]:
    """What DFlashGeneration::load asks the draft graph for: its states beside a separate lm_head, else logits."""
    return DFLASH_STATES_OUTPUTS if separate_head else DFLASH_OUTPUTS


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
