"""Every config.json key a family's transformers modeling code reads, and what packager does with it.

A key is one of three things, never ignored:
- carried: it reaches the graph (or the bundle's files) and changes what they compute;
- refused: the graph assumes one value; any other is refused before any work, naming the key and the value
  packager converts;
- irrelevant: shown not to change what the model computes at inference (dropout, initialisation, multimodal parts).

Each key may carry checks of its value: a value that is not valid at all (a string for a number, a window of 0) is
an invalid config (exit 11); a valid value the graph cannot compute is refused (exit 12). The tables are written
into the docs (docs/reference/config-keys.md) and held against transformers' modeling files by
tests/test_config_keys.py. A leaf like the rest of families/: imports nothing else of packager."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, TypeGuard

from .base import Check, ConfigKey, Finding, shown

CARRIED, REFUSED, IRRELEVANT = "carried", "refused", "irrelevant"
ROLES = (CARRIED, REFUSED, IRRELEVANT)
# The largest window MNN reads (an int32 of llm_config.json); a larger number wraps.
INT32_MAX = 2**31 - 1


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> TypeGuard[float]:
    """A finite number a float holds (an integer of 400 digits is none: it would overflow every float after it)."""
    if _is_int(value):
        return abs(value) < 2**63
    return isinstance(value, float) and math.isfinite(value)


def positive_int(key: str, top: int | None = None) -> Check:
    """Present: an integer from 1 (to `top`)."""

    def check(config: Mapping[str, Any]) -> Finding | None:
        if key not in config or config[key] is None:
            return None
        value = config[key]
        if not _is_int(value) or value < 1 or (top is not None and value > top):
            upto = f" up to {top:,}" if top is not None else ""
            return Finding(key, f"{key} must be a whole number from 1{upto}, found {shown(value)}", False)
        return None

    return check


def positive_number(key: str, nullable: bool = False) -> Check:
    """Present: a finite number above 0 (or null where `nullable`)."""

    def check(config: Mapping[str, Any]) -> Finding | None:
        if key not in config or (config[key] is None and nullable):
            return None
        value = config[key]
        if not _is_number(value) or value <= 0:
            return Finding(key, f"{key} must be a number above 0, found {shown(value)}", False)
        return None

    return check


def boolean(key: str) -> Check:
    def check(config: Mapping[str, Any]) -> Finding | None:
        if key in config and config[key] is not None and not isinstance(config[key], bool):
            return Finding(key, f"{key} must be true or false, found {shown(config[key])}", False)
        return None

    return check


def only(key: str, converts: Any, why: str, default: Any = None, also: tuple[Any, ...] = ()) -> Check:
    """The graph assumes `converts` (a missing key means `default`; `also` lists values that mean the same)."""

    def check(config: Mapping[str, Any]) -> Finding | None:
        value = config.get(key, default)
        if value == converts or value in also:
            return None
        return Finding(key, f"{key} is {shown(value)}: {why}; packager converts {key} = {shown(converts)}", True)

    return check


def rope_theta(config: Mapping[str, Any]) -> Finding | None:
    """rope_theta (and rope_local_base_freq) wherever a config keeps them: top level, in rope_parameters, or in
    each layer type's rope_parameters."""
    places: list[tuple[str, Mapping[str, Any]]] = [("", config)]
    for outer in ("rope_parameters", "rope_scaling"):
        value = config.get(outer)
        if isinstance(value, Mapping):
            places.append((f"{outer}.", value))
            places += [(f"{outer}.{k}.", v) for k, v in value.items() if isinstance(v, Mapping)]
    for prefix, place in places:
        for key in ("rope_theta", "rope_local_base_freq"):
            if key in place and (not _is_number(place[key]) or place[key] <= 0):
                name = prefix + key
                return Finding(name, f"{name} must be a number above 0, found {shown(place[key])}", False)
    return None


