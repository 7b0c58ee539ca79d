"""Publishing over HTTP with the real huggingface_hub client against the local Hub, faults included."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.localhub import READ_TOKEN, WRITE_TOKEN, LocalHub, hub, online, ready
from tests.localhub import change_weights as _change_weights
from tests.localhub import history as _history
from tests.localhub import upload as _upload

pytestmark = pytest.mark.hub

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "release.toml"
SPEC_REPO = "your-name/Qwen3-0.6B-KL-draft-MNN"


def test_fresh_release_is_one_verified_tagged_commit(hub: LocalHub, ready: Path) -> None:
    result = hub.cli("release", str(EXAMPLE), "--bundle", str(ready), "--json", "--quiet")
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads(result.stdout)
    names = [s["name"] for s in summary["stages"]]
    assert names == ["convert", "validate", "verify", "card", "checksum", "upload, verify, tag"]
    assert summary["stages"][2]["detail"].startswith("not verified against its source")  # no checkpoint: said
    history = _history(hub, SPEC_REPO)
    assert len(history) == 1 and history[0]["title"].startswith("Release v3:") and "packager" in history[0]["title"]
    tree = {f["path"] for f in hub.api(f"/api/models/{SPEC_REPO}/tree/v3?recursive=true")}
    assert len(tree) == 13 and {"README.md", "checksums.xxh128", "llm.mnn.weight", ".gitattributes"} <= tree
    assert hub.api(f"/api/models/{SPEC_REPO}/refs")["tags"][0]["targetCommit"] == summary["commit"]
    assert "Tokenizer agreement" in (ready / "README.md").read_text()  # the card came from the provenance


def test_unchanged_rerelease_sends_nothing_and_makes_no_commit(hub: LocalHub, ready: Path) -> None:
    assert _upload(hub, ready, "me/draft").returncode == 0
    before = hub.stats()
    again = _upload(hub, ready, "me/draft")
    assert again.returncode == 0, again.stderr
    data = json.loads(again.stdout)
    assert data["committed"] is False and data["bytes_to_send"] == 0
    assert {r["action"] for r in data["plan"]} == {"unchanged"}
    after = hub.stats()
    assert after["lfs_bytes_received"] == before["lfs_bytes_received"]
    assert after["commits_received"] == before["commits_received"] and len(_history(hub, "me/draft")) == 1


def test_one_changed_file_is_the_only_one_sent(hub: LocalHub, ready: Path) -> None:
    assert _upload(hub, ready, "me/draft").returncode == 0
    before = hub.stats()["lfs_bytes_received"]
    _change_weights(ready)
    result = _upload(hub, ready, "me/draft")
    assert result.returncode == 0, result.stderr
    sent = {r["path"] for r in json.loads(result.stdout)["plan"] if r["action"] == "replace"}
    assert sent == {"llm.mnn.weight", "checksums.xxh128"}
    assert hub.stats()["lfs_bytes_received"] - before == (ready / "llm.mnn.weight").stat().st_size
    assert len(_history(hub, "me/draft")) == 2


def test_download_round_trip_is_byte_for_byte(hub: LocalHub, ready: Path, tmp_path: Path, online: None) -> None:
    assert _upload(hub, ready, "me/draft", "--tag", "v1").returncode == 0
    check = hub.cli("verify-remote", "me/draft@v1", "--json")
    assert check.returncode == 0, check.stderr
    assert json.loads(check.stdout)["checked"] == 11
    from huggingface_hub import snapshot_download

    folder = Path(
        snapshot_download(
            "me/draft", revision="v1", endpoint=hub.url, token=WRITE_TOKEN, cache_dir=str(tmp_path / "cache")
        )
    )
    for path in ready.iterdir():
        assert (folder / path.name).read_bytes() == path.read_bytes(), path.name


def test_verify_remote_catches_a_changed_file(hub: LocalHub, ready: Path, online: None) -> None:
    assert _upload(hub, ready, "me/draft").returncode == 0
    # Someone commits new weights without updating the manifest.
    from huggingface_hub import HfApi

    data = bytearray((ready / "llm.mnn.weight").read_bytes())
    data[100] ^= 1
    HfApi(endpoint=hub.url, token=WRITE_TOKEN).upload_file(
        path_or_fileobj=bytes(data), path_in_repo="llm.mnn.weight", repo_id="me/draft"
    )
    check = hub.cli("verify-remote", "me/draft")
    assert check.returncode == 31 and "MISMATCH llm.mnn.weight" in check.stdout


def test_dry_run_changes_nothing(hub: LocalHub, ready: Path) -> None:
    result = _upload(hub, ready, "me/draft", "--dry-run")
    assert result.returncode == 0
    assert {r["action"] for r in json.loads(result.stdout)["plan"]} == {"add"}
    assert hub.stats() == {"lfs_bytes_received": 0, "commits_received": 0, "unpinned_commits": 0, "faults_left": 0}
    assert hub.cli("verify-remote", "me/draft").returncode == 43  # the repo was not even created


def test_lfs_put_500_once_is_retried(hub: LocalHub, ready: Path) -> None:
    hub.faults({"method": "PUT", "path": "/lfs-upload/", "status": 500, "times": 1})
    assert _upload(hub, ready, "me/draft").returncode == 0
    assert hub.stats()["faults_left"] == 0 and hub.cli("verify-remote", "me/draft").returncode == 0


def test_commit_500_is_retried_without_a_duplicate(hub: LocalHub, ready: Path) -> None:
    hub.faults({"method": "POST", "path": "/commit/", "status": 500, "times": 1})
    assert _upload(hub, ready, "me/draft").returncode == 0
    assert len(_history(hub, "me/draft")) == 1


def test_commit_that_landed_but_lost_its_answer_is_not_repeated(hub: LocalHub, ready: Path) -> None:
    hub.faults({"method": "POST", "path": "/commit/", "status": 500, "times": 1, "after": True})
    result = _upload(hub, ready, "me/draft")
    assert result.returncode == 0, result.stderr
    assert len(_history(hub, "me/draft")) == 1 and hub.stats()["commits_received"] == 1


def test_commit_that_keeps_failing_leaves_no_partial_release(hub: LocalHub, ready: Path) -> None:
    hub.faults({"method": "POST", "path": "/commit/", "status": 503, "times": 10})
    result = _upload(hub, ready, "me/draft", "--tag", "v1")
    assert result.returncode == 40 and result.stderr.count("packager: error:") == 1
    assert _history(hub, "me/draft") == [] and hub.api("/api/models/me/draft/refs")["tags"] == []


def test_dropped_connection_then_rerun_sends_only_what_is_missing(hub: LocalHub, ready: Path) -> None:
    from huggingface_hub.utils.sha import sha_fileobj

    weights = ready / "llm.mnn.weight"
    with open(weights, "rb") as handle:
        oid = sha_fileobj(handle).hex()
    # Every attempt to send the weights loses its connection after 1 MB; the other LFS files get through.
    hub.faults({"method": "PUT", "path": oid, "drop_after_bytes": 1_000_000, "times": 100})
    first = hub.cli("upload", str(ready), "me/draft", "--quiet", timeout=240)
    assert first.returncode == 40 and first.stderr.count("packager: error:") == 1, first.stderr
    assert "Traceback" not in first.stderr and _history(hub, "me/draft") == []
    hub.faults()
    before = hub.stats()["lfs_bytes_received"]
    rerun = _upload(hub, ready, "me/draft")
    assert rerun.returncode == 0, rerun.stderr
    assert hub.stats()["lfs_bytes_received"] - before == weights.stat().st_size  # nothing else re-sent
    assert len(_history(hub, "me/draft")) == 1
    assert hub.cli("verify-remote", "me/draft").returncode == 0


def test_preupload_429_with_retry_after_is_honoured(hub: LocalHub, ready: Path) -> None:
    hub.faults({"method": "POST", "path": "/preupload/", "status": 429, "times": 1, "retry_after": 1})
    assert _upload(hub, ready, "me/draft").returncode == 0
    assert hub.stats()["faults_left"] == 0


@pytest.mark.parametrize(
    "token, code, text",
    [
        ("hf_wrong_token_SECRET", 41, "rejected the credentials (401)"),
        (READ_TOKEN, 42, "is read-only; nothing was sent"),
    ],
)
def test_auth_failures_are_one_line(hub: LocalHub, ready: Path, token: str, code: int, text: str) -> None:
    result = _upload(hub, ready, "me/draft", token=token)
    assert result.returncode == code and text in result.stderr
    assert result.stderr.count("\n") == 1 and token not in result.stdout + result.stderr


def test_missing_repo_is_404(hub: LocalHub) -> None:
    result = hub.cli("verify-remote", "me/nothing-here")
    assert result.returncode == 43 and "(404)" in result.stderr and result.stderr.count("\n") == 1


def test_tag_pointing_elsewhere_is_a_409_conflict(hub: LocalHub, ready: Path) -> None:
    assert _upload(hub, ready, "me/draft", "--tag", "v1").returncode == 0
    _change_weights(ready)
    result = _upload(hub, ready, "me/draft", "--tag", "v1")
    assert result.returncode == 44 and "tag v1 already points at" in result.stderr


def test_token_never_appears_in_output_or_files(hub: LocalHub, ready: Path, tmp_path: Path) -> None:
    outputs = []
    for args in (
        ("release", str(EXAMPLE), "--bundle", str(ready)),
        ("verify-remote", SPEC_REPO + "@v3"),
        ("upload", str(ready), "me/other", "--dry-run"),
    ):
        result = hub.cli(*args)
        assert result.returncode == 0, result.stderr
        outputs.append(result.stdout + result.stderr)
    outputs.append(_upload(hub, ready, "me/x", token=WRITE_TOKEN + "x").stderr)
    for text in outputs:
        assert WRITE_TOKEN not in text
    for path in tmp_path.rglob("*"):
        if path.name == "hub-tokens":
            continue  # the server's own token file, written by the fixture
        if path.is_file() and path.stat().st_size < 50_000_000:
            assert WRITE_TOKEN.encode() not in path.read_bytes(), path


def test_server_keeps_its_repos_across_a_restart(hub: LocalHub, ready: Path) -> None:
    assert _upload(hub, ready, "me/draft", "--tag", "v1").returncode == 0
    commit = hub.api("/api/models/me/draft/refs")["tags"][0]["targetCommit"]
    hub.stop()
    hub.start()
    assert hub.api("/api/models/me/draft/refs")["tags"][0]["targetCommit"] == commit
    assert hub.cli("verify-remote", "me/draft@v1").returncode == 0
    again = json.loads(_upload(hub, ready, "me/draft").stdout)
    assert again["committed"] is False


def _spec_with_source(tmp_path: Path, source: Path, extra: str) -> Path:
    """A spec whose release verifies against `source` on three prompts of its own (the gate's wiring is what these
    tests check; the built-in 54-prompt workload is tests/test_verify.py's)."""
    text = EXAMPLE.read_text().replace(
        "[convert]\nquant_bits = 4\nquant_block = 128\n", f'[convert]\ncheckpoint = "{source}"\n{extra}'
    )
    (tmp_path / "prompts.txt").write_text("The capital of France is\ndef fibonacci(n):\nQ: Why is the sky blue?\n")
    path = tmp_path / "release.toml"
    path.write_text(text + '\n[verify]\nprompts = "prompts.txt"\n')
    return path


@pytest.mark.converter
def test_release_converts_verifies_and_states_parity(hub: LocalHub, tiny_checkpoint: Path, tmp_path: Path) -> None:
    spec = _spec_with_source(tmp_path, tiny_checkpoint, "quant_bits = 8\n")
    result = hub.cli("release", str(spec), "--out", str(tmp_path / "dist" / "b"), "--json", "--quiet", timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    stages = [s["name"] for s in json.loads(result.stdout)["stages"]]
    assert stages == ["convert", "validate", "verify", "card", "checksum", "upload, verify, tag"]
    card = (tmp_path / "dist" / "b" / "README.md").read_text()
    assert "Parity with the source checkpoint (packager verify: 3 chat-templated prompts" in card
    assert "8-bit weights" in card


def test_release_refuses_a_missing_verify_prompts_file_before_any_work(
    hub: LocalHub, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    spec = _spec_with_source(tmp_path, tiny_checkpoint, "quant_bits = 8\n")
    (tmp_path / "prompts.txt").unlink()
    result = hub.cli("release", str(spec), "--out", str(tmp_path / "dist" / "b"), "--quiet", timeout=600)
    assert result.returncode != 0 and result.stderr.count("\n") == 1 and "prompts" in result.stderr
    assert not (tmp_path / "dist").exists()  # nothing converted


@pytest.mark.converter
def test_release_stops_at_a_failed_verify_and_publishes_nothing(
    hub: LocalHub, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    spec = _spec_with_source(tmp_path, tiny_checkpoint, "quant_bits = 4\n")
    # A gate no 4-bit bundle of random weights meets (their logits are flat, so KL cannot tell; cosine can).
    spec.write_text(spec.read_text() + "mean_cosine = 0.9999\n")
    result = hub.cli("release", str(spec), "--out", str(tmp_path / "dist" / "b"), "--quiet", timeout=600)
    assert result.returncode == 50 and "FAIL verify" in result.stdout and "release stopped at verify" in result.stdout
    assert hub.cli("verify-remote", SPEC_REPO).returncode == 43  # nothing was created on the Hub


def test_upload_to_a_new_branch_starts_from_main(hub: LocalHub, ready: Path) -> None:
    assert _upload(hub, ready, "me/draft").returncode == 0
    _change_weights(ready)
    result = _upload(hub, ready, "me/draft", "--revision", "staging")
    assert result.returncode == 0, result.stderr
    refs = hub.api("/api/models/me/draft/refs")
    heads = {b["name"]: b["targetCommit"] for b in refs["branches"]}
    assert set(heads) == {"main", "staging"} and heads["staging"] == json.loads(result.stdout)["commit"]
    assert len(_history(hub, "me/draft")) == 1  # main did not move
    assert hub.cli("verify-remote", "me/draft@staging").returncode == 0


def test_server_side_409_is_a_conflict(hub: LocalHub, ready: Path) -> None:
    hub.faults({"method": "POST", "path": "/tag/", "status": 409, "times": 1})
    result = _upload(hub, ready, "me/draft", "--tag", "v1")
    assert result.returncode == 44 and "conflict (409)" in result.stderr and result.stderr.count("\n") == 1


def test_private_repo_is_hidden_without_a_token(hub: LocalHub, ready: Path) -> None:
    assert _upload(hub, ready, "me/secret", "--private").returncode == 0
    assert hub.cli("verify-remote", "me/secret").returncode == 0
    hidden = hub.cli("verify-remote", "me/secret", token=None)
    assert hidden.returncode == 43 and "(404)" in hidden.stderr


def test_a_failing_tree_listing_is_one_line(hub: LocalHub, ready: Path) -> None:
    assert _upload(hub, ready, "me/draft").returncode == 0
    hub.faults({"method": "GET", "path": "/tree/", "status": 403, "times": 5})
    result = _upload(hub, ready, "me/draft")
    assert result.returncode == 42 and result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "listing me/draft@" in result.stderr
