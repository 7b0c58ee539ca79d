"""Release specs for the tests: the example spec, and small specs written to a folder."""

from __future__ import annotations

from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "release.toml"


def card_spec(
    folder: Path,
    *,
    license: str | None = None,
    base: str = "meta-llama/Llama-3.2-1B-Instruct",
    source: Path | None = None,
    extra: tuple[str, ...] = (),  # lines after the [convert] table (its keys, then other tables)
) -> Path:
    lines = [
        "[release]",
        'repo_id = "me/tiny-draft-mnn"',
        'title = "Tiny draft"',
        'version = "v1"',
        'summary = "A tiny draft."',
        *([f'license = "{license}"'] if license else []),
        "",
        "[model]",
        f'base_model = "{base}"',
        "",
        "[card]",
        'runs_on = "Android phones (CPU)"',
        'limitations = ["A test model."]',
        *(["", "[convert]", f'checkpoint = "{source}"'] if source else []),
        *extra,
    ]
    path = folder / "release.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


FEW_PROMPTS = ("The capital of France is", "def fibonacci(n):", "Q: Why is the sky blue?")


def few_prompts(folder: Path) -> Path:
    """A verify workload of three prompts (prose, code, a question) in `folder`/prompts.txt: for the tests whose
    point is not the built-in workload's size (54 conversations, over 1,000 positions), which bench/ measures."""
    path = folder / "prompts.txt"
    path.write_text("\n".join(FEW_PROMPTS) + "\n", encoding="utf-8")
    return path


def family_release_spec(folder: Path, source: Path, base: str) -> Path:
    """The card tests' spec, converting `source` at 8 bits and verifying on three prompts of its own."""
    few_prompts(folder)
    return card_spec(
        folder, base=base, source=source, extra=("quant_bits = 8", "", "[verify]", 'prompts = "prompts.txt"')
    )


# A matrix release spec's [matrix] table over the card spec's tables: recipes by default, a checkpoint axis when
# given checkpoints (name -> folder), a kind axis when given kinds (the template then needs a {kind}).
RECIPES = (("q4", 4, 128), ("q8", 8, 0))
# Recipes whose graphs the session's graph cache holds for the tiny Qwen3 and the tiny Llama checkpoints: the
# bundle4/bundle8 and llama_bundle8 fixtures and the Llama family's streaming test build them (8 bits in blocks of 128).
CACHED_RECIPES = (("q4", 4, 128), ("q8", 8, 128))


def matrix_spec(
    folder: Path,
    *,
    checkpoints: dict[str, Path] | None = None,
    recipes: tuple[tuple[str, int, int], ...] = RECIPES,
    repo_id: str = "me/tiny-{checkpoint}-{recipe}-mnn",
    lines: tuple[str, ...] = (),  # more lines of the [matrix] table or after it
    prompts: bool = True,
    base: str = "meta-llama/Llama-3.2-1B-Instruct",
    verify: tuple[str, ...] = (),  # more lines of [verify]
    kinds: tuple[str, ...] = (),  # bundle kinds: draft, target
    collection: str | None = None,  # [release] collection
    bases: dict[str, str] | None = None,  # a checkpoint's own [model] base_model (its family's), by its name
) -> Path:
    path = card_spec(
        folder, base=base, extra=(*(("", "[verify]", 'prompts = "prompts.txt"', *verify) if prompts else ()),)
    )
    if collection is not None:
        line = f'collection = "{collection}"'
        text = path.read_text(encoding="utf-8").replace('version = "v1"', f'version = "v1"\n{line}')
        path.write_text(text, encoding="utf-8")
    if prompts:
        few_prompts(folder)
    found = checkpoints if checkpoints is not None else {"tiny": folder / "tiny"}
    text = [
        "",
        "[matrix]",
        f'repo_id = "{repo_id}"',
        'title = "Tiny {checkpoint} draft ({recipe})"',
        *lines,
    ]
    for name, checkpoint in found.items():
        text += ["", "[[matrix.axes.checkpoint]]", f'name = "{name}"', f'convert = {{ checkpoint = "{checkpoint}" }}']
        if bases and name in bases:
            text.append(f'model = {{ base_model = "{bases[name]}" }}')
    for name, bits, block in recipes:
        quant = f"quant_bits = {bits}" + (f", quant_block = {block}" if block else "")
        text += ["", "[[matrix.axes.recipe]]", f'name = "{name}"', f"convert = {{ {quant} }}"]
    for kind in kinds:
        text += ["", "[[matrix.axes.kind]]", f'name = "{kind}"', f'convert = {{ kind = "{kind}" }}']
    path.write_text(path.read_text(encoding="utf-8") + "\n".join(text) + "\n", encoding="utf-8")
    return path
