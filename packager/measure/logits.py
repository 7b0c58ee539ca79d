"""How a bundle's next-token logits compare with its source's, position by position: top-1 agreement, logit cosine,
KL(source || bundle) and the source's own margin between its first and second choice."""

from __future__ import annotations

import numpy as np


def _log_softmax(x: np.ndarray) -> np.ndarray:
    shifted = x - x.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def compare_positions(ours: np.ndarray, theirs: np.ndarray) -> tuple[list[bool], list[float], list[float]]:
    """Per position: same argmax, logit cosine, KL(theirs || ours)."""
    top1 = list(ours.argmax(-1) == theirs.argmax(-1))
    cosine = list((ours * theirs).sum(-1) / (np.linalg.norm(ours, axis=-1) * np.linalg.norm(theirs, axis=-1)))
    p_log, q_log = _log_softmax(theirs), _log_softmax(ours)
    kl = list((np.exp(p_log) * (p_log - q_log)).sum(-1))
    return [bool(t) for t in top1], [float(c) for c in cosine], [max(0.0, float(k)) for k in kl]


def margins(theirs: np.ndarray) -> np.ndarray:
    """Per position: how far (nats) the source's most likely token leads its second. Logits or log-probs give
    the same gap (a row's log-softmax only shifts it)."""
    top2 = np.partition(theirs, -2, axis=-1)[..., -2:]
    return top2[..., 1] - top2[..., 0]


def compare_in_chunks(
    ours: np.ndarray, theirs: np.ndarray, chunk: int = 8
) -> tuple[list[bool], list[float], list[float], list[float]]:
    """compare_positions and margins of float32 rows, a few rows at a time (a whole prompt's rows with their
    temporaries are several hundred MB at a 152k vocabulary). In float64 numpy this took longer than MNN's forward
    of the same prompt, so: top-1 and margins are numpy's own argmax and the same float64 subtraction of the top
    two values (exactly as before); cosine and KL are float32 element-wise in torch, summed with torch's cascade
    summation (accurate to a few float32 epsilons over 152k terms, unlike its log_softmax and norm kernels) and
    combined in float64. KL is E_p[a - b] - (lse(a) - lse(b)) for source logits a and ours b: two exponentials a
    row instead of three. tests/test_verify.py holds it to the float64 reference on real logits.

    Speed (one core, 152k vocabulary): the element-wise temporaries go to two scratch buffers made once (a fresh
    temporary per operation was paged in anew each time), 8 rows a chunk (measured fastest): 0.42 ms a row, where
    fresh temporaries in 16-row chunks took 0.9 ms."""
    import torch

    top1: list[bool] = []
    cosine: list[float] = []
    kl: list[float] = []
    margin: list[float] = []
    scratch = torch.empty((2, min(chunk, len(theirs)), theirs.shape[-1]), dtype=torch.float32)
    with torch.no_grad():
        for at in range(0, len(theirs), chunk):
            mine, source = _float32(ours[at : at + chunk]), _float32(theirs[at : at + chunk])
            best = source.argmax(-1)
            top1 += (mine.argmax(-1) == best).tolist()
            margin += _margins(source, best)
            b, a = torch.from_numpy(mine), torch.from_numpy(source)
            x, y = scratch[0, : len(a)], scratch[1, : len(a)]
            dot, a2, b2 = (torch.mul(u, v, out=x).sum(-1).double() for u, v in ((a, b), (a, a), (b, b)))
            cosine += (dot / (a2 * b2).sqrt()).tolist()
            a_max, b_max = a.amax(-1, keepdim=True), b.amax(-1, keepdim=True)
            p = torch.sub(a, a_max, out=x).exp_()  # the source's probabilities, not yet normalised
            p_sum, q_sum = p.sum(-1).double(), torch.sub(b, b_max, out=y).exp_().sum(-1).double()
            expected = p.mul_(torch.sub(a, b, out=y)).sum(-1).double() / p_sum  # E_p[a - b]
            shift = (a_max - b_max).squeeze(-1).double() + torch.log(p_sum / q_sum)  # lse(a) - lse(b)
            kl += [max(0.0, k) for k in (expected - shift).tolist()]
    return top1, cosine, kl, margin


def _float32(rows: np.ndarray) -> np.ndarray:
    """Contiguous float32 rows, writable (torch.from_numpy shares them), copied only when they are not."""
    rows = np.ascontiguousarray(rows, dtype=np.float32)
    return rows if rows.flags.writeable else rows.copy()


def _margins(rows: np.ndarray, best: np.ndarray) -> list[float]:
    """margins() from each row's argmax: the top value less the largest other one (a tie gives 0, as there)."""
    out = []
    for row, at in zip(rows, best.tolist()):
        second = max(row[:at].max(initial=-np.inf), row[at + 1 :].max(initial=-np.inf))
        out.append(float(row[at]) - float(second))
    return out