def kv_heads(config: Mapping[str, Any]) -> Finding | None:
    """num_key_value_heads: a whole number that divides num_attention_heads."""
    value, heads = config.get("num_key_value_heads"), config.get("num_attention_heads")
    if value is None:
        return None
    if not _is_int(value) or value < 1:
        return Finding(
            "num_key_value_heads", f"num_key_value_heads must be a whole number from 1, found {shown(value)}", False
        )
    if _is_int(heads) and heads > 0 and heads % value:
        return Finding(
            "num_key_value_heads",
            f"num_key_value_heads {value} does not divide num_attention_heads {heads}",
            False,
        )
    return None


def window_within_positions(key: str = "sliding_window") -> Check:
    """A sliding window: a whole number from 1 up to max_position_embeddings (a window that covers every position
    is full attention: say so with layer_types instead) and within what MNN reads."""

    def check(config: Mapping[str, Any]) -> Finding | None:
        value = config.get(key)
        positions = config.get("max_position_embeddings")
        top = positions if _is_int(positions) and 0 < positions <= INT32_MAX else INT32_MAX
        if not _is_int(value) or value < 1 or value > top:
            return Finding(
                key,
                f"{key} must be a whole number from 1 up to max_position_embeddings ({top:,}), found {shown(value)} "
                "(for full attention in every layer, set layer_types to full_attention)",
                False,
            )
        return None

    return check


def eos_ids(config: Mapping[str, Any]) -> Finding | None:
    """eos_token_id: a token id or a list of them, each within the model's rows."""
    value = config.get("eos_token_id")
    if value is None:
        return None
    rows = config.get("vocab_size")
    top = rows if _is_int(rows) and rows > 0 else None
    for item in value if isinstance(value, list) else [value]:
        if not _is_int(item) or item < 0 or (top is not None and item >= top):
            within = f"from 0 to {top - 1:,}" if top is not None else "of 0 or more"
            return Finding("eos_token_id", f"eos_token_id {shown(item)} is not a token id (ids are {within})", False)
    return None


# Keys every family packager converts shares, as transformers' Llama-style modeling code reads them.
SHAPE = (
    ConfigKey("hidden_size", CARRIED, "the graph's width", (positive_int("hidden_size"),)),
    ConfigKey("intermediate_size", CARRIED, "the MLP's width", (positive_int("intermediate_size"),)),
    ConfigKey("num_hidden_layers", CARRIED, "the graph's layers", (positive_int("num_hidden_layers"),)),
    ConfigKey("num_attention_heads", CARRIED, "the attention's query heads", (positive_int("num_attention_heads"),)),
    ConfigKey("num_key_value_heads", CARRIED, "the attention's key/value heads (grouped-query)", (kv_heads,)),
    ConfigKey("head_dim", CARRIED, "each head's width (hidden_size / heads when absent)", (positive_int("head_dim"),)),
    ConfigKey("vocab_size", CARRIED, "the embedding and lm_head rows", (positive_int("vocab_size"),)),
    ConfigKey(
        "tie_word_embeddings",
        CARRIED,
        "a draft shares its embedding table with lm_head; a target's untied table is its embeddings file",
        (boolean("tie_word_embeddings"),),
    ),
    ConfigKey("rms_norm_eps", CARRIED, "each RMSNorm's epsilon", (positive_number("rms_norm_eps"),)),
    ConfigKey(
        "rope_parameters",
        CARRIED,
        "the rope frequencies (theta, type, scaling) written into the graph",
        (rope_theta,),
    ),
    ConfigKey("rope_scaling", CARRIED, "rope_parameters' name before transformers 5", (rope_theta,)),
    ConfigKey("rope_theta", CARRIED, "the rope base before transformers 5 (rope_parameters since)", (rope_theta,)),
    ConfigKey(
        "max_position_embeddings",
        IRRELEVANT,
        "the positions the model was trained for; the graph computes every position alike (a rope's own limits "
        "are in rope_parameters)",
        (positive_int("max_position_embeddings"),),
    ),
    ConfigKey(
        "eos_token_id",
        CARRIED,
        "stop ids beyond the family's own (tokenizer.txt and llm_config.json)",
        (eos_ids,),
    ),
    ConfigKey("bos_token_id", IRRELEVANT, "the bundle's BOS is the family's token, found in the tokenizer"),
    ConfigKey("pad_token_id", IRRELEVANT, "marks the padding row for training; inference never looks a token up by it"),
    ConfigKey("attention_dropout", IRRELEVANT, "dropout is off at inference"),
    ConfigKey("initializer_range", IRRELEVANT, "initialises untrained weights; the checkpoint's weights are read"),
    ConfigKey("use_cache", IRRELEVANT, "transformers' own KV cache switch; MNN always keeps its cache"),
)


