"""The target's states the DFlash check compares the converted graph with (convert.dflash.faithful
transformers_states): transformers' own model, its layers given their weights one at a time, gives exactly the
states of the whole model loaded by from_pretrained, rounded as the recipe stores it or not, for a Qwen3 target
and a Llama 3.2 one (its llama3 rope scaling made by the rotary table built again off the meta device)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from packager.convert.dflash.faithful import transformers_states
from packager.convert.eagle.faithful import _embeddings, quantized
from packager.convert.inspect.checkpoint import inspect_checkpoint
from packager.convert.recipe import QuantRecipe


def _whole_model(path: Path, embeds: np.ndarray, upto: int, recipe: QuantRecipe | None) -> list[np.ndarray]:
    """The plain way: from_pretrained in float32, every Linear rounded in place, one forward."""
    import torch
    from transformers import AutoConfig, AutoModel

    config = AutoConfig.from_pretrained(str(path))
    config.num_hidden_layers = min(int(config.num_hidden_layers), upto + 2)
    model = AutoModel.from_pretrained(str(path), config=config, dtype=torch.float32).eval()
    with torch.no_grad():
        if recipe is not None:
            for module in model.modules():
                if isinstance(module, torch.nn.Linear):
                    module.weight.copy_(quantized(module.weight, recipe.bits, recipe.block, recipe.symmetric))
        out = model(inputs_embeds=torch.from_numpy(embeds)[None], output_hidden_states=True)
    return [state[0].numpy() for state in out.hidden_states[: upto + 2]]


@pytest.mark.parametrize(
    "which, upto, recipe",
    [("qwen3", 0, QuantRecipe(bits=4, block=128)), ("llama", 0, None), ("llama", 1, QuantRecipe(bits=8, block=64))],
    ids=["qwen3 rounded", "llama as stored", "llama rounded, its last layer"],
)
def test_the_states_made_a_layer_at_a_time_are_the_whole_models(
    tiny_checkpoint: Path, llama_checkpoint: Path, which: str, upto: int, recipe: QuantRecipe | None
) -> None:
    path = tiny_checkpoint if which == "qwen3" else llama_checkpoint
    info = inspect_checkpoint(path, allow_untied=True)
    embeds = _embeddings(info, list(range(100, 140)))  # positions past none: the rope is all that differs
    got = transformers_states(info, embeds, upto, recipe)
    want = _whole_model(path, embeds, upto, recipe)
    assert len(got) == len(want) == upto + 2
    for mine, theirs in zip(got, want):
        assert np.array_equal(mine, theirs)
    assert not np.array_equal(got[-1], got[-2])  # the layers did something
