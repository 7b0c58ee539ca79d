"""The quantization recipe: bits, block, symmetry, algorithm, and the lm_head's own bits and block.

llmexport 0.0.5 offers each of these (--quant_bit, --quant_block, --sym, --hqq, --lm_quant_bit,
--lm_quant_block). Its --awq is not offered: AwqQuantizer calibrates on wikitext or pile-val fetched through
`datasets` at conversion time, data the fenced converter (no network) does not have.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal, cast

from ..errors import InvalidOption, SpecError, shorten

if TYPE_CHECKING:
    from .inspect.checkpoint import ModelShape

Algorithm = Literal["plain", "hqq"]
ALGORITHMS = ("plain", "hqq")
DEFAULT_BITS, DEFAULT_BLOCK = 4, 128  # 4-bit weights in blocks of 128, the bundle's recipe unless a spec says otherwise
BITS = (4, 8)
AWQ_HINT = (
    "llmexport's AWQ calibrates on wikitext/pile-val downloaded at conversion time, which the fenced "
    "converter cannot fetch; use plain or hqq"
)


@dataclass(frozen=True)
class QuantRecipe:
    bits: int = 4
    block: int = 128  # 0 = one block per row (per-channel)
    symmetric: bool = False
    algorithm: Algorithm = "plain"
    lm_bits: int | None = None  # the lm_head (also the tied embedding table); None = bits
    lm_block: int | None = None  # None = block

    @property
    def lm(self) -> tuple[int, int]:
        return (self.lm_bits or self.bits, self.block if self.lm_block is None else self.lm_block)

    @property
    def streamable(self) -> bool:
        """The streaming writer reproduces llmexport's bytes for plain asymmetric, one spec for every linear."""
        return self.algorithm == "plain" and not self.symmetric and self.lm == (self.bits, self.block)

    @property
    def name(self) -> str:
        parts = [f"{self.bits}bit", "per-channel" if self.block == 0 else f"b{self.block}"]
        parts += ["sym"] if self.symmetric else []
        parts += [self.algorithm] if self.algorithm != "plain" else []
        if self.lm != (self.bits, self.block):
            parts.append(f"lm{self.lm[0]}bit" + ("" if self.lm[1] == self.block else f"-b{self.lm[1]}"))
        return "-".join(parts)

    def flags(self) -> dict[str, Any]:
        """The recipe as convert's options (ConvertRequest's fields, a spec's [convert] keys)."""
        return {
            "quant_bits": self.bits,
            "quant_block": self.block,
            "symmetric": self.symmetric,
            "algorithm": self.algorithm,
            "lm_bits": self.lm[0],
            "lm_block": self.lm[1],
        }

    def record(self) -> dict[str, Any]:
        """The recipe with the lm_head's values resolved (provenance, card, sweep JSON)."""
        return {**asdict(self), "lm_bits": self.lm[0], "lm_block": self.lm[1]}


# How a refusal names each recipe value given on the command line; a value from the release spec is named by its
# key instead ("[convert] quant_block"), and refused as a SpecError.
FLAGS = {
    "quant_bits": "--quant-bits",
    "quant_block": "--quant-block",
    "symmetric": "--sym",
    "algorithm": "--algorithm",
    "lm_bits": "--lm-bits",
    "lm_block": "--lm-block",
}


@dataclass(frozen=True)
class Origin:
    """Where a recipe's values came from: the keys the release spec (at `spec`) set; the rest are flags or
    defaults. Names each value in a refusal as the user wrote it, and picks the error (SpecError for the spec's)."""

    spec_keys: frozenset[str] = frozenset()
    spec: str = "the release spec"

    def name(self, key: str) -> str:
        return f"[convert] {key}" if key in self.spec_keys else FLAGS[key]

    def refuse(self, key: str, message: str, hint: str) -> InvalidOption | SpecError:
        if key in self.spec_keys:
            return SpecError(f"{self.spec}: {self.name(key)} {message}", hint)
        return InvalidOption(f"{self.name(key)} {message}", hint)


def build(values: dict[str, Any], where: str = "", origin: Origin = Origin()) -> QuantRecipe:
    """A recipe from a dict with the spec's key names (quant_bits, quant_block, symmetric, algorithm, lm_bits,
    lm_block); unknown keys and impossible combinations raise InvalidOption with one line (`where` names a sweep's
    recipe; else each value is named as `origin` says it was given)."""
    known = {"quant_bits", "quant_block", "symmetric", "algorithm", "lm_bits", "lm_block", "name"}
    extra = sorted(set(values) - known)
    prefix = f"{where}: " if where else ""
    if extra:
        raise InvalidOption(f"{prefix}unknown recipe key {shorten(extra[0])}", f"use {', '.join(sorted(known))}")
    algorithm = values.get("algorithm") or "plain"
    refuse = _refuser(prefix, origin)
    if algorithm == "awq":
        raise refuse("algorithm", "awq is not offered", AWQ_HINT)
    if algorithm not in ALGORITHMS:
        raise refuse("algorithm", f"{shorten(str(algorithm))} is not known", "use plain or hqq")
    recipe = QuantRecipe(
        bits=values.get("quant_bits") or 4,
        block=128 if values.get("quant_block") is None else values["quant_block"],
        symmetric=bool(values.get("symmetric")),
        algorithm=cast(Algorithm, algorithm),  # one of ALGORITHMS: checked above
        lm_bits=values.get("lm_bits"),
        lm_block=values.get("lm_block"),
    )
    check(recipe, prefix, origin=origin)
    return recipe


