"""An exported EAGLE-3 head (eagle.mnn, eagle_fc.mnn, eagle_d2t.mnn in a bundle folder) run from Python with
MNN.nn / MNN.expr, to compare it with packager.convert.eagle.reference.

The inputs and outputs are the ones the engine loads the graphs with (speculative_decoding/eagle.cpp):
eagle.mnn takes input_embed [seq, hidden], hidden_states [1, seq, hidden], attention_mask [1, 1, seq, seq]
(0 or float lowest), position_ids [1, seq] int32 and logits_index [1] int32 (0: every position, -1: the last),
and returns logits (log-probabilities over the draft vocabulary) and out_hidden_states; eagle_fc.mnn maps
fc_hidden [1, seq, 3*target_hidden] to hidden_states.

From Python there is no way to give the graph's attention the engine's KV cache: the engine hands the module a
KVMeta pointer through RuntimeManager::setHintPtr, which the Python binding does not expose. Without it the
attention keeps nothing between calls, so every call here attends over its own positions only (a prefill, or a
whole draft tree with its mask).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import BundleError
from .mnn import quiet_stdout

EAGLE_INPUTS = ["input_embed", "hidden_states", "attention_mask", "position_ids", "logits_index"]
EAGLE_OUTPUTS = ["logits", "out_hidden_states"]
LOWEST = float(np.finfo(np.float32).min)
HEAD_HINT = "pass an EAGLE-3 head folder (config.json and model.safetensors, SpecForge/AngelSlim layout)"


def const(array: np.ndarray, dtype: str = "float"):
    import MNN.expr as F

    kind = F.float if dtype == "float" else F.int
    array = np.ascontiguousarray(array, dtype=np.float32 if dtype == "float" else np.int32)
    return F.const(array, list(array.shape), F.NCHW, kind)


def causal_mask(seq: int) -> np.ndarray:
    return np.where(np.tril(np.ones((seq, seq), dtype=bool)), 0.0, LOWEST).astype(np.float32)


class MNNHead:
    """The head graphs of one bundle folder (float32 in and out)."""

    def __init__(self, folder: Path, threads: int = 1) -> None:
        import MNN.expr as F
        import MNN.nn as nn

        self.folder = Path(folder)
        missing = [
            name for name in ("eagle.mnn", "eagle_fc.mnn", "eagle_d2t.mnn") if not (self.folder / name).is_file()
        ]
        if missing:
            raise BundleError(f"{self.folder} has no {', '.join(missing)}", HEAD_HINT)
        with quiet_stdout():
            self._fc = nn.load_module_from_file(
                str(self.folder / "eagle_fc.mnn"), ["fc_hidden"], ["hidden_states"], thread_num=threads
            )
            self._head = nn.load_module_from_file(
                str(self.folder / "eagle.mnn"), EAGLE_INPUTS, EAGLE_OUTPUTS, thread_num=threads
            )
            # keep the variable alive while copying: read() is a view of its buffer
            d2t = F.load_as_list(str(self.folder / "eagle_d2t.mnn"))[0]
            self.d2t = np.array(d2t.read(), dtype=np.int64).reshape(-1)

    def fc(self, aux: np.ndarray) -> np.ndarray:
        """[seq, 3*target_hidden] -> [seq, hidden]."""
        with quiet_stdout():
            out = self._fc.forward([const(np.asarray(aux)[None])])[0]
            return np.array(out.read(), dtype=np.float32).reshape(np.asarray(aux).shape[0], -1)

    def forward(
        self,
        input_embeds: np.ndarray,
        hidden: np.ndarray,
        position_ids: np.ndarray,
        mask: np.ndarray | None = None,
        last_only: bool = False,
    ) -> tuple[np.ndarray, np.ndarray]:
        """input_embeds, hidden [seq, hidden]; position_ids [seq]; mask [seq, seq] additive (default causal).
        Returns (log-probabilities [rows, draft_vocab], out_hidden [rows, hidden]), rows = seq or 1."""
        seq = int(np.asarray(input_embeds).shape[0])
        mask = causal_mask(seq) if mask is None else np.asarray(mask, dtype=np.float32)
        inputs = [
            const(np.asarray(input_embeds)),
            const(np.asarray(hidden)[None]),
            const(mask[None, None]),
            const(np.asarray(position_ids)[None], "int"),
            const(np.array([-1 if last_only else 0]), "int"),
        ]
        with quiet_stdout():
            logits, out_hidden = self._head.forward(inputs)
            rows = 1 if last_only else seq
            return (
                np.array(logits.read(), dtype=np.float32).reshape(rows, -1),
                np.array(out_hidden.read(), dtype=np.float32).reshape(rows, -1),
            )

    def to_target(self, draft_ids: np.ndarray) -> np.ndarray:
        return np.asarray(draft_ids) + self.d2t[np.asarray(draft_ids)]
