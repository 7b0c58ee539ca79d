"""Look at a checkpoint folder before any heavy work and refuse what cannot become a ten-file bundle."""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import (
    CheckpointNotFound,
    CorruptWeights,
    InvalidCheckpointConfig,
    MissingTokenizer,
    UnsupportedModel,
    UntiedEmbeddings,
    shorten,
)
from ...families import (
    Family,
    UnknownFamily,
    exact_positions,
    findings,
    of_checkpoint,
    refusal,
    shown,
    supported_hint,
)
from ...families.configkeys import eos_ids, kv_heads
from ...infra import heap
from ...infra.jsonfile import read_json
from . import safetensors_header

# tokenizer.json carries the vocabulary and merges, so vocab.json and merges.txt (which transformers 5 no
# longer saves) are derived from it when absent; the chat template may sit in its own file.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
DERIVABLE_TOKENIZER_FILES = ("vocab.json", "merges.txt")
OPTIONAL_TOKENIZER_FILES = (
    "chat_template.jinja",
    "special_tokens_map.json",
    "added_tokens.json",
    "generation_config.json",
)
# The checkpoint files a conversion reads (provenance hashes these and nothing else).
MODEL_FILES = ("config.json", "model.safetensors.index.json")


@dataclass(frozen=True)
class ModelShape:
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int


@dataclass(frozen=True)
class CheckpointInfo:
    path: Path
    model_type: str
    family: Family
    shape: ModelShape
    dtype: str
    weight_files: tuple[Path, ...]
    tensor_shapes: dict[str, tuple[int, ...]]
    stop_ids: tuple[int, ...]
    tokenizer_vocab_size: int
    tied: bool = True  # lm_head is the embedding (else the bundle carries an embeddings file)
    # Special tokens at ids past the model's rows that the bundle's tokenizer leaves out (family.beyond_rows).
    left_out_tokens: tuple[str, ...] = ()
    # The positions up to which the bundle computes what transformers does, where that is not every position
    # (families.exact_positions: longrope's short factor).
    exact_positions: int | None = None
    warnings: tuple[str, ...] = ()  # what converting it does otherwise than transformers (the family's to say)


def inspect_checkpoint(
    path: Path, allow_untied: bool = False, engine: tuple[int, int, int] | None = None
) -> CheckpointInfo:
    """Check a Hugging Face checkpoint folder of a family packager converts and describe it. Untied embeddings are
    refused unless `allow_untied` (a target bundle carries them as an embeddings file; a draft bundle cannot), and
    the families MNN cannot speculate with unless `engine` (the oldest MNN the bundle must run on) can."""
    folder = _folder(path)
    config = _config(folder)
    model_type = str(config.get("model_type", ""))
    if not model_type:
        raise UnsupportedModel(f"{folder}/config.json names no model_type", supported_hint())
    refused = refusal(model_type, engine)
    if refused:  # said first: nothing else of such a checkpoint matters
        raise UnsupportedModel(f"{folder}/config.json has model_type {shown(model_type)}: {refused}", supported_hint())
    shape = _shape(folder, config)
    tied = config.get("tie_word_embeddings") is True
    if not tied and not allow_untied:
        raise UntiedEmbeddings(f"{folder} has untied embeddings (tie_word_embeddings is not true)")
    weight_files = _weight_files(folder)
    tensors: dict[str, tuple[int, ...]] = {}
    for weight_file in weight_files:
        tensors.update(safetensors_header.tensor_shapes(weight_file))
    ids_of = _check_tokenizer(folder)
    heap.give_back()  # the parsed tokenizer.json
    try:
        family = of_checkpoint(config, ids_of, f"{folder}/config.json", engine)
        stop_ids = _stop_ids(folder, config, family.stop_ids(ids_of))
    except UnknownFamily as exc:
        raise UnsupportedModel(str(exc), supported_hint()) from None
    check_config_keys(family, config, f"{folder}/config.json")
    left_out = beyond_rows(ids_of, shape.vocab_size, family)
    vocab_size = _within_rows(ids_of, left_out, shape.vocab_size)
    _check_tensors(folder, tensors, shape, tied, family)
    return CheckpointInfo(
        path=folder,
        model_type=model_type,
        family=family,
        shape=shape,
        dtype=str(config.get("dtype") or config.get("torch_dtype") or "float32"),
        weight_files=weight_files,
        tensor_shapes=tensors,
        stop_ids=stop_ids,
        tokenizer_vocab_size=vocab_size,
        tied=tied,
        left_out_tokens=tuple(sorted(left_out)),
        exact_positions=exact_positions(config),
        warnings=family.warnings(config),
    )


