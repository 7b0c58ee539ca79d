"""`verify`: does the bundle behave like its source? Tokenizer agreement, then the next-token distribution at
every position of chat-templated prompts and the source's own greedy continuations (at least 1,000 positions
with the built-in workload), gated on mean KL, on top-1 agreement where the source's choice is decisive, and on
the mean logit cosine (scale-free: it also sees damage where the logits are flat and KL cannot).

Why those two: a quantized model's logits move by a little everywhere, so where the source's top two tokens are
nearly tied any bundle flips some of them, and one flipped token rewrites a greedy continuation. Top-1 over all
positions and greedy agreement therefore swing with the prompt set and the seed; mean KL and decisive top-1 do
not. The defaults were calibrated on trained models (tests/trained.py: 8-bit and 4-bit bundles of a teacher and
a LoRA-distilled draft, several seeds; bench/verify_calibration.py, bench/RESULTS.md)."""

from __future__ import annotations

import gc
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InvalidOption, PackagerError, VerifyFailed, shorten
from ..infra import heap
from ..infra.progress import Progress, Step
from ..runtime.imports import without_collection
from ..runtime.models import Dtype, HFModel, MNNModel, all_cores
from . import compat, workload
from .continuation import Continued, Spill, continue_all
from .logits import compare_in_chunks

MIN_POSITIONS = 1000  # fewer makes the figures noisy: the report says so
MIN_DECISIVE = 100  # fewer decisive positions (flat logits, e.g. untrained weights): top-1 is not gated


@dataclass(frozen=True)
class Thresholds:
    """The gate. Defaults come from the calibration on trained models (module docstring); the release spec's
    [verify] table overrides them. The last two gate only when the spec sets them."""

    tokenizer_agreement: float = 0.85  # share of corpus strings with identical ids
    max_mean_kl: float = 0.05  # mean KL(transformers || MNN) over all positions, nats
    top1_decisive: float = 0.97  # same argmax where the source's top-1 leads its top-2 by decisive_margin
    decisive_margin: float = 1.0  # nats between the source's two most likely tokens
    mean_cosine: float | None = 0.98  # mean logit cosine: scale-free, so it also catches damage to flat logits
    top1_agreement: float | None = None  # same argmax over all positions
    greedy_agreement: float | None = None  # mean share of greedy tokens before the first divergence

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
    prompts: int
    positions: int
    decisive_positions: int
    top1_decisive: float | None  # None when fewer than MIN_DECISIVE positions are decisive
    top1_agreement: float
    mean_kl: float
    p99_kl: float
    mean_cosine: float
    min_cosine: float
    greedy_agreement: float
    failures: tuple[str, ...]
    notes: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def tokenizer_agreement(self) -> float:
        return self.tokenizer_matched / self.tokenizer_total if self.tokenizer_total else 0.0


