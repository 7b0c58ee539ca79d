"""`convert --dflash`'s inspection, before any work: a DFlash draft that would not compute what its checkpoint
computes, or that was made for another target, is one line with its own exit code; a good one is described as the
exporter needs it. Fast: numpy-written drafts against a target described without its weights."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from packager import errors
from packager.convert.dflash.faithful import target_states
from packager.convert.inspect.dflash_draft import build_target_layer_ids, expected_shapes, inspect_dflash
from tests.dflashdrafts import MASK_ID, build_draft, target_view


def _tensors(change: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    def apply(folder: Path) -> None:
        state = load_file(str(folder / "model.safetensors"))
        change(state)
        (folder / "model.safetensors").unlink()
        save_file(state, str(folder / "model.safetensors"))

    return apply


def _config(**changes: Any) -> Callable[[Path], None]:
    def apply(folder: Path) -> None:
        data = json.loads((folder / "config.json").read_text())
        for key, value in changes.items():
            if key.startswith("dflash_"):
                data["dflash_config"][key.removeprefix("dflash_")] = value
            else:
                data[key] = value
        (folder / "config.json").write_text(json.dumps(data))

    return apply


def _drop_dflash_config(folder: Path) -> None:
    data = json.loads((folder / "config.json").read_text())
    del data["dflash_config"]
    (folder / "config.json").write_text(json.dumps(data))


def _drop_mask(folder: Path) -> None:
    data = json.loads((folder / "config.json").read_text())
    del data["dflash_config"]["mask_token_id"]
    (folder / "config.json").write_text(json.dumps(data))


def _rename(old: str, new: str) -> Callable[[Path], None]:
    return _tensors(lambda s: s.__setitem__(new, s.pop(old)))


def _eagle_head(folder: Path) -> None:
    zeros = np.zeros((4, 4), dtype=np.float32)
    (folder / "model.safetensors").unlink()
    save_file(
        {f"midlayer.{n}.weight": zeros for n in ("a", "b", "c", "d")} | {"fc.weight": zeros},
        str(folder / "model.safetensors"),
    )


def _broken_json(folder: Path) -> None:
    (folder / "config.json").write_text("{")


def _pickle(folder: Path) -> None:
    (folder / "model.safetensors").rename(folder / "pytorch_model.bin")


L = errors.DFlashDraftLayout
M = errors.DFlashDraftMismatch
T = errors.DFlashMaskToken
DRAFTS: dict[str, tuple[Callable[[Path], None], type[errors.PackagerError], str]] = {
    "a tensor missing": (_tensors(lambda s: s.pop("hidden_norm.weight")), L, "missing hidden_norm.weight"),
    "a tensor misnamed": (
        _rename("layers.1.self_attn.q_proj.weight", "model.layers.1.self_attn.q_proj.weight"),
        L,
        "unexpected model.layers.1.self_attn.q_proj.weight (did you mean layers.1.self_attn.q_proj.weight?)",
    ),
    "an unexpected tensor": (
        _tensors(lambda s: s.__setitem__("lm_head.weight", np.zeros((8, 256), dtype=np.float32))),
        L,
        "unexpected lm_head.weight",
    ),
    "a layer too many": (_config(num_hidden_layers=3), L, "missing layers.2.input_layernorm.weight"),
    "a wrong shape": (
        _tensors(lambda s: s.__setitem__("layers.0.self_attn.k_proj.weight", np.zeros((256, 256), dtype=np.float32))),
        M,
        "layers.0.self_attn.k_proj.weight is [256, 256], expected [128, 256]",
    ),
    "fc for three layers, two named": (
        _config(dflash_target_layer_ids=[1, 3, 5]),
        M,
        "fc.weight is [256, 512], expected [256, 768]",
    ),
    "mixed dtypes": (
        _tensors(lambda s: s.__setitem__("norm.weight", s["norm.weight"].astype(np.float16))),
        L,
        "stored as F16, F32",
    ),
    "another hidden size": (_config(hidden_size=512), M, "hidden_size 512 differs from the target's 256"),
    "other head counts": (_config(num_key_value_heads=2), M, "num_key_value_heads 2 differs from the target's 1"),
    "another head_dim": (_config(head_dim=64), M, "head_dim 64 differs from the target's 128"),
    "another vocabulary": (_config(vocab_size=128256), M, "vocab_size 128256 differs from the target's 151936"),
    "another target depth": (_config(num_target_layers=36), M, "num_target_layers 36 differs from the target's 8"),
    "layer ids past the target": (
        _config(dflash_target_layer_ids=[1, 9]),
        M,
        "name layer(s) [9] outside the target's 8",
    ),
    "negative layer id": (_config(dflash_target_layer_ids=[-1, 5]), M, "name layer(s) [-1] outside"),
    "layer ids out of order": (_config(dflash_target_layer_ids=[5, 1]), L, "must be strictly increasing"),
    "layer ids repeated": (_config(dflash_target_layer_ids=[5, 5]), L, "must be strictly increasing"),
    "layer ids not a list": (_config(dflash_target_layer_ids="1,5"), L, "must be a non-empty list"),
    "no mask token": (_drop_mask, T, "mask_token_id is missing"),
    "mask token past the rows": (_config(dflash_mask_token_id=151936), T, "has no embedding row"),
    "mask token a text token": (_config(dflash_mask_token_id=1000), T, "a token the target's tokenizer produces"),
    "mask token an added text token": (_config(dflash_mask_token_id=151662), T, "'<|fim_pad|>', a token the target's"),
    "mask token not an integer": (_config(dflash_mask_token_id="151669"), T, "mask_token_id is '151669'"),
    "block of one": (_config(block_size=1), L, "block_size 1 is not one the exported graph takes"),
    "block too wide": (_config(block_size=65), L, "block_size 65"),
    "block as text": (_config(block_size="16"), L, "block_size '16'"),
    "no dflash_config": (_drop_dflash_config, L, "no dflash_config: not a DFlash draft"),
    "an EAGLE-3 head": (_eagle_head, L, "holds an EAGLE-3 head"),
    "a pickle": (_pickle, L, "pytorch_model.bin (a pickle)"),
    "no weights": (lambda f: (f / "model.safetensors").unlink(), L, "has no model.safetensors"),
    "no config": (lambda f: (f / "config.json").unlink(), L, "has no config.json"),
    "config not JSON": (_broken_json, L, "config.json"),
    "sliding window": (_config(use_sliding_window=True), L, "sliding-window attention"),
    "yarn rope": (_config(rope_scaling={"rope_type": "yarn", "factor": 4.0}), L, "rope_scaling"),
    "attention biases": (_config(attention_bias=True), L, "attention_bias is true"),
    "unknown activation": (_config(hidden_act="mish"), L, "hidden_act 'mish'"),
}


@pytest.mark.parametrize("case", sorted(DRAFTS))
def test_a_hostile_dflash_draft_is_one_line_with_its_own_exit_code(case: str, tmp_path: Path) -> None:
    mutate, error, text = DRAFTS[case]
    target = target_view(tmp_path / "target")
    draft = build_draft(tmp_path / "draft")
    mutate(draft)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    with pytest.raises(errors.PackagerError) as raised:
        inspect_dflash(draft, target)
    assert type(raised.value) is error, raised.value.one_line()
    line = raised.value.one_line()
    assert text in line and "\n" not in line, line
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # nothing written


def test_the_dflash_errors_have_exit_codes_of_their_own() -> None:
    codes = [
        errors.DFlashDraftLayout,
        errors.DFlashDraftMismatch,
        errors.DFlashMaskToken,
        errors.DFlashTargetRefused,
        errors.DFlashDraftUnfaithful,
        errors.DFlashTargetUnfaithful,
    ]
    assert len({c.exit_code for c in codes}) == len(codes)


def test_exposed_target_states_are_judged_by_the_layer_they_are_nearest() -> None:
    """target_states on made-up states: a layer's state near its own (rounding) passes with a margin above 1; the
    states one layer off are nearest another layer's, a margin below 1; a state far from all has a large error."""
    rng = np.random.default_rng(0)
    wanted = [rng.normal(size=(5, 8)) for _ in range(5)]  # embeddings, then after layers 0..3
    near = [w + 0.01 * rng.normal(size=w.shape) for w in wanted]
    worst, margin = target_states(np.concatenate([near[2], near[4]], axis=1), wanted, (1, 3))
    assert worst < 0.02 and margin > 10
    _, shifted = target_states(np.concatenate([near[1], near[3]], axis=1), wanted, (1, 3))
    assert shifted < 1
    far, _ = target_states(np.concatenate([30 * near[2], near[4]], axis=1), wanted, (1, 3))
    assert far > 10


