"""A family's quirks are hooks it declares, and shared code only calls them: the torch patches it names exist in the
one registry and are asked for exactly by the configs that need them, its warnings, its decoder rows against the
checkpoint's and the slices between them, its norm offset against transformers' own norm, the job the worker gets
(which serialises itself and names the family), and no module outside families/ naming a family in code."""

from __future__ import annotations

import ast
import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest

from packager.convert.fence import patches
from packager.convert.fence.job import WorkerJob, WorkerResult
from packager.families import BY_NAME, FAMILIES, Family

IDS = [f.name for f in FAMILIES]
ROOT = Path(__file__).resolve().parents[1] / "packager"

# Configs as checkpoints spell the keys the hooks read: plain rope, the llama3 rope (transformers 5 and 4), a rope
# per layer type (Gemma 3 under transformers 5) and Gemma 3's transformers-4 keys, longrope (Phi-3.5).
LLAMA3_ROPE = {"rope_type": "llama3", "factor": 32.0, "original_max_position_embeddings": 8192}
CONFIGS: dict[str, dict[str, Any]] = {
    "plain": {"rope_parameters": {"rope_type": "default", "rope_theta": 1e6}},
    "llama3": {"rope_parameters": {**LLAMA3_ROPE, "rope_theta": 5e5}},
    "llama3 (transformers 4)": {"rope_theta": 5e5, "rope_scaling": LLAMA3_ROPE},
    "per layer type": {
        "rope_parameters": {
            "full_attention": {"rope_type": "default", "rope_theta": 1e6},
            "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
        }
    },
    "gemma3 (transformers 4)": {"rope_theta": 1e6, "rope_local_base_freq": 1e4},
    "longrope": {
        "max_position_embeddings": 131072,
        "original_max_position_embeddings": 4096,
        "rope_scaling": {"type": "longrope", "short_factor": [1.0], "long_factor": [2.0]},
    },
}
# The patches each family asks for, by config (only the configs the family converts: others are refused earlier).
EXPECTED_PATCHES = {
    "llama3": {"plain": (), "llama3": ("transformers_rope",), "llama3 (transformers 4)": ("transformers_rope",)},
    "gemma3": {
        "per layer type": ("per_layer_type_rope", "embed_scale"),
        "gemma3 (transformers 4)": ("per_layer_type_rope", "embed_scale"),
    },
}


@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
def test_every_patch_a_family_declares_is_in_the_registry(family: Family) -> None:
    for config in CONFIGS.values():
        assert set(family.patches(config)) <= set(patches.PATCHES) | set(patches.FILLS), family.patches(config)


@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
def test_a_family_asks_for_a_patch_exactly_where_llmexport_exports_its_config_wrong(family: Family) -> None:
    expected = EXPECTED_PATCHES.get(family.name, {"plain": ()})
    assert {name: family.patches(CONFIGS[name]) for name in expected} == expected


@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
def test_only_a_longrope_config_warns_and_the_warning_names_its_exact_positions(family: Family) -> None:
    for name, config in CONFIGS.items():
        said = family.warnings(config)
        if name == "longrope" and "longrope" in family.rope_types:
            assert len(said) == 1 and "up to 4,096 positions" in said[0] and "\n" not in said[0]
        else:
            assert said == (), (name, said)


@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
def test_graph_rows_differ_from_checkpoint_rows_only_by_the_slices_of_fused_tensors(family: Family) -> None:
    hidden, heads, kv, head_dim, intermediate = 96, 6, 2, 16, 160
    graph = {row[0]: row for row in family.layout.layer(hidden, heads, kv, head_dim, intermediate)}
    checkpoint = {row[0]: row for row in family.layout.checkpoint_layer(hidden, heads, kv, head_dim, intermediate)}
    slices = family.layout.sources(heads, kv, head_dim)
    split = {key.removesuffix(".weight") for key in slices}
    fused = {source.removesuffix(".weight") for source, _, _ in slices.values()}
    assert set(graph) - set(checkpoint) == split and set(checkpoint) - set(graph) == fused
    for name in fused:  # the slices tile the fused tensor's rows, each the width of its graph tensor
        parts = sorted((first, rows, key) for key, (source, first, rows) in slices.items() if source.startswith(name))
        assert [first for first, _, _ in parts] == [sum(r for _, r, _ in parts[:i]) for i in range(len(parts))]
        assert sum(rows for _, rows, _ in parts) == checkpoint[name][2]
        assert all(graph[key.removesuffix(".weight")][2] == rows for _, rows, key in parts)
        assert all(graph[key.removesuffix(".weight")][4] for _, _, key in parts), "a split projection's zero bias"


