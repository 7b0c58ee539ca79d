"""A trained miniature of the seed draft's recipe: a Qwen3-architecture teacher trained on text every machine has
(the Python standard library's documentation and source), and a smaller student KL-distilled from it with LoRA
r16/alpha32, 80% KL + 20% cross-entropy at temperature 1.5, on teacher-generated samples (prose, code, Q&A).

Random weights give flat logits, so nothing about quality (parity thresholds, acceptance, quantization choice) can
be measured on them; these models have sharp, learned distributions over the tokens the corpus uses.

Real parts throughout: the real Qwen3 tokenizer and vocabulary (151,936 ids), transformers models saved as
ordinary checkpoints in bfloat16, a peft LoRA adapter. To stay CPU-cheap the softmax is restricted to the tokens
the corpus uses; every other row of the tied embedding is frozen tiny (~1e-3), so its logit is ~0 and the rest of
the vocabulary enters the loss as one bucket term, log(unused) + 0, which keeps training close to the full softmax
the runtime computes.

    python -m tests.trained [--recipe full|small] [--out DIR]   # prints the fixture's folder

Built once per recipe, BUILDER version, corpus and library versions, and cached (atomic rename) under
$PACKAGER_FIXTURE_DIR, else ~/.cache/packager/trained-fixtures. `make fixture` builds the full one.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import xxhash

from tests.fixturecache import built_once, cache_root, staged
from tests.tokenizers import qwen3_tokenizer_dir

# Part of every cache key, with the recipe, the corpus and the library versions: bump it whenever the training
# code changes what a recipe produces.
BUILDER = 1
EOT, IM_END = 151643, 151645
VOCAB = 151936


@dataclass(frozen=True)
class Shape:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int


@dataclass(frozen=True)
class Recipe:
    name: str
    teacher: Shape
    student: Shape
    corpus_chars: int  # stdlib text used, in characters (docs first, then source)
    seq_len: int
    batch: int
    teacher_steps: int
    student_steps: int  # the student's own (short) pretraining: a weaker base, as Qwen3-0.6B is to 8B
    samples: int  # teacher-generated distillation samples
    sample_tokens: int
    distill_epochs: int
    lora_r: int = 16
    lora_alpha: int = 32
    kl_weight: float = 0.8  # the rest is cross-entropy on the sampled tokens
    temperature: float = 1.5
    lr: float = 5e-3
    lora_lr: float = 2e-3
    seed: int = 0


RECIPES = {
    "full": Recipe(
        "full",
        teacher=Shape(384, 2, 3, 1, 1024),
        student=Shape(256, 1, 2, 1, 512),
        corpus_chars=1_000_000,
        seq_len=64,
        batch=8,
        teacher_steps=600,
        student_steps=300,
        samples=192,
        sample_tokens=64,
        distill_epochs=3,
    ),
    "small": Recipe(
        "small",
        teacher=Shape(256, 2, 2, 1, 768),
        student=Shape(256, 1, 2, 1, 512),
        corpus_chars=60_000,
        seq_len=64,
        batch=4,
        teacher_steps=500,
        student_steps=100,
        samples=48,
        sample_tokens=40,
        distill_epochs=2,
    ),
}


@dataclass(frozen=True)
class Fixture:
    root: Path
    teacher: Path  # checkpoint
    student: Path  # the student's base checkpoint
    adapter: Path  # the distilled LoRA adapter (peft) on `student`
    draft: Path  # student + adapter merged, a checkpoint
    metrics: dict[str, Any]


# ---------------------------------------------------------------- corpus


def _stdlib_documents(limit: int) -> list[tuple[str, str, str]]:
    """(kind, title, text): the language reference's topics (pydoc_data), then stdlib modules' source."""
    import sysconfig
    from pydoc_data.topics import topics

    docs: list[tuple[str, str, str]] = []
    used = 0
    for name in sorted(topics):
        if used >= limit // 2:  # half documentation, half source
            break
        docs.append(("doc", name, topics[name]))
        used += len(topics[name])
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for path in sorted(stdlib.glob("*.py")):
        if used >= limit:
            break
        text = path.read_text(encoding="utf-8", errors="replace")[:20_000]
        docs.append(("code", path.stem, text))
        used += len(text)
    return docs


def _chat_pairs(docs: list[tuple[str, str, str]]) -> list[tuple[str, str]]:
    """Q&A turns built from the same text: a topic's opening paragraphs, a module's docstring."""
    import ast

    pairs = []
    for kind, title, text in docs:
        if kind == "doc":
            body = "\n\n".join(p for p in text.split("\n\n")[:3] if p.strip())
            pairs.append((f"Explain {title.replace('-', ' ')} in Python.", body[:1200]))
        else:
            try:
                doc = ast.get_docstring(ast.parse(text))
            except (SyntaxError, ValueError):
                doc = None
            if doc:
                pairs.append((f"What is the Python module {title} for?", doc[:1200]))
    return pairs


def _render_chat(tokenizer_dir: Path, question: str, answer: str | None) -> str:
    """The Qwen3 chat template with thinking off (as `pair` renders its prompts), plus the answer turn."""
    import jinja2

    config = json.loads((tokenizer_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
    template = jinja2.Environment(trim_blocks=True, lstrip_blocks=True).from_string(config["chat_template"])
    prompt = template.render(
        messages=[{"role": "user", "content": question}], add_generation_prompt=True, enable_thinking=False
    )
    return prompt if answer is None else prompt + answer + "<|im_end|>\n"


@dataclass
class Corpus:
    train: list[list[int]]
    held_out: list[list[int]]
    chat_prompts: list[list[int]]  # training questions, rendered up to the assistant's turn
    used: list[int]  # sorted global ids the corpus uses
    digest: str


def build_corpus(recipe: Recipe) -> Corpus:
    from tokenizers import Tokenizer

    tok_dir = qwen3_tokenizer_dir()
    tokenizer = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
    docs = _stdlib_documents(recipe.corpus_chars)
    pairs = _chat_pairs(docs)
    texts = [text for _, _, text in docs] + [_render_chat(tok_dir, q, a) for q, a in pairs]
    encoded = [ids + [EOT] for ids in (e.ids for e in tokenizer.encode_batch(texts, add_special_tokens=False))]
    train = [ids for i, ids in enumerate(encoded) if i % 20 != 7]
    held_out = [ids for i, ids in enumerate(encoded) if i % 20 == 7]
    prompts = [
        tokenizer.encode(_render_chat(tok_dir, q, None), add_special_tokens=False).ids
        for i, (q, _) in enumerate(pairs)
        if (len(docs) + i) % 20 != 7
    ]
    used = sorted({t for ids in encoded for t in ids} | {EOT, IM_END})
    digest = xxhash.xxh3_64_hexdigest(json.dumps(texts).encode())
    return Corpus(train, held_out, prompts, used, digest)


# ---------------------------------------------------------------- models and the restricted loss


def _model(shape: Shape, seed: int, vocab: int = VOCAB, tie: bool = True, **extra: Any):  # type: ignore[no-untyped-def]
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    config = Qwen3Config(
        vocab_size=vocab,
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        head_dim=128,
        tie_word_embeddings=tie,
        max_position_embeddings=4096,
        **({"bos_token_id": EOT, "eos_token_id": IM_END} if vocab == VOCAB else {}),
        **extra,
    )
    return Qwen3ForCausalLM(config)


class Vocab:
    """Training runs in the corpus's own id space (a model whose vocabulary is the used ids: cheap on a CPU);
    `expand` puts it back into the real 151,936-id model, every other row tiny (~1e-3, so its logit is ~0).
    The loss's softmax adds those rows as one bucket, log(unused) + 0: the full softmax the runtime computes."""

    def __init__(self, used: list[int]) -> None:
        import torch

        self.used = torch.tensor(used)
        self.local = torch.full((VOCAB,), -1, dtype=torch.long)
        self.local[self.used] = torch.arange(len(used))
        self.bucket = math.log(VOCAB - len(used))

    def to_local(self, ids: list[int]) -> list[int]:
        return self.local[ids].tolist()

    def to_global(self, ids: list[int]) -> list[int]:
        return self.used[ids].tolist()

    def log_probs(self, model, ids, temperature: float = 1.0):  # type: ignore[no-untyped-def]
        """log p over the used ids at temperature T (the bucket holds the rest), shape [B, L, used]."""
        return _with_bucket(model(input_ids=ids).logits / temperature, self)

    def expand(self, model, shape: Shape, seed: int, tie: bool = True, **extra: Any):  # type: ignore[no-untyped-def]
        """The same network in the real vocabulary (untied: the output table gets its own tiny rows; `extra`:
        the config fields `model` was made with beyond its shape)."""
        import torch

        full = _model(shape, seed, tie=tie, **extra)
        state = {
            k: v for k, v in model.state_dict().items() if k not in ("model.embed_tokens.weight", "lm_head.weight")
        }
        generator = torch.Generator().manual_seed(seed + 99)
        table = torch.randn(VOCAB, shape.hidden, generator=generator) * 1e-3
        table[self.used] = model.get_input_embeddings().weight.detach()
        state["model.embed_tokens.weight"] = table
        state["lm_head.weight"] = table
        if not tie:
            output = torch.randn(VOCAB, shape.hidden, generator=generator) * 1e-3
            output[self.used] = model.get_output_embeddings().weight.detach()
            state["lm_head.weight"] = output
        full.load_state_dict(state)
        return full.eval()


