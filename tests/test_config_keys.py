"""Every config key a family's transformers modeling code reads is carried, refused unless it is the value the graph
assumes, or shown irrelevant: the tables in packager.families.configkeys, held against transformers' own modeling
files and config classes, and the refusals checked key by key (no converter: the config alone decides)."""

from __future__ import annotations

import importlib
import inspect
import json
import re
from pathlib import Path
from typing import Any

import pytest
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

from packager.convert.inspect.checkpoint import check_config_keys
from packager.errors import InvalidCheckpointConfig, UnsupportedModel
from packager.families import BY_NAME, FAMILIES, ROLES, Family, findings

MODEL_TYPES = sorted({(f.name, t) for f in FAMILIES for t in f.model_types})
READ = re.compile(r"\bconfig\.([A-Za-z_][A-Za-z0-9_]*)|getattr\(\s*config,\s*[\"']([A-Za-z_][A-Za-z0-9_]*)[\"']")


def _modeling_reads(model_type: str) -> set[str]:
    """The config attributes transformers' modeling file of `model_type` reads (methods and private ones aside)."""
    config_class = CONFIG_MAPPING[model_type]
    modeling = importlib.import_module(config_class.__module__.replace(".configuration_", ".modeling_"))
    names = {a or b for a, b in READ.findall(inspect.getsource(modeling))}
    return {n for n in names if not n.startswith("_") and not callable(getattr(config_class, n, None))}


def _fields(model_type: str) -> set[str]:
    return set(getattr(CONFIG_MAPPING[model_type], "__annotations__", {}))


def _default_config(model_type: str, **changes: Any) -> dict[str, Any]:
    config: dict[str, Any] = CONFIG_MAPPING[model_type]().to_dict()
    config.update(changes)
    return config


@pytest.mark.parametrize(("family", "model_type"), MODEL_TYPES)
def test_the_table_names_every_key_the_modeling_code_reads_and_every_field_of_the_config(
    family: str, model_type: str
) -> None:
    named = {key.name for key in BY_NAME[family].config_keys}
    reads = _modeling_reads(model_type)
    assert reads, "the modeling file's reads were not found"
    assert not reads - named, f"{family}: keys the modeling code reads that the table leaves out"
    assert not _fields(model_type) - named, f"{family}: config fields the table leaves out"


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_every_key_has_a_role_and_a_reason_and_every_refused_key_a_check(family: Family) -> None:
    assert len({key.name for key in family.config_keys}) == len(family.config_keys)
    for key in family.config_keys:
        assert key.role in ROLES and key.how, key.name
        if key.role == "refused":
            assert key.checks, f"{family.name}: {key.name} is refused but nothing checks it"


@pytest.mark.parametrize(("family", "model_type"), MODEL_TYPES)
def test_the_config_transformers_saves_by_default_has_no_finding(family: str, model_type: str) -> None:
    assert findings(BY_NAME[family].config_keys, _default_config(model_type)) == []


# (family, model_type, changes, refused: True for exit 12, False for exit 11, the key the line names)
HOSTILE = [
    # Issue 39, High 1: transformers scales Gemma 3 attention by query_pre_attn_scalar ** -0.5, the graph by head_dim's.
    ("gemma3", "gemma3_text", {"query_pre_attn_scalar": 1, "head_dim": 64}, True, "query_pre_attn_scalar"),
    ("gemma3", "gemma3_text", {"query_pre_attn_scalar": 168, "head_dim": 128}, True, "query_pre_attn_scalar"),
    ("gemma3", "gemma3_text", {"query_pre_attn_scalar": 0}, False, "query_pre_attn_scalar"),
    # High 2: attention settings that converted into wrong bundles.
    ("gemma3", "gemma3_text", {"sliding_window": 10**15}, False, "sliding_window"),
    ("gemma3", "gemma3_text", {"sliding_window": -4}, False, "sliding_window"),
    ("gemma3", "gemma3_text", {"sliding_window": 0}, False, "sliding_window"),
    ("gemma3", "gemma3_text", {"sliding_window": None}, False, "sliding_window"),
    ("gemma3", "gemma3_text", {"sliding_window": "512"}, False, "sliding_window"),
    ("gemma3", "gemma3_text", {"use_bidirectional_attention": True}, True, "use_bidirectional_attention"),
    ("gemma3", "gemma3_text", {"attn_logit_softcapping": 50.0}, True, "attn_logit_softcapping"),
    ("gemma3", "gemma3_text", {"hidden_activation": "silu"}, True, "hidden_activation"),
    ("gemma3", "gemma3_text", {"attention_bias": True}, True, "attention_bias"),
    ("gemma3", "gemma3_text", {"final_logit_softcapping": -1}, False, "final_logit_softcapping"),
    ("gemma3", "gemma3_text", {"rope_local_base_freq": "abc"}, False, "rope_local_base_freq"),
    # Low 13: config errors that reached the converter.
    ("qwen3", "qwen3", {"rope_theta": "abc"}, False, "rope_theta"),
    ("qwen3", "qwen3", {"rope_theta": 0}, False, "rope_theta"),
    ("qwen3", "qwen3", {"rope_theta": [1e6]}, False, "rope_theta"),
    ("qwen3", "qwen3", {"rope_parameters": {"rope_type": "default", "rope_theta": float("nan")}}, False, "rope_theta"),
    ("qwen3", "qwen3", {"num_key_value_heads": 1.0}, False, "num_key_value_heads"),
    ("qwen3", "qwen3", {"num_key_value_heads": "1"}, False, "num_key_value_heads"),
    ("qwen3", "qwen3", {"num_attention_heads": 4, "num_key_value_heads": 3}, False, "num_key_value_heads"),
    ("qwen3", "qwen3", {"rms_norm_eps": -1e-6}, False, "rms_norm_eps"),
    ("qwen3", "qwen3", {"rope_theta": 10**400}, False, "rope_theta"),
    ("gemma3", "gemma3_text", {"final_logit_softcapping": 10**400}, False, "final_logit_softcapping"),
    ("qwen3", "qwen3", {"hidden_act": "gelu"}, True, "hidden_act"),
    ("qwen3", "qwen3", {"attention_bias": True}, True, "attention_bias"),
    ("qwen3", "qwen3", {"use_sliding_window": True, "max_window_layers": 1, "num_hidden_layers": 2}, True, "use_"),
    ("qwen3", "qwen3", {"layer_types": ["full_attention", "sliding_attention"]}, True, "layer_types"),
    ("qwen2", "qwen2", {"hidden_act": "relu"}, True, "hidden_act"),
    ("llama3", "llama", {"mlp_bias": True}, True, "mlp_bias"),
    ("phi3", "phi3", {"original_max_position_embeddings": 1}, False, "original_max_position_embeddings"),
    (
        "phi3",
        "phi3",
        {"rope_parameters": {"rope_type": "longrope", "original_max_position_embeddings": 1}},
        False,
        "rope_",
    ),
    ("phi3", "phi3", {"sliding_window": 2047}, True, "sliding_window"),
    # Low 14: stop ids that are no token ids.
    ("qwen3", "qwen3", {"eos_token_id": [151645, -1]}, False, "eos_token_id"),
    ("qwen3", "qwen3", {"eos_token_id": 99999999999}, False, "eos_token_id"),
]