def verify(
    bundle: Path,
    source: Path,
    prompts: tuple[str, ...] | None = None,
    thresholds: Thresholds = Thresholds(),
    continuation: int = 16,
    progress: Progress = lambda _: None,
    dtype: Dtype = "stored",
) -> VerifyReport:
    """The source first (its greedy continuations of every prompt, in batches, its logits to a temporary file),
    then, with the source freed, the bundle: one teacher-forced forward per prompt gives its logits at every
    position and its greedy agreement. `dtype`: the source computes in its stored dtype (bf16 for Qwen3) or in
    float32."""
    from .. import resources
    from ..errors import CheckpointNotFound

    if not source.is_dir():  # never handed on: transformers would take a missing path for a Hub repo id
        raise CheckpointNotFound(
            f"the source checkpoint {shorten(str(source))} {'is not a folder' if source.exists() else 'does not exist'}"
        )
    stop, template, variables, family = _source_facts(source)
    _same_family(bundle, family)
    stops_missing = _stops_missing(bundle, stop)
    items = workload.from_texts(prompts) if prompts else workload.builtin()
    corpus = resources.tokenizer_corpus()
    with ThreadPoolExecutor(max_workers=1) as pool:  # the child loads the bundle while torch is imported here
        preflight = pool.submit(_preflight, bundle, corpus, progress)
        try:
            _import_source_libraries(source)
        except BaseException:  # Ctrl-C or SIGTERM during the imports: a runtime the preflight kept is closed
            preflight.add_done_callback(_close_kept)
            raise
        encoded, kept = preflight.result()
    ours = kept
    try:
        progress(
            f"the source's greedy continuations of {len(items)} chat-templated prompts (up to {continuation} "
            "tokens), in batches"
        )
        continued, spill, expected = _source_pass(
            source, dtype, (template, variables), items, corpus, continuation, stop, progress
        )
        try:
            progress("the bundle (MNN) on the same tokens")
            ours = ours or MNNModel(bundle, threads=min(2, all_cores()))
            torch_threads = _one_torch_thread()  # the comparisons run beside MNN's forwards, on a core of their own
            try:
                matched = sum(mine == theirs for mine, theirs in zip(encoded, expected))
                top1: list[bool] = []
                cosine: list[float] = []
                kl: list[float] = []
                margin: list[float] = []
                greedy = []
                # MNN computes the next prompt while this one is compared; its rows are compared where the child
                # wrote them, done with before the next prompt's rows are asked for
                rows = ours.logits_each(([*item.ids, *item.tokens] for item in continued), borrowed=True)
                compared = _compared_counter(len(continued), progress)
                compared(0)
                for number, (item, all_rows) in enumerate(zip(continued, rows), 1):
                    t, c, k, m = compare_in_chunks(all_rows[: item.positions], spill.read(item, borrowed=True))
                    top1 += t
                    cosine += c
                    kl += k
                    margin += m
                    greedy.append(_greedy_prefix(t, item) / max(1, len(item.tokens)))
                    compared(number)
            finally:
                _one_torch_thread(torch_threads)
        finally:
            spill.close()
    finally:
        if ours is not None:
            ours.close()
    report = _judge(bundle, source, thresholds, matched, len(corpus), len(items), top1, cosine, kl, margin, greedy)
    return replace(report, failures=(*stops_missing, *report.failures)) if stops_missing else report


COMPARED_EVERY = 6  # prompts between the reports of the bundle's stage (a line each when stderr is no terminal)


def _compared_counter(total: int, progress: Progress) -> Callable[[int], None]:
    """Reports the prompts the bundle has been compared on: at 0, every COMPARED_EVERY and at the last."""

    def report(done: int) -> None:
        if done % COMPARED_EVERY == 0 or done == total:
            progress(Step(f"  {done}/{total} prompts compared", done, total, "the bundle on the same tokens"))

    return report


def _same_family(bundle: Path, theirs: str | None) -> None:
    """A bundle of another family than its source (`theirs`) is refused in one line: its logits mean nothing
    against the source's. (Files that cannot be read are left to the loads below, which say what is wrong.)"""
    try:
        ours = compat.facts(bundle).family
    except PackagerError:
        return
    if theirs is not None and ours != theirs:
        raise VerifyFailed(
            f"the bundle is {ours}, its source {theirs}", "verify a bundle against the checkpoint it was converted from"
        )


def _stops_missing(bundle: Path, stop: tuple[int, ...]) -> tuple[str, ...]:
    """A failure line when the bundle's tokenizer file does not stop on the source's stop ids (a bundle made with
    another family's: MNN would generate past the end of every turn, which no logit shows)."""
    from ..bundle.tokenizer_txt import HeaderError, read_header

    found = next((bundle / n for n in ("tokenizer.txt", "tokenizer.mtok") if (bundle / n).is_file()), None)
    try:
        header = read_header(found) if found is not None else None
    except (HeaderError, OSError):
        header = None
    if header is None:
        return ()
    missing = [i for i in stop if i not in header.stop]
    if not missing:
        return ()
    return (f"stop ids: the bundle's tokenizer stops on {list(header.stop)}, not on the source's {missing}",)