def _batches(sequences: list[list[int]], seq_len: int, batch: int, steps: int, seed: int):  # type: ignore[no-untyped-def]
    import torch

    stream = torch.tensor([t for ids in sequences for t in ids])
    generator = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        starts = torch.randint(0, len(stream) - seq_len - 1, (batch,), generator=generator)
        yield torch.stack([stream[s : s + seq_len + 1] for s in starts.tolist()])


def _pretrain(model, vocab: Vocab, train: list[list[int]], recipe: Recipe, steps: int, log) -> float:  # type: ignore[no-untyped-def]
    import torch

    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe.lr, weight_decay=0.0, betas=(0.9, 0.98))
    warmup = max(1, steps // 20)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / steps)))
    )
    model.train()
    loss_value, started = float("nan"), time.perf_counter()
    for step, chunk in enumerate(_batches(train, recipe.seq_len, recipe.batch, steps, recipe.seed + steps)):
        log_probs = vocab.log_probs(model, chunk[:, :-1])
        loss = -log_probs.gather(-1, chunk[:, 1:].unsqueeze(-1)).mean()
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        loss_value = loss.item()
        if step % 25 == 0 or step == steps - 1:
            log(f"  step {step + 1}/{steps} loss {loss_value:.3f} ({time.perf_counter() - started:.0f} s)")
    model.eval()
    return loss_value


