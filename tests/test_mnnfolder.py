"""An MNN folder's vocabulary is read from every form a folder states it in (tie_embeddings as a list of 5 or 6
entries or as an object, embeddings files of each dtype, the graph description), and files that disagree are
refused with the reason, by pair as by the reader itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from packager.bundle import folder as mnnfolder
from packager.errors import PairIncompatible
from packager.measure import compat

HIDDEN, VOCAB = 1024, 151936


def _tie_numbers(
    bits: int, block: int, asymmetric: bool = True, alpha_bytes: int = 4, offset: int = 4096, vocab: int = VOCAB
) -> tuple[int, int, int, int, int]:
    weight = vocab * HIDDEN * bits // 8
    alpha = vocab * (HIDDEN // block if block else 1) * (2 if asymmetric else 1) * alpha_bytes
    return offset, offset + weight, alpha, bits, block


def _folder(root: Path, tie: object | None, files: dict[str, int] | None = None, config: dict | None = None) -> Path:
    """An MNN folder as an app stores it: no llm.mnn.json; files of the given sizes (sparse, never written)."""
    root.mkdir()
    (root / "llm.mnn").write_bytes(b"\0" * 16)
    (root / "llm.mnn.weight").write_bytes(b"")
    llm_config = {"model_type": "qwen3", "hidden_size": HIDDEN, "layer_nums": 28}
    if tie is not None:
        llm_config["tie_embeddings"] = tie
    (root / "llm_config.json").write_text(json.dumps(llm_config))
    if config is not None:
        (root / "config.json").write_text(json.dumps(config))
    for name, size in (files or {}).items():
        with open(root / name, "wb") as handle:
            handle.truncate(size)
    return root


def _read(folder: Path) -> int:
    config = json.loads((folder / "config.json").read_text()) if (folder / "config.json").is_file() else {}
    return mnnfolder.vocabulary(folder, json.loads((folder / "llm_config.json").read_text()), config)


@pytest.mark.parametrize("bits,block", [(4, 128), (8, 64), (4, 0), (8, 0)])
def test_list_of_five_gives_the_rows_of_its_weight_span_not_its_alpha_offset(
    bits: int, block: int, tmp_path: Path
) -> None:
    assert _read(_folder(tmp_path / "m", list(_tie_numbers(bits, block)))) == VOCAB


@pytest.mark.parametrize("fp16", [0, 1])
def test_list_of_six_reads_its_alpha_dtype_flag(fp16: int, tmp_path: Path) -> None:
    tie = [*_tie_numbers(4, 128, alpha_bytes=2 if fp16 else 4), fp16]
    assert _read(_folder(tmp_path / "m", tie)) == VOCAB


@pytest.mark.parametrize("dtype,symmetric", [("fp32", False), ("fp16", False), ("fp32", True)])
def test_object_form_of_engines_3_6_gives_the_same_vocabulary(dtype: str, symmetric: bool, tmp_path: Path) -> None:
    numbers = _tie_numbers(4, 128, asymmetric=not symmetric, alpha_bytes=mnnfolder.ALPHA_BYTES[dtype])
    tie = dict(zip(mnnfolder.TIE_KEYS, numbers), alpha_dtype=dtype)
    assert _read(_folder(tmp_path / "m", tie)) == VOCAB


def test_untied_bf16_embeddings_file_gives_its_rows(tmp_path: Path) -> None:
    assert _read(_folder(tmp_path / "m", None, {"embeddings_bf16.bin": VOCAB * HIDDEN * 2})) == VOCAB


@pytest.mark.parametrize("bits", [4, 8])
def test_quantized_embeddings_file_is_read_through_its_offset_zero_declaration(bits: int, tmp_path: Path) -> None:
    tie = _tie_numbers(bits, 128, offset=0)
    folder = _folder(
        tmp_path / "m",
        list(tie),
        {f"embeddings_int{bits}.bin": tie[1] + tie[2]},
        config={"llm_model": "llm.mnn", "embedding_file": f"embeddings_int{bits}.bin"},
    )
    assert _read(folder) == VOCAB
    assert (
        mnnfolder.embeddings_file(folder, {}, mnnfolder.tied_embedding(list(tie))).name == f"embeddings_int{bits}.bin"
    )


def test_quantized_embeddings_file_shorter_than_its_declaration_is_a_conflict(tmp_path: Path) -> None:
    tie = _tie_numbers(4, 128, offset=0)
    folder = _folder(tmp_path / "m", list(tie), {"embeddings_int4.bin": tie[1]})
    with pytest.raises(mnnfolder.FolderConflict, match="embeddings_int4.bin has .* bytes; tie_embeddings reads up to"):
        _read(folder)


def test_a_folder_that_states_nothing_reads_zero(tmp_path: Path) -> None:
    assert _read(_folder(tmp_path / "m", None)) == 0


def test_tie_and_embeddings_file_that_disagree_are_named_both(tmp_path: Path) -> None:
    folder = _folder(
        tmp_path / "m",
        list(_tie_numbers(4, 128, offset=0, vocab=VOCAB)),
        {"embeddings_int4.bin": 10**9},
        config={"embedding_file": "embeddings_int4.bin"},
    )
    assert _read(folder) == VOCAB  # the file holds the declared table (and more): consistent
    graph_says = 151669
    with pytest.raises(
        mnnfolder.FolderConflict,
        match=f"llm.mnn.json \\(lm_head\\) says {graph_says}, llm_config.json tie_embeddings says {VOCAB}",
    ):
        mnnfolder.vocabulary(folder, json.loads((folder / "llm_config.json").read_text()), {}, graph_says)


@pytest.mark.parametrize(
    "tie,message",
    [
        ([1, 2, 3], "list of 3 entries"),
        ([4096, 4096 + 77, 10, 4, 128], "not a whole number of 1024-wide 4-bit rows"),
        ([4096, 4096 + VOCAB * 512, 12345, 4, 128], "alpha size 12345 does not fit its 151936 rows"),
        ([4096, 100, 10, 4, 128], "is impossible"),
        ([4096, 8192, 10, 3, 128], "is impossible"),
        ({"weight_offset": 1}, "lacks integer alpha_offset"),
        ({**dict(zip(mnnfolder.TIE_KEYS, (1, 2, 3, 4, 128))), "alpha_dtype": "int8"}, "has alpha_dtype 'int8'"),
        ("4096", "is a str"),
        ([True, 2, 3, 4, 5], "list of 5 entries"),
    ],
)
def test_malformed_tie_embeddings_is_one_reason(tie: object, message: str, tmp_path: Path) -> None:
    with pytest.raises(mnnfolder.FolderConflict, match=message):
        _read(_folder(tmp_path / "m", tie))


def test_bf16_file_of_partial_rows_is_a_conflict(tmp_path: Path) -> None:
    with pytest.raises(mnnfolder.FolderConflict, match="not a whole number of 1024-wide bf16 rows"):
        _read(_folder(tmp_path / "m", None, {"embeddings_bf16.bin": VOCAB * HIDDEN * 2 + 3}))


def test_pair_refuses_a_folder_whose_files_disagree_before_loading(tmp_path: Path) -> None:
    folder = _folder(tmp_path / "m", list(_tie_numbers(4, 128)), config={"llm_model": "llm.mnn"})
    (folder / "tokenizer.txt").write_text("430 0\n0 0 0\n\n")
    llm_config = json.loads((folder / "llm_config.json").read_text())
    llm_config["tie_embeddings"][2] += 4
    (folder / "llm_config.json").write_text(json.dumps(llm_config))
    with pytest.raises(PairIncompatible, match="alpha size .* does not fit") as raised:
        compat.facts(folder)
    assert raised.value.exit_code == 51 and "\n" not in raised.value.one_line()
