"""packager.convert.eagle.reference computes what MNN's exported EAGLE-3 head computes: the cache, the aux layers, d2t
and the head folder's checks in torch, then the real llmexport export of an 8-layer Qwen3 with a random head,
run with MNN.nn, against the reference at llmexport's rope theta (10000)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from packager.convert.eagle.reference import aux_hidden_states, aux_layers, eagle_decode, greedy, load_head
from packager.errors import InvalidCheckpointConfig
from tests.models import build_eagle_head, build_qwen3, llmexport_raw

LLMEXPORT_THETA = 10000.0


@pytest.fixture(scope="session")
def target8(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_qwen3(tmp_path_factory.mktemp("eagle-target") / "qwen3-8l", layers=8, seed=5)


@pytest.fixture(scope="session")
def head_folder(target8: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_eagle_head(target8, tmp_path_factory.mktemp("eagle-head") / "head", seed=6)


@pytest.fixture(scope="session")
def target_model(target8: Path):  # type: ignore[no-untyped-def]
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(target8, dtype=torch.float32).eval()


def _inputs(target_model, ids: list[int], next_token: int):  # type: ignore[no-untyped-def]
    """What the engine's prefill gives the head: fc's input (the aux states at each position) and the
    embeddings of the tokens one position later."""
    aux = aux_hidden_states(target_model, ids)
    with torch.no_grad():
        embeds = target_model.get_input_embeddings()(torch.tensor(ids[1:] + [next_token]))
    return aux, embeds


@pytest.mark.slow
def test_prefill_then_cached_steps_equal_one_forward_over_all_positions(head_folder: Path, target_model) -> None:  # type: ignore[no-untyped-def]
    head = load_head(head_folder)
    ids = list(range(2000, 2024))
    aux, embeds = _inputs(target_model, ids, 7)
    with torch.no_grad():
        hidden = head.fc(aux)
        full_lp, full_h, (full_k, _) = head(embeds, hidden, torch.arange(24))
        lp1, h1, past = head(embeds[:17], hidden[:17], torch.arange(17))
        lp2, h2, past = head(embeds[17:20], hidden[17:20], torch.arange(17, 20), past)
        lp3, h3, past = head(embeds[20:], hidden[20:], torch.arange(20, 24), past)
    torch.testing.assert_close(torch.cat([lp1, lp2, lp3]), full_lp, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(torch.cat([h1, h2, h3]), full_h, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(past[0], full_k, atol=1e-5, rtol=1e-5)
    assert full_lp.shape == (24, head.config.draft_vocab_size)
    torch.testing.assert_close(full_lp.exp().sum(-1), torch.ones(24))


def test_a_later_position_changes_nothing_before_it(head_folder: Path, target_model) -> None:  # type: ignore[no-untyped-def]
    head = load_head(head_folder)
    aux, embeds = _inputs(target_model, list(range(3000, 3012)), 9)
    with torch.no_grad():
        hidden = head.fc(aux)
        lp, _, _ = head(embeds, hidden, torch.arange(12))
        changed = embeds.clone()
        changed[-1] += 1.0
        lp_changed, _, _ = head(changed, hidden, torch.arange(12))
    torch.testing.assert_close(lp_changed[:-1], lp[:-1])
    assert (lp_changed[-1] - lp[-1]).abs().max() > 1e-3


@pytest.mark.converter
def test_theta_is_the_heads_rope_theta_unless_given(head_folder: Path, target_model) -> None:  # type: ignore[no-untyped-def]
    assert load_head(head_folder).theta == 1_000_000.0
    own, llmexport = load_head(head_folder), load_head(head_folder, theta=LLMEXPORT_THETA)
    aux, embeds = _inputs(target_model, list(range(4000, 4016)), 3)
    with torch.no_grad():
        a, _, _ = own(embeds, own.fc(aux), torch.arange(16))
        b, _, _ = llmexport(embeds, llmexport.fc(aux), torch.arange(16))
    torch.testing.assert_close(a[0], b[0])  # position 0 is not rotated, whatever theta is
    assert (a[1:] - b[1:]).abs().max() > 1e-2


def test_aux_hidden_states_are_the_inputs_of_layers_2_half_and_n_minus_3(target_model) -> None:  # type: ignore[no-untyped-def]
    assert aux_layers(8) == [2, 4, 5] and aux_layers(7) == [2, 3, 4] and aux_layers(36) == [2, 18, 33]
    with pytest.raises(InvalidCheckpointConfig):
        aux_layers(6)
    seen: dict[int, torch.Tensor] = {}
    hooks = [
        layer.register_forward_pre_hook(
            lambda _m, args, kwargs, i=i: seen.__setitem__(i, kwargs.get("hidden_states", args[0] if args else None)),
            with_kwargs=True,
        )
        for i, layer in enumerate(target_model.model.layers)
    ]
    ids = [151644, 872, 198, 9707, 11, 1879, 0]
    try:
        aux = aux_hidden_states(target_model, ids)
    finally:
        for hook in hooks:
            hook.remove()
    expected = torch.cat([seen[2][0], seen[4][0], seen[5][0]], dim=-1)
    assert aux.shape == (7, 3 * 256)
    torch.testing.assert_close(aux, expected)
    assert not torch.allclose(aux, torch.cat([seen[1][0], seen[4][0], seen[5][0]], dim=-1))


def test_d2t_maps_the_draft_vocabulary_onto_its_target_ids(head_folder: Path) -> None:
    head = load_head(head_folder)
    t2d = load_file(str(head_folder / "model.safetensors"))["t2d"]
    mapped = head.to_target(torch.arange(head.config.draft_vocab_size))
    assert mapped.tolist() == torch.nonzero(t2d).flatten().tolist()
    assert int(mapped.max()) < head.config.vocab_size and len(set(mapped.tolist())) == head.config.draft_vocab_size


def test_a_head_folder_without_a_tensor_or_with_a_wrong_shape_is_refused(head_folder: Path, tmp_path: Path) -> None:
    state = load_file(str(head_folder / "model.safetensors"))
    for name, edit in (
        ("missing", lambda s: s.pop("midlayer.hidden_norm.weight")),
        ("shape", lambda s: s.__setitem__("lm_head.weight", s["lm_head.weight"][:-1])),
    ):
        folder = tmp_path / name
        folder.mkdir()
        shutil.copy(head_folder / "config.json", folder / "config.json")
        edited = dict(state)
        edit(edited)
        save_file({k: v.contiguous() for k, v in edited.items()}, str(folder / "model.safetensors"))
        with pytest.raises(InvalidCheckpointConfig, match="hidden_norm" if name == "missing" else "lm_head"):
            load_head(folder)


@pytest.mark.slow
def test_eagle_decoding_emits_the_targets_greedy_tokens(head_folder: Path, target_model) -> None:  # type: ignore[no-untyped-def]
    head = load_head(head_folder)
    prompt = [151644, 872, 198, 3838, 374, 13027, 30]
    decoded = eagle_decode(target_model, head, prompt, 24, depth=3)
    assert decoded.tokens[:24] == greedy(target_model, prompt, 24)
    assert sum(decoded.accepted) + 1 == len(decoded.tokens) and all(1 <= a <= 4 for a in decoded.accepted)


# ---------------------------------------------------------------- the exported graphs in MNN


@pytest.fixture(scope="session")
def exported(target8: Path, head_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return llmexport_raw(target8, tmp_path_factory.mktemp("eagle-export") / "raw", bits=8, eagle=head_folder)


@pytest.mark.converter
@pytest.mark.slow
def test_llmexport_writes_the_eagle_graphs_and_config(exported: Path, head_folder: Path) -> None:
    import json

    from packager.runtime.eagle_head import MNNHead

    config = json.loads((exported / "config.json").read_text(encoding="utf-8"))
    assert config["speculative_type"] == "eagle" and config["hidden_states"] is True
    assert MNNHead(exported).d2t.tolist() == load_head(head_folder).d2t.tolist()


@pytest.mark.converter
@pytest.mark.slow
def test_the_exported_head_computes_the_reference_at_llmexports_theta(
    exported: Path, head_folder: Path, target_model
) -> None:  # type: ignore[no-untyped-def]
    from packager.runtime.eagle_head import MNNHead

    mnn = MNNHead(exported)
    ids = [151644, 872, 198] + list(range(5000, 5061))
    aux, embeds = _inputs(target_model, ids, 11)
    positions = np.arange(len(ids))
    fc = mnn.fc(aux.numpy())
    logprobs, out_hidden = mnn.forward(embeds.numpy(), fc, positions)
    errors = {}
    for theta in (LLMEXPORT_THETA, 1_000_000.0):
        head = load_head(head_folder, theta=theta)
        with torch.no_grad():
            np.testing.assert_allclose(fc, head.fc(aux).numpy(), atol=5e-3)  # 8-bit weights
            ref_lp, ref_h, _ = head(embeds, torch.from_numpy(fc), torch.from_numpy(positions))
        errors[theta] = (np.abs(logprobs - ref_lp.numpy()).mean(), np.abs(out_hidden - ref_h.numpy()).max())
    assert errors[LLMEXPORT_THETA][1] < 0.03
    # the 8-bit weights' error is small next to what the other theta changes
    assert errors[LLMEXPORT_THETA][0] * 3 < errors[1_000_000.0][0]


@pytest.mark.converter
@pytest.mark.slow
def test_the_exported_head_follows_the_engines_draft_tree_mask_and_positions(
    exported: Path, head_folder: Path, target_model
) -> None:  # type: ignore[no-untyped-def]
    """A deeper draft step as the engine runs it with eagle_topk 2: two sibling nodes, each its own out_hidden with
    a drafted token, both one position further, each attending over the prefill and itself only. (MNN from Python
    keeps no KV cache between calls, so the step goes in one call with the prefill, under the tree's mask.)"""
    from packager.runtime.eagle_head import LOWEST, MNNHead, causal_mask

    mnn = MNNHead(exported)
    head = load_head(head_folder, theta=LLMEXPORT_THETA)
    ids = [151644, 872, 198] + list(range(6000, 6021))
    aux, embeds = _inputs(target_model, ids, 13)
    length = len(ids)
    fc = mnn.fc(aux.numpy())
    logprobs, out_hidden = mnn.forward(embeds.numpy(), fc, np.arange(length), last_only=True)
    top2 = mnn.to_target(np.argsort(-logprobs[0])[:2])
    step_embeds = target_model.get_input_embeddings()(torch.from_numpy(top2)).detach().numpy()
    mask = np.full((length + 2, length + 2), LOWEST, dtype=np.float32)
    mask[:length, :length] = causal_mask(length)
    mask[length:, :length] = 0.0
    mask[length, length] = mask[length + 1, length + 1] = 0.0
    positions = np.concatenate([np.arange(length), [length, length]])
    step_lp, step_h = mnn.forward(
        np.concatenate([embeds.numpy(), step_embeds]), np.concatenate([fc, out_hidden, out_hidden]), positions, mask
    )
    with torch.no_grad():
        _, ref_h, past = head(embeds, torch.from_numpy(fc), torch.arange(length))
        ref_lp, ref_step_h, _ = head(
            torch.from_numpy(step_embeds)[:, None],
            ref_h[-1:].expand(2, 1, -1),
            torch.tensor([[length], [length]]),
            (past[0].expand(2, -1, -1, -1), past[1].expand(2, -1, -1, -1)),
        )
    np.testing.assert_allclose(out_hidden[0], ref_h[-1].numpy(), atol=0.03)
    # 8-bit weights: the errors are ~0.013 and ~0.0036; a sibling seeing the other (a causal mask) is ~4x that
    np.testing.assert_allclose(step_h[-2:], ref_step_h[:, 0].numpy(), atol=0.025)
    assert np.abs(step_lp[-2:] - ref_lp[:, 0].numpy()).mean() < 0.006


def test_the_heads_activations_are_transformers_own() -> None:
    import torch
    from transformers.activations import ACT2FN

    from packager.convert.eagle.reference import _ACTIVATIONS
    from packager.convert.inspect.eagle_head import ACTIVATIONS

    x = torch.linspace(-8, 8, 20001)
    for name in ACTIVATIONS:  # every activation a head may name is computed as transformers computes it
        assert torch.allclose(_ACTIVATIONS[name](x), ACT2FN[name](x), atol=1e-6, rtol=0), name
