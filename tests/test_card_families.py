"""The card names the bundle's family and carries its license: Llama's with "Built with Llama", its notice and its
LICENSE file (checksummed and signed with the card), Apache-2.0 for Qwen; a spec that contradicts the family is
refused in one line; `packager init` fills the spec from any family."""

from __future__ import annotations

import json
import os
import re
import shutil
import tomllib
from pathlib import Path

import pytest

from packager.bundle.checksum import read_manifest
from packager.convert.pipeline import ConvertRequest, ConvertResult, convert
from packager.trust.keys import PASSPHRASE_ENV
from packager.validate import validate
from tests import shared
from tests.conftest import run_cli
from tests.signkeys import Keys, keys
from tests.specs import card_spec as _spec

pytestmark = pytest.mark.converter
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "release.toml"
FAMILY_ERROR = 69  # errors.FamilyLicenseConflict


def _copy(bundle: ConvertResult, tmp_path: Path) -> Path:
    out = tmp_path / "bundle"
    shutil.copytree(bundle.out, out)
    return out


def _front(text: str) -> dict:  # type: ignore[type-arg]
    from huggingface_hub import ModelCard

    return ModelCard(text).data.to_dict()


def one_line_error(result, code: int, *words: str) -> None:  # type: ignore[no-untyped-def]
    assert result.returncode == code, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("packager: error:"), result.stderr
    for word in words:
        assert word in lines[0], lines[0]


@pytest.fixture(scope="module")
def qwen25_bundle8(qwen25_checkpoint: Path) -> ConvertResult:
    result: ConvertResult = shared.converted(qwen25_checkpoint, quant_bits=8)
    return result


def test_a_llama_card_states_the_llama_license_built_with_llama_and_ships_its_license_file(
    llama_bundle8: ConvertResult, llama_checkpoint: Path, tmp_path: Path
) -> None:
    bundle = _copy(llama_bundle8, tmp_path)
    spec = _spec(tmp_path, source=llama_checkpoint)  # no license: the family's
    result = run_cli("card", str(bundle), "--spec", str(spec))
    assert result.returncode == 0 and result.stderr == "", result.stderr
    text = (bundle / "README.md").read_text(encoding="utf-8")
    data = _front(text)
    assert data["license"] == "llama3.2" and data["base_model"] == ["meta-llama/Llama-3.2-1B-Instruct"]
    assert {"llama", "llama-3"} <= set(data["tags"]) and "qwen3" not in data["tags"]
    # "Built with Llama", displayed prominently: right under the title, before anything else.
    assert re.search(r"\n# Tiny draft\n\n\*\*Built with Llama\*\*\n\nA tiny draft\.\n", text)
    assert "| Family | Llama 3.x: Llama 3 decoder" in text and "temperature 0.6, top-p 0.9" in text
    assert "| License | llama3.2 |" in text and "[Llama 3.2 Community License](https://www.llama.com/" in text
    assert "Llama 3.2 is licensed under the Llama 3.2 Community License, Copyright © Meta Platforms" in text
    assert "`LICENSE` holds a copy of the license, shipped with the model, as the license requires." in text
    # The checkpoint's own LICENSE ships, listed with its digest; checksummed, validated and signed like the card.
    assert (bundle / "LICENSE").read_bytes() == (llama_checkpoint / "LICENSE").read_bytes()
    assert re.search(r"\| `LICENSE` \| [^|]+ \| The license \(Llama 3.2 Community License\) \| `[0-9a-f]{32}` \|", text)
    assert run_cli("checksum", str(bundle)).returncode == 0
    assert "LICENSE" in read_manifest(bundle / "checksums.xxh128")
    assert validate(bundle).errors == ()


def test_the_llama_license_file_is_signed_with_the_card(
    llama_bundle8: ConvertResult, llama_checkpoint: Path, keys: Keys, tmp_path: Path
) -> None:
    bundle = _copy(llama_bundle8, tmp_path)
    assert run_cli("card", str(bundle), "--spec", str(_spec(tmp_path, source=llama_checkpoint))).returncode == 0
    assert run_cli("checksum", str(bundle)).returncode == 0
    env = {k: v for k, v in os.environ.items() if k not in (PASSPHRASE_ENV, "PACKAGER_SIGNING_KEY")}
    signed = run_cli("sign", str(bundle), "--key", str(keys.private), "--json", env=env)
    assert signed.returncode == 0, signed.stderr
    assert "LICENSE" in json.loads(signed.stdout)["files"]
    checked = run_cli("verify-signature", str(bundle), "--public-key", str(keys.public), "--json", env=env)
    assert checked.returncode == 0 and "LICENSE" in json.loads(checked.stdout)["files"], checked.stderr


