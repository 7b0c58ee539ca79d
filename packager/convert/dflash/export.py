"""dflash.mnn and dflash_fc.mnn from a checked draft: packager's graphs (dflash.graph) with the checkpoint's weights
and the target's lm_head, traced to ONNX and converted by pymnn's MNNConvert in this process (the converter
worker's, inside the fence). As MNN's own exporter does, the draft graph is converted without transformer fusion
(fused attention assumes causal masking; the draft attends to everything) and at 8 bits; dflash_fc stays float
(the engine runs it in fp32: its input is several hidden states wide)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..inspect.dflash_draft import DFlashDraft

DRAFT_BITS = 8
DRAFT_BLOCK = 64  # per-block scales where the block divides every input width, else per channel
DRAFT_FILES = ("dflash.mnn", "dflash_fc.mnn")
LM_HEAD_NAMES = ("lm_head.weight", "model.embed_tokens.weight")  # untied first, else the tied embedding


def target_lm_head(weight_files: tuple[Path, ...], names: tuple[str, ...] = LM_HEAD_NAMES) -> Any:
    """The target's lm_head [vocab, hidden] (float32), read from its safetensors: its own, else the embedding."""
    import torch
    from safetensors import safe_open

    for name in names:
        for file in weight_files:
            with safe_open(str(file), framework="pt") as handle:
                if name in handle.keys():  # noqa: SIM118 - safe_open has keys(), not __contains__
                    return handle.get_tensor(name).to(torch.float32)
    raise ValueError(f"the target's weights hold none of {', '.join(names)}")


def block_for(draft: DFlashDraft) -> int:
    widths = (draft.hidden_size, draft.intermediate_size, draft.num_heads * draft.head_dim)
    return DRAFT_BLOCK if all(w % DRAFT_BLOCK == 0 for w in widths) else 0


def mnnconvert(onnx: Path, out: Path, flags: tuple[str, ...] = ()) -> None:
    """pymnn's converter in this process (the caller has stubbed MNN.tools.utils.log: no telemetry)."""
    from ...runtime.mnn import quiet_stdout

    with quiet_stdout():  # the converter prints to fd 1, which may carry --json (pymnn too, at import)
        import _tools

        code = _tools.mnnconvert(
            ["MNNConvert", "-f", "ONNX", "--modelFile", str(onnx), "--MNNModel", str(out), "--bizCode", "MNN", *flags]
        )
    if code is False or not out.is_file():  # pymnn returns True on success
        raise RuntimeError(f"MNNConvert did not convert {onnx.name} (code {code})")


def export(draft: DFlashDraft, weight_files: tuple[Path, ...], dst: Path) -> None:
    """Both graphs into `dst` (their ONNX files in dst/onnx-dflash, left for the caller's work folder)."""
    from . import graph

    main, fc = graph.load(draft, target_lm_head(weight_files))
    onnx = dst / "onnx-dflash"
    onnx.mkdir(parents=True, exist_ok=True)
    main_onnx, fc_onnx = graph.export_onnx(main, fc, draft, onnx)
    del main, fc
    mnnconvert(fc_onnx, dst / "dflash_fc.mnn")
    block = block_for(draft)
    quant = ("--weightQuantBits", str(DRAFT_BITS), *(("--weightQuantBlock", str(block)) if block else ()))
    mnnconvert(main_onnx, dst / "dflash.mnn", quant)