def check_config_keys(family: Family, config: dict[str, Any], where: str) -> None:
    """Refuse, in one line naming the key, a config value the family's graph does not compute as transformers does
    (UnsupportedModel) or that is not a valid value at all (InvalidCheckpointConfig): the family's config-key table
    (families.configkeys) says which keys are carried, which refused and which irrelevant."""
    found = findings(family.config_keys, config)
    if not found:
        return
    first = found[0]
    more = f" (and {len(found) - 1} more finding(s))" if len(found) > 1 else ""
    if first.refused:
        raise UnsupportedModel(
            f"{where}: {first.message}{more}", f"packager does not convert this {family.title} config"
        )
    raise InvalidCheckpointConfig(f"{where}: {first.message}{more}", "fix the value in config.json")


def token_ids(data: Any, folder: Path) -> tuple[dict[str, int], list[dict[str, Any]]]:
    """A parsed tokenizer.json's vocabulary (token text -> id, added tokens last, as the tokenizer finds them) and
    its added tokens; what a family is found from (families.of_checkpoint)."""
    vocab, _, added = bpe_tables(data, folder, first_merge=True)
    return _ids_of(vocab, added), added


def _ids_of(vocab: dict[str, int], added: list[dict[str, Any]]) -> dict[str, int]:
    ids_of = dict(vocab)
    ids_of.update((str(token.get("content")), int(token["id"])) for token in added)
    return ids_of


def family_fields(info: CheckpointInfo) -> dict[str, Any]:
    """What the converter worker needs of the checkpoint's family (WorkerJob fields): its name (the worker looks
    its facts up) and the torch patches it declares for this config."""
    config = read_json(info.path / "config.json", InvalidCheckpointConfig)
    return {"family": info.family.name, "patches": info.family.patches(config), "left_out_tokens": info.left_out_tokens}


def _folder(path: Path) -> Path:
    try:
        return _existing_folder(path)
    except OSError as exc:
        raise CheckpointNotFound(f"checkpoint folder {shorten(str(path))} cannot be read ({exc.strerror})") from None


def _existing_folder(path: Path) -> Path:
    if not path.exists():
        raise CheckpointNotFound(f"checkpoint folder {path} does not exist")
    if not path.is_dir():
        raise CheckpointNotFound(f"checkpoint {path} is not a folder")
    if not os.access(path, os.R_OK | os.X_OK):
        raise CheckpointNotFound(f"checkpoint folder {path} is not readable", "check its permissions")
    return path.resolve()


def _config(folder: Path) -> dict[str, Any]:
    path = folder / "config.json"
    if not path.is_file():
        if os.path.lexists(path):  # a device, a pipe, a folder or a dangling link: never read
            raise InvalidCheckpointConfig(f"{path} is not a regular file")
        raise InvalidCheckpointConfig(f"{folder} has no config.json", "pass a Hugging Face checkpoint folder")
    config = read_json(path, InvalidCheckpointConfig)
    if not isinstance(config, dict):
        raise InvalidCheckpointConfig(f"{path} is not a JSON object")
    return config


def _shape(folder: Path, config: dict[str, Any]) -> ModelShape:
    def need(key: str) -> int:
        value = config.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise InvalidCheckpointConfig(
                f"{folder}/config.json: {key} must be a positive integer, found {shorten(repr(value))}"
            )
        return value

    hidden, heads = need("hidden_size"), need("num_attention_heads")
    head_dim = config.get("head_dim") or hidden // heads
    if not isinstance(head_dim, int) or head_dim <= 0:
        raise InvalidCheckpointConfig(f"{folder}/config.json: head_dim must be a positive integer")
    wrong_kv = kv_heads(config)  # the config-key tables' rule (families.configkeys), needed before the family
    if wrong_kv is not None:
        raise InvalidCheckpointConfig(f"{folder}/config.json: {wrong_kv.message}")
    kv = heads if config.get("num_key_value_heads") is None else need("num_key_value_heads")
    return ModelShape(
        hidden_size=hidden,
        num_layers=need("num_hidden_layers"),
        num_heads=heads,
        num_kv_heads=kv,
        head_dim=head_dim,
        intermediate_size=need("intermediate_size"),
        vocab_size=need("vocab_size"),
    )