def test_a_good_draft_is_described_as_its_checkpoint_says(tmp_path: Path) -> None:
    target = target_view(tmp_path / "target")
    draft = inspect_dflash(build_draft(tmp_path / "draft", block_size=8, layer_ids=[2, 4, 6]), target)
    assert draft.target_layer_ids == (2, 4, 6) and draft.layer_ids_given
    assert (draft.block_size, draft.mask_token_id, draft.dtype) == (8, MASK_ID, "float32")
    assert draft.rope_theta == 1_000_000.0 and draft.num_layers == 2 and draft.rope_scaling is None
    assert expected_shapes(draft)["fc.weight"] == (256, 3 * 256)


def test_a_special_token_may_be_the_mask(tmp_path: Path) -> None:
    target = target_view(tmp_path / "target")
    draft = inspect_dflash(build_draft(tmp_path / "draft", mask_token_id=151654), target)  # <|vision_pad|>
    assert draft.mask_token_id == 151654


def test_layer_ids_the_config_does_not_name_are_z_labs_defaults(tmp_path: Path) -> None:
    assert build_target_layer_ids(36, 5) == (1, 9, 17, 25, 33)  # z-lab's Qwen3-8B draft names these
    assert build_target_layer_ids(8, 1) == (4,) and build_target_layer_ids(8, 2) == (1, 5)
    target = target_view(tmp_path / "target")
    folder = build_draft(tmp_path / "draft")
    config = json.loads((folder / "config.json").read_text())
    del config["dflash_config"]["target_layer_ids"]
    (folder / "config.json").write_text(json.dumps(config))
    draft = inspect_dflash(folder, target)
    assert draft.target_layer_ids == (1, 5) and not draft.layer_ids_given


def test_a_transformers_5_config_gives_its_rope_theta_in_rope_parameters(tmp_path: Path) -> None:
    target = target_view(tmp_path / "target")
    folder = build_draft(tmp_path / "draft")
    config = json.loads((folder / "config.json").read_text())
    del config["rope_theta"]
    config["rope_parameters"] = {"rope_type": "default", "rope_theta": 5e5}
    (folder / "config.json").write_text(json.dumps(config))
    assert inspect_dflash(folder, target).rope_theta == 5e5


def test_init_from_a_dflash_draft_says_it_ships_inside_its_targets_bundle(tmp_path: Path) -> None:
    from packager.release.init.facts import gather

    draft = build_draft(tmp_path / "draft")
    with pytest.raises(errors.UnsupportedModel) as error:
        gather(draft, None)
    assert "is a DFlash draft (z-lab's DFlashDraftModel), which ships inside its target's bundle" in (
        error.value.one_line()
    )
    assert "[convert] in release.toml" in error.value.one_line()