def _small(bundle: Path, vocab: int) -> bool:
    """A bundle whose whole weight file is no larger than its lm_head at one byte a weight: a small draft with a
    152k vocabulary, which spends its forward in the lm_head. Such a bundle stays loaded from the preflight on
    (its runtime is a few hundred MB at most; loading it again cost 0.25 s of the trained miniature's 6.5 s) and
    runs on one MNN thread: its forward costs about what comparing its rows costs, one core each (2.7 s for the
    miniature's bundle stage against 3.3 s with two MNN threads). A larger bundle is closed after the preflight,
    so the two models are never resident together, and loaded again with two threads: its forward is the
    longer side."""
    from ..infra.jsonfile import read_json

    try:
        hidden = read_json(bundle / "llm_config.json", InvalidOption).get("hidden_size")
        weights = (bundle / "llm.mnn.weight").stat().st_size
    except (PackagerError, OSError, AttributeError, RecursionError):  # validate reports such a bundle
        return False
    return isinstance(hidden, int) and hidden > 0 and weights <= vocab * hidden


def _one_torch_thread(threads: int = 1) -> int:
    """Set torch's intra-op threads (one while the MNN child computes the next prompt: two threads on each
    side oversubscribed the two cores); returns the old count."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    return before


def _preflight(bundle: Path, corpus: tuple[str, ...], progress: Progress) -> tuple[list[list[int]], MNNModel | None]:
    """The bundle's ids for the tokenizer corpus, and one forward: a bundle that cannot run fails in seconds, not
    after the source's whole pass. A small bundle's runtime is kept for the comparison (see _small), a larger
    one's closed again."""
    progress("loading the bundle (MNN) for a first forward and its tokenizer's ids")
    ours = MNNModel(bundle, threads=1)
    try:
        encoded = [ours.encode(text) for text in corpus]
        ours.logits_all(next((ids for ids in encoded if ids), [0])[:8])
        if _small(bundle, ours.vocab):
            return encoded, ours
    except BaseException:
        ours.close()
        raise
    ours.close()
    return encoded, None


def _close_kept(preflight: Future[tuple[list[list[int]], MNNModel | None]]) -> None:
    """The runtime a preflight kept, closed when nobody will use it (its own failure is reported elsewhere)."""
    if not preflight.cancelled() and preflight.exception() is None and (kept := preflight.result()[1]) is not None:
        kept.close()


def _import_source_libraries(source: Path) -> None:
    """torch, transformers and the source's modeling module: the imports the source's load would make anyway,
    made while the preflight's child process loads the bundle on the other core, with the garbage collector
    paused (packager.runtime.imports: 1.8 s instead of 2.8 s on the trained miniature). Only a head start:
    whatever fails here is reported by the source's load itself."""
    with without_collection():
        try:
            import torch  # noqa: F401
            from transformers import AutoConfig, DynamicCache  # noqa: F401
            from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

            MODEL_FOR_CAUSAL_LM_MAPPING[type(AutoConfig.from_pretrained(source))]  # imports the model's module
        except Exception:
            pass


def _source_facts(source: Path) -> tuple[tuple[int, ...], str, Mapping[str, Any], str | None]:
    """The source's stop ids, chat template, its family's template variables and its family (None: unreadable)."""
    variables: Mapping[str, Any] = {}
    family: str | None = None
    try:
        found = compat.facts(source)
        stop, variables, family = tuple(sorted(found.stop)), found.variables, found.family
    except PackagerError:  # an unreadable source: loading it below says what is wrong, as verify's error
        stop = ()
    try:
        template = workload.chat_template(source)
    except (OSError, ValueError):  # likewise: the source's own load reports it
        template = ""
    return stop, template, variables, family