def test_a_llama_bundle_without_a_license_file_is_carded_with_one_warning_saying_what_to_do(
    llama_bundle8: ConvertResult, tmp_path: Path
) -> None:
    bundle = _copy(llama_bundle8, tmp_path)
    result = run_cli("card", str(bundle), "--spec", str(_spec(tmp_path)))
    assert result.returncode == 0, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("warning: the Llama 3.2 Community License asks that a copy")
    assert "copy the checkpoint's LICENSE" in lines[0]
    assert not (bundle / "LICENSE").exists()
    text = (bundle / "README.md").read_text(encoding="utf-8")
    assert "this release carries none: read it at https://www.llama.com/llama3_2/license/" in text


def test_a_spec_license_that_contradicts_the_family_is_one_line_and_writes_nothing(
    llama_bundle8: ConvertResult, llama_checkpoint: Path, tmp_path: Path
) -> None:
    bundle = _copy(llama_bundle8, tmp_path)
    result = run_cli("card", str(bundle), "--spec", str(_spec(tmp_path, license="apache-2.0", source=llama_checkpoint)))
    one_line_error(result, FAMILY_ERROR, "'apache-2.0'", "Llama 3.x", "llama3.2", 'license = "llama3.2"')
    assert not (bundle / "README.md").exists() and not (bundle / "LICENSE").exists()


def test_another_llama_version_license_is_accepted_as_it_is(llama_bundle8: ConvertResult, tmp_path: Path) -> None:
    bundle = _copy(llama_bundle8, tmp_path)
    result = run_cli("card", str(bundle), "--spec", str(_spec(tmp_path, license="llama3.1")), "-o", "-")
    assert result.returncode == 0, result.stderr
    assert _front(result.stdout)["license"] == "llama3.1" and "**Built with Llama**" in result.stdout


def test_a_base_model_of_another_family_is_refused_in_one_line(llama_bundle8: ConvertResult, tmp_path: Path) -> None:
    result = run_cli("card", str(llama_bundle8.out), "--spec", str(_spec(tmp_path, base="Qwen/Qwen3-0.6B")), "-o", "-")
    one_line_error(result, FAMILY_ERROR, "Qwen/Qwen3-0.6B is Qwen3", "the bundle is Llama 3.x")


def test_a_qwen25_card_says_apache_2_0_and_names_qwen25(qwen25_bundle8: ConvertResult, tmp_path: Path) -> None:
    result = run_cli(
        "card", str(qwen25_bundle8.out), "--spec", str(_spec(tmp_path, base="Qwen/Qwen2.5-0.5B-Instruct")), "-o", "-"
    )
    assert result.returncode == 0, result.stderr
    data = _front(result.stdout)
    assert data["license"] == "apache-2.0" and data["base_model"] == ["Qwen/Qwen2.5-0.5B-Instruct"]
    assert "qwen2.5" in data["tags"] and "qwen3" not in data["tags"]
    assert "| Family | Qwen2.5: Qwen2 decoder" in result.stdout and "Built with" not in result.stdout
    assert "apache-2.0 ([Apache License 2.0](https://www.apache.org/licenses/LICENSE-2.0))." in result.stdout
    assert "asks that a copy" not in result.stdout + result.stderr  # Apache asks for no file to be carded


def test_a_qwen3_card_keeps_its_tags_in_their_order(bundle4: ConvertResult) -> None:
    result = run_cli("card", str(bundle4.out), "--spec", str(EXAMPLE), "-o", "-")
    assert result.returncode == 0, result.stderr
    tags = _front(result.stdout)["tags"]
    assert tags == ["mnn", "speculative-decoding", "draft-model", "qwen3", "on-device", "4-bit"]
    assert "| Family | Qwen3: Qwen3 decoder" in result.stdout


def test_init_from_a_llama_checkpoint_writes_a_spec_that_check_spec_accepts_and_cards_the_bundle(
    llama_checkpoint: Path, llama_bundle8: ConvertResult, tmp_path: Path
) -> None:
    folder = tmp_path / "release"
    made = run_cli("init", str(folder), "--checkpoint", str(llama_checkpoint), "--repo-id", "me/tiny-llama-draft-mnn")
    assert made.returncode == 0, made.stderr
    spec = folder / "release.toml"
    data = tomllib.loads(spec.read_text(encoding="utf-8"))
    assert data["release"]["license"] == "llama3.2"
    assert data["model"]["architecture"] == "Llama 3.x (dense, full attention)"
    assert "meta-llama/Llama-3.2-1B-Instruct" in data["model"]["base_model"]  # the example of its placeholder
    assert "llama, llama-3" in spec.read_text(encoding="utf-8")  # the tags the card adds, said where tags go
    filled = re.sub(
        r'"TODO: [^"]*"',
        lambda m: '"meta-llama/Llama-3.2-1B-Instruct"' if "Hub id" in m.group() else '"a true sentence"',
        spec.read_text(encoding="utf-8"),
    )
    spec.write_text(filled, encoding="utf-8")
    checked = run_cli("check-spec", str(spec))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    bundle = _copy(llama_bundle8, tmp_path)
    carded = run_cli("card", str(bundle), "--spec", str(spec))  # its [convert] checkpoint is the checkpoint
    assert carded.returncode == 0 and carded.stderr == "", carded.stderr
    assert (bundle / "LICENSE").is_file()
