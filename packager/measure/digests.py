"""What a measurement read: the digests a pair or verify report carries, so a card states its figures only for
those very files."""

from __future__ import annotations

from pathlib import Path


def measured_digests(folder: Path) -> dict[str, str]:
    """xxh3-128 of the files a measurement read from `folder`: an MNN folder's runtime files (what an app downloads
    to run it, plus a lookup corpus), or a checkpoint's (config, weights, tokenizer). A report carries them so that
    a card states its figures only for those very files."""
    from ..bundle.kinds import kind_of
    from ..infra.hashing import xxh3_128_file
    from ..runtime.models import is_bundle

    if not is_bundle(folder):
        from ..convert.provenance import checkpoint_sources

        return checkpoint_sources(folder)
    names = [name for name in kind_of(folder).app_set(folder) if (folder / name).is_file()]
    return {name: xxh3_128_file(folder / name) for name in sorted(names)}