def check(
    recipe: QuantRecipe,
    prefix: str = "",
    inputs: dict[str, int] | None = None,
    origin: Origin = Origin(),
    model: str = "this checkpoint",
) -> None:
    """Refuse what llmexport cannot make, or would silently make otherwise than asked: each value named as the user
    gave it (origin), the block's hint from `inputs` (what divides them for `model`, e.g. "this SmolLM2 checkpoint")."""
    lm_bits_key = "lm_bits" if recipe.lm_bits is not None else "quant_bits"  # the lm_head takes the body's otherwise
    lm_block_key = "lm_block" if recipe.lm_block is not None else "quant_block"
    refuse = _refuser(prefix, origin)
    for key, bits in (("quant_bits", recipe.bits), (lm_bits_key, recipe.lm[0])):
        if bits not in BITS:
            raise refuse(key, f"{shorten(str(bits))} is not supported", "use 4 or 8")
    for key, block in (("quant_block", recipe.block), (lm_block_key, recipe.lm[1])):
        if not isinstance(block, int) or block < 0:
            raise refuse(
                key,
                f"{shorten(str(block))} is negative or not a number",
                "use 0 (one block per row, llmexport's per-channel) or a positive block size",
            )
    fits = default_block(inputs or {})
    for name, size in (inputs or {}).items():
        for key, block in (("quant_block", recipe.block), (lm_block_key, recipe.lm[1])):
            if block and size % block and (key == "quant_block" or "lm_head" in name):
                # llmexport would halve the block until it divides: a recipe other than the one asked for.
                said = f"{fits}, the default for {model}" if fits else "none of 128, 64 and 32 does here"
                raise refuse(
                    key,
                    f"{block} does not divide the input size {size} of {name}",
                    f"use a block size that divides every input size ({said}), or 0 for per-channel"
                    + (f"; or leave {origin.name(key)} out" if key in origin.spec_keys else ""),
                )


def _refuser(prefix: str, origin: Origin) -> Callable[[str, str, str], InvalidOption | SpecError]:
    """How a refusal names a value: after `prefix` (a sweep's recipe file and entry) by its flag, else as `origin`
    says it was given."""

    def refuse(key: str, message: str, hint: str) -> InvalidOption | SpecError:
        if prefix:
            return InvalidOption(f"{prefix}{FLAGS[key]} {message}", hint)
        return origin.refuse(key, message, hint)

    return refuse


def quantized_inputs(shape: ModelShape) -> dict[str, int]:
    """Input size of every kind of linear the converter quantizes (the block must divide each)."""
    return {
        "q/k/v_proj and gate/up_proj and lm_head (hidden_size)": shape.hidden_size,
        "o_proj (num_attention_heads x head_dim)": shape.num_heads * shape.head_dim,
        "down_proj (intermediate_size)": shape.intermediate_size,
    }


def defaults(default_bits: int, shape: ModelShape) -> Mapping[str, int]:
    """What a conversion takes when neither flags nor the spec say: the family's bits (`default_bits`) and the
    largest block every input size of the shape divides (default_block)."""
    return {"quant_bits": default_bits, "quant_block": default_block(quantized_inputs(shape))}


def default_block(inputs: dict[str, int]) -> int:
    """The recipe's block when none is asked for: 128, else the largest of 64 and 32 that divides every input size
    (SmolLM2-135M's hidden 576), else 0 (per-channel)."""
    for block in (DEFAULT_BLOCK, 64, 32):
        if all(size % block == 0 for size in inputs.values()):
            return block
    return 0


def default_grid(block: int = DEFAULT_BLOCK) -> tuple[QuantRecipe, ...]:
    """The sweep's default: a small grid around 4-bit at the checkpoint's default block (128; 64 for SmolLM2-135M,
    see default_block), halved and quartered blocks, and 8-bit as the ceiling."""
    return (
        QuantRecipe(block=block),
        QuantRecipe(block=block // 2),
        QuantRecipe(block=block // 4),
        QuantRecipe(block=block, symmetric=True),
        QuantRecipe(block=block, algorithm="hqq"),
        QuantRecipe(block=block, lm_bits=8),
        QuantRecipe(block=block, algorithm="hqq", lm_bits=8),
        QuantRecipe(block=block, bits=8),
    )
