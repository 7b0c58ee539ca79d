"""The exported head must compute what the checkpoint's head computes, or the bundle is not written.

On the same inputs (the target's own hidden states, from the converted target graph's `hidden_states` output
over a short chat prompt, and the checkpoint's embeddings of the next tokens), the exported eagle_fc.mnn +
eagle.mnn run in MNN and the checkpoint's head runs in torch at its own rope theta, its linears quantized and
dequantized the way MNNConvert stores them (--weightQuantBits/--weightQuantBlock, round to nearest; without that
emulation 4-bit random weights alone differ by ~20 %, with it by ~2 %). Two things must hold:
- the difference is what the converter's arithmetic leaves (relative error of the head's output state and its
  log-probabilities under a bound), and
- when the head's theta is not llmexport's built-in 10000, the exported head is much closer to the head at its
  own theta than to the head at 10000 (so the rope is the checkpoint's, not llmexport's).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import EagleHeadUnfaithful
from ..inspect.checkpoint import CheckpointInfo
from ..inspect.eagle_head import HeadInfo
from ..stream.layout import EMBED
from ..stream.weightwriter import index

LLMEXPORT_THETA = 10000.0
# Relative error allowed of the exported head against the checkpoint's with the same quantization (measured on a
# random 4-bit head: 1.8 % for the out state, 0.2 % for the log-probabilities; the wrong theta gives 19 %).
MAX_RELATIVE_ERROR = 0.05
# The exported head is at least this many times closer to its own theta than to llmexport's 10000.
THETA_MARGIN = 3.0
PROBE = (
    "<|im_start|>user\nWhat is a list comprehension in Python, and when should I use one?<|im_end|>\n"
    "<|im_start|>assistant\nA list comprehension builds a list from an iterable in one expression."
)


@dataclass(frozen=True)
class Faithfulness:
    positions: int
    hidden_error: float  # relative error of the layer's contribution to its output state (h - its input), own theta
    logprob_error: float  # the same for the log-probabilities
    other_theta_error: float | None  # hidden_error against the head at 10000 (None: the head's theta is 10000)
    top1_agreement: float


def _embeddings(info: CheckpointInfo, ids: list[int]) -> np.ndarray:
    """Rows of the checkpoint's embedding, float32, read from its safetensors without loading the table."""
    import torch

    ref = index(info.weight_files)[EMBED]
    width = ref.nbytes // (ref.shape[0] * ref.shape[1])
    torch_dtype = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}[ref.dtype]
    rows = []
    with open(ref.file, "rb") as handle:
        for token in ids:
            handle.seek(ref.start + token * ref.shape[1] * width)
            raw = bytearray(handle.read(ref.shape[1] * width))
            rows.append(torch.frombuffer(raw, dtype=torch_dtype).float().numpy())
    return np.stack(rows)


def _target_hidden(bundle: Path, embeds: np.ndarray, threads: int) -> np.ndarray:
    """The converted target's `hidden_states` output over a prefill of `embeds` [seq, hidden].

    Loaded in MNN's low-memory mode, as MNN.llm runs a bundle: its weights stay 4-bit (the default mode expands
    them to float32, 3.3 GB for a 0.6B target, twice the time). These states are only the inputs both heads get."""
    from ...runtime.eagle_head import causal_mask, const
    from ...runtime.mnn import quiet_stdout

    seq = embeds.shape[0]
    with quiet_stdout():
        import MNN.expr as F
        import MNN.nn as nn

        graph = nn.load_module_from_file(
            str(bundle / "llm.mnn"),
            ["input_ids", "attention_mask", "position_ids", "logits_index"],
            ["logits", "hidden_states"],
            thread_num=threads,
            memory_mode=F.MemoryMode.Low,
        )
        out = graph.forward(
            [
                const(embeds[:, None, :]),
                const(causal_mask(seq)[None, None]),
                const(np.arange(seq)[None], "int"),
                const(np.array([-1]), "int"),
            ]
        )
        return np.array(out[1].read(), dtype=np.float32).reshape(seq, -1)


