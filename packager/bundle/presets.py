"""The five runtime configs of a bundle: documented presets, overridable key by key from the release spec.

Presets (what each file is for):
- DRAFT (config_cpu.json = draft_config_cpu.json): the draft on the phone's CPU. 2 threads keep it on the
  performance cores under Android's WALT governor; power "high" pins it there; greedy sampling is what
  lossless greedy verification needs; precision/memory "low" for speed.
- MAIN (config.json): the draft settings plus the file paths, so `MNN.llm.create(config.json)` runs the
  draft as shipped. Paths are relative: the engine glues them onto the bundle folder.
- OPENCL (config_opencl.json): the reference target-side recipe on OpenCL. `thread_num` is OpenCL's
  GPU-mode value there (4 = wide tuning; the engine adds the buffer bit, 64). `speculative_type: draftmodel`,
  `draft_predict_length` and `draft_config_path` are app-specific (TokForge); upstream MNN ignores them.
- runtime_config.json: app-level recommendation derived from the two above (never set by hand, so it always
  agrees with them), compatible targets, notes and the minimum engine.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ..families.base import Family
from .engine import EngineRequirement
from .kinds import DFLASH_LMHEAD
from .modes import DFLASH_KEYS, DFLASH_LMHEAD_KEY

DRAFT: dict[str, Any] = {
    "backend_type": "cpu",
    "thread_num": 2,
    "precision": "low",
    "memory": "low",
    "sampler_type": "greedy",
    "power": "high",
}
PATHS: dict[str, Any] = {
    "llm_model": "llm.mnn",
    "llm_weight": "llm.mnn.weight",
    "llm_config": "llm_config.json",
    "tokenizer_file": "tokenizer.txt",
}
OPENCL: dict[str, Any] = {
    "backend_type": "opencl",
    "thread_num": 4,
    "precision": "low",
    "memory": "low",
    "sampler_type": "greedy",
    "speculative_type": "draftmodel",
    "draft_predict_length": 3,
    "draft_config_path": "draft_config_cpu.json",
}
NOTES: dict[str, str] = {
    "thread_num": "2 draft threads stay on the performance cores; 4 or more spread onto efficiency cores",
    "power_high": "power=high pins the draft threads to the big cores",
    "draft_backend_cpu": "the draft runs on the CPU so the GPU stays free for the target",
    "predict_length": "draft_predict_length is the number of tokens the draft proposes per step",
}


@dataclass(frozen=True)
class RuntimeOverrides:
    """Keys from the release spec's [runtime.*] tables, merged over the presets."""

    main: dict[str, Any] = field(default_factory=dict)
    draft: dict[str, Any] = field(default_factory=dict)
    opencl: dict[str, Any] = field(default_factory=dict)
    compatible_targets: dict[str, Any] | None = None
    notes: dict[str, str] | None = None


def _dump(data: dict[str, Any]) -> bytes:
    return (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


# The files render() writes (the release spec's [runtime.*] tables shape them).
RENDERED = ("config.json", "config_cpu.json", "draft_config_cpu.json", "config_opencl.json", "runtime_config.json")


def render(
    overrides: RuntimeOverrides,
    engine: EngineRequirement,
    mode: dict[str, Any] | None = None,
    *,
    family: Family,
) -> dict[str, bytes]:
    """The five config files as bytes, keyed by file name; `mode` (lookahead's keys) goes into config.json last.
    The family's runtime keys go over the presets, the spec's over both."""
    draft = {**DRAFT, **family.runtime, **overrides.draft}
    main = {**PATHS, **draft, **overrides.main, **(mode or {})}
    opencl = {**OPENCL, **overrides.opencl}
    runtime = {
        "_comment": "Recommended speculative-decoding settings for this draft (app-level; MNN does not read it)",
        "recommended": {
            "target_backend": opencl["backend_type"],
            "draft_backend": draft["backend_type"],
            "draft_predict_length": opencl.get("draft_predict_length", 3),
            "draft_thread_num": draft["thread_num"],
            "draft_power": draft.get("power", "normal"),
            "draft_sampler_type": draft["sampler_type"],
        },
        "compatible_targets": overrides.compatible_targets
        if overrides.compatible_targets is not None
        else dict(family.compatible_targets),
        "notes": overrides.notes if overrides.notes is not None else NOTES,
        "min_mnn_engine": {"version": engine.text, "because": list(engine.reasons)},
    }
    draft_bytes = _dump(draft)
    return {
        "config.json": _dump(main),
        "config_cpu.json": draft_bytes,
        "draft_config_cpu.json": draft_bytes,
        "config_opencl.json": _dump(opencl),
        "runtime_config.json": _dump(runtime),
    }


# A target bundle's config.json (upstream MNN reads it as is): the paths, the CPU defaults llmexport writes
# except its sampler (greedy: the speculative modes verify by argmax, and plain decoding is then reproducible).
TARGET: dict[str, Any] = {
    "backend_type": "cpu",
    "thread_num": 4,
    "precision": "low",
    "memory": "low",
    "sampler_type": "greedy",
}
# MNN 3.6.1's own defaults for its EAGLE mode (llmconfig.hpp), written out so the card and validate can read them.
EAGLE: dict[str, Any] = {
    "speculative_type": "eagle",
    "hidden_states": True,
    "eagle_model": "eagle.mnn",
    "eagle_fc": "eagle_fc.mnn",
    "eagle_d2t": "eagle_d2t.mnn",
    "eagle_depth": 3,
    "eagle_topk": 1,
    "draft_predict_length": 3,
}

# MNN 3.6.x's DFlash mode (llmconfig.hpp, speculative_decoding/dflash.cpp): the files, and the draft's own facts
# (dflash_keys) the engine cannot find elsewhere; its defaults (block 16, mask id 0) are never right by chance.
DFLASH: dict[str, Any] = {
    "speculative_type": "dflash",
    "hidden_states": True,
    **DFLASH_KEYS,
    DFLASH_LMHEAD_KEY: DFLASH_LMHEAD,  # the draft's head: the target's own (its weights' bytes), as a graph
}


def dflash_keys(block_size: int, mask_token_id: int, target_layer_ids: tuple[int, ...]) -> dict[str, Any]:
    """A DFlash bundle's config keys for its draft."""
    return {
        **DFLASH,
        "dflash_block_size": block_size,
        "dflash_mask_token_id": mask_token_id,
        "dflash_target_layer_ids": list(target_layer_ids),
    }


def render_target(
    overrides: RuntimeOverrides,
    head: Any = None,
    untied: bool = False,
    mode: dict[str, Any] | None = None,
    *,
    family: Family,
    dflash: dict[str, Any] | None = None,
) -> dict[str, bytes]:
    """config.json of a target bundle (with the EAGLE keys when it carries a head, the DFlash keys (dflash_keys)
    when it carries a DFlash draft, or lookahead's `mode` keys)."""
    main = {
        **PATHS,
        **TARGET,
        **family.runtime,
        **({"embedding_file": "embeddings_bf16.bin"} if untied else {}),
        **(EAGLE if head is not None else {}),
        **(dflash or {}),
        **overrides.main,
        **(mode or {}),
    }
    return {"config.json": _dump(main)}
