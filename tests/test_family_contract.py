"""Each family's facts hold against the real thing, with no converter: its markers and stop ids against its real
tokenizer, its chat template ending a turn on its first stop token, its weight layout against the tensors
transformers makes for a tiny config of it (on the meta device: no weights), the rope and layer kinds it accepts
and refuses, how a bundle of it is recognised again, and what its cards say. A new family is held to all of it by
being in FAMILIES."""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import jinja2
import pytest
from tokenizers import Tokenizer
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

from packager.families import BY_NAME, FAMILIES, Family, UnknownFamily, findings, of_bundle, of_checkpoint
from tests.tokenizers import (
    QWEN25_TEMPLATE,
    gemma3_tokenizer_dir,
    llama32_tokenizer_dir,
    phi35_tokenizer_dir,
    qwen3_tokenizer_dir,
    smollm2_tokenizer_dir,
)

# The real tokenizer of each family, and the chat template its instruct models carry when the tokenizer's own files
# lack it (None: the files' own).
TOKENIZERS: dict[str, tuple[Callable[[], Path], str | None]] = {
    "qwen3": (qwen3_tokenizer_dir, None),
    "qwen2": (qwen3_tokenizer_dir, QWEN25_TEMPLATE),  # Qwen2.5 and Qwen3 share the vocabulary
    "llama3": (llama32_tokenizer_dir, None),
    "smollm2": (smollm2_tokenizer_dir, None),
    "gemma3": (gemma3_tokenizer_dir, None),
    "phi3": (phi35_tokenizer_dir, None),
}

