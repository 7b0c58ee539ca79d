"""embeddings_bf16.bin: a bfloat16 embedding is copied by the kernel, byte for byte what the row-by-row path writes;
and a graph's uuid is read where MNN's flatbuffer keeps it, the one the search through the whole file finds."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from packager.convert import reproducible
from packager.convert.pipeline import ConvertResult
from packager.convert.stream import weightwriter
from packager.convert.stream.weightwriter import index, write_embeddings


@pytest.fixture()
def weights(tmp_path: Path) -> Path:
    generator = torch.Generator().manual_seed(3)
    tensors = {
        "a.weight": torch.randn(7, 5, generator=generator).to(torch.bfloat16),  # before: the embedding is not at 0
        "model.embed_tokens.weight": torch.randn(301, 64, generator=generator).to(torch.bfloat16),
    }
    save_file(tensors, str(tmp_path / "model.safetensors"))
    return tmp_path / "model.safetensors"


def test_a_bfloat16_embedding_is_copied_as_the_row_by_row_path_writes_it(weights: Path, tmp_path: Path) -> None:
    ref = index((weights,))["model.embed_tokens.weight"]
    write_embeddings(tmp_path / "copied.bin", ref)
    write_embeddings(tmp_path / "rows.bin", ref, rows_per_chunk=7)  # the path through Python's buffers
    table = (tmp_path / "rows.bin").read_bytes()
    assert (tmp_path / "copied.bin").read_bytes() == table
    assert len(table) == 301 * 64 * 2


def test_a_file_system_that_cannot_copy_ranges_gets_the_row_by_row_bytes(
    weights: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ref = index((weights,))["model.embed_tokens.weight"]
    write_embeddings(tmp_path / "rows.bin", ref, rows_per_chunk=7)

    def refuse(*_: object) -> int:
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(weightwriter.os, "copy_file_range", refuse)
    write_embeddings(tmp_path / "fallback.bin", ref)
    assert (tmp_path / "fallback.bin").read_bytes() == (tmp_path / "rows.bin").read_bytes()


@pytest.mark.converter
def test_the_graph_uuid_is_read_where_the_flatbuffer_keeps_it(bundle4: ConvertResult) -> None:
    data = (bundle4.out / "llm.mnn").read_bytes()
    assert reproducible._net_uuid(data) == bundle4.graph_uuid.encode("ascii")
    assert set(reproducible._UUID.findall(data)) == {bundle4.graph_uuid.encode("ascii")}
    assert reproducible._net_uuid(b"\x00" * 64) is None  # not a graph: the caller searches instead
    assert reproducible._net_uuid(b"") is None
