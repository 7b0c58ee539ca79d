"""The bundle kinds packager makes, their file names and what each file is for.

- draft: the ten-file draft bundle for an app's `draftmodel` mode (the kind packager has always made);
- target: a model upstream MNN runs on its own (config.json with the paths, the graph, weights, tokenizer), with
  `embeddings_bf16.bin` when its embeddings are untied;
- target+eagle: a target exported together with its EAGLE-3 head, which MNN runs with speculative_type "eagle";
- target+dflash: a target exported together with its DFlash draft, which MNN (3.6.x) runs with speculative_type
  "dflash".
Any kind may carry a lookahead corpus (`lookup_file.txt`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..infra.userfile import read_at_most

_GRAPH = {
    "llm.mnn": "Model graph",
    "llm.mnn.json": "Model graph as JSON (reference copy)",
    "llm.mnn.weight": "Model weights (quantized)",
    "llm_config.json": "Model settings and chat template",
}
# name -> purpose; the order is the order the card lists them in.
FILES: dict[str, str] = {
    "config.json": "MNN runtime settings (main config: paths, CPU draft settings)",
    "config_cpu.json": "Draft runtime settings (CPU, 2 threads, greedy)",
    "config_opencl.json": "Reference OpenCL target settings (app-specific draftmodel keys)",
    "draft_config_cpu.json": "Draft runtime settings (same as config_cpu.json)",
    **_GRAPH,
    "runtime_config.json": "Recommended speculative-decoding settings and compatible targets (app-level)",
    "tokenizer.txt": "Tokenizer",
}
TARGET_FILES: dict[str, str] = {
    "config.json": "MNN runtime settings (paths, backend, sampler)",
    **_GRAPH,
    "tokenizer.txt": "Tokenizer",
}
EMBEDDINGS = "embeddings_bf16.bin"
EAGLE_FILES: dict[str, str] = {
    "eagle.mnn": "EAGLE-3 head graph (one decoder layer over the target's hidden states)",
    "eagle.mnn.weight": "EAGLE-3 head weights (quantized)",
    "eagle_fc.mnn": "EAGLE-3 input projection graph (three target hidden states to one)",
    "eagle_fc.mnn.weight": "EAGLE-3 input projection weights",
    "eagle_d2t.mnn": "EAGLE-3 draft-to-target vocabulary map",
}
DFLASH_FILES: dict[str, str] = {
    "dflash.mnn": "DFlash draft graph and weights (the draft layers, 8-bit)",
    "dflash_fc.mnn": "DFlash context projection (fc and hidden_norm over the target's hidden states, float)",
    "dflash_lmhead.mnn": "DFlash draft's lm_head graph (the target's own lm_head, as llm.mnn.weight stores it)",
    "dflash_lmhead.mnn.weight": "DFlash draft's lm_head weights (the bytes of the target's lm_head)",
}
# The draft's own graphs (made from its checkpoint; the rest of DFLASH_FILES come from the target's graph)
DFLASH_GRAPHS = ("dflash.mnn", "dflash_fc.mnn")
DFLASH_LMHEAD = "dflash_lmhead.mnn"
LOOKUP = "lookup_file.txt"
# Files a bundle of any kind may hold; `embeddings_bf16.bin` is required where llm_config.json has no tie.
OPTIONAL: dict[str, str] = {
    EMBEDDINGS: "Token embeddings (bfloat16; the embeddings are not tied to lm_head)",
    LOOKUP: "Lookahead corpus (MNN matches n-grams of it while decoding)",
}
# What a release adds beside a kind's files: the card, the model's license file when its license asks for a copy
# with the model (Llama's) or the checkpoint has one, the manifest of every file, and the signature over them.
CARD = "README.md"
LICENSE_FILE = "LICENSE"
MANIFEST = "checksums.xxh128"
SIGNATURE = "model.sig"  # signs the manifest, so the manifest cannot list it
RELEASE_EXTRAS = (CARD, LICENSE_FILE, MANIFEST, SIGNATURE)
DRAFT_ONLY = ("config_cpu.json", "config_opencl.json", "draft_config_cpu.json", "runtime_config.json")
# What an app downloads to run the draft; the rest are reference files.
APP_FILES = (
    "llm.mnn",
    "llm.mnn.weight",
    "llm_config.json",
    "config.json",
    "config_cpu.json",
    "draft_config_cpu.json",
    "tokenizer.txt",
)
_TARGET_APP = ("config.json", "llm.mnn", "llm.mnn.weight", "llm_config.json", "tokenizer.txt")


@dataclass(frozen=True)
class BundleKind:
    name: str  # "draft", "target", "target+eagle"
    description: str
    files: dict[str, str]  # required, name -> purpose
    app_files: tuple[str, ...]  # what an app downloads to run it (optional files it holds come on top)

    def all_files(self) -> dict[str, str]:
        """Required and optional names, in card order."""
        return {**self.files, **OPTIONAL}

    def present(self, folder: Path) -> list[str]:
        """The required files, then the optional ones the folder holds."""
        return [*self.files, *(name for name in OPTIONAL if (folder / name).is_file())]

    def app_set(self, folder: Path) -> list[str]:
        return [*self.app_files, *(name for name in OPTIONAL if (folder / name).is_file())]

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        """A kind is one of KINDS, compared by identity: pickled (a result sent to another process), it comes back
        as that same object, not a copy."""
        return (named, (self.name,))


DRAFT = BundleKind("draft", "a draft model for an app's draftmodel mode (ten files)", FILES, APP_FILES)
TARGET = BundleKind("target", "a model upstream MNN runs on its own", TARGET_FILES, _TARGET_APP)
TARGET_EAGLE = BundleKind(
    "target+eagle",
    "a target with its EAGLE-3 head (speculative_type eagle)",
    {**TARGET_FILES, **EAGLE_FILES},
    (*_TARGET_APP, *EAGLE_FILES),
)
TARGET_DFLASH = BundleKind(
    "target+dflash",
    "a target with its DFlash draft (speculative_type dflash)",
    {**TARGET_FILES, **DFLASH_FILES},
    (*_TARGET_APP, *DFLASH_FILES),
)
KINDS = {kind.name: kind for kind in (DRAFT, TARGET, TARGET_EAGLE, TARGET_DFLASH)}


def named(name: str) -> BundleKind:
    """The kind of that name (KINDS)."""
    return KINDS[name]


# Every name any kind holds (what a folder of bundle files may contain).
ALL_NAMES = frozenset(FILES) | frozenset(TARGET_EAGLE.files) | frozenset(DFLASH_FILES) | frozenset(OPTIONAL)


def kind_from_names(names: set[str] | frozenset[str]) -> BundleKind:
    """The kind a set of file names says (a Hub listing, a manifest): as kind_of, without reading config.json."""
    if names & set(EAGLE_FILES):
        return TARGET_EAGLE
    if names & set(DFLASH_FILES):
        return TARGET_DFLASH
    if names & set(DRAFT_ONLY):
        return DRAFT
    return TARGET if {"config.json", "llm.mnn"} <= names else DRAFT


def release_names(folder: Path, *extras: str) -> tuple[str, ...]:
    """The files a release of this folder's kind holds, the license file when the folder has one, then `extras`
    (the card, the manifest)."""
    license_file = (LICENSE_FILE,) if (folder / LICENSE_FILE).is_file() else ()
    return (*kind_of(folder).present(folder), *license_file, *extras)


def kind_of(folder: Path) -> BundleKind:
    """The kind a folder's files say it is: eagle files or speculative_type eagle make target+eagle (dflash files or
    speculative_type dflash target+dflash), any of the
    draft's app configs a draft, config.json and the graph without them a target. A folder that is none of
    these is judged a draft, whose ten files validate then names."""

    def has(name: str) -> bool:
        try:
            return (folder / name).is_file()
        except OSError:
            return False

    mode = _speculative_type(folder / "config.json")
    if any(has(name) for name in EAGLE_FILES) or mode == "eagle":
        return TARGET_EAGLE
    if any(has(name) for name in DFLASH_FILES) or mode == "dflash":
        return TARGET_DFLASH
    if any(has(name) for name in DRAFT_ONLY):
        return DRAFT
    if has("config.json") and has("llm.mnn"):
        return TARGET
    return DRAFT


def _speculative_type(config: Path) -> str | None:
    try:
        text = read_at_most(config, 1 << 20)  # a device or sparse file claims any size: read no further
        data = json.loads(text) if len(text) <= 1 << 20 else None
    except (OSError, ValueError, RecursionError):
        return None
    value = data.get("speculative_type") if isinstance(data, dict) else None
    return value if isinstance(value, str) else None