def _source_pass(
    source: Path,
    dtype: Dtype,
    chat: tuple[str, Mapping[str, Any]],
    items: Sequence[Any],
    corpus: tuple[str, ...],
    n: int,
    stop: tuple[int, ...],
    progress: Progress,
) -> tuple[list[Continued], Spill, list[list[int]]]:
    """Load the source, decode, free it (and give its heap back) before the bundle is loaded. `chat`: the chat
    template and its variables."""
    theirs = HFModel(source, dtype=dtype)
    expected = [theirs.encode(text) for text in corpus]
    template, variables = chat
    ids = [theirs.encode(workload.render(template, item, variables) if template else _plain(item)) for item in items]
    spill = Spill(theirs.vocab)
    try:
        continued = continue_all(
            theirs.model,
            ids,
            n,
            stop,
            spill,
            progress=lambda done: progress(
                Step(f"  {done}/{len(ids)} prompts decoded", done, len(ids), "the source's continuations")
            ),
        )
        spill.flush()  # a full disk is reported here, before the bundle is loaded
    except BaseException:
        spill.close()
        raise
    del theirs
    gc.collect()
    heap.give_back()
    return continued, spill, expected


def _greedy_prefix(same_top1: list[bool], item: Continued) -> int:
    """How many leading tokens of the source's continuation the bundle's own greedy decoding gives: up to its
    first argmax that differs, teacher-forced on the same tokens (no stepwise decoding). At a continuation
    position the source's argmax is the continuation's token (each was chosen from the very row compared), so
    the per-position top-1 agreement already says it."""
    start = len(item.ids) - 1
    return next((j for j, same in enumerate(same_top1[start : start + len(item.tokens)]) if not same), len(item.tokens))


def _plain(item: Any) -> str:
    return "\n".join(content for _, content in item.messages)


def _judge(
    bundle: Path,
    source: Path,
    thresholds: Thresholds,
    matched: int,
    corpus: int,
    prompts: int,
    top1: list[bool],
    cosine: list[float],
    kl: list[float],
    margin: list[float],
    greedy: list[float],
) -> VerifyReport:
    decisive = [t for t, m in zip(top1, margin) if m >= thresholds.decisive_margin]
    top1_decisive = sum(decisive) / len(decisive) if len(decisive) >= MIN_DECISIVE else None
    values = {
        "tokenizer_matched": matched,
        "tokenizer_total": corpus,
        "prompts": prompts,
        "positions": len(top1),
        "decisive_positions": len(decisive),
        "top1_decisive": top1_decisive,
        "top1_agreement": sum(top1) / len(top1),
        "mean_kl": float(np.mean(kl)),
        "p99_kl": float(np.percentile(kl, 99)),
        "mean_cosine": float(np.mean(cosine)),
        "min_cosine": float(np.min(cosine)),
        "greedy_agreement": float(np.mean(greedy)),
    }
    checks = [
        ("tokenizer agreement", matched / corpus, thresholds.tokenizer_agreement, ">="),
        ("mean KL", values["mean_kl"], thresholds.max_mean_kl, "<="),
        ("decisive top-1", top1_decisive, thresholds.top1_decisive, ">="),
        ("top-1 agreement", values["top1_agreement"], thresholds.top1_agreement, ">="),
        ("mean cosine", values["mean_cosine"], thresholds.mean_cosine, ">="),
        ("greedy agreement", values["greedy_agreement"], thresholds.greedy_agreement, ">="),
    ]
    failures = tuple(
        f"{name} {value:.4f} {'<' if op == '>=' else '>'} {limit:.4f}"
        for name, value, limit, op in checks
        if value is not None and limit is not None and (value < limit if op == ">=" else value > limit)
    )
    notes = []
    if len(top1) < MIN_POSITIONS:
        notes.append(f"only {len(top1)} positions (>= {MIN_POSITIONS} make the figures steady): add prompts")
    if top1_decisive is None:
        notes.append(
            f"only {len(decisive)} positions where the source's top-1 leads by >= "
            f"{thresholds.decisive_margin:g} nats (flat logits, e.g. untrained weights): top-1 not gated"
        )
    return VerifyReport(bundle=bundle, source=source, **values, failures=failures, notes=tuple(notes))  # type: ignore[arg-type]
