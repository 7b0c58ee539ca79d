"""A trained EAGLE-3 fixture: an 8-layer Qwen3 target (untied embeddings as Qwen3-8B, so its bundle ships
embeddings_bf16.bin; rope theta 1e6 as Qwen3) trained on tests/trained.py's small corpus, and an EAGLE-3 head in
the SpecForge layout trained on the target's own hidden states and greedy continuations.

EAGLE-3 reads the inputs of layers 2, N//2 and N-3 (N >= 7); the small teacher has 2. Trained from scratch, 8
layers learn far slower than 2 (measured: loss 4.1 after the 500 steps that bring 2 layers to 2.9), so the target
is grown: a 2-layer core of the small teacher's shape and recipe becomes layers 0 and 4 of 8 whose other six start
as identities (attention and MLP outputs zero), and the whole trains on. No small fixture is built first.

The head computes what packager.convert.eagle.reference says MNN 3.6.1 computes: at position p, fc(aux_p) and the
embedding of token p+1; it is taught the target's argmax at p+1 (what the engine verifies it against) over the
draft vocabulary (the ids the corpus uses). Its deeper draft steps train as EAGLE-3's training-time test: step k
at p takes step k-1's out_hidden and the token the target would have put at p+k, one position further, and
attends to step 1's keys up to p and its own earlier steps at p (the chain the engine drafts with eagle_topk 1).

    python -m tests.trained_eagle [--out DIR]   # prints the fixture's folder

Cached as tests/trained.py's fixtures (same root, atomic rename), keyed by the recipe, BUILDER, the corpus and the
library versions.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from tests import trained
from tests.fixturecache import fixture_main
from tests.trained import EOT, IM_END, VOCAB, Recipe, Shape, Vocab

# Part of the cache key: bump it whenever the code changes what the recipe produces.
BUILDER = 1
Log = Callable[[str], None]


@dataclass(frozen=True)
class EagleRecipe:
    name: str
    target: Recipe  # the corpus; the target's shape (`teacher`) and the core's training (`teacher_steps`, `lr`)
    core_places: tuple[int, ...]  # where the core's layers go in the target; the others start as identities
    grow_steps: int  # training of the grown target
    grow_lr: float
    samples: int  # greedy continuations the head learns from, beside the training text
    sample_tokens: int
    head_intermediate: int
    head_steps: int
    head_batch: int  # windows of target.seq_len + depth tokens
    head_lr: float
    depth: int  # draft steps trained together (MNN's default eagle_depth is 3)
    step_decay: float = 0.8  # weight of draft step k's loss: decay^(k-1), as EAGLE-3 weighs them
    rope_theta: float = 1e6  # Qwen3's (the default Qwen3Config has 10000); the head's is the target's

    def target_config(self) -> dict[str, Any]:
        return {"tie": False, "rope_parameters": {"rope_type": "default", "rope_theta": self.rope_theta}}


RECIPE = EagleRecipe(
    "eagle-small",
    target=replace(trained.RECIPES["small"], teacher=Shape(256, 8, 2, 1, 768)),
    core_places=(0, 4),
    grow_steps=300,
    grow_lr=3e-3,
    samples=64,
    sample_tokens=96,
    head_intermediate=512,
    head_steps=450,
    head_batch=4,
    head_lr=3e-3,
    depth=3,
)


# The trained fixtures' workload in MNN: questions from the training text (the target learned their answers) and
# ones it never saw.
QUESTIONS = (
    "Explain assert in Python.",
    "Explain assignment in Python.",
    "Explain atom literals in Python.",
    "What is the Python module __future__ for?",
    "Explain the with statement in Python.",
    "What is the Python module abc for?",
    "Explain lambda in Python.",
)


@dataclass(frozen=True)
class EagleFixture:
    root: Path
    target: Path  # checkpoint (bfloat16, untied)
    head: Path  # EAGLE-3 head folder (SpecForge layout)
    metrics: dict[str, Any]


def _train_target(recipe: EagleRecipe, vocab: Vocab, train: list[list[int]], log: Log):  # type: ignore[no-untyped-def]
    """The core, trained as the small teacher is; then the grown target, trained on. Returns it and its loss."""
    import torch

    shape, seed = recipe.target.teacher, recipe.target.seed
    core = trained._model(
        replace(shape, layers=len(recipe.core_places)), seed, len(vocab.used), **recipe.target_config()
    )
    trained._pretrain(core, vocab, train, recipe.target, recipe.target.teacher_steps, log)
    target = trained._model(shape, seed + 1, len(vocab.used), **recipe.target_config())
    state = target.state_dict()
    for name, value in core.state_dict().items():
        parts = name.split(".")
        if name.startswith("model.layers."):
            parts[2] = str(recipe.core_places[int(parts[2])])
        state[".".join(parts)] = value
    for layer in set(range(shape.layers)) - set(recipe.core_places):
        for name in ("self_attn.o_proj.weight", "mlp.down_proj.weight"):  # a residual block adding nothing
            state[f"model.layers.{layer}.{name}"] = torch.zeros_like(state[f"model.layers.{layer}.{name}"])
    target.load_state_dict(state)
    log(f"target: grown to {shape.layers} layers, training on")
    loss = trained._pretrain(target, vocab, train, replace(recipe.target, lr=recipe.grow_lr), recipe.grow_steps, log)
    return target, loss


def _greedy_samples(target, vocab: Vocab, corpus: trained.Corpus, recipe: EagleRecipe) -> list[list[int]]:  # type: ignore[no-untyped-def]
    """Prompts (chat questions, raw-text prefixes) with the target's greedy continuation up to a stop id, in local
    ids. One left-padded batch: ~13x faster than one prompt at a time, and the same tokens (measured)."""
    import torch

    stops = vocab.to_local([IM_END, EOT])
    prompts = trained.sample_prompts(vocab, corpus, recipe.samples, recipe.target.seed + 31)
    longest = max(map(len, prompts))
    ids = torch.tensor([[stops[1]] * (longest - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (longest - len(p)) + [1] * len(p) for p in prompts])
    with torch.no_grad():
        out = target.generate(
            ids,
            attention_mask=mask,
            max_new_tokens=recipe.sample_tokens,
            do_sample=False,
            pad_token_id=stops[1],
            eos_token_id=stops,
        ).tolist()
    ends = [next((i + 1 for i, t in enumerate(row[longest:]) if t in stops), len(row) - longest) for row in out]
    return [prompt + row[longest : longest + end] for prompt, row, end in zip(prompts, out, ends)]


def _target_states(target, stream: list[int], length: int):  # type: ignore[no-untyped-def]
    """The stream cut into windows of `length`: their ids, the target's aux states (inputs of layers 2, N//2 and
    N-3, concatenated) and its argmax at every position."""
    import torch

    from packager.convert.eagle.reference import aux_layers

    ids = torch.tensor(stream[: len(stream) // length * length]).view(-1, length)
    layers, aux, argmax = aux_layers(target.config.num_hidden_layers), [], []
    with torch.no_grad():
        for out in (target(input_ids=chunk, output_hidden_states=True) for chunk in ids.split(16)):
            aux.append(torch.cat([out.hidden_states[i] for i in layers], dim=-1))
            argmax.append(out.logits.argmax(-1))
    return ids, torch.cat(aux), torch.cat(argmax)


def _new_head(target, vocab: Vocab, recipe: EagleRecipe):  # type: ignore[no-untyped-def]
    """A head in the real vocabulary's terms; d2t stays zero (draft id = local id) until it is saved. Its
    lm_head starts from the target's (restricted to the draft vocabulary), as EAGLE heads commonly do."""
    import torch

    from packager.convert.eagle.reference import EagleHead, HeadConfig

    c = target.config
    config = HeadConfig(
        hidden_size=c.hidden_size,
        target_hidden_size=c.hidden_size,
        vocab_size=VOCAB,
        draft_vocab_size=len(vocab.used),
        intermediate_size=recipe.head_intermediate,
        rms_norm_eps=c.rms_norm_eps,
        hidden_act="silu",
        num_attention_heads=c.num_attention_heads,
        num_key_value_heads=c.num_key_value_heads,
        head_dim=c.head_dim,
        rope_theta=float(c.rope_parameters["rope_theta"]),
    )
    torch.manual_seed(recipe.target.seed + 41)
    head = EagleHead(config)
    with torch.no_grad():
        head.lm_head.weight.copy_(target.get_output_embeddings().weight)
    return head


