"""Each new family end to end: converted (streaming), validated, verified, carded and released to the local Hub,
the card naming its family, license and base model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.families import build_gemma3, build_llama32, build_qwen25, smollm2_checkpoint
from tests.localhub import LocalHub, hub
from tests.specs import family_release_spec

pytestmark = [pytest.mark.converter, pytest.mark.hub]

CASES = {
    "llama32": ("meta-llama/Llama-3.2-1B-Instruct", "llama3.2", "Llama 3.x", "Built with Llama"),
    "qwen25": ("Qwen/Qwen2.5-0.5B-Instruct", "apache-2.0", "Qwen2.5", ""),
    "smollm2": ("HuggingFaceTB/SmolLM2-135M-Instruct", "apache-2.0", "SmolLM2", ""),
    "gemma3": ("google/gemma-3-270m-it", "gemma", "Gemma 3", ""),
}
# The notice each family's license asks every copy to carry (the card prints it under License).
NOTICES = {"gemma3": "Gemma is provided under and subject to the Gemma Terms of Use found at ai.google.dev/gemma/terms"}
MODEL_TYPES = {"qwen25": "qwen2", "gemma3": "gemma3_text"}


def _source(case: str, root: Path) -> Path:
    if case == "llama32":
        return build_llama32(root / "llama32")
    if case == "qwen25":
        return build_qwen25(root / "qwen25")
    if case == "gemma3":
        return build_gemma3(root / "gemma3")
    return smollm2_checkpoint()


@pytest.mark.parametrize("case", list(CASES))
def test_a_family_draft_is_converted_verified_and_released_with_a_card_naming_its_family(
    hub: LocalHub,
    tmp_path: Path,
    case: str,
) -> None:
    base, license_id, title, attribution = CASES[case]
    spec = family_release_spec(tmp_path, _source(case, tmp_path), base)
    out = tmp_path / "dist" / "bundle"
    result = hub.cli("release", str(spec), "--out", str(out), "--json", "--quiet", timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    done = json.loads(result.stdout)
    assert [s["name"] for s in done["stages"]] == [
        "convert",
        "validate",
        "verify",
        "card",
        "checksum",
        "upload, verify, tag",
    ]
    card = (out / "README.md").read_text(encoding="utf-8")
    assert f"license: {license_id}" in card and base in card and title in card
    assert (attribution in card) if attribution else "Built with Llama" not in card
    assert hub.cli("verify-remote", "me/tiny-draft-mnn@v1").returncode == 0
    llm_config = json.loads((out / "llm_config.json").read_text(encoding="utf-8"))
    assert llm_config["model_type"] == MODEL_TYPES.get(case, "llama")
    if case in NOTICES:
        assert NOTICES[case] in card
    else:
        assert "Gemma Terms" not in card
