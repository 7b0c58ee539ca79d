"""The exported DFlash draft must compute what the checkpoint's draft computes, or the bundle is not written.

On the same inputs (the target's hidden states from the converted target graph's `hidden_states` output over a
short chat prompt, and the checkpoint's embeddings of each block: the next token, then mask tokens), the bundle's
dflash_fc.mnn + dflash.mnn run in MNN and z-lab's architecture runs in torch (dflash.reference, float32). The
block's logits must agree: per position the cosine of the two logit vectors, and the top-1 token. The draft graph
is 8-bit, so the logits differ by what rounding leaves (measured on a random draft: cosine above 0.999, every top-1
equal), where a wrong rope, a layer out of order or a swapped weight gives cosines far lower.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import DFlashDraftUnfaithful
from ..eagle.faithful import PROBE, _embeddings, _target_hidden
from ..inspect.checkpoint import CheckpointInfo
from ..inspect.dflash_draft import DFlashDraft

# The least cosine allowed between the exported block logits and the reference's, at any position.
MIN_COSINE = 0.99
# Agreement of the top-1 token over the checked positions (a near-tie may fall either way after rounding).
MIN_TOP1 = 0.9
STEPS = 3  # draft steps checked, at context lengths spread over the probe
# The exported top-1 agrees where the reference ranks it first or within this share of the row's logit range of its
# own first: an 8-bit draft may swap two tokens that close (a random draft's logits are full of them; measured: a
# position at cosine 0.9998 whose top two the reference puts 0.3% of the range apart).
NEAR_TIE = 0.01


@dataclass(frozen=True)
class Faithfulness:
    positions: int
    min_cosine: float
    top1_agreement: float
    context_error: float  # relative error of dflash_fc's output against the reference's


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(-1) / np.maximum(np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1), 1e-12)


def _const(array: np.ndarray, integer: bool = False) -> Any:
    import MNN.expr as F

    data = np.ascontiguousarray(array, dtype=np.int32 if integer else np.float32)
    return F.const(data, list(data.shape), F.NCHW, F.int if integer else F.float)


def measure(bundle: Path, draft: DFlashDraft, info: CheckpointInfo, threads: int = 2) -> Faithfulness:
    import torch
    from tokenizers import Tokenizer

    from ...runtime.mnn import quiet_stdout
    from .export import target_lm_head
    from .graph import DRAFT_INPUTS, DRAFT_OUTPUTS, FC_INPUTS, FC_OUTPUTS
    from .reference import Reference

    ids = Tokenizer.from_file(str(info.path / "tokenizer.json")).encode(PROBE, add_special_tokens=False).ids
    embeds = _embeddings(info, [*ids, draft.mask_token_id])
    mask_row, embeds = embeds[-1], embeds[:-1]
    features = _target_hidden(bundle, embeds, threads)  # [n, k*hidden]: after each target layer named
    reference = Reference(draft, target_lm_head(info.weight_files))
    with quiet_stdout():
        import MNN.nn as nn

        fc = nn.load_module_from_file(str(bundle / "dflash_fc.mnn"), FC_INPUTS, FC_OUTPUTS)
        main = nn.load_module_from_file(str(bundle / "dflash.mnn"), DRAFT_INPUTS, DRAFT_OUTPUTS)
        block = draft.block_size
        cosines, agree, context_errors = [], [], []
        n = len(ids)
        for length in sorted({max(1, n * (s + 1) // (STEPS + 1)) for s in range(STEPS)}):
            feats = features[:length]
            exported_ctx = np.array(fc.forward([_const(feats[None])])[0].read(), dtype=np.float32).reshape(length, -1)
            want_ctx = reference.context(torch.from_numpy(feats)).numpy()
            scale = max(float(np.linalg.norm(want_ctx)), 1e-12)
            context_errors.append(float(np.linalg.norm(exported_ctx - want_ctx)) / scale)
            noise = np.stack([embeds[length], *([mask_row] * (block - 1))])  # the next token, then masks
            out = main.forward(
                [
                    _const(noise[None]),
                    _const(exported_ctx[None]),
                    _const(np.zeros((1, 1, block, length + block))),
                    _const(np.arange(length, length + block)[None], integer=True),
                    _const(np.arange(length + block)[None], integer=True),
                ]
            )[0]
            got = np.array(out.read(), dtype=np.float32).reshape(block, -1)[1:]  # position 0 is never a draft
            want = reference.logits(torch.from_numpy(feats), torch.from_numpy(noise)).numpy()[1:]
            cosines.extend(_cosines(got, want).tolist())
            picked = np.take_along_axis(want, got.argmax(-1)[:, None], axis=-1)[:, 0]
            spread = want.max(-1) - want.min(-1)
            agree.extend((picked >= want.max(-1) - NEAR_TIE * spread).tolist())
    return Faithfulness(
        positions=len(cosines),
        min_cosine=float(min(cosines)),
        top1_agreement=float(np.mean(agree)),
        context_error=float(max(context_errors)),
    )


def check(bundle: Path, draft: DFlashDraft, info: CheckpointInfo) -> Faithfulness:
    found = measure(bundle, draft, info)
    if found.min_cosine < MIN_COSINE or found.top1_agreement < MIN_TOP1:
        raise DFlashDraftUnfaithful(
            f"the exported DFlash draft differs from the checkpoint's: block logits cosine down to "
            f"{found.min_cosine:.4f} (at least {MIN_COSINE} expected) and top-1 agreement "
            f"{found.top1_agreement:.0%} over {found.positions} positions"
        )
    return found