def _unrolled(head, embed, ids, aux, argmax, depth: int):  # type: ignore[no-untyped-def]
    """Per draft step k (1..depth): (log-probabilities [B, n, draft], labels [B, n], valid [B, n]) for the
    positions p < n = window - depth. Step k at p is valid while the window follows the target's argmax
    (token p+j+1 is the target's argmax at p+j for 1 <= j < k), so its label is what a right chain is checked
    against."""
    import torch

    n = ids.shape[1] - depth
    hidden, past = head.fc(aux[:, :n]), None
    valid = torch.ones_like(ids[:, :n], dtype=torch.bool)
    tril, eye = torch.ones(n, n, dtype=torch.bool).tril(), torch.eye(n, dtype=torch.bool)
    steps = []
    for k in range(1, depth + 1):
        if k > 1:
            valid = valid & (ids[:, k : k + n] == argmax[:, k - 1 : k - 1 + n])
        mask = torch.cat([tril] + [eye] * (k - 1), dim=1)
        with torch.no_grad():
            embeds = embed(ids[:, k : k + n])
        logprobs, hidden, past = head(embeds, hidden, torch.arange(n).expand(len(ids), n) + k - 1, past, mask)
        steps.append((logprobs, argmax[:, k : k + n], valid))
    return steps


def _train_head(head, target, data, recipe: EagleRecipe, log: Log) -> list[float]:  # type: ignore[no-untyped-def]
    """Cross-entropy to the target's argmax, every draft step; returns each step's accuracy in the last 10%."""
    import math

    import torch

    ids, aux, argmax = data
    embed = target.get_input_embeddings()
    optimizer = torch.optim.AdamW(head.parameters(), lr=recipe.head_lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / 15) * 0.5 * (1 + math.cos(math.pi * s / recipe.head_steps))
    )
    generator = torch.Generator().manual_seed(recipe.target.seed + 42)
    right, seen = [0.0] * recipe.depth, [0.0] * recipe.depth
    head.train()
    for step in range(recipe.head_steps):
        pick = torch.randint(0, len(ids), (recipe.head_batch,), generator=generator)
        loss = torch.zeros(())
        for k, (logprobs, labels, valid) in enumerate(
            _unrolled(head, embed, ids[pick], aux[pick], argmax[pick], recipe.depth)
        ):
            picked = logprobs.gather(-1, labels[..., None])[..., 0][valid]  # none valid: no term, not NaN
            loss = loss - recipe.step_decay**k * picked.sum() / max(1, picked.numel())
            if step >= recipe.head_steps * 0.9:
                right[k] += float((logprobs.argmax(-1) == labels)[valid].sum())
                seen[k] += float(valid.sum())
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        if step % 50 == 0 or step == recipe.head_steps - 1:
            log(f"  head step {step + 1}/{recipe.head_steps} loss {loss.item():.3f}")
    head.eval()
    return [r / max(1.0, s) for r, s in zip(right, seen)]


