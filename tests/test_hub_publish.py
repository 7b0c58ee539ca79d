"""Publishing says "verified" only when the Hub holds the bundle: the findings of issue 10, each through the
real `packager` command and huggingface_hub client against the local Hub."""

from __future__ import annotations

import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.localhub import READ_TOKEN, WRITE_TOKEN, LocalHub, change_weights, history, hub, online, ready, upload


def _same_size_other_bytes(path: Path) -> bytes:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x5A
    return bytes(data)


def _one_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    return result.stderr


def _nothing_sent(hub: LocalHub, before: dict[str, int]) -> None:
    after = hub.stats()
    assert after["lfs_bytes_received"] == before["lfs_bytes_received"]
    assert after["commits_received"] == before["commits_received"]


# 1. the plan compares the Hub's files, not its manifest's claims --------------------------------------------
def test_upload_repairs_a_file_changed_behind_an_unchanged_manifest(hub: LocalHub, ready: Path, online: None) -> None:
    from huggingface_hub import HfApi

    assert upload(hub, ready, "me/draft", "--tag", "v1").returncode == 0
    HfApi(endpoint=hub.url, token=WRITE_TOKEN).upload_file(
        path_or_fileobj=_same_size_other_bytes(ready / "llm.mnn.weight"),
        path_in_repo="llm.mnn.weight",
        repo_id="me/draft",
        commit_message="someone else",
    )
    assert hub.cli("verify-remote", "me/draft").returncode == 31
    result = upload(hub, ready, "me/draft", "--tag", "v9")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["repaired"] == ["llm.mnn.weight"] and data["committed"] is True
    assert {r["path"] for r in data["plan"] if r["action"] != "unchanged"} == {"llm.mnn.weight"}
    text = hub.cli("upload", str(ready), "me/draft", "--quiet")
    assert "unchanged" in text.stdout.splitlines()[-1]
    check = hub.cli("verify-remote", "me/draft@v9")
    assert check.returncode == 0, check.stdout + check.stderr


def test_upload_summary_names_what_it_repaired(hub: LocalHub, ready: Path, online: None) -> None:
    from huggingface_hub import HfApi

    assert upload(hub, ready, "me/draft").returncode == 0
    HfApi(endpoint=hub.url, token=WRITE_TOKEN).upload_file(
        path_or_fileobj=_same_size_other_bytes(ready / "llm.mnn.weight"),
        path_in_repo="llm.mnn.weight",
        repo_id="me/draft",
    )
    result = hub.cli("upload", str(ready), "me/draft", "--quiet")
    assert result.returncode == 0 and "repaired on the Hub: llm.mnn.weight" in result.stdout


def test_damaged_stored_object_is_found_and_replaced_without_a_commit(hub: LocalHub, ready: Path) -> None:
    assert upload(hub, ready, "me/draft", "--tag", "v1").returncode == 0
    stored = hub.stored_object("me/draft", "llm.mnn.weight")
    stored.write_bytes(_same_size_other_bytes(stored))
    os.utime(stored, ns=(0, 0))
    assert hub.cli("verify-remote", "me/draft@v1").returncode == 31  # the Hub serves damaged bytes
    before = hub.stats()
    result = upload(hub, ready, "me/draft", "--tag", "v1")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["repaired"] == [] and data["committed"] is False
    assert [r["path"] for r in data["plan"] if r["action"] == "restore"] == ["llm.mnn.weight"]
    after = hub.stats()
    assert after["commits_received"] == before["commits_received"]
    assert after["lfs_bytes_received"] - before["lfs_bytes_received"] == (ready / "llm.mnn.weight").stat().st_size
    assert hub.cli("verify-remote", "me/draft@v1").returncode == 0


