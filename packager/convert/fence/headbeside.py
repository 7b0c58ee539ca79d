"""The EAGLE-3 head's export in a forked copy of the graph-only worker, beside the target's graph.

llmexport exports the head first, then the target, one after the other: module init, the head's ONNX export and
two MNN conversions, about 9 s on the critical path of a cold 0.6B conversion while the other core idles (the
weights are written by then). Here the head is still built in the worker, because building it changes the
target's config (the head's head_dim, the rotary) before the target is traced, exactly as llmexport orders it;
its export and conversion run in a forked copy while the worker exports the target. The worker waits for the
copy before llmexport writes the config and deletes the ONNX folder. tests/test_streaming.py holds the streamed
target+head bundle to the reference path's, byte for byte, and the converter checks the exported head against the
checkpoint's in any case.

The copy works in a folder of its own: MNN's converter keeps a converted graph's weights in a temporary file
with a fixed name in the current folder (`.__convert_external_data.bin`), so two conversions in one folder at
once overwrite each other's weights (measured: a head 100% off the checkpoint's, refused by that check).
A copy that fails fails the conversion with its reason: the worker cannot export the head again after the
target, whose export replaces the model's layers with weightless stand-ins.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .forked import Forked
from .sandbox import Fence


def export_head_beside(exporter: Any, fence: Fence, folder: Path) -> None:
    """Make `exporter.export("mnn")` export its EAGLE-3 head in a forked copy (working in `folder`, which must
    not exist yet) beside the target's export."""
    copies: list[Forked] = []
    write_config = exporter.export_config

    def export_eagle() -> None:
        if exporter.args.eagle_path is None:
            return
        from utils.eagle import Eagle

        exporter.eagle = Eagle.get_eagle(exporter.model_type)(exporter.args.eagle_path, exporter.model)
        folder.mkdir()
        copies.append(Forked(fence, lambda send: _head_files(exporter, folder)))

    def export_config(*args: Any, **kwargs: Any) -> Any:
        while copies:
            if copies.pop().result() is None:
                raise RuntimeError(
                    "exporting the EAGLE-3 head failed beside the target (its traceback is in the converter's log)"
                )
        return write_config(*args, **kwargs)

    exporter.export_eagle = export_eagle
    exporter.export_config = export_config


def _head_files(exporter: Any, folder: Path) -> dict[str, Any]:
    """In the copy: what llmexport's export_eagle does after building the head (its ONNX graphs, converted by
    MNN), in `folder`, on one torch thread (OpenMP's thread pool does not survive a fork; none is started)."""
    import torch
    from utils.mnn_converter import MNNConverter

    os.chdir(folder)
    torch.set_num_threads(1)
    eagle_onnx, eagle_fc_onnx = exporter.eagle.export(exporter.onnx_path)
    if exporter.mnn_converter:
        MNNConverter(exporter, None).export(eagle_onnx)
        MNNConverter(exporter, None).export(eagle_fc_onnx)
    return {}