def _torch_acceptance(target, head, vocab: Vocab, corpus: trained.Corpus, depth: int) -> float:  # type: ignore[no-untyped-def]
    """Mean tokens per verification step of the reference EAGLE decoding over the chat prompts (local ids)."""
    from packager.convert.eagle.reference import eagle_decode

    stops = tuple(vocab.to_local([IM_END, EOT]))
    runs = [eagle_decode(target, head, vocab.to_local(p), 48, depth, stops).accepted for p in corpus.chat_prompts]
    return sum(map(sum, runs)) / max(1, sum(map(len, runs)))


def build(recipe: EagleRecipe, out: Path, log: Log = print) -> dict[str, Any]:
    """Train the target and the head; write target/, head/ and fixture.json."""
    import torch

    torch.set_num_threads(1)  # OpenMP over 2 cores shared with other work runs several times slower than 1 thread
    started = time.perf_counter()
    corpus = trained.build_corpus(recipe.target)
    vocab = Vocab(corpus.used)
    log(f"target: training a {len(recipe.core_places)}-layer core ({len(corpus.used)} distinct ids)")
    target, loss = _train_target(recipe, vocab, [vocab.to_local(i) for i in corpus.train], log)
    target = target.to(torch.bfloat16).to(torch.float32).eval()  # the stored weights from here on
    metrics = {
        "recipe": asdict(recipe),
        "corpus_digest": corpus.digest,
        "distinct_ids": len(corpus.used),
        "target_final_loss": loss,
        "target_seconds": round(time.perf_counter() - started, 1),
    }
    log("target: greedy continuations")
    samples = _greedy_samples(target, vocab, corpus, recipe)
    stream = [t for ids in samples + [vocab.to_local(i) for i in corpus.train] for t in ids]
    data = _target_states(target, stream, recipe.target.seq_len + recipe.depth)
    log(f"head: training on {data[0].numel()} positions")
    head = _new_head(target, vocab, recipe)
    metrics["head_accuracy_per_step"] = _train_head(head, target, data, recipe, log)
    head = head.to(torch.bfloat16).to(torch.float32)  # as saved
    metrics["torch_accepted_per_step"] = _torch_acceptance(target, head, vocab, corpus, recipe.depth)
    with trained.staged(out, "fixture.json", log) as tmp:
        _save(recipe, vocab, target, head, tmp)
        full = trained._model(recipe.target.teacher, 0, **recipe.target_config())
        full.load_state_dict(trained._state(tmp / "target"))
        metrics["target_held_out_top1"] = trained.held_out_accuracy(full, corpus.held_out, recipe.target.seq_len)
        metrics["build_seconds"] = round(time.perf_counter() - started, 1)
        log(json.dumps({k: v for k, v in metrics.items() if k != "recipe"}))
        (tmp / "fixture.json").write_text(json.dumps(metrics, indent=2) + "\n", encoding="utf-8")
    return metrics


