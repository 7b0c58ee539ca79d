"""`verify`: does the bundle behave like its source? Tokenizer agreement, next-token parity at every prompt
position, and greedy continuation agreement, each held to a threshold."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Callable

import numpy as np

from . import resources
from .errors import VERIFY_FAILED, InvalidOption, PackagerError, from_os_error, shorten

Progress = Callable[[str], None]


class VerifyFailed(PackagerError):
    exit_code = VERIFY_FAILED
    hint = "the bundle does not behave like its source; reconvert (8-bit gives more headroom) or check the weights"


@dataclass(frozen=True)
class Thresholds:
    """Defaults suit a real distilled draft; the release spec's [verify] table overrides them."""

    tokenizer_agreement: float = 0.85  # share of corpus strings with identical ids
    top1_agreement: float = 0.90  # share of prompt positions where MNN's and transformers' argmax agree
    mean_cosine: float = 0.98  # mean logit cosine over prompt positions
    max_mean_kl: float = 0.10  # mean KL(transformers || MNN) over prompt positions, nats
    greedy_agreement: float = 0.50  # mean share of greedy continuation tokens before the first divergence

    @classmethod
    def from_spec(cls, table: dict[str, Any] | None) -> Thresholds:
        known = {f.name for f in fields(cls)}
        return cls(**{k: float(v) for k, v in (table or {}).items() if k in known})


@dataclass(frozen=True)
class VerifyReport:
    bundle: Path
    source: Path
    tokenizer_matched: int
    tokenizer_total: int
    positions: int
    top1_agreement: float
    mean_cosine: float
    min_cosine: float
    mean_kl: float
    greedy_agreement: float
    prompts: int
    failures: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def tokenizer_agreement(self) -> float:
        return self.tokenizer_matched / self.tokenizer_total if self.tokenizer_total else 0.0


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def compare_positions(ours: np.ndarray, theirs: np.ndarray) -> tuple[list[bool], list[float], list[float]]:
    """Per position: same argmax, logit cosine, KL(theirs || ours)."""
    top1 = list(ours.argmax(-1) == theirs.argmax(-1))
    cosine = list((ours * theirs).sum(-1) / (np.linalg.norm(ours, axis=-1) * np.linalg.norm(theirs, axis=-1)))
    p, q = _softmax(theirs), _softmax(ours)
    kl = list((p * (np.log(p + 1e-12) - np.log(q + 1e-12))).sum(-1))
    return [bool(t) for t in top1], [float(c) for c in cosine], [float(k) for k in kl]


def _prefix_share(a: list[int], b: list[int]) -> float:
    same = 0
    for x, y in zip(a, b):
        if x != y:
            break
        same += 1
    return same / max(1, len(b))


def verify(bundle: Path, source: Path, prompts: tuple[str, ...] | None = None,
           thresholds: Thresholds = Thresholds(), greedy_tokens: int = 16,
           progress: Progress = lambda _: None) -> VerifyReport:
    from .pair.models import HFModel, MNNModel

    progress("loading the bundle (MNN) and the source (transformers)")
    ours, theirs = MNNModel(bundle), HFModel(source)
    corpus = resources.tokenizer_corpus()
    matched = sum(ours.encode(text) == theirs.encode(text) for text in corpus)
    prompts = prompts or resources.parity_prompts()
    progress(f"comparing logits and greedy continuations on {len(prompts)} prompts")
    top1: list[bool] = []
    cosine: list[float] = []
    kl: list[float] = []
    greedy = []
    for prompt in prompts:
        ids = theirs.encode(prompt)
        t, c, k = compare_positions(ours.logits_all(ids), theirs.logits_all(ids))
        top1 += t
        cosine += c
        kl += k
        greedy.append(_prefix_share(ours.greedy(ids, greedy_tokens), theirs.greedy(ids, greedy_tokens)))
    report = dict(bundle=bundle, source=source, tokenizer_matched=matched, tokenizer_total=len(corpus),
                  positions=len(top1), top1_agreement=sum(top1) / len(top1), mean_cosine=float(np.mean(cosine)),
                  min_cosine=float(np.min(cosine)), mean_kl=float(np.mean(kl)),
                  greedy_agreement=float(np.mean(greedy)), prompts=len(prompts))
    checks = [("tokenizer agreement", matched / len(corpus), thresholds.tokenizer_agreement, ">="),
              ("top-1 agreement", report["top1_agreement"], thresholds.top1_agreement, ">="),
              ("mean cosine", report["mean_cosine"], thresholds.mean_cosine, ">="),
              ("mean KL", report["mean_kl"], thresholds.max_mean_kl, "<="),
              ("greedy agreement", report["greedy_agreement"], thresholds.greedy_agreement, ">=")]
    failures = tuple(f"{name} {value:.4f} {'<' if op == '>=' else '>'} {limit:.4f}" for name, value, limit, op in checks
                     if (value < limit if op == ">=" else value > limit))
    return VerifyReport(**report, failures=failures)  # type: ignore[arg-type]


def prompts_from_file(path: Path) -> tuple[str, ...]:
    """One prompt per line, or a JSON list / {"prompts": [...]} of non-empty strings."""
    import json

    where = f"--prompts {shorten(str(path), 120)}"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise from_os_error(exc, "cannot read --prompts") from None
    except UnicodeDecodeError as exc:
        raise InvalidOption(f"{where} is not UTF-8 text ({exc.reason} at byte {exc.start})", _PROMPTS_HINT) from None
    if text.lstrip().startswith(("[", "{")):
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as exc:
            reason = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
            raise InvalidOption(f"{where} is not valid JSON ({reason})", _PROMPTS_HINT) from None
        prompts = data.get("prompts") if isinstance(data, dict) else data
    else:
        prompts = [line for line in text.splitlines() if line.strip()]
    if not isinstance(prompts, list) or not all(isinstance(p, str) and p.strip() for p in prompts):
        raise InvalidOption(f"{where} must hold a list of non-empty strings", _PROMPTS_HINT)
    if not prompts:
        raise InvalidOption(f"{where} holds no prompts", _PROMPTS_HINT)
    return tuple(prompts)


_PROMPTS_HINT = 'give one prompt per line, or a JSON list of strings, or {"prompts": [...]}'