def _weight_files(folder: Path) -> tuple[Path, ...]:
    files = tuple(sorted(folder.glob("*.safetensors")))
    if not files:
        found = sorted(p.name for p in folder.glob("*.bin")) + sorted(p.name for p in folder.glob("*.pt*"))
        extra = f" (found {', '.join(found)}; re-save with safe_serialization=True)" if found else ""
        raise CorruptWeights(f"{folder} has no *.safetensors weight files{extra}")
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        listed = read_json(index, CorruptWeights).get("weight_map", {})
        missing = sorted({name for name in listed.values() if not (folder / name).is_file()})
        if missing:
            raise CorruptWeights(f"{index} names missing shard(s): {', '.join(missing)}")
    return files


def _check_tensors(
    folder: Path, tensors: dict[str, tuple[int, ...]], shape: ModelShape, tied: bool, family: Family
) -> None:
    embed = tensors.get("model.embed_tokens.weight")
    if embed is None:
        raise CorruptWeights(f"{folder} weights have no model.embed_tokens.weight")
    if embed != (shape.vocab_size, shape.hidden_size):
        raise CorruptWeights(
            f"model.embed_tokens.weight has shape {list(embed)}, config.json says "
            f"[{shape.vocab_size}, {shape.hidden_size}]",
            "the weights do not belong to this config.json",
        )
    head = tensors.get("lm_head.weight")
    if tied and head is not None:
        raise UntiedEmbeddings(f"{folder} weights hold a separate lm_head.weight")
    if not tied and head != (shape.vocab_size, shape.hidden_size):
        raise CorruptWeights(
            f"{folder}: config.json unties the embeddings but lm_head.weight is "
            f"{'missing' if head is None else list(head)}, expected [{shape.vocab_size}, "
            f"{shape.hidden_size}]",
            "the weights do not belong to this config.json",
        )
    rows = family.layout.checkpoint_layer(
        shape.hidden_size, shape.num_heads, shape.num_kv_heads, shape.head_dim, shape.intermediate_size
    )
    for layer in range(shape.num_layers):
        for suffix, kind, out_features, in_features, bias in rows:
            name = f"model.layers.{layer}.{suffix}"
            expected: dict[str, tuple[int, ...]] = (
                {f"{name}.weight": (out_features,)}
                if kind == "norm"
                else {
                    f"{name}.weight": (out_features, in_features),
                    **({f"{name}.bias": (out_features,)} if bias else {}),
                }
            )
            for key, want in expected.items():
                if tensors.get(key) != want:
                    raise CorruptWeights(
                        f"{key} is {'missing' if key not in tensors else list(tensors[key])}, expected {list(want)} "
                        f"for {family.title}",
                        "the weights do not belong to this config.json",
                    )
            if not bias and f"{name}.bias" in tensors and kind == "linear":
                raise CorruptWeights(
                    f"{folder} holds {name}.bias, which {family.title} does not have",
                    "the weights do not belong to this config.json",
                )


def _check_tokenizer(folder: Path) -> dict[str, int]:
    """Each token's id by its text (added tokens last, as the tokenizer finds them)."""
    missing = [name for name in TOKENIZER_FILES if not (folder / name).is_file()]
    if missing:
        raise MissingTokenizer(f"{folder} is missing tokenizer file(s): {', '.join(missing)}")
    tok_config = read_json(folder / "tokenizer_config.json", MissingTokenizer)
    if not isinstance(tok_config, dict):
        raise MissingTokenizer(f"{folder}/tokenizer_config.json is not a JSON object")
    if not (tok_config.get("chat_template") or (folder / "chat_template.jinja").is_file()):
        raise MissingTokenizer(
            f"{folder} has no chat template (tokenizer_config.json chat_template or chat_template.jinja)"
        )
    data = read_json(folder / "tokenizer.json", MissingTokenizer)
    vocab, merges, added = bpe_tables(data, folder, first_merge=True)
    if not merges and not (folder / "merges.txt").is_file():
        raise MissingTokenizer(f"{folder}/tokenizer.json has no BPE merges and there is no merges.txt")
    return _ids_of(vocab, added)