def held_out_accuracy(model, held_out: list[list[int]], seq_len: int) -> float:  # type: ignore[no-untyped-def]
    """Next-token top-1 accuracy over the full vocabulary (as the runtime computes it) on held-out documents."""
    import torch

    right = total = 0
    with torch.no_grad():
        for ids in held_out:
            for start in range(0, len(ids) - 1, seq_len):
                window = torch.tensor([ids[start : start + seq_len + 1]])
                if window.shape[1] < 2:
                    continue
                logits = model(window[:, :-1]).logits[0]
                right += int((logits.argmax(-1) == window[0, 1:]).sum())
                total += window.shape[1] - 1
    return right / max(1, total)


def _teacher_samples(teacher, vocab: Vocab, corpus: Corpus, recipe: Recipe, log) -> list[tuple[int, list[int]]]:  # type: ignore[no-untyped-def]
    """(prompt length, prompt + sampled continuation) in local ids: chat questions and raw-text prefixes, the
    teacher sampling at T 0.8 until end of text."""
    import torch

    prompts = sample_prompts(vocab, corpus, recipe.samples, recipe.seed + 11)
    stops = vocab.to_local([IM_END, EOT])
    samples = []
    torch.manual_seed(recipe.seed + 12)
    with torch.no_grad():
        for index, prompt in enumerate(prompts):
            out = teacher.generate(
                torch.tensor([prompt]),
                max_new_tokens=recipe.sample_tokens,
                do_sample=True,
                temperature=0.8,
                top_k=0,
                top_p=1.0,
                pad_token_id=stops[1],
                eos_token_id=stops,
            )
            samples.append((len(prompt), out[0].tolist()))
            if index % 64 == 0:
                log(f"  sample {index + 1}/{len(prompts)}")
    return samples


