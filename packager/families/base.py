"""What a model family is to packager, and how one is found (a leaf: imports nothing else of packager)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple


def shown(value: object, limit: int = 60) -> str:
    """repr(value) cut to `limit` characters with a note of what was left out (packager.errors.shorten's form; a
    leaf cannot import it); repr escapes control characters, so a value cannot move a terminal's cursor."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit} more characters)"


class UnknownFamily(ValueError):
    """No family packager converts matches; the message names what was found (one line)."""


@dataclass(frozen=True)
class Finding:
    """What is wrong with one key's value: `refused` for a valid value the graph cannot compute (exit 12), else a
    value that is not valid at all (exit 11)."""

    key: str
    message: str
    refused: bool


Check = Callable[[Mapping[str, Any]], "Finding | None"]  # a config -> what is wrong with one key, or None


@dataclass(frozen=True)
class ConfigKey:
    name: str
    role: str  # CARRIED, REFUSED or IRRELEVANT
    how: str  # where it goes, the value the graph assumes, or why it does not matter (the docs' table)
    checks: tuple[Check, ...] = ()


@dataclass(frozen=True)
class License:
    spdx: str  # the Hub's `license` value
    name: str
    link: str
    attribution: str = ""  # a line the license requires wherever the model is offered ("Built with Llama")
    file: str = ""  # a license file the checkpoint must carry and the release must ship, when the license asks
    notice: str = ""  # the notice the license asks every copy to carry (the card prints it under License)
    # Other Hub ids for the same terms (a model may be released under the license id of its own version).
    aliases: tuple[str, ...] = ()


class Row(NamedTuple):
    """One tensor of a decoder layer: its name after `model.layers.N.`, "linear" or "norm", its shape (a norm:
    width, 0) and whether a linear carries a bias."""

    suffix: str
    kind: str
    out_features: int
    in_features: int = 0
    bias: bool = False


@dataclass(frozen=True)
class Dims:
    """The sizes a decoder layer's tensors are made of."""

    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int


Rows = Callable[[Dims], tuple[Row, ...]]
Slices = Callable[[Dims], dict[str, tuple[str, int, int]]]


def norm(suffix: str, d: Dims) -> Row:
    return Row(suffix, "norm", d.hidden)


def attention(d: Dims, bias: bool = False, qk_norm: bool = False) -> tuple[Row, ...]:
    """q, k, v and o projections as llmexport writes them (a per-head q/k norm right after its projection)."""
    q, kv = d.heads * d.head_dim, d.kv_heads * d.head_dim
    head_norm = (lambda name: (Row(f"self_attn.{name}_norm", "norm", d.head_dim),)) if qk_norm else (lambda _: ())
    return (
        Row("self_attn.q_proj", "linear", q, d.hidden, bias),
        *head_norm("q"),
        Row("self_attn.k_proj", "linear", kv, d.hidden, bias),
        *head_norm("k"),
        Row("self_attn.v_proj", "linear", kv, d.hidden, bias),
        Row("self_attn.o_proj", "linear", d.hidden, q),
    )


def gated_mlp(d: Dims) -> tuple[Row, ...]:
    """A gated MLP's gate, up and down projections (SwiGLU, GeGLU)."""
    return (
        Row("mlp.gate_proj", "linear", d.intermediate, d.hidden),
        Row("mlp.up_proj", "linear", d.intermediate, d.hidden),
        Row("mlp.down_proj", "linear", d.hidden, d.intermediate),
    )


def decoder(qkv_bias: bool = False, qk_norm: bool = False) -> Rows:
    """The pre-norm decoder layer most families share: norm, attention, norm, gated MLP."""

    def rows(d: Dims) -> tuple[Row, ...]:
        return (
            norm("input_layernorm", d),
            *attention(d, qkv_bias, qk_norm),
            norm("post_attention_layernorm", d),
            *gated_mlp(d),
        )

    return rows