def _save(recipe: EagleRecipe, vocab: Vocab, target, head, out: Path) -> None:  # type: ignore[no-untyped-def]
    """The target in the real vocabulary (bfloat16 checkpoint) and the head, its d2t mapping the draft ids."""
    import torch

    from tests.models import save_eagle_head

    trained._save(
        vocab.expand(target, recipe.target.teacher, recipe.target.seed, **recipe.target_config()), out / "target"
    )
    with torch.no_grad():
        head.d2t.copy_(vocab.used - torch.arange(len(vocab.used)))
    save_eagle_head(head, out / "head", dtype="bfloat16", draft_ids=vocab.used)


def fixture(root: Path | None = None, log: Log = lambda _: None, recipe: EagleRecipe = RECIPE) -> EagleFixture:
    """The cached fixture, built first if missing."""
    root = root or trained.cache_root()
    root.mkdir(parents=True, exist_ok=True)
    out = root / trained._key(recipe, trained.build_corpus(recipe.target).digest, BUILDER)
    trained.built_once(out, "fixture.json", lambda: build(recipe, out, log))
    metrics = json.loads((out / "fixture.json").read_text(encoding="utf-8"))
    return EagleFixture(root=out, target=out / "target", head=out / "head", metrics=metrics)


def main(argv: list[str] | None = None) -> None:
    fixture_main(__doc__, fixture, argv)


if __name__ == "__main__":
    main()