@pytest.mark.parametrize(
    ("family", "model_type", "changes", "refused", "key"),
    HOSTILE,
    ids=[f"{h[0]}-{'-'.join(h[2])}-{str(next(iter(h[2].values())))[:12]}" for h in HOSTILE],
)
def test_a_value_the_graph_does_not_compute_is_one_line_naming_the_key(
    family: str, model_type: str, changes: dict[str, Any], refused: bool, key: str
) -> None:
    config = _default_config(model_type, **changes)
    error = UnsupportedModel if refused else InvalidCheckpointConfig
    with pytest.raises(error) as raised:
        check_config_keys(BY_NAME[family], config, "ckpt/config.json")
    line = raised.value.one_line()
    assert key in line and line.startswith("ckpt/config.json: ") and "\n" not in line, line
    if refused:
        assert "packager converts" in line, line


def test_the_real_gemma3_27b_attention_scale_is_refused_naming_what_packager_converts() -> None:
    """Gemma 3 27B: head_dim 128, query_pre_attn_scalar 168 (its config.json on the Hub)."""
    config = _default_config("gemma3_text", head_dim=128, query_pre_attn_scalar=168)
    (finding,) = findings(BY_NAME["gemma3"].config_keys, config)
    assert finding.refused and "query_pre_attn_scalar = head_dim = 128" in finding.message


@pytest.mark.parametrize(
    ("model_type", "changes"),
    [
        ("gemma3_text", {"sliding_window": 512, "max_position_embeddings": 32768}),
        ("gemma3_text", {"head_dim": 64, "query_pre_attn_scalar": 64}),
        ("gemma3_text", {"final_logit_softcapping": 30.0}),
        ("qwen3", {"use_sliding_window": True, "max_window_layers": 28, "num_hidden_layers": 28}),
        ("qwen2", {"use_sliding_window": False, "sliding_window": 131072, "max_window_layers": 21}),
        (
            "phi3",
            {"sliding_window": 262144, "max_position_embeddings": 131072, "original_max_position_embeddings": 4096},
        ),
    ],
)
def test_real_released_values_pass(model_type: str, changes: dict[str, Any]) -> None:
    family = next(f for f in FAMILIES if model_type in f.model_types)
    assert findings(family.config_keys, _default_config(model_type, **changes)) == []


def test_invalid_values_are_said_before_refused_ones() -> None:
    config = _default_config("gemma3_text", query_pre_attn_scalar=1, sliding_window=0)
    with pytest.raises(InvalidCheckpointConfig, match=r"sliding_window .*\(and 1 more finding"):
        check_config_keys(BY_NAME["gemma3"], config, "c")


@pytest.mark.converter
def test_rms_norm_eps_is_carried_into_the_graph(tiny_checkpoint: Path, tmp_path: Path) -> None:
    """A carried key changes the graph: two epsilons, two graphs (the Gemma 3 test proves two carried keys by
    verify as well)."""
    from packager.convert.pipeline import ConvertRequest, convert
    from tests.models import copy_checkpoint

    graphs = []
    for eps in (1e-6, 1e-2):
        folder = copy_checkpoint(tiny_checkpoint, tmp_path / f"eps-{eps}")
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        (folder / "config.json").write_text(json.dumps({**config, "rms_norm_eps": eps}), encoding="utf-8")
        graphs.append(
            (convert(ConvertRequest(checkpoint=folder, out=tmp_path / f"b-{eps}")).out / "llm.mnn").read_bytes()
        )
    assert graphs[0] != graphs[1]