def beyond_rows(ids_of: dict[str, int], rows: int, family: Family) -> dict[str, int]:
    """The tokens the tokenizer holds at ids the model has no row for, which the family names as such (Gemma 3's
    <image_soft_token>, the multimodal models' image placeholder, at 262,144 = vocab_size of the text models)."""
    return {token: i for token, i in ids_of.items() if i >= rows and token in family.beyond_rows}


def _within_rows(ids_of: dict[str, int], left_out: dict[str, int], rows: int) -> int:
    """The tokenizer's id count without the tokens the bundle leaves out (`beyond_rows`); any other id past the
    model's rows is refused: MNN would read past the embedding table for it without a word."""
    kept = [i for token, i in ids_of.items() if token not in left_out]
    top = max(kept) + 1 if kept else 0
    if top > rows:
        raise MissingTokenizer(
            f"the tokenizer has ids up to {top - 1} but the model's vocab_size is {rows}",
            "use the tokenizer the model was trained with",
        )
    return top


def bpe_tables(
    data: Any, folder: Path, first_merge: bool = False
) -> tuple[dict[str, int], list[str], list[dict[str, Any]]]:
    """tokenizer.json's BPE vocabulary, merges (as "a b" lines) and added tokens, checked for shape.

    With `first_merge` only the first well-formed merge is returned (enough to know there are merges; building
    all 151,387 of Qwen3's lines cost 0.4 s of a conversion's start)."""
    model = data.get("model") if isinstance(data, dict) else None
    vocab = model.get("vocab") if isinstance(model, dict) else None
    if not isinstance(model, dict) or model.get("type") != "BPE" or not isinstance(vocab, dict):
        raise MissingTokenizer(
            f"{folder}/tokenizer.json does not hold a BPE model with a vocabulary",
            "use the tokenizer the model was trained with (a byte-level BPE tokenizer.json)",
        )
    lines = (
        m if isinstance(m, str) else " ".join(m)
        for m in model.get("merges") or []
        if isinstance(m, str) or (isinstance(m, list) and len(m) == 2 and all(isinstance(p, str) for p in m))
    )
    merges = list(itertools.islice(lines, 1)) if first_merge else list(lines)
    added = [t for t in data.get("added_tokens") or [] if isinstance(t, dict) and isinstance(t.get("id"), int)]
    if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in vocab.values()):
        raise MissingTokenizer(f"{folder}/tokenizer.json has vocabulary ids that are not non-negative integers")
    return vocab, merges, added


def _stop_ids(folder: Path, config: dict[str, Any], family_stops: tuple[int, ...]) -> tuple[int, ...]:
    """The family's stop ids (by name, through the tokenizer), then any other end id the checkpoint names."""
    ids: list[int] = list(family_stops)
    sources: list[Any] = [config.get("eos_token_id")]
    generation = folder / "generation_config.json"
    if generation.is_file():
        settings = read_json(generation, InvalidCheckpointConfig)
        if not isinstance(settings, dict):
            raise InvalidCheckpointConfig(
                f"{shorten(str(generation), 120)} is not a JSON object",
                "fix or re-save generation_config.json with transformers, or remove it",
            )
        found = eos_ids({"eos_token_id": settings.get("eos_token_id"), "vocab_size": config.get("vocab_size")})
        if found is not None:  # the same rule as config.json's (families.configkeys): a token id within the rows
            raise InvalidCheckpointConfig(f"{shorten(str(generation), 120)}: {found.message}", "fix the value")
        sources.append(settings.get("eos_token_id"))
    for value in sources:
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, int) and item not in ids:
                ids.append(item)
    return tuple(ids)