@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
def test_the_norm_offset_is_what_transformers_own_norm_adds_to_its_weight(family: Family) -> None:
    """transformers' RMSNorm of the family, its weight set to zeros: it scales the normalised input by the offset."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    config = CONFIG_MAPPING[family.model_types[0]](
        hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=4
    )
    with torch.device("meta"):
        norm_class = type(AutoModelForCausalLM.from_config(config).model.norm)
    norm = norm_class(64, eps=1e-6)
    with torch.no_grad():
        norm.weight.zero_()
        x = torch.randn(3, 64)
        unit = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
        assert torch.allclose(norm(x), unit * family.layout.norm_offset, atol=1e-5)


def test_the_worker_job_is_one_declaration_read_back_exactly_from_its_json() -> None:
    values: dict[str, Any] = {
        "source": Path("/ckpt"),
        "adapter": Path("/adapter"),
        "workdir": Path("/work"),
        "quant_bits": 8,
        "quant_block": 64,
        "stop_ids": (151645, 151643),
        "corpus": ("a", "b c"),
        "family": "gemma3",
        "graph_only": True,
        "graph_dtype": "bfloat16",
        "equal_tensors": (("model.norm.weight", 3), ("lm_head.weight", 0)),
        "fuse_c4": False,
        "symmetric": True,
        "hqq": True,
        "lm_bits": 8,
        "lm_block": 128,
        "also": ({"name": "4bit-b64", "quant_bits": 4},),
        "eagle": Path("/head"),
        "eagle_rope_theta": 5e5,
        "eagle_rope_scaling": {"rope_type": "llama3", "factor": 8.0},
        "patches": ("per_layer_type_rope",),
        "left_out_tokens": ("<image_soft_token>",),
        "dflash_layers": (1, 4, 7),
    }
    assert set(values) == {f.name for f in dataclasses.fields(WorkerJob)}, "a field this test does not set"
    job = WorkerJob(**values)
    text = job.to_json()
    assert set(json.loads(text)) == set(values)
    assert WorkerJob.from_json(text) == job
    plain = WorkerJob(**{**values, "adapter": None, "eagle": None, "lm_bits": None, "eagle_rope_scaling": None})
    assert WorkerJob.from_json(plain.to_json()) == plain
    assert job.family in BY_NAME


def test_the_worker_result_is_read_back_exactly_from_what_the_worker_sends() -> None:
    made = WorkerResult(
        export_dir=Path("/work/export"),
        tokenizers={"pipeline": Path("/work/export/tokenizer.mtok"), "text": Path("/work/tokenizer-text/t.txt")},
        encodings={"pipeline": [[1, 2], [3]], "text": [[1, 2], [4, 5]]},
        versions={"mnn": "3.6.1"},
        also={"8bit-b128": Path("/work/export-0")},
    )
    sent = json.loads(json.dumps(made.to_plain()))  # as the done event carries it
    assert WorkerResult.from_plain(sent) == made


FAMILY_WORD = re.compile(r"qwen|llama|smollm|gemma|phi[-_0-9]", re.IGNORECASE)
# Modules that may name one, and why: the families themselves and the torch patches they declare by name; an EAGLE-3
# head is SpecForge's Llama-architecture layer whatever family it drafts for (its format, not a family); the rope
# helper builds transformers' llama3 frequencies for such heads.
ALLOWED = {
    "families": "the families",
    "convert/fence/patches.py": "the patches' registry",
    "convert/eagle/reference.py": "an EAGLE-3 head's format",
    "convert/inspect/eagle_head.py": "an EAGLE-3 head's format",
    "convert/rope.py": "transformers' llama3 rope for EAGLE-3 heads",
    "convert/dflash/reference.py": "a DFlash draft's format: z-lab's layers are transformers' Qwen3 modules",
    "convert/inspect/dflash_draft.py": "transformers' llama3 rope a Llama 3.1 DFlash draft carries",
}


def _named_in_code(path: Path) -> list[str]:
    """Identifiers, imported names and strings (not docstrings, not comments) of `path` that name a family."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            text = node.value
        elif isinstance(node, (ast.Name, ast.Attribute, ast.alias, ast.ImportFrom)):
            text = getattr(node, "id", None) or getattr(node, "attr", None) or getattr(node, "name", None)
            text = text or getattr(node, "module", None) or ""
        else:
            continue
        if FAMILY_WORD.search(text):
            found.append(f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}: {text[:60]!r}")
    return found


def test_no_module_outside_families_and_the_patches_names_a_family_in_code() -> None:
    named = {path: _named_in_code(path) for path in sorted(ROOT.rglob("*.py"))}
    allowed = {path for path in named if any(str(path.relative_to(ROOT)).startswith(prefix) for prefix in ALLOWED)}
    assert [line for path, lines in named.items() if path not in allowed for line in lines] == []
    stale = [
        p for p in ALLOWED if not any(named[path] for path in allowed if str(path.relative_to(ROOT)).startswith(p))
    ]
    assert stale == [], "an exception no longer needed: take it out of ALLOWED"