@dataclass(frozen=True)
class Layout:
    """How the family's decoder layer lays its weights out (llmexport writes them in graph order): hooks the
    streaming writer and inspection call, never asking which family it is."""

    rows: Rows  # the layer's tensors as the graph holds them, in weight-file order
    checkpoint_rows: Rows | None = None  # the same as the checkpoint holds them (None: as the graph does)
    # Graph tensor suffix -> (checkpoint tensor suffix, first row, rows) where the graph's tensor is a slice of a
    # fused one; a graph bias that is in no checkpoint tensor is zeros.
    slices: Slices = lambda d: {}
    norm_offset: float = 0.0  # a norm scales by offset + w; the graph's gamma is offset + w in float32

    def layer(self, hidden: int, heads: int, kv_heads: int, head_dim: int, intermediate: int) -> tuple[Row, ...]:
        """(tensor suffix, kind, out_features, in_features, bias) of one decoder layer as the graph holds it, in
        weight-file order (for a norm: (suffix, "norm", width, 0, False))."""
        return self.rows(Dims(hidden, heads, kv_heads, head_dim, intermediate))

    def checkpoint_layer(
        self, hidden: int, heads: int, kv_heads: int, head_dim: int, intermediate: int
    ) -> tuple[Row, ...]:
        """The same rows as the checkpoint holds them."""
        return (self.checkpoint_rows or self.rows)(Dims(hidden, heads, kv_heads, head_dim, intermediate))

    def sources(self, heads: int, kv_heads: int, head_dim: int) -> dict[str, tuple[str, int, int]]:
        """Graph tensor suffix -> (checkpoint tensor suffix, first row, rows) of each graph tensor that is a slice
        of a fused checkpoint tensor."""
        return self.slices(Dims(0, heads, kv_heads, head_dim, 0))


@dataclass(frozen=True)
class Family:
    name: str  # packager's name for it (cards, reports, --json)
    title: str  # how people call it
    model_types: tuple[str, ...]  # config.json / llm_config.json model_type values
    # Tokens its vocabulary holds at these ids (tell families of one model_type apart: a Llama-architecture
    # checkpoint with Qwen's tokenizer is neither Llama 3 nor SmolLM2).
    markers: Mapping[str, int]
    stop_tokens: tuple[str, ...]  # generation ends on these, by name; the first must exist
    layout: Layout
    license: License
    architecture: str  # the card's architecture line
    # The ids stop_tokens have in the family's released tokenizers: validate checks a bundle against them (a
    # bundle's tokenizer file cannot be asked for a token by name); conversion resolves the names themselves.
    known_stop_ids: tuple[int, ...] = ()
    bos_token: str = ""  # the token MNN puts before every encode (the tokenizer adds it), "" for none
    rope_types: tuple[str, ...] = ("default",)
    template_variables: Mapping[str, Any] = field(default_factory=dict)  # what its chat template reads beyond messages
    llmexport_type: str = ""  # the model_type llmexport's tokenizer loader is given ("" = model_types[0])
    tags: tuple[str, ...] = ()
    base_models: tuple[
        str, ...
    ] = ()  # the Hub ids of the family's released checkpoints this kind of draft derives from
    targets: tuple[str, ...] = ()  # targets its drafts are paired with
    sampling: str = ""  # advice for the card
    # runtime_config.json's compatible_targets for its drafts (keys are short target names).
    compatible_targets: Mapping[str, Any] = field(default_factory=dict)
    # The weight bits a conversion takes when none are asked for (4; 8 where 4 bits lose too much: SmolLM2-135M).
    default_bits: int = 4
    # Runtime keys its bundles need other than packager's presets (the release spec's [runtime.*] still win).
    runtime: Mapping[str, Any] = field(default_factory=dict)
    # The tokenizer.txt formats MNN reads right for it: its text format (type 3) hard-codes Qwen2's pre-tokenizer
    # (single digits), wrong for Llama 3 (digits in threes) and SmolLM2; the pipeline format is generic.
    tokenizer_formats: tuple[str, ...] = ("text", "pipeline")
    # The attention kinds its config's layer_types may name (Gemma 3 mixes sliding-window and global layers).
    layer_types: tuple[str, ...] = ("full_attention",)
    # Special tokens its tokenizers hold at ids past the model's rows (Gemma 3's <image_soft_token> at 262,144 =
    # vocab_size of the text models): no text may encode to them, so the bundle's tokenizer leaves them out.
    beyond_rows: tuple[str, ...] = ()
    # Every config.json key its transformers modeling code reads: carried into the graph, refused unless it is the
    # value the graph assumes, or irrelevant at inference (families.configkeys; the docs' config-key tables).
    config_keys: tuple[ConfigKey, ...] = ()
    # The model types of the family's multimodal checkpoints (text and images, the text model's config in
    # text_config): refused, saying to convert their text model.
    multimodal_types: tuple[str, ...] = ()
    # The torch patches (packager.convert.fence.patches, by name) the converter applies to llmexport for a config
    # of this family: what llmexport exports otherwise than transformers computes.
    patches: Callable[[Mapping[str, Any]], tuple[str, ...]] = lambda config: ()
    # DFlash drafts (z-lab's DFlashDraftModel) are published for its checkpoints: `convert --dflash` takes one as
    # target (the draft's graph is Qwen3-style attention over the target's hidden states and embeddings).
    dflash: bool = False
    # What a conversion of such a config says it does otherwise than transformers (convert's warnings).
    warnings: Callable[[Mapping[str, Any]], tuple[str, ...]] = lambda config: ()

    def tokenizer_type(self) -> str:
        return self.llmexport_type or self.model_types[0]

    def stop_ids(self, ids_of: Mapping[str, int]) -> tuple[int, ...]:
        """The stop ids, resolved through the tokenizer's `ids_of` (token text -> id); a name the tokenizer lacks
        is skipped, but the first (the end of a chat turn) must be there."""
        if self.stop_tokens and self.stop_tokens[0] not in ids_of:
            raise UnknownFamily(f"the tokenizer has no {self.stop_tokens[0]} (the {self.title} end of turn)")
        return tuple(ids_of[name] for name in self.stop_tokens if name in ids_of)