# 2. --revision takes branch names only; every commit is pinned -------------------------------------------------
@pytest.mark.parametrize("revision", ["v1", "COMMIT", "bad..name", "refs/heads/x", "-x"])
def test_revision_that_is_not_a_branch_name_is_refused_before_sending(
    hub: LocalHub, ready: Path, revision: str
) -> None:
    assert upload(hub, ready, "me/draft", "--tag", "v1").returncode == 0
    if revision == "COMMIT":
        revision = hub.api("/api/models/me/draft/refs")["tags"][0]["targetCommit"]
    change_weights(ready)
    before = hub.stats()
    result = upload(hub, ready, "me/draft", "--revision", revision)
    assert result.returncode == 46 and "--revision" in _one_line(result)
    _nothing_sent(hub, before)
    assert [b["name"] for b in hub.api("/api/models/me/draft/refs")["branches"]] == ["main"]


def test_first_upload_to_a_new_repo_and_branch_is_pinned_to_the_initial_commit(hub: LocalHub, ready: Path) -> None:
    result = upload(hub, ready, "me/fresh", "--revision", "staging")
    assert result.returncode == 0, result.stderr
    heads = {b["name"]: b["targetCommit"] for b in hub.api("/api/models/me/fresh/refs")["branches"]}
    staging = hub.api("/api/models/me/fresh/commits/staging")
    assert [c["id"] for c in staging] == [heads["staging"], heads["main"]]  # staging = main's first commit + ours
    assert history(hub, "me/fresh") == []  # main holds only the initial commit
    assert hub.stats()["unpinned_commits"] == 0