def quantized(weight: Any, bits: int, block: int, symmetric: bool) -> Any:
    """`weight` [out, in] rounded to `bits` per block of `block` inputs (0: the whole row) and back."""
    import torch

    rows, inputs = weight.shape
    size = block or inputs
    blocks = weight.reshape(rows, inputs // size, size)
    if symmetric:
        top = (1 << (bits - 1)) - 1
        scale = blocks.abs().amax(-1, keepdim=True).clamp_min(1e-12) / top
        return (torch.round(blocks / scale).clamp(-top - 1, top) * scale).reshape(rows, inputs)
    low, high = blocks.amin(-1, keepdim=True), blocks.amax(-1, keepdim=True)
    scale = (high - low).clamp_min(1e-12) / ((1 << bits) - 1)
    return (torch.round((blocks - low) / scale) * scale + low).reshape(rows, inputs)


def _relative(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / max(float(np.linalg.norm(b)), 1e-12))


@dataclass(frozen=True)
class Reference:
    """The torch side of the check, which needs nothing of the bundle: the probe's embeddings and the
    checkpoint's head with its linears quantized as MNNConvert stores them (made beside the conversion)."""

    embeds: np.ndarray  # [positions + 1, hidden] float32
    model: Any  # packager.convert.eagle.reference.EagleHead


def prepare(head: HeadInfo, info: CheckpointInfo, bits: int, block: int, symmetric: bool = False) -> Reference:
    import torch
    from tokenizers import Tokenizer

    from .reference import load_head

    ids = Tokenizer.from_file(str(info.path / "tokenizer.json")).encode(PROBE, add_special_tokens=False).ids
    model = load_head(head.path, pickle=head.pickle)  # at the head's own theta
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.Linear):
                module.weight.copy_(quantized(module.weight, bits, block, symmetric))
    return Reference(_embeddings(info, ids), model)


def measure(
    bundle: Path,
    head: HeadInfo,
    info: CheckpointInfo,
    bits: int,
    block: int,
    symmetric: bool = False,
    threads: int = 2,
    prepared: Reference | None = None,
) -> Faithfulness:
    import torch

    from ...runtime.eagle_head import MNNHead

    ref = prepared if prepared is not None else prepare(head, info, bits, block, symmetric)
    embeds, model = ref.embeds, ref.model
    aux = _target_hidden(bundle, embeds[:-1], threads)  # positions 0..n-2; the head gets token i+1's embedding
    following = embeds[1:]
    positions = np.arange(len(embeds) - 1)
    exported = MNNHead(bundle, threads=threads)
    fc = exported.fc(aux)
    logprobs, hidden = exported.forward(following, fc, positions)

    def reference(theta: float) -> tuple[np.ndarray, np.ndarray]:
        model.theta = theta
        with torch.no_grad():
            ref_lp, ref_h, _ = model(
                torch.from_numpy(following), model.fc(torch.from_numpy(aux)), torch.from_numpy(positions)
            )
        return ref_lp.numpy(), ref_h.numpy()

    # The layer's own contribution (its output state minus the state it was given, which both got from MNN's fc):
    # a head whose layer adds little next to its input would hide any difference in the whole state.
    ref_lp, ref_h = reference(head.rope_theta)
    other = None
    if head.rope_theta != LLMEXPORT_THETA:
        other = _relative(hidden - fc, reference(LLMEXPORT_THETA)[1] - fc)
    return Faithfulness(
        positions=len(positions),
        hidden_error=_relative(hidden - fc, ref_h - fc),
        logprob_error=_relative(logprobs, ref_lp),
        other_theta_error=other,
        top1_agreement=float((logprobs.argmax(-1) == ref_lp.argmax(-1)).mean()),
    )


def check(
    bundle: Path,
    head: HeadInfo,
    info: CheckpointInfo,
    bits: int,
    block: int,
    symmetric: bool = False,
    prepared: Reference | None = None,
) -> Faithfulness:
    found = measure(bundle, head, info, bits, block, symmetric, prepared=prepared)
    if max(found.hidden_error, found.logprob_error) > MAX_RELATIVE_ERROR:
        raise EagleHeadUnfaithful(
            f"the exported EAGLE-3 head differs from the checkpoint's head by "
            f"{found.hidden_error:.1%} (state) and {found.logprob_error:.1%} (log-probabilities) "
            f"over {found.positions} positions, more than the {MAX_RELATIVE_ERROR:.0%} "
            "quantization leaves"
        )
    if found.other_theta_error is not None and found.other_theta_error < THETA_MARGIN * found.hidden_error:
        raise EagleHeadUnfaithful(
            f"the exported EAGLE-3 head is not computed with the head's rope theta "
            f"{head.rope_theta:g} (error {found.hidden_error:.2%} against it, "
            f"{found.other_theta_error:.2%} against llmexport's 10000)"
        )
    return found
