"""A refused model's line ends with the families packager converts, from the registry (issue 39, row 15)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from packager.convert.inspect.checkpoint import inspect_checkpoint
from packager.errors import UnsupportedModel
from packager.families import FAMILIES


def _config_only(folder: Path, config: dict[str, object]) -> Path:
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


@pytest.mark.parametrize(
    "config",
    [
        {"model_type": "qwen3_moe"},
        {"model_type": "lfm2"},
        {"architectures": ["LlamaForCausalLM"]},
        {"model_type": "gemma3", "text_config": {"model_type": "gemma3_text", "hidden_size": 1152}},
    ],
    ids=["moe", "linear-attention", "no-model-type", "multimodal"],
)
def test_every_refusal_ends_with_every_family_of_the_registry(config: dict[str, object], tmp_path: Path) -> None:
    with pytest.raises(UnsupportedModel) as refused:
        inspect_checkpoint(_config_only(tmp_path / "ckpt", config))
    hint = refused.value.hint
    assert [f.title for f in FAMILIES if f.title not in hint] == []
    assert all(f"({'/'.join(f.model_types)})" in hint for f in FAMILIES)


def test_a_multimodal_checkpoint_is_told_to_convert_its_text_model(tmp_path: Path) -> None:
    config = {"model_type": "gemma3", "text_config": {"model_type": "gemma3_text"}, "vision_config": {}}
    with pytest.raises(UnsupportedModel) as refused:
        inspect_checkpoint(_config_only(tmp_path / "ckpt", config))
    line = refused.value.one_line()
    assert "model_type 'gemma3': a multimodal Gemma 3 model" in line
    assert "model.language_model" in line and "model_type 'gemma3_text'" in line
