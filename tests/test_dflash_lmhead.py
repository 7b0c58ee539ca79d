"""The DFlash draft's head: the target's lm_head as its graph stores it, read back (packager.bundle.quantized) and
lifted out of the target's graph into a graph of its own (convert.dflash.export.lm_head_graph), without MNN."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from packager.bundle.graph import Linear
from packager.bundle.quantized import ROWS_AT_ONCE, dequantized
from packager.convert.dflash.export import LmHeadUnexpected, lm_head_graph
from packager.convert.stream.quant import QuantSpec, quantize


def _stored(path: Path, weight: np.ndarray, bits: int, block: int, at: int = 0, half: bool = False) -> Linear:
    """`weight` quantized as the streaming writer quantizes (asymmetric), written at byte `at` of `path` (`half`:
    its scales stored as float16, as MNN's newer exporter stores them)."""
    rows, cols = weight.shape
    spec = QuantSpec(bits, block)
    packed, alpha = quantize(weight.astype(np.float32), "float32", spec, lambda x: x.astype(np.float32))
    if half:
        alpha = np.frombuffer(alpha, np.float32).astype(np.float16).tobytes()
    header = spec.header(rows, cols)
    path.write_bytes(b"\0" * at + header + packed + alpha)
    external = (at, len(header) + len(packed), len(alpha), 0, 0)
    return Linear("/lm/lm_head/Linear", cols, rows, bits, True, external, scale_bytes=2 if half else 4)


@pytest.mark.parametrize("bits, block, half", [(4, 32, False), (8, 64, False), (4, 0, False), (4, 64, True)])
def test_the_stored_head_is_the_weights_within_half_a_step_of_their_block(
    tmp_path: Path, bits: int, block: int, half: bool
) -> None:
    """Every value read back is its weight rounded to its block's grid (at most half a step off; float16 scales
    round the grid itself), over more rows than one chunk of the reader, with the head at an offset in the file."""
    weight = np.random.RandomState(bits + block).randn(ROWS_AT_ONCE + 37, 128).astype(np.float32)
    linear = _stored(tmp_path / "llm.mnn.weight", weight, bits, block, at=1000, half=half)
    assert linear.block == (block or 128)
    got = dequantized(tmp_path / "llm.mnn.weight", linear)
    size = block or 128
    blocks = weight.reshape(weight.shape[0], -1, size)
    step = (blocks.max(-1) - blocks.min(-1)) / ((1 << bits) - 1)
    off = np.abs(got - weight).reshape(blocks.shape)
    slack = 0.01 * np.abs(blocks).max(-1, keepdims=True) if half else 1e-5
    assert got.shape == weight.shape and (off <= step[..., None] * 0.5 + slack).all()
    assert (off > 0).any()  # rounded, not the weights themselves


def test_a_head_whose_byte_ranges_do_not_match_its_shape_is_refused(tmp_path: Path) -> None:
    weight = np.random.RandomState(0).randn(16, 64).astype(np.float32)
    linear = _stored(tmp_path / "w", weight, 4, 32)
    wrong = Linear(linear.name, 64, 8, 4, True, linear.external)  # half the rows the bytes hold
    with pytest.raises(ValueError, match="byte ranges do not match"):
        dequantized(tmp_path / "w", wrong)


def _graph(ops: list[dict]) -> dict:  # type: ignore[type-arg]
    return {"oplists": ops, "tensorName": [f"t{i}" for i in range(10)], "outputName": ["logits"], "bizCode": "MNN"}


def _conv(name: str, inputs: list[int], outputs: list[int], external: list[int] | None = None) -> dict:  # type: ignore[type-arg]
    main = {"common": {"inputCount": 64, "outputCount": 16}, "quanParameter": {"aMaxOrBits": 4, "aMin": 1}}
    if external is not None:
        main["external"] = external
    return {"type": "Convolution", "name": name, "inputIndexes": inputs, "outputIndexes": outputs, "main": main}


@pytest.mark.parametrize(
    "ops, why",
    [
        ([_conv("/blocks.0/q_proj", [0], [1], [0, 100, 10, 0, 0])], "no quantized lm_head"),
        ([_conv("/lm/lm_head/Linear", [0], [1])], "no quantized lm_head with external weights"),
        (
            [
                _conv("/lm/lm_head/Linear", [0], [1], [0, 100, 10, 0, 0]),
                _conv("/lm/lm_head/Linear/again", [1], [2], [110, 100, 10, 0, 0]),
            ],
            "not one convolution in one chain",
        ),
        (
            [
                {"type": "Concat", "name": "/lm/lm_head/Linear/join", "inputIndexes": [0, 5], "outputIndexes": [3]},
                _conv("/lm/lm_head/Linear", [3], [1], [0, 100, 10, 0, 0]),
            ],
            "not one convolution in one chain",
        ),
    ],
)
def test_a_target_graph_whose_head_cannot_be_lifted_out_is_refused_before_anything_is_written(
    tmp_path: Path,
    ops: list[dict],
    why: str,  # type: ignore[type-arg]
) -> None:
    target = tmp_path / "target"
    target.mkdir()
    (target / "llm.mnn.json").write_text(json.dumps(_graph(ops)))
    (target / "llm.mnn.weight").write_bytes(b"\0" * 300)
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(LmHeadUnexpected, match=why):
        lm_head_graph(target, out, tmp_path)
    assert list(out.iterdir()) == []


def test_a_weight_file_shorter_than_the_heads_range_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.mkdir()
    (target / "llm.mnn.json").write_text(
        json.dumps(_graph([_conv("/lm/lm_head/Linear", [0], [1], [0, 100, 10, 0, 0])]))
    )
    (target / "llm.mnn.weight").write_bytes(b"\0" * 50)
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(LmHeadUnexpected, match="ends before the lm_head's bytes do"):
        lm_head_graph(target, out, tmp_path)
    assert list(out.iterdir()) == []