def assumes(key: str, converts: Any, why: str, default: Any = None, also: tuple[Any, ...] = ()) -> ConfigKey:
    """A refused key: the graph assumes `converts` for the reason `why` (the docs' table says the same)."""
    return ConfigKey(key, REFUSED, why, (only(key, converts, why, default, also),))


def silu(key: str = "hidden_act") -> ConfigKey:
    return assumes(key, "silu", "the graph's MLP is SwiGLU", default="silu")


def no_bias(key: str, what: str) -> ConfigKey:
    return assumes(key, False, f"the family's {what} have no biases", default=False)


def _full_layers(config: Mapping[str, Any]) -> Finding | None:
    kinds = config.get("layer_types")
    if kinds is None or (isinstance(kinds, list) and all(k == "full_attention" for k in kinds)):
        return None
    odd = sorted({str(k) for k in kinds}) if isinstance(kinds, list) else kinds
    return Finding(
        "layer_types",
        f"layer_types holds {shown(odd)}: the graph attends to every earlier position in every layer; packager "
        "converts layer_types = full_attention in every layer",
        True,
    )


def full_attention_only(family: str) -> tuple[ConfigKey, ...]:
    """Qwen2/Qwen3's sliding-window switches: a layer past max_window_layers slides only when use_sliding_window."""

    def sliding(config: Mapping[str, Any]) -> Finding | None:
        if config.get("use_sliding_window") is not True:
            return None
        layers, first = config.get("num_hidden_layers"), config.get("max_window_layers")
        if _is_int(layers) and _is_int(first) and first >= layers:
            return None  # no layer slides
        return Finding(
            "use_sliding_window",
            f"use_sliding_window is true with max_window_layers {shown(first)} of {shown(layers)} layers: the "
            f"{family} graph attends to every earlier position in every layer; packager converts "
            "use_sliding_window = false",
            True,
        )

    return (
        ConfigKey(
            "use_sliding_window",
            REFUSED,
            "every layer attends to every earlier position (refused when a layer would slide)",
            (boolean("use_sliding_window"), sliding),
        ),
        ConfigKey(
            "max_window_layers",
            IRRELEVANT,
            "matters only with use_sliding_window, which is refused when a layer would slide",
            (positive_int("max_window_layers"),),
        ),
        ConfigKey(
            "sliding_window",
            IRRELEVANT,
            "read only for sliding layers, which use_sliding_window = false leaves out",
        ),
        ConfigKey("layer_types", REFUSED, "every layer is full_attention", (_full_layers,)),
    )


def table(*groups: tuple[ConfigKey, ...] | ConfigKey) -> tuple[ConfigKey, ...]:
    """The keys of `groups`, a later key replacing an earlier one of the same name, in first-seen order."""
    keys: dict[str, ConfigKey] = {}
    for group in groups:
        for key in group if isinstance(group, tuple) else (group,):
            keys[key.name] = key
    return tuple(keys.values())


def findings(keys: tuple[ConfigKey, ...], config: Mapping[str, Any]) -> list[Finding]:
    """What is wrong with the config's values under the table `keys`, invalid values first."""
    found = [f for key in keys for check in key.checks if (f := check(config)) is not None]
    unique = list(dict.fromkeys(found))  # one check may serve several keys (rope_theta's, wherever it is kept)
    return sorted(unique, key=lambda f: f.refused)


# The Llama architecture's keys (Llama 3.x and SmolLM2).
LLAMA_KEYS = table(
    SHAPE,
    silu(),
    no_bias("attention_bias", "attention projections"),
    no_bias("mlp_bias", "MLP projections"),
    ConfigKey("pretraining_tp", IRRELEVANT, "a tensor-parallel training switch transformers 5's Llama never reads"),
)
