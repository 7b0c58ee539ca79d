"""`packager sign` and `packager verify-signature`: a model.sig over the release set through model-signing's API,
and every bad key or signature refused in one line with its own exit code, nothing written."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from packager.bundle.checksum import read_manifest
from packager.trust.keys import PASSPHRASE_ENV
from packager.trust.sign import RELEASE_SET
from tests.conftest import run_cli
from tests.localhub import ready
from tests.signkeys import PASSPHRASE, Keys, forge_signature, keys

pytestmark = [pytest.mark.converter, pytest.mark.hub]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (PASSPHRASE_ENV, "PACKAGER_SIGNING_KEY")}
    return {**env, **extra}


def sign(bundle: Path, *args: str, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return run_cli("sign", str(bundle), *args, env=env or _env())


def check(bundle: Path, public: Path):  # type: ignore[no-untyped-def]
    return run_cli("verify-signature", str(bundle), "--public-key", str(public), "--json", env=_env())


def one_line_error(result, code: int, *words: str) -> None:  # type: ignore[no-untyped-def]
    assert result.returncode == code, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("packager: error:"), result.stderr
    assert "Traceback" not in result.stderr
    for word in words:
        assert word in lines[0], lines[0]


def test_sign_covers_the_release_set_and_verifies_with_the_public_key(ready: Path, keys: Keys) -> None:
    result = sign(ready, "--key", str(keys.private), "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert sorted(data["files"]) == sorted(RELEASE_SET) and len(data["key_id"]) == 64
    verified = check(ready, keys.public)
    assert verified.returncode == 0, verified.stderr
    assert sorted(json.loads(verified.stdout)["files"]) == sorted(RELEASE_SET)
    assert json.loads(verified.stdout)["signer"] == data["key_id"]


def test_signed_bundle_still_validates_and_its_manifest_does_not_list_the_signature(ready: Path, keys: Keys) -> None:
    assert sign(ready, "--key", str(keys.private)).returncode == 0
    assert "model.sig" not in read_manifest(ready / "checksums.xxh128")
    assert run_cli("checksum", str(ready), "--check").returncode == 0
    assert run_cli("validate", str(ready)).returncode == 0


def test_a_passphrase_protected_key_signs_with_its_passphrase(ready: Path, keys: Keys, tmp_path: Path) -> None:
    secret = tmp_path / "passphrase"
    secret.write_bytes(PASSPHRASE + b"\n")
    assert sign(ready, "--key", str(keys.locked), "--passphrase-file", str(secret)).returncode == 0
    (ready / "model.sig").unlink()
    by_env = sign(ready, "--key", str(keys.locked), env=_env(**{PASSPHRASE_ENV: PASSPHRASE.decode()}))
    assert by_env.returncode == 0, by_env.stderr


def test_the_key_can_come_from_the_environment(ready: Path, keys: Keys) -> None:
    result = sign(ready, env=_env(PACKAGER_SIGNING_KEY=str(keys.private)))
    assert result.returncode == 0, result.stderr
    assert check(ready, keys.public).returncode == 0


@pytest.mark.parametrize(
    "which, code, words",
    [
        ("public", 70, ("is a public key, not a private key",)),
        ("garbage", 70, ("not a PEM private key",)),
        ("wrong_curve", 71, ("secp256k1",)),
        ("rsa", 71, ("not an EC key",)),
        ("locked", 72, ("protected by a passphrase and none was given",)),
        ("wrong_passphrase", 72, ("does not unlock",)),
    ],
)
def test_a_bad_key_is_one_line_with_its_own_code_and_writes_nothing(
    ready: Path, keys: Keys, tmp_path: Path, which: str, code: int, words: tuple[str, ...]
) -> None:
    garbage = tmp_path / "garbage.pem"
    garbage.write_bytes(os.urandom(300))
    key = {
        "public": keys.public,
        "garbage": garbage,
        "wrong_curve": keys.wrong_curve,
        "rsa": keys.rsa,
        "locked": keys.locked,
        "wrong_passphrase": keys.locked,
    }[which]
    env = _env(**{PASSPHRASE_ENV: "not it"}) if which == "wrong_passphrase" else _env()
    before = sorted(p.name for p in ready.iterdir())
    one_line_error(sign(ready, "--key", str(key), env=env), code, *words)
    assert sorted(p.name for p in ready.iterdir()) == before  # no model.sig, no temporary file


def test_signing_again_over_the_same_files_keeps_the_signature(ready: Path, keys: Keys) -> None:
    assert sign(ready, "--key", str(keys.private)).returncode == 0
    before = (ready / "model.sig").read_bytes()
    again = sign(ready, "--key", str(keys.private), "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["unchanged"] is True
    assert (ready / "model.sig").read_bytes() == before
    other = sign(ready, "--key", str(keys.other_private), "--json")  # another key: signed anew
    assert other.returncode == 0 and json.loads(other.stdout)["unchanged"] is False
    assert check(ready, keys.other_public).returncode == 0


def test_a_failed_signing_keeps_the_previous_signature(ready: Path, keys: Keys) -> None:
    assert sign(ready, "--key", str(keys.private)).returncode == 0
    before = (ready / "model.sig").read_bytes()
    one_line_error(sign(ready, "--key", str(keys.wrong_curve)), 71)
    assert (ready / "model.sig").read_bytes() == before


def test_signing_refuses_a_bundle_that_does_not_match_its_manifest(ready: Path, keys: Keys) -> None:
    (ready / "tokenizer.txt").write_bytes((ready / "tokenizer.txt").read_bytes() + b"x")
    one_line_error(sign(ready, "--key", str(keys.private)), 22, "does not match its checksums.xxh128")
    assert not (ready / "model.sig").exists()


def test_signing_refuses_a_stray_file(ready: Path, keys: Keys) -> None:
    (ready / "notes.txt").write_text("x")
    one_line_error(sign(ready, "--key", str(keys.private)), 22, "notes.txt")
    assert not (ready / "model.sig").exists()


def test_another_publishers_key_is_refused(ready: Path, keys: Keys) -> None:
    assert sign(ready, "--key", str(keys.private)).returncode == 0
    one_line_error(check(ready, keys.other_public), 77, "is not signed by the key")


def test_a_changed_file_is_named(ready: Path, keys: Keys) -> None:
    assert sign(ready, "--key", str(keys.private)).returncode == 0
    data = bytearray((ready / "llm.mnn.weight").read_bytes())
    data[77] ^= 1
    (ready / "llm.mnn.weight").write_bytes(bytes(data))
    one_line_error(check(ready, keys.public), 78, "llm.mnn.weight")


@pytest.mark.parametrize(
    "content, words",
    [
        (b"{not json", ("is not JSON",)),
        (b"[1, 2]", ("no sigstore bundle",)),
        (b"[" * 100_000 + b"]" * 100_000, ("is not JSON",)),
        (b" " * (1024 * 1024 + 1), ("more than any signature",)),
        (json.dumps({"verificationMaterial": {"publicKey": {}}, "mediaType": 3}).encode(), ("model-signing can read",)),
    ],
)
def test_a_malformed_signature_is_one_line(ready: Path, keys: Keys, content: bytes, words: tuple[str, ...]) -> None:
    (ready / "model.sig").write_bytes(content)
    one_line_error(check(ready, keys.public), 73, *words)


def test_a_signature_naming_a_file_that_is_not_there_is_refused(ready: Path, keys: Keys) -> None:
    assert sign(ready, "--key", str(keys.private)).returncode == 0
    (ready / "llm.mnn.json").unlink()
    one_line_error(check(ready, keys.public), 75, "names llm.mnn.json")


def test_a_signature_leaving_a_file_out_is_refused(ready: Path, keys: Keys) -> None:
    assert sign(ready, "--key", str(keys.private)).returncode == 0
    (ready / "extra.bin").write_bytes(b"unsigned")
    one_line_error(check(ready, keys.public), 75, "leaves out extra.bin")


@pytest.mark.parametrize("path", ["../evil.bin", "sub/../../evil.bin", "/etc/passwd"])
def test_a_signed_path_outside_the_bundle_is_refused(ready: Path, keys: Keys, path: str) -> None:
    forge_signature(ready, keys.private, {path: b"\0" * 32})
    one_line_error(check(ready, keys.public), 76, "names")


def test_verify_signature_needs_whom_to_trust(ready: Path, keys: Keys) -> None:
    assert sign(ready, "--key", str(keys.private)).returncode == 0
    one_line_error(run_cli("verify-signature", str(ready), env=_env()), 19, "--require-signature needs")


def _offline_env(tmp_path: Path) -> dict[str, str]:
    """No CI identity in the environment, a fresh HOME (no sigstore cache), and the loopback-only guard."""
    tests = Path(__file__).resolve().parent
    env = {k: v for k, v in _env().items() if not k.startswith(("ACTIONS_", "GITHUB_", "GOOGLE_", "SIGSTORE"))}
    return {
        **env,
        "HOME": str(tmp_path / "home"),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "PACKAGER_NETGUARD_LOG": str(tmp_path / "netguard.log"),
        "PYTHONPATH": os.pathsep.join([str(tests / "netguard"), str(tests.parent)]),
    }


def _jwt(claims: dict[str, object]) -> str:
    import base64

    def part(data: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()

    return ".".join([part({"alg": "RS256", "typ": "JWT"}), part(claims), "c2lnbmF0dXJl"])


def test_keyless_signing_without_an_identity_is_one_line_and_writes_nothing(ready: Path, tmp_path: Path) -> None:
    before = sorted(p.name for p in ready.iterdir())
    one_line_error(sign(ready, "--keyless", env=_offline_env(tmp_path)), 74, "no OIDC identity token")
    assert sorted(p.name for p in ready.iterdir()) == before
    assert not (tmp_path / "netguard.log").exists()  # refused before any network


def test_keyless_signing_refuses_a_malformed_token_offline(ready: Path, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("not-a-jwt")
    one_line_error(
        sign(ready, "--keyless", "--identity-token-file", str(token), env=_offline_env(tmp_path)),
        74,
        "identity token is not usable",
    )
    assert not (ready / "model.sig").exists() and not (tmp_path / "netguard.log").exists()


def test_keyless_signing_goes_as_far_as_sigstore_and_fails_in_one_line_without_it(ready: Path, tmp_path: Path) -> None:
    import time

    now = int(time.time())
    token = tmp_path / "token"
    token.write_text(
        _jwt(
            {
                "iss": "https://token.actions.githubusercontent.com",
                "aud": "sigstore",
                "iat": now,
                "nbf": now,
                "exp": now + 3600,
                "sub": "repo:me/draft:ref:refs/heads/main",
            }
        )
    )
    result = sign(ready, "--keyless", "--identity-token-file", str(token), env=_offline_env(tmp_path))
    one_line_error(result, 74, "keyless signing failed")
    assert not (ready / "model.sig").exists()
    assert (tmp_path / "netguard.log").read_text().strip()  # it reached for sigstore's services, and only then


def test_a_key_signed_bundle_is_not_accepted_as_keyless_and_the_reverse(ready: Path, keys: Keys) -> None:
    assert sign(ready, "--key", str(keys.private)).returncode == 0
    as_keyless = run_cli(
        "verify-signature",
        str(ready),
        "--identity",
        "me@example.com",
        "--issuer",
        "https://accounts.example.com",
        env=_env(),
    )
    one_line_error(as_keyless, 77, "signed with a key, not keyless")
    document = json.loads((ready / "model.sig").read_text())
    document["verificationMaterial"] = {"certificate": {"rawBytes": "MIIB"}, "tlogEntries": []}
    (ready / "model.sig").write_text(json.dumps(document))
    one_line_error(check(ready, keys.public), 77, "was signed keyless")


@pytest.mark.parametrize(
    "args, words",
    [
        (("--identity", "me@example.com"), ("--identity and --issuer go together",)),
        (("--public-key", "k.pub", "--identity", "x", "--issuer", "y"), ("both given",)),
    ],
)
def test_contradictory_trust_options_are_refused(ready: Path, args: tuple[str, ...], words: tuple[str, ...]) -> None:
    one_line_error(run_cli("verify-signature", str(ready), *args, env=_env()), 19, *words)


def test_keyless_verification_goes_as_far_as_sigstore_s_trust_root_and_fails_in_one_line(
    ready: Path, keys: Keys, tmp_path: Path
) -> None:
    assert sign(ready, "--key", str(keys.private)).returncode == 0
    document = json.loads((ready / "model.sig").read_text())
    document["verificationMaterial"] = {"certificate": {"rawBytes": "MIIB"}, "tlogEntries": []}  # as keyless
    (ready / "model.sig").write_text(json.dumps(document))
    result = run_cli(
        "verify-signature",
        str(ready),
        "--identity",
        "me@example.com",
        "--issuer",
        "https://accounts.example.com",
        env=_offline_env(tmp_path),
    )
    one_line_error(result, 74, "trust root could not be loaded")
    assert "sigstore" in (tmp_path / "netguard.log").read_text()


CAPPED = ("bash", "-c", 'ulimit -v 4000000; exec "$0" "$@"')  # a read that would not stop fails here, not the host


def _capped(*args: str, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return run_cli(*args, env=env or _env(), prefix=CAPPED)


def _replace_signature(bundle: Path, kind: str, tmp_path: Path) -> None:
    """model.sig as a link (to a real signature outside the bundle, or to /dev/zero), a FIFO or a folder."""
    signature = bundle / "model.sig"
    outside = tmp_path / "outside.sig"
    outside.write_bytes(signature.read_bytes())
    signature.unlink()
    if kind == "link":
        signature.symlink_to(outside)
    elif kind == "link to /dev/zero":
        signature.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(signature)
    else:
        signature.mkdir()


@pytest.mark.parametrize("kind", ["link", "link to /dev/zero", "fifo", "folder"])
def test_a_model_sig_that_is_no_regular_file_is_refused_by_sign_and_verify_signature(
    ready: Path, keys: Keys, tmp_path: Path, kind: str
) -> None:
    assert sign(ready, "--key", str(keys.private)).returncode == 0
    _replace_signature(ready, kind, tmp_path)
    verified = _capped("verify-signature", str(ready), "--public-key", str(keys.public))
    one_line_error(verified, 22, "model.sig is not a regular file")
    signed = _capped("sign", str(ready), "--key", str(keys.private))
    one_line_error(signed, 22, "model.sig is not a regular file", "nothing was signed")
    assert (tmp_path / "outside.sig").read_bytes() and (ready / "model.sig").is_symlink() == kind.startswith("link")


def test_the_passphrase_file_is_read_to_its_first_newline_only(ready: Path, keys: Keys, tmp_path: Path) -> None:
    secret = tmp_path / "passphrase"
    with open(secret, "wb") as handle:  # the passphrase, then 3 GB that hold no memory (sparse)
        handle.write(PASSPHRASE + b"\r\n")
        handle.truncate(3 << 30)
    signed = _capped("sign", str(ready), "--key", str(keys.locked), "--passphrase-file", str(secret))
    assert signed.returncode == 0, signed.stderr
    assert check(ready, keys.public.parent / "locked.pub").returncode == 0


@pytest.mark.parametrize(
    "option, source",
    [
        ("--passphrase-file", "/dev/zero"),
        ("--passphrase-file", "sparse"),
        ("--key", "sparse"),
        ("--public-key", "/dev/zero"),
        ("--public-key", "sparse"),
    ],
)
def test_a_passphrase_or_key_file_larger_than_any_is_one_line_under_a_memory_cap(
    ready: Path, keys: Keys, tmp_path: Path, option: str, source: str
) -> None:
    path = tmp_path / "sparse"
    if source == "sparse":
        with open(path, "wb") as handle:  # 3 GB without a newline, holding no memory
            handle.truncate(3 << 30)
    given = source if source == "/dev/zero" else str(path)
    if option == "--public-key":
        assert sign(ready, "--key", str(keys.private)).returncode == 0
        result = _capped("verify-signature", str(ready), "--public-key", given)
    else:
        key = given if option == "--key" else str(keys.locked)
        result = _capped(
            "sign", str(ready), "--key", key, *(("--passphrase-file", given) if option == "--passphrase-file" else ())
        )
    what = {"--key": "signing key", "--public-key": "public key"}.get(option, option)
    # a device is no key file at all; a passphrase file's first line from it, and a sparse file, are too long
    refused = (
        ("is not a PEM public key file",)
        if (option, source) == ("--public-key", "/dev/zero")
        else ("64 KiB", "too large")
    )
    one_line_error(result, 70, what, *refused)


@pytest.mark.parametrize(
    "material", [{}, {"tlogEntries": []}, {"publicKey": {"hint": "x"}, "certificate": {"rawBytes": "MIIB"}}]
)
def test_a_signature_naming_no_signer_is_malformed_not_keyless(
    ready: Path, keys: Keys, tmp_path: Path, material: dict[str, object]
) -> None:
    assert sign(ready, "--key", str(keys.private)).returncode == 0
    document = json.loads((ready / "model.sig").read_text())
    (ready / "model.sig").write_text(json.dumps({**document, "verificationMaterial": material}))
    one_line_error(check(ready, keys.public), 73, "names no signer")
    keyless = run_cli(
        "verify-signature",
        str(ready),
        "--identity",
        "me@example.com",
        "--issuer",
        "https://accounts.example.com",
        env=_offline_env(tmp_path),
    )
    one_line_error(keyless, 73, "names no signer")
    assert not (tmp_path / "netguard.log").exists()  # refused before sigstore's trust root was asked for
    (ready / "model.sig").write_text('{"verificationMaterial":{}}')  # the review's own file
    one_line_error(check(ready, keys.public), 73, "neither a public key nor a certificate")
