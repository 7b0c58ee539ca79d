"""Quantization recipes: convert makes what the recipe says (llm_config.json, the graph, provenance and the card
state it; validate checks they agree), refuses impossible ones in one line, and quant-sweep measures recipes on
the trained fixture and picks the smallest one whose acceptance is within the tolerance of the best."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest

from packager.bundle.graph import read as read_graph
from packager.bundle.kinds import FILES
from packager.card.measurements import gather_measurements
from packager.card.render import render
from packager.convert.pipeline import ConvertRequest, ConvertResult, convert, convert_many
from packager.convert.recipe import QuantRecipe
from packager.errors import CardError
from packager.measure.sweep import SweepRequest, sweep
from packager.measure.sweep.report import as_dict
from packager.spec.model import from_dict
from packager.validate import validate
from tests import shared
from tests.conftest import run_cli
from tests.mutations import mutate
from tests.trained import Fixture, fixture

pytestmark = pytest.mark.trained

FIXTURES = Path(
    os.environ.get("PACKAGER_FIXTURE_DIR") or Path(tempfile.gettempdir()) / f"packager-test-fixtures-{os.getuid()}"
)


def _facts(
    bundle: Path,
) -> tuple[list[int], list[tuple[int | None, int | None, bool]], tuple[int | None, int | None, bool]]:
    llm = json.loads((bundle / "llm_config.json").read_text())
    graph = read_graph(json.loads((bundle / "llm.mnn.json").read_text()))
    lm = graph.lm_head
    assert lm is not None
    body = [(lin.bits, lin.block, lin.asymmetric) for lin in graph.linears if lin is not lm]
    return llm["tie_embeddings"], body, (lm.bits, lm.block, lm.asymmetric)


@pytest.fixture(scope="module")
def hqq_lm8(tiny_checkpoint: Path) -> ConvertResult:
    result: ConvertResult = shared.converted(tiny_checkpoint, quant_block=64, algorithm="hqq", lm_bits=8, lm_block=0)
    return result


def test_the_bundle_and_its_provenance_state_the_recipe(hqq_lm8: ConvertResult) -> None:
    tie, body, lm = _facts(hqq_lm8.out)
    assert tie[3:5] == [8, 0] and lm[0] == 8
    assert set(body) == {(4, 64, True)}
    assert hqq_lm8.path == "reference"  # the streaming writer reproduces plain asymmetric only
    record = json.loads(hqq_lm8.provenance.read_text())["options"]["quant_recipe"]
    assert record == {"bits": 4, "block": 64, "symmetric": False, "algorithm": "hqq", "lm_bits": 8, "lm_block": 0}
    assert hqq_lm8.recipe.name == "4bit-b64-hqq-lm8bit-b0"


def test_symmetric_weights_have_no_zero_points(tiny_checkpoint: Path) -> None:
    result = shared.converted(tiny_checkpoint, symmetric=True)
    _tie, body, lm = _facts(result.out)
    assert {asym for _, _, asym in body} == {False} and lm[2] is False
    assert not validate(result.out).errors


def test_one_model_load_exports_every_recipe_to_the_bytes_of_its_own_conversion(
    tiny_checkpoint: Path, bundle4: ConvertResult, bundle8: ConvertResult, hqq_lm8: ConvertResult, tmp_path: Path
) -> None:
    # quant-sweep's path: llmexport loads the model once and exports recipe after recipe. Each bundle must be
    # what a conversion of its own makes (the streaming ones included), in all ten files, whatever came before.
    symmetric = shared.converted(tiny_checkpoint, symmetric=True)
    alone = [bundle4, hqq_lm8, symmetric, bundle8]
    requests = [
        ConvertRequest(
            checkpoint=tiny_checkpoint,
            out=tmp_path / "many" / r.recipe.name,
            quant_bits=r.recipe.bits,
            quant_block=r.recipe.block,
            symmetric=r.recipe.symmetric,
            algorithm=r.recipe.algorithm,
            lm_bits=r.recipe.lm_bits,
            lm_block=r.recipe.lm_block,
        )
        for r in alone
    ]
    stages: list[str] = []
    together = convert_many(requests, progress=stages.append)
    assert sum("exporting again from the loaded model" in line for line in stages) == len(alone) - 1
    assert sum(line.startswith("loading the checkpoint into llmexport") for line in stages) == 1
    for one, batch in zip(alone, together):
        assert batch.recipe == one.recipe and batch.path == "reference"
        for name in FILES:
            assert (batch.out / name).read_bytes() == (one.out / name).read_bytes(), (one.recipe.name, name)
        assert not validate(batch.out).errors
    assert sorted(p.name for p in (tmp_path / "many").iterdir()) == sorted(
        [r.recipe.name for r in alone] + [f"{r.recipe.name}.provenance.json" for r in alone]
    )


def test_many_recipes_refuse_a_repeated_recipe_before_any_work(tiny_checkpoint: Path, tmp_path: Path) -> None:
    same = [ConvertRequest(checkpoint=tiny_checkpoint, out=tmp_path / name) for name in ("a", "b")]
    with pytest.raises(ValueError, match="distinct"):
        convert_many(same)
    assert not list(tmp_path.iterdir())


def test_validate_finds_a_linear_off_the_bundles_recipe(hqq_lm8: ConvertResult, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(hqq_lm8.out, copy)
    assert not validate(copy).errors
    mutate(copy, {"op": "set", "file": "llm_config.json", "pointer": "/tie_embeddings/3", "value": 4})
    errors = [f.message for f in validate(copy).errors]
    assert any("8-bit weights, the bundle declares 4" in m for m in errors)


@pytest.mark.parametrize(
    "flags,words",
    [
        (("--algorithm", "awq"), "awq is not offered"),
        (("--lm-bits", "3"), "--lm-bits 3 is not supported"),
        (("--lm-block", "100"), "--lm-block 100 does not divide"),
        (("--quant-block", "-1"), "--quant-block -1 is negative"),
    ],
)
def test_impossible_recipes_are_refused_in_one_line(
    tiny_checkpoint: Path, tmp_path: Path, flags: tuple[str, ...], words: str
) -> None:
    result = run_cli("convert", str(tiny_checkpoint), "--out", str(tmp_path / "b"), *flags)
    assert result.returncode == 19, result.stderr
    assert words in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "b").exists()


def test_the_spec_sets_the_recipe_and_flags_win(tiny_checkpoint: Path, tmp_path: Path) -> None:
    spec = from_dict({"convert": {"quant_bits": 8, "symmetric": True, "lm_bits": 4}}, tmp_path / "release.toml")
    result = convert(ConvertRequest(checkpoint=tiny_checkpoint, out=tmp_path / "b", spec=spec, lm_bits=8))
    assert result.recipe == QuantRecipe(bits=8, block=128, symmetric=True, lm_bits=8)


@pytest.fixture(scope="module")
def trained() -> Fixture:
    return fixture("small", FIXTURES)


@pytest.fixture(scope="module")
def swept(trained: Fixture, tmp_path_factory: pytest.TempPathFactory) -> dict:  # type: ignore[type-arg]
    recipes = (QuantRecipe(), QuantRecipe(symmetric=True), QuantRecipe(bits=8))
    work = tmp_path_factory.mktemp("sweep")
    report = sweep(
        SweepRequest(
            checkpoint=trained.student,
            adapter=trained.adapter,
            target=trained.teacher,
            workdir=work,
            recipes=recipes,
            prompts=_prompts(),
        )
    )
    return as_dict(report)


def _prompts() -> tuple[str, ...]:
    """Three prompts (a question, code, a phrase): what the assertions read is each recipe's order by size and KL,
    which three show as six did (bench/ measures the sweep's figures on the full workload)."""
    return ("Explain what a Python list comprehension is.", "def fibonacci(n):", "The os.path module")


def test_sweep_measures_every_recipe_and_picks_the_smallest_near_the_best(swept: dict) -> None:  # type: ignore[type-arg]
    rows = {row["name"]: row for row in swept["rows"]}
    assert list(rows) == ["4bit-b128", "4bit-b128-sym", "8bit-b128"]
    assert rows["8bit-b128"]["bytes"] > rows["4bit-b128"]["bytes"]
    assert rows["8bit-b128"]["mean_kl"] < rows["4bit-b128"]["mean_kl"]  # the ceiling is closer to the source
    for row in rows.values():
        assert row["alpha"]["low"] <= row["alpha"]["value"] <= row["alpha"]["high"]
        assert row["tau"]["3"]["value"] >= 1.0
    best = max(row["alpha"]["value"] for row in rows.values())
    near = [r for r in rows.values() if r["alpha"]["value"] >= best - swept["tolerance"]]
    chosen = [r for r in rows.values() if r["chosen"]]
    assert len(chosen) == 1 and chosen[0]["bytes"] == min(r["bytes"] for r in near)
    assert swept["convert"]["quant_bits"] == chosen[0]["recipe"]["bits"]
    assert rows["4bit-b128"]["alpha_vs_baseline"]["value"] == 0.0


def test_a_sweep_bundle_is_the_bundle_convert_makes(swept: dict, trained: Fixture, tmp_path: Path) -> None:  # type: ignore[type-arg]
    # The sweep merges the adapter once and converts the merged checkpoint: the bytes are convert --lora's.
    result = convert(
        ConvertRequest(checkpoint=trained.student, adapter=trained.adapter, out=tmp_path / "sym", symmetric=True)
    )
    row = next(r for r in swept["rows"] if r["name"] == "4bit-b128-sym")
    assert sum(result.sizes.values()) == row["bytes"]
    for name in ("llm.mnn.weight", "llm_config.json", "tokenizer.txt"):
        assert (result.out / name).read_bytes() == (Path(row["bundle"]) / name).read_bytes(), name


def test_the_card_says_why_that_recipe(swept: dict, hqq_lm8: ConvertResult, tmp_path: Path) -> None:  # type: ignore[type-arg]
    import tomllib

    from tests.specs import EXAMPLE

    data = tomllib.loads(EXAMPLE.read_text())
    measured = gather_measurements(hqq_lm8.out)
    plain = render(hqq_lm8.out, from_dict(data, tmp_path / "release.toml"), measurements=measured).text
    assert "`4bit-b64-hqq-lm8bit-b0`" in plain and "HQQ" in plain and "Quantization choice: not swept" in plain
    sweep_file = tmp_path / "sweep.json"
    sweep_file.write_text(json.dumps(swept))
    data["convert"] = {**data.get("convert", {}), "quant_sweep": "sweep.json"}
    with pytest.raises(CardError, match="made with 4bit-b64-hqq-lm8bit-b0 but the sweep"):
        render(hqq_lm8.out, from_dict(data, tmp_path / "release.toml"), measurements=measured)
    card = render(hqq_lm8.out, from_dict(data, tmp_path / "release.toml"), measurements=None).text
    assert "### Why this quantization" in card and f"It chose **{swept['chosen']}**" in card
    assert "| 4bit-b128-sym" in card and "alpha - 4bit-b128" in card