def sample_prompts(vocab: Vocab, corpus: Corpus, count: int, seed: int) -> list[list[int]]:
    """`count` prompts in local ids: up to a third the corpus's chat questions, the rest raw-text prefixes
    (16 to 32 tokens) from random places in the training text."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    prompts = [vocab.to_local(p) for p in corpus.chat_prompts[: count // 3]]
    stream = vocab.to_local([t for ids in corpus.train for t in ids])
    while len(prompts) < count:
        start = int(torch.randint(0, len(stream) - 64, (1,), generator=generator))
        prompts.append(stream[start : start + 16 + len(prompts) % 17])
    return prompts


def _distill(student, teacher, vocab: Vocab, samples, recipe: Recipe, log):  # type: ignore[no-untyped-def]
    """LoRA on every linear of the student; loss 0.8 * T^2 * KL(teacher_T || student_T) + 0.2 * CE, on the
    sampled continuations. Returns the peft model, the last epoch's greedy agreement with the teacher
    (training alpha) and its mean KL."""
    import torch
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(recipe.seed + 21)
    config = LoraConfig(
        r=recipe.lora_r,
        lora_alpha=recipe.lora_alpha,
        lora_dropout=0.0,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    )
    model = get_peft_model(student, config)
    optimizer = torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad], lr=recipe.lora_lr, weight_decay=0.0
    )
    t = recipe.temperature
    alpha, kl_value = 0.0, 0.0
    for epoch in range(recipe.distill_epochs):
        order = torch.randperm(len(samples), generator=torch.Generator().manual_seed(recipe.seed + epoch)).tolist()
        agree = count = 0
        kl_sum = 0.0
        model.train()
        for index in order:
            prompt_len, ids = samples[index]
            if len(ids) - prompt_len < 2:
                continue
            tensor = torch.tensor([ids[:-1]])
            targets = torch.tensor(ids[1:])[prompt_len - 1 :]
            keep = slice(prompt_len - 1, None)  # the continuation the teacher sampled
            with torch.no_grad():
                teacher_logits = teacher(input_ids=tensor).logits[0, keep]
            student_logits = model(input_ids=tensor).logits[0, keep]
            teacher_lp, student_lp_t = (_with_bucket(x / t, vocab) for x in (teacher_logits, student_logits))
            student_lp = _with_bucket(student_logits, vocab)
            kl = (teacher_lp.exp() * (teacher_lp - student_lp_t)).sum(-1).mean()
            ce = -student_lp.gather(-1, targets.unsqueeze(-1)).mean()
            loss = recipe.kl_weight * t * t * kl + (1 - recipe.kl_weight) * ce
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            agree += int((student_logits.argmax(-1) == teacher_logits.argmax(-1)).sum())
            count += int(targets.numel())
            kl_sum += kl.item() * int(targets.numel())
        alpha, kl_value = agree / max(1, count), kl_sum / max(1, count)
        log(f"  epoch {epoch + 1}/{recipe.distill_epochs}: training alpha {alpha:.4f}, KL(T={t}) {kl_value:.4f}")
    model.eval()
    return model, alpha, kl_value


def _with_bucket(logits, vocab: Vocab):  # type: ignore[no-untyped-def]
    import torch

    bucket = torch.full_like(logits[..., :1], vocab.bucket)
    return logits - torch.logsumexp(torch.cat([logits, bucket], dim=-1), dim=-1, keepdim=True)


def _agreement(a, b, samples) -> float:  # type: ignore[no-untyped-def]
    """Greedy agreement of two full-vocabulary models' argmax on the samples' continuations (global ids)."""
    import torch

    right = total = 0
    with torch.no_grad():
        for prompt_len, ids in samples:
            tensor = torch.tensor([ids[:-1]])
            x = a(tensor).logits[0, prompt_len - 1 :].argmax(-1)
            y = b(tensor).logits[0, prompt_len - 1 :].argmax(-1)
            right += int((x == y).sum())
            total += int(x.numel())
    return right / max(1, total)


def _save(model, out: Path) -> None:  # type: ignore[no-untyped-def]
    import torch

    model.to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
    model.to(torch.float32)
    for item in qwen3_tokenizer_dir().iterdir():
        shutil.copy(item, out / item.name)
    (out / "generation_config.json").write_text(
        json.dumps({"bos_token_id": EOT, "eos_token_id": [IM_END, EOT], "pad_token_id": EOT}), encoding="utf-8"
    )


def _key(recipe: Any, corpus_digest: str, builder: int = BUILDER) -> str:
    """The cache folder's name: the recipe's name, then a hash of the recipe (a dataclass), the corpus, the
    builder's version and the training libraries' versions."""
    import peft
    import torch
    import transformers

    material = json.dumps(
        {
            "recipe": asdict(recipe),
            "corpus": corpus_digest,
            "builder": builder,
            "versions": [torch.__version__, transformers.__version__, peft.__version__],
        },
        sort_keys=True,
    )
    return f"{recipe.name}-{xxhash.xxh3_64_hexdigest(material.encode())}"


def _load(root: Path) -> Fixture:
    metrics = json.loads((root / "fixture.json").read_text(encoding="utf-8"))
    return Fixture(
        root=root,
        teacher=root / "teacher",
        student=root / "student",
        adapter=root / "draft-lora",
        draft=root / "draft",
        metrics=metrics,
    )


def build(recipe: Recipe, out: Path, log=print) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """Train the teacher, the student's base, distill the LoRA draft; write the checkpoints and fixture.json."""
    import torch
    from peft import PeftModel

    threads = len(os.sched_getaffinity(0))
    torch.set_num_threads(threads)
    started = time.perf_counter()
    corpus = build_corpus(recipe)
    vocab = Vocab(corpus.used)
    train = [vocab.to_local(ids) for ids in corpus.train]
    tokens = sum(len(ids) for ids in train)
    log(
        f"corpus: {tokens} training tokens, {sum(len(i) for i in corpus.held_out)} held out, "
        f"{len(corpus.used)} distinct ids"
    )
    log("teacher: training")
    teacher = _model(recipe.teacher, recipe.seed, len(corpus.used))
    teacher_loss = _pretrain(teacher, vocab, train, recipe, recipe.teacher_steps, log)
    log("student base: training (short)")
    student = _model(recipe.student, recipe.seed + 1, len(corpus.used))
    student_loss = _pretrain(student, vocab, train, recipe, recipe.student_steps, log)
    # bfloat16 is what is shipped and converted: sample, distill and measure from the stored weights
    teacher = teacher.to(torch.bfloat16).to(torch.float32).eval()
    student = student.to(torch.bfloat16).to(torch.float32)
    log("teacher: sampling the distillation set")
    samples = _teacher_samples(teacher, vocab, corpus, recipe, log)
    with staged(out, "fixture.json", log) as tmp:
        full_teacher = vocab.expand(teacher, recipe.teacher, recipe.seed)
        full_student = vocab.expand(student, recipe.student, recipe.seed + 1)
        _save(full_teacher, tmp / "teacher")
        _save(full_student, tmp / "student")
        log("draft: LoRA KL distillation")
        peft_model, train_alpha, final_kl = _distill(student, teacher, vocab, samples, recipe, log)
        peft_model.save_pretrained(tmp / "draft-lora", safe_serialization=True)
        base = _model(recipe.student, 0)
        base.load_state_dict(_state(tmp / "student"))  # the stored bf16 base
        merged = PeftModel.from_pretrained(base, tmp / "draft-lora").merge_and_unload()
        _save(merged, tmp / "draft")
        full_teacher, full_student, merged = (
            m.to(torch.bfloat16).to(torch.float32).eval() for m in (full_teacher, full_student, merged)
        )
        global_samples = [(n, vocab.to_global(ids)) for n, ids in samples]
        log("measuring")
        metrics = {
            "recipe": asdict(recipe),
            "corpus_digest": corpus.digest,
            "training_tokens": tokens,
            "distinct_ids": len(corpus.used),
            "teacher_final_loss": teacher_loss,
            "student_final_loss": student_loss,
            "teacher_held_out_top1": held_out_accuracy(full_teacher, corpus.held_out, recipe.seq_len),
            "student_base_held_out_top1": held_out_accuracy(full_student, corpus.held_out, recipe.seq_len),
            "draft_held_out_top1": held_out_accuracy(merged, corpus.held_out, recipe.seq_len),
            "training_alpha_final_epoch": train_alpha,
            "final_kl": final_kl,
            "base_alpha_on_samples": _agreement(full_student, full_teacher, global_samples),
            "draft_alpha_on_samples": _agreement(merged, full_teacher, global_samples),
            "samples": len(samples),
            "threads": threads,
            "build_seconds": round(time.perf_counter() - started, 1),
        }
        log(json.dumps({k: v for k, v in metrics.items() if k != "recipe"}))
        (tmp / "fixture.json").write_text(json.dumps(metrics, indent=2) + "\n", encoding="utf-8")
    return metrics


def _state(checkpoint: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    state = load_file(str(checkpoint / "model.safetensors"))
    if "lm_head.weight" not in state:
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    return {k: v.float() for k, v in state.items()}


def fixture(name: str = "full", root: Path | None = None, log=lambda _: None, seed: int = 0) -> Fixture:  # type: ignore[no-untyped-def]
    """The cached fixture for recipe `name` (trained from `seed`), built first if missing."""
    recipe = replace(RECIPES[name], seed=seed)
    root = root or cache_root()
    root.mkdir(parents=True, exist_ok=True)
    out = root / _key(recipe, build_corpus(recipe).digest)
    built_once(out, "fixture.json", lambda: build(recipe, out, log))
    return _load(out)


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", choices=sorted(RECIPES), default="full")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="cache folder  [default: $PACKAGER_FIXTURE_DIR or XDG cache]")
    args = parser.parse_args(argv)
    found = fixture(args.recipe, args.out, log=lambda line: print(line, file=sys.stderr, flush=True), seed=args.seed)
    print(json.dumps({k: v for k, v in found.metrics.items() if k != "recipe"}, indent=2), file=sys.stderr)
    print(found.root)


if __name__ == "__main__":
    main()
