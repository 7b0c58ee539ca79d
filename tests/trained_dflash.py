"""A trained DFlash fixture: a small draft in z-lab's DFlashDraftModel layout, trained against the trained EAGLE-3
fixture's 8-layer Qwen3 target (tests/trained_eagle.py), on CPU in minutes.

The objective is DFlash's: at an anchor position s, the draft sees the context features (the target's hidden states
after the layers of target_layer_ids at positions 0..s-1, through fc and hidden_norm) and the block
[token s, mask, ..., mask] at positions s..s+B-1 (the target's embeddings, as MNN 3.6.1's DFlashGeneration feeds
it), and learns the block's tokens: block position k is taught the target's argmax at s+k-1, what the engine
verifies it against, valid while the tokens s+1..s+k-1 follow the target's argmax (the chain a right draft makes).
Many anchors of one window train together: each block attends to the context before its anchor and to itself.

    python -m tests.trained_dflash [--out DIR]   # prints the fixture's folder

Cached beside the EAGLE fixture (same root, atomic rename), keyed by the recipe, BUILDER, the EAGLE fixture's own
folder and the library versions.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tests import trained, trained_eagle
from tests.dflashdrafts import MASK_ID, draft_config
from tests.fixturecache import fixture_main
from tests.trained import VOCAB, Vocab

# Part of the cache key: bump it whenever the code changes what the recipe produces.
BUILDER = 1
Log = Callable[[str], None]


@dataclass(frozen=True)
class DFlashRecipe:
    name: str = "dflash-small"
    layer_ids: tuple[int, ...] = (1, 4, 7)  # outputs of these target layers are the context features
    block_size: int = 4
    layers: int = 1
    samples: int = 96  # greedy continuations of the target the draft learns from, beside the training text
    sample_tokens: int = 96
    window: int = 64
    anchors: int = 24  # blocks trained per window
    steps: int = 1500
    batch: int = 4
    lr: float = 3e-3
    decay: float = 0.8  # weight of block position k's loss: decay^(k-1)
    seed: int = 7


RECIPE = DFlashRecipe()


@dataclass(frozen=True)
class DFlashFixture:
    root: Path
    target: Path  # the EAGLE fixture's target checkpoint
    draft: Path  # the DFlash draft (z-lab layout)
    metrics: dict[str, Any]


def _draft_module(c: Any, recipe: DFlashRecipe):  # type: ignore[no-untyped-def]
    """A trainable draft whose state_dict carries z-lab's tensor names."""
    import torch
    from torch import nn
    from transformers.models.qwen3.modeling_qwen3 import Qwen3MLP, Qwen3RMSNorm

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            h, d = c.hidden_size, c.head_dim
            self.q_proj = nn.Linear(h, c.num_attention_heads * d, bias=False)
            self.k_proj = nn.Linear(h, c.num_key_value_heads * d, bias=False)
            self.v_proj = nn.Linear(h, c.num_key_value_heads * d, bias=False)
            self.o_proj = nn.Linear(c.num_attention_heads * d, h, bias=False)
            self.q_norm = Qwen3RMSNorm(d, eps=c.rms_norm_eps)
            self.k_norm = Qwen3RMSNorm(d, eps=c.rms_norm_eps)

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.self_attn = Attention()
            self.mlp = Qwen3MLP(c)
            self.input_layernorm = Qwen3RMSNorm(c.hidden_size, eps=c.rms_norm_eps)
            self.post_attention_layernorm = Qwen3RMSNorm(c.hidden_size, eps=c.rms_norm_eps)

    class Draft(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(len(recipe.layer_ids) * c.hidden_size, c.hidden_size, bias=False)
            self.hidden_norm = Qwen3RMSNorm(c.hidden_size, eps=c.rms_norm_eps)
            self.layers = nn.ModuleList([Layer() for _ in range(recipe.layers)])
            self.norm = Qwen3RMSNorm(c.hidden_size, eps=c.rms_norm_eps)

    torch.manual_seed(recipe.seed)
    return Draft()


def _rope(positions, head_dim: int, theta: float):  # type: ignore[no-untyped-def]
    import torch

    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    freqs = positions[..., None].float() * inv
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos()[:, None], emb.sin()[:, None]  # [W, 1, n, head_dim]


def _rotate(x, cos, sin):  # type: ignore[no-untyped-def]
    import torch

    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def draft_hidden(draft, c: Any, features, anchors, block, theta: float):  # type: ignore[no-untyped-def]
    """The blocks' states before lm_head. features [W, L, k*hidden]; anchors [W, m]; block [W, m, B, hidden] (the
    embeddings of each block's tokens). Block j attends to context positions before its anchor and to itself."""
    import torch

    w, length = features.shape[:2]
    m, b = block.shape[1], block.shape[2]
    heads, kv, d = c.num_attention_heads, c.num_key_value_heads, c.head_dim
    ctx = draft.hidden_norm(draft.fc(features))
    x = block.reshape(w, m * b, -1)
    q_pos = (anchors[..., None] + torch.arange(b)).reshape(w, m * b)
    k_pos = torch.cat([torch.arange(length).expand(w, length), q_pos], dim=1)
    see_context = torch.arange(length)[None, None, :] < anchors.repeat_interleave(b, dim=1)[..., None]
    own = torch.arange(m).repeat_interleave(b)
    see_block = (own[:, None] == own[None, :]).expand(w, m * b, m * b)
    mask = torch.where(torch.cat([see_context, see_block], dim=-1), 0.0, float("-inf"))[:, None]
    q_cos, q_sin = _rope(q_pos, d, theta)
    k_cos, k_sin = _rope(k_pos, d, theta)
    for layer in draft.layers:
        a = layer.self_attn
        normed = layer.input_layernorm(x)
        both = torch.cat([ctx, normed], dim=1)
        q = a.q_norm(a.q_proj(normed).view(w, m * b, heads, d)).transpose(1, 2)
        k = a.k_norm(a.k_proj(both).view(w, -1, kv, d)).transpose(1, 2)
        v = a.v_proj(both).view(w, -1, kv, d).transpose(1, 2)
        q, k = _rotate(q, q_cos, q_sin), _rotate(k, k_cos, k_sin)
        k, v = k.repeat_interleave(heads // kv, dim=1), v.repeat_interleave(heads // kv, dim=1)
        weights = torch.softmax(q @ k.transpose(-2, -1) * d**-0.5 + mask, dim=-1)
        x = x + a.o_proj((weights @ v).transpose(1, 2).reshape(w, m * b, heads * d))
        x = x + layer.mlp(layer.post_attention_layernorm(x))
    return draft.norm(x).reshape(w, m, b, -1)


def _local_target(full, vocab: Vocab):  # type: ignore[no-untyped-def]
    """The target restricted to the corpus's ids (the same network; training and sampling are cheap in it)."""
    recipe = trained_eagle.RECIPE
    local = trained._model(recipe.target.teacher, 0, len(vocab.used), **recipe.target_config())
    state = dict(full.state_dict())
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        state[name] = state[name][vocab.used]
    local.load_state_dict(state)
    return local.eval()


def _states(target, stream: list[int], length: int, layer_ids: tuple[int, ...]):  # type: ignore[no-untyped-def]
    """Windows of `length` tokens (local ids), their context features and the target's argmax at each position."""
    import torch

    ids = torch.tensor(stream[: len(stream) // length * length]).view(-1, length)
    features, argmax = [], []
    with torch.no_grad():
        for out in (target(input_ids=chunk, output_hidden_states=True) for chunk in ids.split(16)):
            features.append(torch.cat([out.hidden_states[i + 1] for i in layer_ids], dim=-1))
            argmax.append(out.logits.argmax(-1))
    return ids, torch.cat(features), torch.cat(argmax)


def _targets(ids, argmax, anchors, b: int):  # type: ignore[no-untyped-def]
    """Labels [W, m, b-1] (the target's argmax at s+k-1 for block position k) and their validity."""
    import torch

    offsets = anchors[..., None] + torch.arange(b - 1)  # s+k-1 for k = 1..b-1
    labels = argmax.gather(1, offsets.flatten(1)).view(offsets.shape)
    follows = ids.gather(1, (offsets + 1).flatten(1)).view(offsets.shape) == labels  # token s+k is the argmax
    valid = torch.ones_like(follows)
    valid[..., 1:] = torch.cumprod(follows[..., :-1].int(), dim=-1).bool()
    return labels, valid


def _train(draft, c: Any, data, embed, mask_row, lm_head, vocab: Vocab, recipe: DFlashRecipe, log: Log) -> float:  # type: ignore[no-untyped-def]
    """Cross-entropy of each block position to the target's argmax (the full vocabulary's softmax, the unused ids
    as one bucket); returns the top-1 accuracy of block position 1 over the last 10% of steps."""
    import torch

    ids, features, argmax = data
    b, length = recipe.block_size, recipe.window
    optimizer = torch.optim.AdamW(draft.parameters(), lr=recipe.lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / 20) * 0.5 * (1 + math.cos(math.pi * s / recipe.steps))
    )
    generator = torch.Generator().manual_seed(recipe.seed + 1)
    weights = torch.tensor([recipe.decay**k for k in range(b - 1)])
    right = seen = 0.0
    theta = float(c.rope_parameters["rope_theta"])
    draft.train()
    for step in range(recipe.steps):
        pick = torch.randint(0, len(ids), (recipe.batch,), generator=generator)
        anchors = torch.randint(1, length - b + 1, (recipe.batch, recipe.anchors), generator=generator)
        w_ids = ids[pick]
        with torch.no_grad():
            first = embed(w_ids.gather(1, anchors))[:, :, None]
            block = torch.cat([first, mask_row.expand(*anchors.shape, b - 1, -1)], dim=2)
        hidden = draft_hidden(draft, c, features[pick], anchors, block, theta)[:, :, 1:]
        logprobs = trained._with_bucket(hidden @ lm_head.T, vocab)
        labels, valid = _targets(w_ids, argmax[pick], anchors, b)
        picked = logprobs.gather(-1, labels[..., None])[..., 0]
        loss = -((picked * valid * weights).sum() / (valid * weights).sum().clamp(min=1e-6))
        if step >= recipe.steps * 0.9:
            right += float((logprobs[..., 0, :].argmax(-1) == labels[..., 0]).sum())
            seen += float(labels[..., 0].numel())
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        if step % 50 == 0 or step == recipe.steps - 1:
            log(f"  draft step {step + 1}/{recipe.steps} loss {loss.item():.3f}")
    draft.eval()
    return right / max(1.0, seen)


def _torch_acceptance(target, draft, c: Any, embed, mask_row, corpus, vocab: Vocab, recipe: DFlashRecipe) -> float:  # type: ignore[no-untyped-def]
    """Tokens per step of greedy DFlash decoding in torch over the chat prompts (48 new tokens each): the target's
    greedy continuation, the draft's blocks along it, each step accepting the drafted tokens that match."""
    import torch

    from tests.trained import EOT, IM_END

    stops = vocab.to_local([IM_END, EOT])
    theta = float(c.rope_parameters["rope_theta"])
    tokens = steps = 0
    with torch.no_grad():
        for prompt in corpus.chat_prompts[:12]:
            local = vocab.to_local(prompt)
            out = target.generate(
                torch.tensor([local]), max_new_tokens=48, do_sample=False, eos_token_id=stops, pad_token_id=stops[1]
            )[0].tolist()
            states = target(input_ids=torch.tensor([out]), output_hidden_states=True)
            features = torch.cat([states.hidden_states[i + 1] for i in recipe.layer_ids], dim=-1)
            s = len(local)  # the first generated token is the prefill's; steps start after it
            while s < len(out) - 1:
                block = torch.cat(
                    [embed(torch.tensor([[out[s]]]))[:, None], mask_row.expand(1, 1, recipe.block_size - 1, -1)], 2
                )
                hidden = draft_hidden(draft, c, features[:, :s], torch.tensor([[s]]), block, theta)[0, 0, 1:]
                drafted = (hidden @ target.lm_head.weight.T).argmax(-1).tolist()
                accepted = 1
                for k, token in enumerate(drafted):
                    if s + 1 + k >= len(out) or token != out[s + 1 + k]:
                        break
                    accepted += 1
                tokens, steps, s = tokens + min(accepted, len(out) - 1 - s), steps + 1, s + accepted
    return tokens / max(1, steps)


def build(recipe: DFlashRecipe, eagle: trained_eagle.EagleFixture, out: Path, log: Log = print) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)  # as the EAGLE fixture: one thread is faster on 2 shared cores
    started = time.perf_counter()
    corpus = trained.build_corpus(trained_eagle.RECIPE.target)
    vocab = Vocab(corpus.used)
    full = trained._model(trained_eagle.RECIPE.target.teacher, 0, **trained_eagle.RECIPE.target_config())
    full.load_state_dict(trained._state(eagle.target))
    c = full.config
    target = _local_target(full.eval(), vocab)
    mask_row = full.get_input_embeddings().weight[MASK_ID].detach().clone()
    embed, lm_head = target.get_input_embeddings(), target.lm_head.weight.detach()
    log("dflash: greedy continuations of the target")
    samples = trained_eagle._greedy_samples(target, vocab, corpus, _sampling(recipe))
    stream = [t for ids in samples + [vocab.to_local(i) for i in corpus.train] for t in ids]
    data = _states(target, stream, recipe.window, recipe.layer_ids)
    log(f"dflash: training the draft on {data[0].numel()} positions")
    config = draft_config(
        hidden=c.hidden_size,
        heads=c.num_attention_heads,
        kv_heads=c.num_key_value_heads,
        head_dim=c.head_dim,
        intermediate=c.intermediate_size,
        layers=recipe.layers,
        target_layers=c.num_hidden_layers,
        layer_ids=list(recipe.layer_ids),
        block_size=recipe.block_size,
        rope_theta=float(c.rope_parameters["rope_theta"]),
    )
    draft = _draft_module(c, recipe)
    with torch.no_grad():  # the draft's layer starts as the target's last
        source = {
            k.removeprefix(f"model.layers.{c.num_hidden_layers - 1}."): v
            for k, v in full.state_dict().items()
            if k.startswith(f"model.layers.{c.num_hidden_layers - 1}.")
        }
        draft.layers[0].load_state_dict(source)
        draft.norm.weight.copy_(full.model.norm.weight)
    metrics: dict[str, Any] = {"recipe": asdict(recipe), "eagle_fixture": eagle.root.name}
    metrics["block1_accuracy"] = _train(draft, c, data, embed, mask_row, lm_head, vocab, recipe, log)
    draft = draft.to(torch.bfloat16).to(torch.float32)  # as saved
    metrics["torch_accepted_per_step"] = _torch_acceptance(target, draft, c, embed, mask_row, corpus, vocab, recipe)
    with trained.staged(out, "fixture.json", log) as tmp:
        from safetensors.torch import save_file

        (tmp / "draft").mkdir()
        (tmp / "draft" / "config.json").write_text(json.dumps({**config, "torch_dtype": "bfloat16"}, indent=2))
        save_file(
            {k: v.to(torch.bfloat16).contiguous() for k, v in draft.state_dict().items()},
            str(tmp / "draft" / "model.safetensors"),
        )
        metrics["build_seconds"] = round(time.perf_counter() - started, 1)
        log(json.dumps({k: v for k, v in metrics.items() if k != "recipe"}))
        (tmp / "fixture.json").write_text(json.dumps(metrics, indent=2) + "\n", encoding="utf-8")
    return metrics


def _sampling(recipe: DFlashRecipe) -> trained_eagle.EagleRecipe:
    from dataclasses import replace

    return replace(trained_eagle.RECIPE, samples=recipe.samples, sample_tokens=recipe.sample_tokens)


def fixture(root: Path | None = None, log: Log = lambda _: None, recipe: DFlashRecipe = RECIPE) -> DFlashFixture:
    """The cached fixture (the EAGLE fixture's target first), built first if missing."""
    eagle = trained_eagle.fixture(root, log)
    root = eagle.root.parent
    out = root / trained._key(recipe, eagle.root.name, BUILDER)
    trained.built_once(out, "fixture.json", lambda: build(recipe, eagle, out, log))
    metrics = json.loads((out / "fixture.json").read_text(encoding="utf-8"))
    return DFlashFixture(root=out, target=eagle.target, draft=out / "draft", metrics=metrics)


def main(argv: list[str] | None = None) -> None:
    fixture_main(__doc__, fixture, argv)


if __name__ == "__main__":
    main()
