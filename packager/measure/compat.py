"""Can this draft serve this target at all? Same family, vocabulary, special and stop tokens, chat template,
and identical token ids on the built-in corpus - checked before anything is measured."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import resources
from ..bundle import folder as mnnfolder
from ..bundle import graph
from ..bundle.tokenizer_txt import read_header
from ..convert.inspect.checkpoint import token_ids
from ..errors import MissingTokenizer, PairIncompatible, from_os_error, shorten
from ..families import UnknownFamily, of_bundle, of_checkpoint, shown
from ..infra.jsonfile import read_json
from ..runtime.models import Model, is_bundle

# A draft and a target may differ by this many vocabulary rows when the ids they share have the same texts
# (llama.cpp's SPEC_VOCAB_MAX_SIZE_DIFFERENCE): Qwen2.5-0.5B has 151,936, Qwen2.5-7B 152,064 (padding rows).
MAX_VOCAB_DIFFERENCE = 128

# Inputs whose ids MNN's runtime and the HF tokenizer disagree on for the same tokenizer (measured by convert):
# a bundle and a checkpoint are not compared on them.
RUNTIME_DIFFERENCES = {"nfd", "emoji"}


NEITHER_HINT = (
    "pass a Hugging Face checkpoint folder (config.json and *.safetensors) or an MNN model folder "
    "(llm.mnn, llm.mnn.weight and llm_config.json, as llmexport writes it)"
)


@dataclass(frozen=True)
class Facts:
    path: Path
    bundle: bool
    family: str  # the family's title ("Llama 3.x"), or what the files name when packager knows no such family
    vocab_size: int  # 0: not stated by the files (an MNN folder without llm.mnn.json); checked after loading
    special: frozenset[int]
    special_all: frozenset[int]  # checkpoints: every added token; bundles: what the header lists
    stop: frozenset[int]
    chat_template: str
    variables: Mapping[str, Any] = field(default_factory=dict)  # what the family's chat template reads


def _json(path: Path) -> dict:
    return read_json(path, PairIncompatible)


def facts(path: Path) -> Facts:
    """What pairing compares, read from the files alone; anything unreadable is one line."""
    if not path.is_dir():
        raise PairIncompatible(f"{shorten(str(path), 120)} is not a folder", NEITHER_HINT)
    if not is_bundle(path) and not (path / "config.json").is_file():
        raise PairIncompatible(
            f"{shorten(str(path), 120)} is neither a checkpoint nor an MNN model folder", NEITHER_HINT
        )
    try:
        return _bundle_facts(path) if is_bundle(path) else _checkpoint_facts(path)
    except OSError as exc:
        raise from_os_error(exc, "cannot read the pair's files") from None
    except (ValueError, TypeError, AttributeError) as exc:  # HeaderError is a ValueError
        raise PairIncompatible(
            f"{shorten(str(path), 120)} is malformed ({shorten(str(exc))})",
            "run packager validate (bundles) or re-save the checkpoint",
        ) from None


def _checkpoint_facts(path: Path) -> Facts:
    config = _json(path / "config.json")
    tok_config = _json(path / "tokenizer_config.json") if (path / "tokenizer_config.json").is_file() else {}
    ids_of, listed = token_ids(read_json(path / "tokenizer.json", MissingTokenizer), path)
    added = tok_config.get("added_tokens_decoder")
    if not isinstance(added, dict):  # transformers 5 saves the added tokens in tokenizer.json only
        added = {str(t["id"]): {"special": bool(t.get("special"))} for t in listed}
    template = tok_config.get("chat_template") or (
        (path / "chat_template.jinja").read_text(encoding="utf-8") if (path / "chat_template.jinja").is_file() else ""
    )
    try:
        found = of_checkpoint(config, ids_of, f"{path}/config.json")
        family, variables = found.title, dict(found.template_variables)
        stops = set(found.stop_ids(ids_of))
    except UnknownFamily:
        family, variables, stops = f"model_type {shown(config.get('model_type', '?'))}", {}, set()
    for source in (
        config.get("eos_token_id"),
        _json(path / "generation_config.json").get("eos_token_id")
        if (path / "generation_config.json").is_file()
        else None,
    ):
        stops.update(x for x in (source if isinstance(source, list) else [source]) if isinstance(x, int))
    return Facts(
        path=path,
        bundle=False,
        family=family,
        vocab_size=int(config.get("vocab_size", 0)),
        special=frozenset(int(i) for i, t in added.items() if t.get("special")),
        special_all=frozenset(int(i) for i in added),
        stop=frozenset(stops),
        chat_template=template,
        variables=variables,
    )


def _bundle_facts(path: Path) -> Facts:
    llm_config = _json(path / "llm_config.json")
    config = _json(path / "config.json") if (path / "config.json").is_file() else {}
    tokenizer = path / str(config.get("tokenizer_file") or "tokenizer.txt")
    header = read_header(tokenizer if tokenizer.is_file() else path / "tokenizer.mtok")
    # The stop ids packager's own generation uses for the family (as for checkpoints): plain llmexport lists
    # only <|im_end|>, packager's bundles <|endoftext|> too.
    try:
        found = of_bundle(llm_config)
        family, variables = found.title, dict(found.template_variables)
        stops = set(header.stop) | set(found.known_stop_ids)
    except UnknownFamily:
        family, variables, stops = f"model_type {shown(llm_config.get('model_type', '?'))}", {}, set(header.stop)
    return Facts(
        path=path,
        bundle=True,
        family=family,
        vocab_size=_bundle_vocab(path, llm_config, config),
        special=frozenset(header.special),
        special_all=frozenset(header.special),
        stop=frozenset(stops),
        chat_template=str((llm_config.get("jinja") or {}).get("chat_template", "")),
        variables=variables,
    )


def _bundle_vocab(path: Path, llm_config: dict, config: dict) -> int:
    """What the graph description, the tied embedding and the embeddings file agree on (packager.bundle.folder);
    0 when none says. Files that disagree are refused here, before anything loads."""
    lm = graph.read(_json(path / "llm.mnn.json")).lm_head if (path / "llm.mnn.json").is_file() else None
    try:
        return mnnfolder.vocabulary(path, llm_config, config, lm.out_features if lm else None)
    except mnnfolder.FolderConflict as exc:
        raise PairIncompatible(
            f"{shorten(str(path), 120)}: {exc}", "restore the folder's files from the export that made them"
        ) from None


def _special_equal(a: Facts, b: Facts) -> bool:
    """The same special tokens at the ids both vocabularies have rows for. (A token past the shared rows cannot be
    proposed by the draft nor accepted from it: Gemma 3's <image_soft_token> 262,144 has a row in the multimodal
    targets' 262,208, none in the text drafts', whose bundles leave it out.)"""
    sizes = [size for size in (a.vocab_size, b.vocab_size) if size]
    rows = min(sizes) if sizes else None

    def shared(ids: frozenset[int]) -> frozenset[int]:
        return ids if rows is None else frozenset(i for i in ids if i < rows)

    # A text-format tokenizer.txt lists every added token, a PIPELINE one only the special ones.
    options_a = {shared(a.special), shared(a.special_all)}
    options_b = {shared(b.special), shared(b.special_all)}
    if options_a & options_b:
        return True
    if a.bundle == b.bundle:
        return False
    # llmexport's header also calls special the tokens transformers' tokenizer class names (Gemma's <mask>, an
    # added token that tokenizer.json does not mark special): a bundle's special tokens must be added tokens of
    # the checkpoint, and every token the checkpoint marks special must be special in the bundle.
    bundle, checkpoint = (a, b) if a.bundle else (b, a)
    return shared(bundle.special) <= shared(checkpoint.special_all) and shared(checkpoint.special) <= shared(
        bundle.special
    )


def check_files(draft: Facts, target: Facts) -> None:
    if draft.family != target.family:
        raise PairIncompatible(
            f"{draft.path.name} cannot draft for {target.path.name}: the draft is {shorten(draft.family, 60)}, "
            f"the target {shorten(target.family, 60)}",
            "pair a draft with a target of its own family (README: Supported families)",
        )
    problems = []
    if draft.vocab_size and target.vocab_size and abs(draft.vocab_size - target.vocab_size) > MAX_VOCAB_DIFFERENCE:
        problems.append(
            f"vocabulary {draft.vocab_size} vs {target.vocab_size} ids (more than {MAX_VOCAB_DIFFERENCE} apart)"
        )
    if not _special_equal(draft, target):
        problems.append("different special tokens")
    if draft.stop != target.stop:
        problems.append(f"stop ids {sorted(draft.stop)} vs {sorted(target.stop)}")
    if draft.chat_template.strip() != target.chat_template.strip():
        problems.append("different chat templates")
    if problems:
        raise PairIncompatible(f"{draft.path.name} cannot draft for {target.path.name}: " + "; ".join(problems))


def check_tokenizers(draft: Model, target: Model, draft_facts: Facts, target_facts: Facts) -> int:
    """Same vocabulary as loaded (the logits' width), and every corpus string must get the same ids from both;
    returns how many strings were compared."""
    if abs(draft.vocab - target.vocab) > MAX_VOCAB_DIFFERENCE:
        raise PairIncompatible(
            f"{draft_facts.path.name} cannot draft for {target_facts.path.name}: "
            f"vocabulary {draft.vocab} vs {target.vocab} ids (more than {MAX_VOCAB_DIFFERENCE} apart)"
        )
    if draft.vocab != target.vocab:
        _same_texts(draft, target, draft_facts, target_facts)
    mixed = draft_facts.bundle != target_facts.bundle
    compared, differing = 0, []
    for item in resources.tokenizer_corpus_items():
        if mixed and item["category"] in RUNTIME_DIFFERENCES:
            continue
        compared += 1
        if draft.encode(item["text"]) != target.encode(item["text"]):
            differing.append(item["text"])
    if differing:
        raise PairIncompatible(
            f"{draft_facts.path.name} and {target_facts.path.name} tokenize "
            f"{len(differing)} of {compared} corpus strings differently (first: {differing[0]!r})"
        )
    return compared


def _same_texts(draft: Model, target: Model, draft_facts: Facts, target_facts: Facts) -> None:
    """Vocabularies of different sizes pair only when every id they share has the same text (llama.cpp's rule).
    MNN decodes a special token (and NUL) to nothing and cannot decode a lone byte piece: those ids are compared
    through the special-token check and the corpus instead."""
    shared = min(draft.vocab, target.vocab)
    mine, theirs = draft.texts(shared), target.texts(shared)
    for index, (a, b) in enumerate(zip(mine, theirs, strict=True)):
        if a and b and a != b:
            raise PairIncompatible(
                f"{draft_facts.path.name} cannot draft for {target_facts.path.name}: the vocabularies differ in size "
                f"({draft.vocab} vs {target.vocab}) and id {index} is {a!r:.40} in one, {b!r:.40} in the other"
            )
