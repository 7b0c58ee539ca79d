"""The card's `model-index`: the figures people compare drafts by, as Hub evaluation results.

Each result names the workload it was measured on (its "dataset") and packager as its source; the Hub reads
them from the front matter and shows them on the model page. Built with huggingface_hub's own EvalResult, so
the front matter is exactly what its ModelCard parser reads back.
"""

from __future__ import annotations

from typing import Any

TASK = "text-generation"
PAIR_WORKLOAD = "packager-pair"
VERIFY_WORKLOAD = "packager-verify"


def _ci(interval: dict[str, float], digits: int) -> tuple[str, dict[str, float]]:
    low, high = round(interval["low"], digits), round(interval["high"], digits)
    return f" (95% interval {low:.{digits}f}-{high:.{digits}f})", {"ci95_low": low, "ci95_high": high}


def _source(repo_id: str) -> dict[str, str]:
    from .. import __version__

    return {"source_name": f"packager {__version__}", "source_url": f"https://huggingface.co/{repo_id}"}


def pair_results(pairing: dict[str, Any], repo_id: str, default_d: int | None) -> list[Any]:
    """Greedy alpha, tokens per target step at the recommended d, and sampling acceptance when measured."""
    from huggingface_hub import EvalResult

    target = pairing["target"] or "the target"  # its Hub id, when the spec or the report gives it
    workload: dict[str, Any] = {
        "task_type": TASK,
        "task_name": f"Speculative decoding: draft for {target}",
        "dataset_type": PAIR_WORKLOAD,
        "dataset_config": target,
        "dataset_name": (
            f"packager pair workload: {pairing['prompts']} chat-templated prompts, {pairing['positions']} "
            f"greedy target tokens (up to {pairing['new_tokens']} per prompt)"
        ),
        "dataset_args": {
            "target": target,
            "prompts": pairing["prompts"],
            "positions": pairing["positions"],
            "max_new_tokens": pairing["new_tokens"],
        },
        **_source(repo_id),
    }
    alpha = pairing["alpha"]
    text, args = _ci(alpha, 3)
    results = [
        EvalResult(
            metric_type="greedy_acceptance_alpha",
            metric_value=round(alpha["value"], 4),
            metric_name=f"Greedy acceptance alpha{text}",
            metric_args=args,
            **workload,
        )
    ]
    d = pairing["recommended_d"] if pairing["recommended_d"] is not None else default_d
    depth = next((x for x in pairing["depths"] if x["d"] == d and x["tokens_per_step"]), None)
    if depth is not None:
        text, args = _ci(depth["tokens_per_step"], 2)
        results.append(
            EvalResult(
                metric_type="tokens_per_step",
                metric_value=round(depth["tokens_per_step"]["value"], 3),
                metric_name=f"Tokens per target step at d={d}{text}",
                metric_config=f"d={d}",
                metric_args=args,
                **workload,
            )
        )
    sampling = pairing.get("sampling")
    if sampling and sampling.get("acceptance"):
        text, args = _ci(sampling["acceptance"], 3)
        top_k = sampling["top_k"] or "off"
        setting = f"temperature {sampling['temperature']:g}, top-k {top_k}, top-p {sampling['top_p']:g}"
        results.append(
            EvalResult(
                metric_type="sampling_acceptance",
                metric_value=round(sampling["acceptance"]["value"], 4),
                metric_name=f"Speculative sampling acceptance ({setting}){text}",
                metric_config=setting,
                metric_args=args,
                **workload,
            )
        )
    return results


def parity_results(parity: dict[str, Any], repo_id: str) -> list[Any]:
    """verify's mean KL and top-1 agreement with the source checkpoint (and top-1 where the source is decisive)."""
    from huggingface_hub import EvalResult

    workload: dict[str, Any] = {
        "task_type": TASK,
        "task_name": "Parity with the source checkpoint (MNN vs transformers)",
        "dataset_type": VERIFY_WORKLOAD,
        "dataset_name": (
            f"packager verify workload: {parity['prompts']} chat-templated prompts and greedy "
            f"continuations, {parity['positions']} positions"
        ),
        "dataset_args": {"prompts": parity["prompts"], "positions": parity["positions"]},
        **_source(repo_id),
    }
    results = [
        EvalResult(
            metric_type="mean_kl",
            metric_value=round(parity["mean_kl"], 5),
            metric_name="Mean KL(source || MNN), nats",
            **workload,
        ),
        EvalResult(
            metric_type="top1_agreement",
            metric_value=round(parity["top1_agreement"], 4),
            metric_name="Top-1 agreement with the source, all positions",
            **workload,
        ),
    ]
    if parity.get("top1_decisive") is not None:
        results.append(
            EvalResult(
                metric_type="top1_agreement_decisive",
                metric_value=round(parity["top1_decisive"], 4),
                metric_name=f"Top-1 agreement where the source is decisive ({parity['decisive_positions']} positions)",
                **workload,
            )
        )
    return results


def model_index(repo_id: str, measurements: dict[str, Any], default_d: int | None) -> list[dict[str, Any]] | None:
    """The front matter's model-index, or None when nothing was measured."""
    from huggingface_hub.repocard_data import eval_results_to_model_index

    results = []
    if "pairing" in measurements:
        results += pair_results(measurements["pairing"], repo_id, default_d)
    if "parity" in measurements:
        results += parity_results(measurements["parity"], repo_id)
    return eval_results_to_model_index(repo_id.split("/")[-1], results) if results else None
