"""`quant-sweep`: convert one checkpoint with several quantization recipes, measure each against the source (and a
target's acceptance), and pick the smallest recipe whose acceptance is within a tolerance of the best.

What is shared across recipes: a LoRA adapter is merged once (the merged float32 checkpoint is both what every
recipe converts and the source the bundles are measured against); the graph cache serves every plain recipe of
one bits/block; the source's logits and the target's greedy continuations are computed once per prompt.
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from ...convert import recipe as recipes
from ...convert.recipe import QuantRecipe
from ...errors import InvalidOption, shorten
from ...infra.progress import Progress
from .measure import measure
from .report import Row, SweepReport, pick

TOLERANCE = 0.01  # acceptance (alpha) within this of the best counts as "as good"


@dataclass(frozen=True)
class SweepRequest:
    checkpoint: Path
    workdir: Path  # bundles are kept here, one folder per recipe
    adapter: Path | None = None
    target: Path | None = None
    recipes: tuple[QuantRecipe, ...] | None = None  # None: the default grid, around the checkpoint's default block
    tolerance: float = TOLERANCE
    threads: int | None = None
    prompts: tuple[str, ...] | None = None


def read_recipes(path: Path) -> tuple[QuantRecipe, ...]:
    """A JSON list of recipes ({"quant_bits": 4, "quant_block": 64, "algorithm": "hqq", ...}), or {"recipes": [...]}."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InvalidOption(
            f"cannot read the recipes file {shorten(str(path))} ({shorten(str(exc))})",
            'write a JSON list such as [{"quant_bits": 4, "algorithm": "hqq"}]',
        ) from None
    items = data.get("recipes") if isinstance(data, dict) else data
    if not isinstance(items, list) or not items or not all(isinstance(i, dict) for i in items):
        raise InvalidOption(
            f"{shorten(str(path))} holds no list of recipes",
            'write a JSON list such as [{"quant_bits": 4, "algorithm": "hqq"}]',
        )
    found = tuple(recipes.build(item, f"{path.name} recipe {n}") for n, item in enumerate(items, 1))
    if len({r.name for r in found}) != len(found):
        raise InvalidOption(f"{shorten(str(path))} names a recipe twice", "list each recipe once")
    return found


def sweep(request: SweepRequest, progress: Progress = lambda _: None) -> SweepReport:
    from ...convert.pipeline import ConvertRequest, convert_many

    grid = request.recipes if request.recipes is not None else _default_grid(request.checkpoint, progress)
    request.workdir.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="merged-", dir=request.workdir) as temp:
        source = request.checkpoint
        if request.adapter is not None:
            progress(
                "merging the LoRA adapter once (peft, float32): every recipe converts it, and the bundles "
                "are measured against it"
            )
            source = _merged(request.checkpoint, request.adapter, Path(temp) / "merged")
        progress(f"converting {len(grid)} recipes from one load of the model")
        results = convert_many(
            [
                ConvertRequest(checkpoint=source, out=request.workdir / item.name, force=True, **item.flags())
                for item in grid
            ],
            progress=lambda line: progress(f"  {line}"),
        )
        bundles = {item.name: result.out for item, result in zip(grid, results)}
        sizes = {item.name: sum(result.sizes.values()) for item, result in zip(grid, results)}
        paths = {item.name: result.path for item, result in zip(grid, results)}
        converted = time.monotonic()
        quality = measure(bundles, source, request.target, request.threads, request.prompts, progress)
    rows = tuple(
        Row(recipe=r, bundle=bundles[r.name], bytes=sizes[r.name], weights=paths[r.name], quality=quality[r.name])
        for r in grid
    )
    report = pick(rows, request.tolerance, request.checkpoint, request.adapter, request.target)
    return replace(report, seconds=(("converting", converted - start), ("measuring", time.monotonic() - converted)))


def _default_grid(checkpoint: Path, progress: Progress) -> tuple[QuantRecipe, ...]:
    """The default grid around the block every input size of this checkpoint divides (128 for Qwen3; 64 for
    SmolLM2-135M's hidden 576), said in a line when it is not 128."""
    from ...convert.inspect.checkpoint import inspect_checkpoint
    from ...convert.pipeline import quantized_inputs

    block = recipes.default_block(quantized_inputs(inspect_checkpoint(checkpoint, allow_untied=True)))
    if block != recipes.DEFAULT_BLOCK:
        progress(
            f"block {recipes.DEFAULT_BLOCK} does not divide every input size of this checkpoint: "
            f"the grid is around block {block}"
        )
    return recipes.default_grid(block)


def _merged(checkpoint: Path, adapter: Path, out: Path) -> Path:
    from ...convert.inspect.checkpoint import inspect_checkpoint
    from ...convert.inspect.lora import inspect_adapter, merge

    inspect_adapter(adapter, inspect_checkpoint(checkpoint))  # refused here, with convert's own errors
    out.mkdir(parents=True)
    merge(checkpoint, adapter, out)
    return out