# A tiny config of each family, as its released checkpoints set the keys that decide its graph (rope, layer kinds).
_SIZES = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4}
_LLAMA3_ROPE = {
    "rope_type": "llama3",
    "factor": 32.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
    "rope_theta": 500000.0,
}
CONFIGS: dict[str, dict[str, Any]] = {
    "qwen3": {"num_key_value_heads": 2, "head_dim": 16, "vocab_size": 151936},
    "qwen2": {"num_key_value_heads": 2, "vocab_size": 151936},
    "llama3": {"num_key_value_heads": 2, "vocab_size": 128256, "rope_parameters": _LLAMA3_ROPE},
    "smollm2": {"num_key_value_heads": 4, "vocab_size": 49152, "rope_parameters": {"rope_type": "default"}},
    "gemma3": {
        "num_key_value_heads": 1,
        "head_dim": 16,
        "query_pre_attn_scalar": 16,
        "vocab_size": 262144,
        "sliding_window": 512,
        "layer_types": ["sliding_attention", "full_attention"],
        "rope_parameters": {
            "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        },
    },
    "phi3": {
        "num_key_value_heads": 4,
        "vocab_size": 32064,
        "max_position_embeddings": 131072,
        "original_max_position_embeddings": 4096,
        "rope_scaling": {"type": "longrope", "short_factor": [1.0] * 8, "long_factor": [2.0] * 8},
        "tie_word_embeddings": False,
    },
}
IDS = [f.name for f in FAMILIES]


def test_every_family_has_a_tokenizer_and_a_tiny_config_here() -> None:
    assert set(TOKENIZERS) == set(CONFIGS) == set(BY_NAME), "a family packager knows is missing from its contract"


def config_of(family: Family, **changes: Any) -> dict[str, Any]:
    """The tiny config of `family` as transformers saves it (its config class's defaults, then the family's keys)."""
    made = CONFIG_MAPPING[family.model_types[0]](**{**_SIZES, **CONFIGS[family.name]}).to_dict()
    made.update(changes)
    return made


@cache
def tokenizer_files(name: str) -> tuple[Tokenizer, str]:
    """The family's real tokenizer and its chat template."""
    folder, template = TOKENIZERS[name][0](), TOKENIZERS[name][1]
    if template is None:
        config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
        jinja = folder / "chat_template.jinja"
        template = config.get("chat_template") or (jinja.read_text(encoding="utf-8") if jinja.is_file() else "")
    return Tokenizer.from_file(str(folder / "tokenizer.json")), str(template)


@cache
def vocabulary(name: str) -> dict[str, int]:
    return tokenizer_files(name)[0].get_vocab(with_added_tokens=True)


@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
def test_the_family_is_found_from_its_own_config_and_tokenizer_and_no_other_is(family: Family) -> None:
    assert of_checkpoint(config_of(family), vocabulary(family.name), "the checkpoint") is family
    for other in FAMILIES:  # another family's tokenizer under this family's model_type is never this family
        if other is not family and set(other.model_types) & set(family.model_types):
            try:
                found = of_checkpoint(config_of(family), vocabulary(other.name), "the checkpoint")
            except UnknownFamily:
                continue
            assert found is other, f"{other.name}'s tokenizer passes for {found.name}"


@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
def test_markers_and_stop_ids_are_the_real_tokenizers_ids(family: Family) -> None:
    ids = vocabulary(family.name)
    assert all(ids.get(token) == number for token, number in family.markers.items()), family.markers
    assert family.stop_ids(ids) == family.known_stop_ids
    rows = config_of(family)["vocab_size"]
    assert all(0 <= number < rows for number in family.known_stop_ids), "a stop id past the model's rows"
    assert not family.bos_token or family.bos_token in ids
    assert all(ids.get(token, -1) >= rows for token in family.beyond_rows)


@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
def test_the_chat_template_ends_an_assistant_turn_on_the_first_stop_token_and_encodes_it_as_one_id(
    family: Family,
) -> None:
    tokenizer, template = tokenizer_files(family.name)
    assert template, f"{family.name}'s tokenizer carries no chat template"
    answer = "The answer is 42."
    messages = [{"role": "user", "content": "What is six times seven?"}, {"role": "assistant", "content": answer}]
    text = (
        jinja2.Environment()
        .from_string(template)
        .render(
            **{
                "messages": messages,
                "add_generation_prompt": False,
                "bos_token": family.bos_token,
                "eos_token": family.stop_tokens[-1],
                **family.template_variables,
            }
        )
    )
    after = text.split(answer, 1)[1]
    assert after.startswith(family.stop_tokens[0]), (family.name, after[:40])
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    assert family.known_stop_ids[0] in ids
    if family.bos_token:  # the template puts the bos token first, where MNN's encode puts it too
        assert ids[0] == vocabulary(family.name)[family.bos_token]


@cache
def _meta_layer(name: str) -> dict[str, tuple[int, ...]]:
    """Layer 0's tensors (suffix -> shape) as transformers makes the family's tiny model, on the meta device."""
    import torch
    from transformers import AutoModelForCausalLM

    family = BY_NAME[name]
    config = CONFIG_MAPPING[family.model_types[0]](**{**_SIZES, **CONFIGS[name]})
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    prefix = "model.layers.0."
    return {k[len(prefix) :]: tuple(v.shape) for k, v in model.state_dict().items() if k.startswith(prefix)}


@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
def test_the_layout_names_every_tensor_of_a_layer_with_its_shape(family: Family) -> None:
    config = config_of(family)
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    head_dim = config.get("head_dim") or hidden // heads
    rows = family.layout.checkpoint_layer(
        hidden, heads, config["num_key_value_heads"], head_dim, config["intermediate_size"]
    )
    expected: dict[str, tuple[int, ...]] = {}
    for suffix, kind, out_features, in_features, bias in rows:
        expected[f"{suffix}.weight"] = (out_features,) if kind == "norm" else (out_features, in_features)
        if bias:
            expected[f"{suffix}.bias"] = (out_features,)
    assert expected == _meta_layer(family.name)


@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
def test_the_split_of_a_fused_tensor_covers_it_exactly(family: Family) -> None:
    config = config_of(family)
    heads, kv = config["num_attention_heads"], config["num_key_value_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    sources = family.layout.sources(heads, kv, head_dim)
    if "self_attn.qkv_proj.weight" not in _meta_layer(family.name):
        assert sources == {}
        return
    spans = sorted((first, first + count) for _, first, count in sources.values())
    assert spans[0][0] == 0 and all(a[1] == b[0] for a, b in itertools.pairwise(spans))
    assert spans[-1][1] == _meta_layer(family.name)["self_attn.qkv_proj.weight"][0]


@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
def test_the_family_accepts_its_rope_and_layer_kinds_and_refuses_others_in_one_line(family: Family) -> None:
    ids = vocabulary(family.name)
    for kind in ("yarn", "dynamic"):  # rope types no family converts
        assert kind not in family.rope_types
        rope = {"rope_type": kind, "factor": 4.0, "rope_theta": 10000.0, "original_max_position_embeddings": 4096}
        key = "rope_scaling" if "rope_scaling" in CONFIGS[family.name] else "rope_parameters"
        changes: dict[str, Any] = {key: rope, "rope_parameters" if key == "rope_scaling" else "rope_scaling": None}
        if family.name == "gemma3":  # a rope per layer type
            changes[key] = {"full_attention": rope, "sliding_attention": {"rope_type": "default"}}
        with pytest.raises(UnknownFamily, match=f"rope_type '{kind}'") as refused:
            of_checkpoint(config_of(family, **changes), ids, "the checkpoint")
        assert "\n" not in str(refused.value)
    for kind in ("linear_attention", "sliding_attention", "chunked_attention"):
        if kind in family.layer_types:
            continue
        with pytest.raises(UnknownFamily, match="layer_types") as refused:
            of_checkpoint(config_of(family, layer_types=[kind, "full_attention"]), ids, "the checkpoint")
        assert "\n" not in str(refused.value)
    assert set(config_of(family).get("layer_types") or ["full_attention"]) <= set(family.layer_types)


@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
def test_a_bundle_of_the_family_is_recognised_from_its_llm_config(family: Family) -> None:
    jinja = {"bos": family.bos_token, "eos": family.stop_tokens[0]}
    assert of_bundle({"model_type": family.model_types[0], "jinja": jinja}) is family


@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
def test_the_tiny_config_has_no_config_key_finding(family: Family) -> None:
    assert findings(family.config_keys, config_of(family)) == []


HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
def test_card_metadata_is_complete_and_well_formed(family: Family) -> None:
    license = family.license
    assert re.fullmatch(r"[a-z0-9.-]+", license.spdx) and license.name and license.link.startswith("https://")
    assert family.title and family.architecture and family.tags
    assert all(re.fullmatch(r"[a-z0-9.-]+", tag) for tag in family.tags)
    assert family.base_models and all(HUB_ID.match(m) for m in (*family.base_models, *family.targets))
    assert set(family.tokenizer_formats) <= {"text", "pipeline"} and family.tokenizer_formats
    assert family.default_bits in (4, 8)
