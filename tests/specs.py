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


def family_release_spec(folder: Path, source: Path, base: str) -> Path:
    """The card tests' spec, converting `source` at 8 bits and verifying on three prompts of its own."""
    (folder / "prompts.txt").write_text("The capital of France is\ndef fibonacci(n):\nQ: Why is the sky blue?\n")
    return card_spec(
        folder, base=base, source=source, extra=("quant_bits = 8", "", "[verify]", 'prompts = "prompts.txt"')
    )
