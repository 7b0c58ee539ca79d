"""`release` refuses what it was given before any work (a missing source, a report of other files), and a dry run
of a built bundle writes nothing in the user's folder."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from packager.convert.pipeline import ConvertResult
from packager.infra.hashing import xxh3_128_file
from tests.appfiles import app_copy
from tests.conftest import run_cli
from tests.localhub import LocalHub, hub, ready
from tests.signkeys import Keys, keys

pytestmark = pytest.mark.converter

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "release.toml"


def _spec(tmp_path: Path, convert: str = "", card: str = "") -> Path:
    """The example spec with more [convert] and [card] keys."""
    text = EXAMPLE.read_text().replace("[convert]\n", f"[convert]\n{convert}\n", 1)
    path = tmp_path / "release.toml"
    path.write_text(text.replace("[card]\n", f"[card]\n{card}\n", 1))
    return path


def _one_line(result, code: int, *words: str) -> None:  # type: ignore[no-untyped-def]
    assert result.returncode == code, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("packager: error:"), result.stderr
    for word in words:
        assert word in lines[0], lines[0]


def test_a_convert_source_that_does_not_exist_is_10_before_any_work(bundle4: ConvertResult, tmp_path: Path) -> None:
    spec = _spec(tmp_path, convert='checkpoint = "missing/checkpoint"')
    bundle = tmp_path / "bundle"
    shutil.copytree(bundle4.out, bundle)
    # with --bundle the release verifies against the source: refused before validate, never looked up on a Hub
    _one_line(
        run_cli("release", str(spec), "--bundle", str(bundle), "--dry-run"),
        10,
        "[convert] checkpoint",
        "missing/checkpoint does not exist",
    )
    _one_line(run_cli("release", str(spec), "--dry-run"), 10, "missing/checkpoint does not exist")
    _one_line(
        run_cli("convert", "--spec", str(spec), "--out", str(tmp_path / "out")), 10, "missing/checkpoint does not exist"
    )
    assert not (tmp_path / "out").exists() and not (tmp_path / "dist").exists()


def test_the_app_files_a_pull_leaves_are_refused_as_the_bundle_of_a_release(
    bundle4: ConvertResult, tmp_path: Path
) -> None:
    app = app_copy(bundle4.out, tmp_path / "app")
    before = _contents(app)
    done = run_cli("release", str(_spec(tmp_path)), "--bundle", str(app), "--dry-run", "--quiet")
    assert done.returncode == 22, done.stdout + done.stderr
    assert "holds only the files an app runs" in done.stdout and _contents(app) == before


def test_a_spec_pair_report_of_other_files_is_refused_before_any_work(
    bundle4: ConvertResult, bundle8: ConvertResult, tmp_path: Path
) -> None:
    from tests.pairreports import pair_report

    pair_report(tmp_path / "pair8.json", bundle8.out)  # pair's own serializer, the 8-bit bundle's digests
    spec = _spec(tmp_path, card='pair_report = "pair8.json"')
    bundle = tmp_path / "bundle"
    shutil.copytree(bundle4.out, bundle)
    before = sorted(p.name for p in bundle.iterdir())
    _one_line(
        run_cli("release", str(spec), "--bundle", str(bundle), "--dry-run"),
        24,
        "pair8.json measured another bundle",
        "run packager pair on this bundle again",
    )
    assert sorted(p.name for p in bundle.iterdir()) == before
    stated = run_cli(
        "release",
        str(spec),
        "--bundle",
        str(bundle8.out),
        "--dry-run",
        "--json",
        "--quiet",
        "--endpoint",
        "http://127.0.0.1:9",
    )  # no Hub there: the stages before the upload plan pass
    assert "pair8.json" not in stated.stderr and '"name": "sign"' not in stated.stdout
    assert [s["ok"] for s in json.loads(stated.stdout)["stages"]][:4] == [True] * 4


def test_a_pair_report_of_other_files_stops_a_converting_release_at_the_card(
    tiny_checkpoint: Path, bundle4: ConvertResult, tmp_path: Path
) -> None:
    from tests.pairreports import pair_report

    pair_report(tmp_path / "pair4.json", bundle4.out)  # of the 4-bit bundle; the release converts to 8 bits
    spec = _spec(tmp_path, convert=f'checkpoint = "{tiny_checkpoint}"', card='pair_report = "pair4.json"')
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("The capital of France is\n", encoding="utf-8")
    spec.write_text(
        spec.read_text().replace("quant_bits = 4", "quant_bits = 8", 1) + f'\n[verify]\nprompts = "{prompts}"\n'
    )
    done = run_cli("release", str(spec), "--out", str(tmp_path / "out"), "--dry-run", "--quiet")
    assert done.returncode == 24, done.stdout + done.stderr
    assert "ok   verify" in done.stdout and "FAIL card" in done.stdout
    assert "pair4.json measured another bundle" in done.stdout
    assert "upload plan" not in done.stdout  # stopped before anything was planned or sent


def _contents(folder: Path) -> dict[str, tuple[str, float]]:
    """Every entry's digest and modification time."""
    return {p.name: (xxh3_128_file(p), p.stat().st_mtime) for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("signed", [False, True])
def test_a_dry_run_of_a_built_bundle_writes_nothing_in_it(
    hub: LocalHub, ready: Path, keys: Keys, tmp_path: Path, signed: bool
) -> None:
    spec = EXAMPLE
    if signed:  # the user's own signature over their folder, and a spec that signs with the same key
        assert run_cli("sign", str(ready), "--key", str(keys.private)).returncode == 0
        spec = tmp_path / "release.toml"
        spec.write_text(EXAMPLE.read_text().replace("[release]\n", f'[release]\nsigning_key = "{keys.private}"\n', 1))
    before = _contents(ready)
    done = hub.cli("release", str(spec), "--bundle", str(ready), "--dry-run", "--json", "--quiet")
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads(done.stdout)
    card = next(s for s in summary["stages"] if s["name"] == "card")
    assert "in a copy (a dry run writes nothing in --bundle)" in card["detail"] and summary["bundle"] == str(ready)
    verify = next(s for s in summary["stages"] if s["name"] == "verify")  # no [convert] checkpoint: said, not silent
    assert verify["warnings"] == [verify["detail"]] and verify["detail"].startswith("not verified against its source")
    assert "not verified against its source" in done.stderr
    assert {r["path"] for r in summary["plan"]} >= {"README.md", "checksums.xxh128"}
    assert _contents(ready) == before  # the card, manifest and signature the dry run made went to its copy
    if signed:
        assert "model.sig" in {r["path"] for r in summary["plan"]}
        assert run_cli("verify-signature", str(ready), "--public-key", str(keys.public)).returncode == 0
    assert hub.stats()["commits_received"] == 0


def _passing_verify_report(bundle: Path, path: Path) -> Path:
    """A passing `verify --json` report of `bundle`'s very files (the figures are the release's to state, not
    checked here: what matters is that release takes the report instead of verifying again)."""
    from packager.bundle.kinds import kind_of

    files = {
        name: xxh3_128_file(bundle / name) for name in kind_of(bundle).app_set(bundle) if (bundle / name).is_file()
    }
    figures = {"prompts": 54, "positions": 2143, "decisive_positions": 0, "mean_kl": 0.0001, "top1_decisive": None}
    figures |= {"min_cosine": 0.99, "mean_cosine": 0.999, "top1_agreement": 0.9, "greedy_agreement": 0.8}
    path.write_text(json.dumps({"ok": True, "failures": [], "files_xxh3_128": files, **figures}), encoding="utf-8")
    return path


def test_release_reuses_a_verify_report_of_these_very_files_instead_of_verifying_again(
    hub: LocalHub, ready: Path, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    report = _passing_verify_report(ready, tmp_path / "verify.json")
    spec = _spec(tmp_path, convert=f'checkpoint = "{tiny_checkpoint}"', card=f'verify_report = "{report}"')
    done = hub.cli("release", str(spec), "--bundle", str(ready), "--dry-run", "--json", "--quiet")
    assert done.returncode == 0, done.stdout + done.stderr
    verify = next(s for s in json.loads(done.stdout)["stages"] if s["name"] == "verify")
    assert verify["detail"].startswith("reused ") and "verify.json" in verify["detail"], verify


def test_a_verify_report_of_other_files_is_refused_before_any_work(
    bundle4: ConvertResult, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    bundle = tmp_path / "bundle"
    shutil.copytree(bundle4.out, bundle)
    report = _passing_verify_report(bundle, tmp_path / "verify.json")
    (bundle / "tokenizer.txt").write_bytes((bundle / "tokenizer.txt").read_bytes() + b"\n")
    spec = _spec(tmp_path, convert=f'checkpoint = "{tiny_checkpoint}"', card=f'verify_report = "{report}"')
    done = run_cli("release", str(spec), "--bundle", str(bundle), "--dry-run")
    _one_line(done, 24, "verify.json measured another bundle", "tokenizer.txt")
    assert "release: validate" not in done.stderr


def test_a_stale_model_sig_in_the_bundle_is_refused_before_any_work(
    ready: Path, keys: Keys, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    """Issue 39: release verified for minutes, then failed on a model.sig made before the card changed."""
    assert run_cli("sign", str(ready), "--key", str(keys.private)).returncode == 0
    (ready / "README.md").write_text((ready / "README.md").read_text() + "changed after signing\n")
    spec = _spec(tmp_path, convert=f'checkpoint = "{tiny_checkpoint}"')
    done = run_cli("release", str(spec), "--bundle", str(ready), "--dry-run")
    assert done.returncode != 0 and "model.sig" in done.stderr and "no longer matches" in done.stderr, done.stderr
    assert "release: verify" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