def rope_type(config: Mapping[str, Any]) -> str:
    """The rope type a transformers config asks for (`rope_parameters` in transformers 5, `rope_scaling` before);
    for a config with a rope per layer type (Gemma 3), the types joined by "+" in sorted order."""
    kinds = rope_types(config)
    return "+".join(kinds) if kinds else "default"


def rope_types(config: Mapping[str, Any]) -> tuple[str, ...]:
    """Each distinct rope type the config asks for: one, or one per layer type where `rope_parameters` maps layer
    types (sliding_attention, full_attention) to their own parameters."""
    for key in ("rope_parameters", "rope_scaling"):
        value = config.get(key)
        if not isinstance(value, Mapping):
            continue
        nested = [v for v in value.values() if isinstance(v, Mapping)]
        if nested:
            return tuple(sorted({str(v.get("rope_type", v.get("type", "default"))) for v in nested}))
        kind = value.get("rope_type", value.get("type"))
        if kind is not None:
            return (str(kind),)
    return ("default",)


def exact_positions(config: Mapping[str, Any]) -> int | None:
    """How many positions a graph with fixed rope frequencies computes as transformers does, where that is not
    all of them: longrope (Phi-3.5) uses its short factor up to original_max_position_embeddings and switches
    every position to its long factor past them, and llmexport exports the short one. None: no such limit."""
    if "longrope" not in rope_types(config):
        return None
    parameters = config.get("rope_parameters") or config.get("rope_scaling") or {}
    found = parameters.get("original_max_position_embeddings") if isinstance(parameters, Mapping) else None
    found = found or config.get("original_max_position_embeddings")
    return int(found) if isinstance(found, int) and not isinstance(found, bool) and found > 0 else None


def per_layer_type_rope(config: Mapping[str, Any]) -> bool:
    """Whether the config gives each layer type its own rope (Gemma 3's local and global bases)."""
    value = config.get("rope_parameters")
    return isinstance(value, Mapping) and any(isinstance(v, Mapping) for v in value.values())


def find(families: Collection[Family], model_type: str, ids_of: Mapping[str, int], where: str) -> Family:
    """The one family of `model_type` whose markers are all in the vocabulary `ids_of` (token text -> id) at
    their ids; UnknownFamily naming what was found otherwise."""
    of_type = [f for f in families if model_type in f.model_types]
    if not of_type:
        raise UnknownFamily(f"{where} has model_type {shown(model_type)}")
    matching = [f for f in of_type if all(ids_of.get(m) == i for m, i in f.markers.items())]
    if len(matching) != 1:
        known = " or ".join(f"{f.title} ({', '.join(f'{m} {i}' for m, i in f.markers.items())})" for f in of_type)
        found = "none" if not matching else ", ".join(f.title for f in matching)
        raise UnknownFamily(
            f"{where} has model_type {shown(model_type)} but its tokens match {found} of the families packager "
            f"converts for it: {known}"
        )
    return matching[0]
