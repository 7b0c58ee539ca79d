"""`release` with a signing key: model.sig written after the card and manifest, part of the one commit, checked
against the Hub's files before the tag; the card says who signed and how to verify, and its commands work."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from packager.bundle.checksum import write_manifest
from tests.localhub import WRITE_TOKEN, LocalHub, hub, online, ready
from tests.localhub import history as _history
from tests.signkeys import Keys, keys

pytestmark = [pytest.mark.converter, pytest.mark.hub]

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "release.toml"
REPO = "your-name/Qwen3-0.6B-KL-draft-MNN"
MODEL_SIGNING = Path(sys.executable).parent / "model_signing"


def _stage(summary: dict, name: str) -> dict:  # type: ignore[type-arg]
    return next(stage for stage in summary["stages"] if stage["name"] == name)


def spec_signed_with(tmp_path: Path, key: Path | None) -> Path:
    spec = tmp_path / "release.toml"
    line = f'signing_key = "{key}"\n' if key else ""
    spec.write_text(EXAMPLE.read_text().replace("[release]\n", f"[release]\n{line}", 1))
    return spec


def release(hub: LocalHub, spec: Path, bundle: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "packager.cli", "release", str(spec), "--bundle", str(bundle), "--json", "--quiet"],
        capture_output=True,
        text=True,
        env={**hub.env(), **env},
        timeout=300,
    )


def test_a_signed_release_is_one_commit_with_model_sig_and_pulls_verified(
    hub: LocalHub, ready: Path, keys: Keys, tmp_path: Path
) -> None:
    result = release(hub, spec_signed_with(tmp_path, keys.private), ready)
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads(result.stdout)
    names = [s["name"] for s in summary["stages"]]
    assert names == ["convert", "validate", "verify", "card", "checksum", "sign", "upload, verify, tag"]
    assert "signature verified on the Hub (12 files)" in summary["stages"][-1]["detail"]
    assert len(_history(hub, REPO)) == 1
    tree = {f["path"] for f in hub.api(f"/api/models/{REPO}/tree/v3?recursive=true")}
    assert "model.sig" in tree and len(tree) == 14
    pulled = hub.cli(
        "pull",
        f"{REPO}@v3",
        str(tmp_path / "draft"),
        "--public-key",
        str(keys.public),
        "--require-signature",
        "--quiet",
        token=None,
    )
    assert pulled.returncode == 0, pulled.stderr
    check = hub.cli("verify-remote", f"{REPO}@v3", "--public-key", str(keys.public), "--json")
    assert check.returncode == 0, check.stdout + check.stderr
    assert json.loads(check.stdout)["signature"] == "verified"


def test_the_card_names_the_key_and_its_commands_verify(hub: LocalHub, ready: Path, keys: Keys, tmp_path: Path) -> None:
    assert release(hub, spec_signed_with(tmp_path, keys.private), ready).returncode == 0
    card = (ready / "README.md").read_text()
    key_id = json.loads((ready / "model.sig").read_text())["verificationMaterial"]["publicKey"]["hint"]
    assert f"`{key_id}`" in card
    assert f"packager pull {REPO}@v3 ./draft --public-key publisher.pub --require-signature" in card
    command = "model_signing verify key ./release --signature ./release/model.sig --public_key publisher.pub"
    assert command in card
    # The card's model-signing command, run as written on a full pull (its exit code says nothing: read it).
    folder = tmp_path / "release"
    assert hub.cli("pull", f"{REPO}@v3", str(folder), "--files", "all", "--quiet", token=None).returncode == 0
    (tmp_path / "publisher.pub").write_bytes(keys.public.read_bytes())
    argv = [str(MODEL_SIGNING), *command.split()[1:]]
    good = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert "Verification succeeded" in good.stdout + good.stderr, good.stdout + good.stderr
    (folder / "tokenizer.txt").write_bytes(b"tampered")
    bad = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert "Verification failed" in bad.stdout + bad.stderr


def test_the_key_can_come_from_the_environment_for_ci(hub: LocalHub, ready: Path, keys: Keys, tmp_path: Path) -> None:
    result = release(hub, spec_signed_with(tmp_path, None), ready, PACKAGER_SIGNING_KEY=str(keys.private))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "sign" in [s["name"] for s in json.loads(result.stdout)["stages"]]
    assert (ready / "model.sig").is_file()


def test_an_unchanged_signed_rerelease_makes_no_commit(hub: LocalHub, ready: Path, keys: Keys, tmp_path: Path) -> None:
    spec = spec_signed_with(tmp_path, keys.private)
    assert release(hub, spec, ready).returncode == 0
    again = release(hub, spec, ready)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "model.sig kept" in _stage(json.loads(again.stdout), "sign")["detail"]
    assert len(_history(hub, REPO)) == 1


@pytest.mark.parametrize("which, code", [("wrong_curve", 71), ("locked", 72), ("public", 70)])
def test_a_bad_signing_key_stops_the_release_before_any_work(
    hub: LocalHub, ready: Path, keys: Keys, tmp_path: Path, which: str, code: int
) -> None:
    key = {"wrong_curve": keys.wrong_curve, "locked": keys.locked, "public": keys.public}[which]
    before = (ready / "README.md").read_bytes()
    result = release(hub, spec_signed_with(tmp_path, key), ready)
    assert result.returncode == code, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert not (ready / "model.sig").exists() and (ready / "README.md").read_bytes() == before
    assert _history(hub, REPO) == []


def test_verify_remote_fails_the_signature_naming_a_file_replaced_with_its_manifest_line(
    hub: LocalHub, ready: Path, keys: Keys, tmp_path: Path, online: None
) -> None:
    assert release(hub, spec_signed_with(tmp_path, keys.private), ready).returncode == 0
    data = bytearray((ready / "llm.mnn.weight").read_bytes())
    data[123] ^= 1
    (ready / "llm.mnn.weight").write_bytes(bytes(data))
    write_manifest(ready)
    from huggingface_hub import CommitOperationAdd, HfApi

    HfApi(endpoint=hub.url, token=WRITE_TOKEN).create_commit(
        REPO,
        commit_message="tamper",
        operations=[
            CommitOperationAdd(path_in_repo=n, path_or_fileobj=str(ready / n))
            for n in ("llm.mnn.weight", "checksums.xxh128")
        ],
    )
    unchecked = hub.cli("verify-remote", REPO)
    assert unchecked.returncode == 0 and "signature: not checked" in unchecked.stdout  # the manifest agrees
    checked = hub.cli("verify-remote", REPO, "--public-key", str(keys.public))
    assert checked.returncode == 78, checked.stdout + checked.stderr  # as pull: the files are not the signed ones
    assert "NOT AS SIGNED llm.mnn.weight" in checked.stdout and "NOT AS SIGNED checksums.xxh128" in checked.stdout
    assert "signature: FAILED (signer " in checked.stdout and "verified" not in checked.stdout
    assert "checksums.xxh128, llm.mnn.weight differ from what model.sig signed" in checked.stdout
    assert "MISMATCH" not in checked.stdout and "does NOT match its manifest" not in checked.stdout
    assert checked.stdout.splitlines()[-1].endswith("is NOT what its publisher signed; do not use it")
    data = json.loads(hub.cli("verify-remote", REPO, "--public-key", str(keys.public), "--json").stdout)
    assert data["signature"] == "failed" and data["not_as_signed"] == ["checksums.xxh128", "llm.mnn.weight"]
    pulled = hub.cli("pull", REPO, str(tmp_path / "draft"), "--public-key", str(keys.public), "--quiet")
    assert pulled.returncode == 78 and "differs from what model.sig signed" in pulled.stderr
    other = hub.cli("verify-remote", REPO, "--public-key", str(keys.other_public))
    assert other.returncode == 77 and "is not signed by the key" in other.stderr


def test_the_card_of_a_keyless_release_names_the_identity_and_its_commands(ready: Path, tmp_path: Path) -> None:
    identity = "https://github.com/me/draft/.github/workflows/release.yml@refs/heads/main"
    issuer = "https://token.actions.githubusercontent.com"
    spec = tmp_path / "release.toml"
    spec.write_text(
        EXAMPLE.read_text().replace(
            "[release]\n", f'[release]\nsigning_identity = "{identity}"\nsigning_issuer = "{issuer}"\n', 1
        )
    )
    result = subprocess.run(
        [sys.executable, "-m", "packager.cli", "card", str(ready), "--spec", str(spec)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    card = (ready / "README.md").read_text()
    assert f"made keyless with sigstore by `{identity}` (issuer `{issuer}`)" in card
    assert f"--identity {identity} --issuer {issuer} --require-signature" in card
    assert (
        f"model_signing verify sigstore ./release --signature ./release/model.sig --identity {identity} "
        f"--identity_provider {issuer}" in card
    )


def test_the_card_command_states_the_spec_s_signing_key(ready: Path, keys: Keys, tmp_path: Path) -> None:
    from packager.trust.keys import key_id

    spec = spec_signed_with(tmp_path, keys.private)
    result = subprocess.run(
        [sys.executable, "-m", "packager.cli", "card", str(ready), "--spec", str(spec)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert f"`{key_id(keys.public.read_bytes())}`" in (ready / "README.md").read_text()


def test_an_unsigned_card_says_nothing_about_signatures(ready: Path, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "packager.cli", "card", str(ready), "--spec", str(EXAMPLE)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "model.sig" not in (ready / "README.md").read_text()


def test_a_keyless_identity_without_issuer_is_refused(ready: Path, tmp_path: Path) -> None:
    spec = tmp_path / "release.toml"
    spec.write_text(EXAMPLE.read_text().replace("[release]\n", '[release]\nsigning_identity = "me"\n', 1))
    result = subprocess.run(
        [sys.executable, "-m", "packager.cli", "card", str(ready), "--spec", str(spec)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 17 and "signing_identity needs signing_issuer" in result.stderr


def test_a_stale_signature_is_never_uploaded(hub: LocalHub, ready: Path, keys: Keys) -> None:
    assert hub.cli("sign", str(ready), "--key", str(keys.private)).returncode == 0
    (ready / "README.md").write_text((ready / "README.md").read_text() + "\nedited after signing\n")
    write_manifest(ready)  # the manifest is current, the signature is not
    result = hub.cli("upload", str(ready), "me/draft", "--quiet")
    assert result.returncode == 78, result.stdout + result.stderr
    assert "model.sig in" in result.stderr and "no longer matches README.md" in result.stderr
    assert _history(hub, "me/draft") == []


def test_an_unsigned_release_of_a_bundle_with_an_old_signature_is_refused(
    hub: LocalHub, ready: Path, keys: Keys, tmp_path: Path
) -> None:
    assert hub.cli("sign", str(ready), "--key", str(keys.private)).returncode == 0
    result = release(hub, spec_signed_with(tmp_path, None), ready)  # the card is rewritten, nobody re-signs
    assert result.returncode == 78, result.stdout + result.stderr
    assert _history(hub, REPO) == []


def test_a_changed_signed_rerelease_is_signed_anew_and_verifies_on_the_hub(
    hub: LocalHub, ready: Path, keys: Keys, tmp_path: Path
) -> None:
    spec = spec_signed_with(tmp_path, keys.private)
    assert release(hub, spec, ready).returncode == 0
    data = bytearray((ready / "llm.mnn.weight").read_bytes())
    data[999] ^= 1
    (ready / "llm.mnn.weight").write_bytes(bytes(data))
    write_manifest(ready)  # as a rebuilt bundle would be; its old model.sig still lies beside it
    spec.write_text(spec.read_text().replace('version = "v3"', 'version = "v4"'))
    again = release(hub, spec, ready)
    assert again.returncode == 0, again.stdout + again.stderr
    summary = json.loads(again.stdout)
    assert "model.sig written" in _stage(summary, "sign")["detail"]
    assert "signature verified on the Hub (12 files)" in _stage(summary, "upload, verify, tag")["detail"]
    check = hub.cli("verify-remote", f"{REPO}@v4", "--public-key", str(keys.public))
    assert check.returncode == 0, check.stdout + check.stderr


def test_the_post_upload_check_reads_the_hub_s_small_files_back(
    hub: LocalHub, ready: Path, keys: Keys, tmp_path: Path, online: None
) -> None:
    from packager.errors import ContentMismatch
    from packager.release.signing import plan, verify_uploaded
    from packager.spec import model as spec_module

    spec = spec_signed_with(tmp_path, keys.private)
    result = release(hub, spec, ready)
    assert result.returncode == 0, result.stdout + result.stderr
    commit = json.loads(result.stdout)["commit"]
    signing = plan(spec_module.load(spec))
    assert "12 files" in verify_uploaded(signing, hub.url, WRITE_TOKEN, REPO, commit)
    stored = hub.stored_object(REPO, "config_cpu.json", revision=commit)
    stored.write_bytes(stored.read_bytes().replace(b"2", b"3"))  # the Hub's copy damaged behind its listing
    with pytest.raises(ContentMismatch, match="config_cpu.json"):
        verify_uploaded(signing, hub.url, WRITE_TOKEN, REPO, commit)