def test_two_concurrent_first_uploads_cannot_both_land(hub: LocalHub, ready: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    shutil.copytree(ready, other)
    change_weights(other)
    # Both commits are held until both arrived: both uploads read the repo before either committed.
    hub.faults({"method": "POST", "path": "/commit/", "barrier": 2, "times": 2})
    runs = [
        subprocess.Popen(
            [sys.executable, "-m", "packager.cli", "upload", str(b), "me/race", "--json", "--quiet"],
            env=hub.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for b in (ready, other)
    ]
    outcomes = [(run.wait(timeout=300), *run.communicate()) for run in runs]
    assert sorted(code for code, _, _ in outcomes) == [0, 44], outcomes
    winner = json.loads(next(out for code, out, _ in outcomes if code == 0))
    assert [c["id"] for c in history(hub, "me/race")] == [winner["commit"]]
    assert "conflict (412)" in next(err for code, _, err in outcomes if code == 44)
    assert hub.cli("verify-remote", "me/race").returncode == 0 and hub.stats()["unpinned_commits"] == 0


# 3. visibility ---------------------------------------------------------------------------------------------
def test_private_upload_into_a_public_repo_is_refused_until_made_private(hub: LocalHub, ready: Path) -> None:
    assert upload(hub, ready, "me/open").returncode == 0
    change_weights(ready)
    before = hub.stats()
    refused = upload(hub, ready, "me/open", "--private")
    assert refused.returncode == 47 and "--make-private" in _one_line(refused)
    _nothing_sent(hub, before)
    assert hub.api("/api/models/me/open")["private"] is False
    done = upload(hub, ready, "me/open", "--make-private")
    assert done.returncode == 0, done.stderr
    assert hub.api("/api/models/me/open")["private"] is True
    assert hub.cli("verify-remote", "me/open", token=None).returncode == 43


# 4. tag conflicts before the commit ---------------------------------------------------------------------------
def test_tag_on_another_commit_is_refused_before_anything_is_sent(hub: LocalHub, ready: Path) -> None:
    assert upload(hub, ready, "me/draft", "--tag", "v1").returncode == 0
    head = history(hub, "me/draft")
    change_weights(ready)
    before = hub.stats()
    result = upload(hub, ready, "me/draft", "--tag", "v1")
    assert result.returncode == 44 and "tag v1 already points at" in _one_line(result)
    _nothing_sent(hub, before)
    assert history(hub, "me/draft") == head  # main did not move


# 5. the landing check goes by identity, not by title ------------------------------------------------------------
def test_a_commit_with_our_title_but_not_our_upload_id_is_not_taken_for_ours(hub: LocalHub, ready: Path) -> None:
    # The commit POST fails, and meanwhile another uploader's commit with the very same title lands.
    hub.faults({"method": "POST", "path": "/commit/", "status": 500, "foreign": True})
    result = upload(hub, ready, "me/draft", "--message", "same title")
    assert result.returncode == 44 and "nothing of this upload landed" in _one_line(result)
    landed = history(hub, "me/draft")
    assert len(landed) == 1 and landed[0]["title"] == "same title" and "packager-upload-id" not in landed[0]["message"]


def test_a_lost_answer_is_recognised_by_the_upload_id(hub: LocalHub, ready: Path) -> None:
    hub.faults({"method": "POST", "path": "/commit/", "status": 500, "after": True})
    result = upload(hub, ready, "me/draft", "--message", "same title")
    assert result.returncode == 0, result.stderr
    landed = history(hub, "me/draft")
    assert [c["id"] for c in landed] == [json.loads(result.stdout)["commit"]]
    assert "packager-upload-id: " in landed[0]["message"]


# 7. permissions before the commit -----------------------------------------------------------------------------
def test_read_only_token_on_an_existing_repo_is_42(hub: LocalHub, ready: Path) -> None:
    assert upload(hub, ready, "me/draft").returncode == 0
    change_weights(ready)
    result = upload(hub, ready, "me/draft", token=READ_TOKEN)
    assert result.returncode == 42 and "read-only" in _one_line(result) and READ_TOKEN not in result.stderr


# 8. input problems are usage errors, never "rerun" ----------------------------------------------------------------
@pytest.mark.parametrize("repo_id", ["a/../../b", "noslash", "a/b/c", "me/bad--name", ".hidden/x", "me/x.git"])
def test_invalid_repo_id_is_a_usage_error(hub: LocalHub, ready: Path, repo_id: str) -> None:
    for result in (upload(hub, ready, repo_id), hub.cli("verify-remote", repo_id)):
        assert (
            result.returncode == 48 and "invalid repo id" in _one_line(result) and "rerun the same" not in result.stderr
        )


def test_endpoint_without_a_scheme_is_a_usage_error(hub: LocalHub, ready: Path) -> None:
    result = upload(hub, ready, "me/draft", "--endpoint", hub.url.removeprefix("http://"))
    assert result.returncode == 48 and "is not an http:// or https:// URL" in _one_line(result)
    assert "rerun the same" not in result.stderr


@pytest.fixture()
def not_a_hub() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_endpoint_that_is_not_a_hub_is_a_usage_error(hub: LocalHub, ready: Path, not_a_hub: str) -> None:
    result = upload(hub, ready, "me/draft", "--endpoint", not_a_hub)
    assert result.returncode == 48 and "does not answer like a Hugging Face Hub" in _one_line(result)
    assert "rerun the same" not in result.stderr


# 9. verify-remote in bounded time; 31 for a mismatch, 40 for what cannot be read ---------------------------------
def test_verify_remote_names_a_truncated_stored_file(hub: LocalHub, ready: Path) -> None:
    assert upload(hub, ready, "me/draft").returncode == 0
    stored = hub.stored_object("me/draft", "llm.mnn.weight")
    stored.write_bytes(stored.read_bytes()[:1000])
    result = hub.cli("verify-remote", "me/draft", "--quiet")
    assert result.returncode == 40 and "could not read llm.mnn.weight" in _one_line(result)
    assert str(hub.root) not in result.stderr + result.stdout  # the Hub does not show its paths
    again = upload(hub, ready, "me/draft")  # the next upload sends it again
    assert again.returncode == 0 and "llm.mnn.weight" in json.loads(again.stdout)["repaired"] + [
        r["path"] for r in json.loads(again.stdout)["plan"] if r["action"] == "restore"
    ]
    assert hub.cli("verify-remote", "me/draft").returncode == 0


def test_verify_remote_gives_up_on_a_stalled_download_naming_the_file(hub: LocalHub, ready: Path) -> None:
    assert upload(hub, ready, "me/draft").returncode == 0
    hub.faults({"method": "GET", "path": "/resolve/", "stall_after_bytes": 100, "times": 20})
    result = hub.cli("verify-remote", "me/draft", "--timeout", "1")
    assert result.returncode == 40 and "could not read" in _one_line(result) and "no data for 1 s" in result.stderr


def test_token_file_stands_in_for_hf_token_and_is_never_shown(hub: LocalHub, ready: Path, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(WRITE_TOKEN + "\n")
    result = upload(hub, ready, "me/draft", "--token-file", str(token_file), token=None)
    assert result.returncode == 0, result.stderr
    check = hub.cli("verify-remote", "me/draft", "--token-file", str(token_file), token=None)
    assert check.returncode == 0 and WRITE_TOKEN not in result.stdout + result.stderr + check.stdout + check.stderr


# issue 30: a token that cannot travel in a header, or a token file that never ends ------------------------------------
NOWHERE = "http://127.0.0.1:9"  # nothing listens there: a request would end in a connection error (40), not in 41


def _command(name: str, ready: Path, tmp_path: Path) -> list[str]:
    return {
        "pull": ["pull", "me/draft", str(tmp_path / "draft"), "--quiet"],
        "verify-remote": ["verify-remote", "me/draft"],
        "upload": ["upload", str(ready), "me/draft", "--quiet"],
    }[name] + ["--endpoint", NOWHERE]


@pytest.mark.parametrize("command", ["pull", "verify-remote", "upload"])
@pytest.mark.parametrize("source", ["--token-file", "$HF_TOKEN", "the huggingface login"])
def test_an_unprintable_token_is_refused_before_any_request_naming_where_it_came_from(
    ready: Path, tmp_path: Path, command: str, source: str
) -> None:
    local = LocalHub(tmp_path / "hub", tmp_path / "netguard.log")
    env = local.env(token=None)
    args = _command(command, ready, tmp_path)
    if source == "--token-file":
        (tmp_path / "token").write_bytes(b"hf_SECRET\x01x\n")
        args += ["--token-file", str(tmp_path / "token")]
    elif source == "$HF_TOKEN":
        env["HF_TOKEN"] = "hf_S\x7fSECRET"
    else:
        Path(env["HF_HOME"]).mkdir(parents=True)
        (Path(env["HF_HOME"]) / "token").write_bytes(b"hf_SECRET\x01x\n")
    result = subprocess.run(
        [sys.executable, "-m", "packager.cli", *args], capture_output=True, text=True, env=env, timeout=120
    )
    assert result.returncode == 41, result.stdout + result.stderr
    line = _one_line(result)
    assert f"the token from {source}" in line and "holds a control character" in line and "nothing was sent" in line
    assert "SECRET" not in result.stdout + result.stderr and not (tmp_path / "draft").exists()
    assert not (tmp_path / "netguard.log").exists() or (tmp_path / "netguard.log").read_text() == ""


@pytest.mark.parametrize("which", ["/dev/zero", "a 3 GB sparse file"])
def test_a_token_file_that_never_ends_is_one_line_under_a_memory_cap(tmp_path: Path, which: str) -> None:
    path = Path("/dev/zero")
    if which != "/dev/zero":
        path = tmp_path / "sparse-token"
        with open(path, "wb") as handle:
            handle.truncate(3 * 1024**3)
    env = LocalHub(tmp_path / "hub", tmp_path / "netguard.log").env(token=None)
    cap = ("bash", "-c", 'ulimit -v 4000000; exec "$0" "$@"')
    result = subprocess.run(
        [
            *cap,
            sys.executable,
            "-m",
            "packager.cli",
            "pull",
            "me/draft",
            str(tmp_path / "draft"),
            "--endpoint",
            NOWHERE,
            "--token-file",
            str(path),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 26, result.stderr
    assert f"--token-file {path} is over 64 KiB" in _one_line(result)
