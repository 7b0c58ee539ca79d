"""The local Hub against hostile clients, over raw HTTP (http.client and sockets) and the real client."""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from packager.hub.local.rules import path_problem
from tests.localhub import READ_TOKEN, WRITE_TOKEN, LocalHub, online

pytestmark = pytest.mark.hub

LFS_BYTES = b"\x00binary" + bytes(range(256)) * 40


@pytest.fixture()
def hub(tmp_path: Path) -> Iterator[LocalHub]:
    server = LocalHub(tmp_path / "hub", tmp_path / "netguard.log", "--body-timeout", "2").start()
    yield server
    server.stop()
    log = tmp_path / "netguard.log"
    assert not log.exists() or log.read_text() == "", log.read_text()


def _create(hub: LocalHub, name: str, organization: str = "me", private: bool = False) -> tuple[int, Any]:
    body = {"name": name, "organization": organization, **({"visibility": "private"} if private else {})}
    status, _, data = hub.raw(
        "POST", "/api/repos/create", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    return status, json.loads(data)


def _commit(hub: LocalHub, repo: str, *lines: dict[str, Any], raw: bytes | None = None) -> tuple[int, Any]:
    body = raw if raw is not None else "\n".join(json.dumps(line) for line in lines).encode()
    status, _, data = hub.raw("POST", f"/api/models/{repo}/commit/main", body, {"Content-Type": "application/x-ndjson"})
    return status, json.loads(data)


def _file(path: str, content: bytes = b"hello\n") -> dict[str, Any]:
    return {"key": "file", "value": {"path": path, "content": base64.b64encode(content).decode(), "encoding": "base64"}}


def _header(summary: str = "raw commit") -> dict[str, Any]:
    return {"key": "header", "value": {"summary": summary, "description": ""}}


def _tree(hub: LocalHub, repo: str) -> set[str]:
    return {e["path"] for e in hub.api(f"/api/models/{repo}/tree/main?recursive=true")}


@pytest.fixture()
def repo(hub: LocalHub, online: None) -> str:
    """me/box with notes.txt (regular) and blob.bin (LFS, sent by the real client)."""
    from huggingface_hub import HfApi

    assert _create(hub, "box")[0] == 200
    assert _commit(hub, "me/box", _header(), _file("notes.txt"))[0] == 200
    HfApi(endpoint=hub.url, token=WRITE_TOKEN).upload_file(
        path_or_fileobj=LFS_BYTES, path_in_repo="blob.bin", repo_id="me/box"
    )
    return "me/box"


def _exchange(hub: LocalHub, data: bytes, read_until_close: bool = True) -> bytes:
    """Send raw bytes on one connection and return everything the server answers until it closes."""
    host, port = hub.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
            if not read_until_close and b"\r\n\r\n" in b"".join(chunks):
                break
        return b"".join(chunks)


# -- paths and names ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "path",
    [
        "../../etc/x",
        "/etc/abs",
        ".git/config",
        "a/.git/x",
        ".",
        "",
        "a\x00b",
        "a//b",
        "a/./b",
        "x/..",
        "a\\b",
        "line\nbreak",
    ],
)
def test_commit_path_outside_the_repo_is_400_with_the_reason(hub: LocalHub, repo: str, path: str) -> None:
    before = _tree(hub, repo)
    status, answer = _commit(hub, repo, _header(), _file(path))
    assert status == 400 and "path" in answer["error"]
    assert _tree(hub, repo) == before
    assert _commit(hub, repo, _header(), _file("ok/after.txt"))[0] == 200  # the repo still takes commits


@pytest.mark.parametrize(
    "name, organization",
    [("../../b", "a"), ("x", "../.."), ("a--b", "me"), ("", "me"), ("x.git", "me"), (5, "me"), ("x", "a/b")],
)
def test_repo_name_against_the_hub_rules_is_400(hub: LocalHub, name: Any, organization: str) -> None:
    status, answer = _create(hub, name, organization)
    assert status == 400 and answer["error"]
    assert not (hub.root / "objects").exists() or list((hub.root / "objects").iterdir()) == []


# -- malformed input -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "body",
    [
        b"{not json",
        b"[1, 2]",
        b'{"key": "file"}',
        b'{"key":"file","value":{"path":"a"}}',
        b'{"key":"file","value":{"path":"a","content":"!!"}}',
        b"\xff\xfe",
        b'{"key":"lfsFile","value":{"path":"a","oid":"x","size":-1}}',
        b'{"key":"header","value":{"summary":3}}',
    ],
)
def test_malformed_commit_is_400_without_exception_text(hub: LocalHub, repo: str, body: bytes) -> None:
    status, answer = _commit(hub, repo, raw=body)
    assert status == 400
    assert not any(word in answer["error"] for word in ("Traceback", "Error:", "Exception", str(hub.root)))


def test_malformed_json_body_is_400(hub: LocalHub) -> None:
    status, _, data = hub.raw("POST", "/api/repos/create", b"{not json")
    assert status == 400 and "not valid JSON" in json.loads(data)["error"]


# -- headers, URLs ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "target",
    [
        "/api/models/me/box%0d%0aX-Injected:%20yes",
        "/me/box/resolve/main/a%0d%0aX-Injected:%20yes",
        "/api/models/me/box/tree/ma%0ain%0d%0aX-Injected:%20yes",
    ],
)
def test_crlf_in_a_url_is_never_reflected_into_a_header(hub: LocalHub, repo: str, target: str) -> None:
    answer = _exchange(hub, f"GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    head = answer.split(b"\r\n\r\n")[0].lower()
    assert head.startswith(b"http/1.1 4") and b"x-injected" not in head


def test_raw_crlf_in_the_request_line_is_not_reflected(hub: LocalHub) -> None:
    answer = _exchange(hub, b"GET /api/models/a\r\nX-Injected: yes HTTP/1.1\r\nHost: x\r\n\r\n")
    head = answer.split(b"\r\n\r\n")[0].lower()
    assert head.split(b" ")[1].startswith(b"4") and b"x-injected" not in head


def test_missing_non_latin1_path_gets_a_404_answer(hub: LocalHub, repo: str) -> None:
    status, headers, _data = hub.raw("GET", "/me/box/resolve/main/%E2%98%83-%F0%9F%98%80.bin")
    assert status == 404 and headers["x-error-code"] == "EntryNotFound" and "x-repo-commit" in headers


# -- bodies ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "target", ["/api/repos/create", "/api/models/me/box/commit/main", "/me/box.git/info/lfs/objects/batch"]
)
def test_unauthenticated_body_is_refused_before_it_is_read(hub: LocalHub, repo: str, target: str) -> None:
    # 600 MB announced, none sent: the answer comes anyway, so the server never waited for (or kept) the body.
    answer = _exchange(hub, f"POST {target} HTTP/1.1\r\nHost: x\r\nContent-Length: 600000000\r\n\r\n".encode())
    assert answer.startswith(b"HTTP/1.1 401")


def test_upload_with_a_wrong_capability_is_refused_before_its_body(hub: LocalHub, repo: str) -> None:
    oid = "ab" * 32
    answer = _exchange(
        hub,
        f"PUT /lfs-upload/me/box/{oid}?t=guess&size=600000000 HTTP/1.1\r\nHost: x\r\n"
        "Content-Length: 600000000\r\n\r\n".encode(),
    )
    assert answer.startswith(b"HTTP/1.1 403")


def test_body_over_the_cap_is_413_before_it_is_read(hub: LocalHub) -> None:
    answer = _exchange(
        hub,
        f"POST /api/repos/create HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {WRITE_TOKEN}\r\n"
        "Content-Length: 900000000\r\n\r\n".encode(),
    )
    assert answer.startswith(b"HTTP/1.1 413")


@pytest.mark.parametrize("length", [0, 1])
def test_unread_body_is_never_parsed_as_a_next_request(hub: LocalHub, length: int) -> None:
    # A refused request's body hides a request for /_stats; a real next request follows. The hidden one must
    # never be answered (its answer would hold "lfs_bytes_received"). `length` 0: the body is announced whole;
    # 1: it is announced one byte longer than sent, so the real request starts inside the body.
    smuggled = b"GET /_stats HTTP/1.1\r\nHost: x\r\n\r\n"
    announced = b"POST /api/repos/create HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (len(smuggled) + length)
    answer = _exchange(
        hub, announced + smuggled + b"GET /api/whoami-v2 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    assert answer.split(b" ")[1].startswith(b"4") and b"lfs_bytes_received" not in answer


def test_content_length_lie_is_abandoned_with_408(hub: LocalHub) -> None:
    # The fixture's server waits 2 s for a silent body, then answers 408 and frees the connection.
    answer = _exchange(
        hub,
        f"POST /api/repos/create HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {WRITE_TOKEN}\r\n"
        'Content-Length: 1000\r\n\r\n{"name":'.encode(),
    )
    assert answer.startswith(b"HTTP/1.1 408")


def test_idle_and_lying_connections_do_not_block_other_requests(hub: LocalHub, repo: str) -> None:
    host, port = hub.url.removeprefix("http://").split(":")
    idle = [socket.create_connection((host, int(port)), timeout=30) for _ in range(100)]
    try:
        for n, sock in enumerate(idle):  # half send part of a request line, half a body that never comes
            sock.sendall(
                b"GET /api/models/me/box HT"
                if n % 2
                else f"POST /api/repos/create HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {WRITE_TOKEN}\r\n"
                "Content-Length: 1000\r\n\r\n".encode()
            )
        status, _, data = hub.raw("GET", "/api/models/me/box")
        assert status == 200 and json.loads(data)["id"] == "me/box"
    finally:
        for sock in idle:
            sock.close()


# -- privacy ---------------------------------------------------------------------------------------------------
def test_lfs_verify_needs_a_token_and_reveals_nothing_about_private_repos(hub: LocalHub, repo: str) -> None:
    assert _create(hub, "secret", private=True)[0] == 200
    body = json.dumps({"oid": "ab" * 32, "size": 1}).encode()
    assert hub.raw("POST", f"/lfs-verify/me/box/{'ab' * 32}", body, token=None)[0] == 401
    private = hub.raw("POST", f"/lfs-verify/me/secret/{'ab' * 32}", body, token=None)
    absent = hub.raw("POST", f"/lfs-verify/me/nothing/{'ab' * 32}", body, token=None)
    assert private[0] == absent[0] == 404 and json.loads(private[2])["error"].replace("secret", "") == json.loads(
        absent[2]
    )["error"].replace("nothing", "")
    for target in (
        "/api/models/me/secret",
        "/api/models/me/secret/refs",
        "/me/secret/resolve/main/.gitattributes",
        "/api/models/me/secret/tree/main",
    ):
        assert hub.raw("GET", target, token=None)[0] == 404, target
        assert hub.raw("GET", target, token=READ_TOKEN)[0] == 200, target


# -- content ---------------------------------------------------------------------------------------------------
def test_ranges_are_served_and_impossible_ones_are_416(hub: LocalHub, repo: str) -> None:
    size = len(LFS_BYTES)
    status, headers, data = hub.raw("GET", "/me/box/resolve/main/blob.bin", headers={"Range": "bytes=2-9"})
    assert status == 206 and data == LFS_BYTES[2:10] and headers["content-range"] == f"bytes 2-9/{size}"
    status, headers, _ = hub.raw("GET", "/me/box/resolve/main/blob.bin", headers={"Range": f"bytes={size + 5}-"})
    assert status == 416 and headers["content-range"] == f"bytes */{size}"
    status, headers, data = hub.raw("GET", "/me/box/resolve/main/blob.bin")
    assert (
        status == 200
        and data == LFS_BYTES
        and headers["etag"].strip('"') == hub.api("/api/models/me/box/tree/main")[1]["lfs"]["oid"]
    )


def test_damaged_object_is_reported_and_asked_for_again(hub: LocalHub, repo: str, online: None) -> None:
    from huggingface_hub import HfApi

    stored = hub.stored_object(repo, "blob.bin")
    stored.write_bytes(stored.read_bytes()[:-1] + b"!")
    oid = stored.name
    batch = json.dumps({"operation": "upload", "objects": [{"oid": oid, "size": len(LFS_BYTES)}]}).encode()
    status, _, data = hub.raw(
        "POST", "/me/box.git/info/lfs/objects/batch", batch, {"Content-Type": "application/vnd.git-lfs+json"}
    )
    assert status == 200 and "actions" in json.loads(data)["objects"][0]  # not "already present"
    stored.write_bytes(stored.read_bytes()[:10])  # truncated: reads are refused, naming no server path
    status, headers, data = hub.raw("GET", "/me/box/resolve/main/blob.bin")
    assert status == 500 and headers["x-error-code"] == "StoredObjectDamaged" and str(hub.root).encode() not in data
    HfApi(endpoint=hub.url, token=WRITE_TOKEN).preupload_lfs_files(
        repo, additions=[__import__("huggingface_hub").CommitOperationAdd("blob.bin", LFS_BYTES)]
    )
    assert hub.raw("GET", "/me/box/resolve/main/blob.bin")[2] == LFS_BYTES  # replaced


def test_partial_upload_left_by_a_killed_server_is_removed_at_start(hub: LocalHub, repo: str) -> None:
    oid, size = "cd" * 32, 5_000_000
    batch = json.dumps({"operation": "upload", "objects": [{"oid": oid, "size": size}]}).encode()
    href = json.loads(hub.raw("POST", "/me/box.git/info/lfs/objects/batch", batch)[2])["objects"][0]["actions"][
        "upload"
    ]["href"]
    target = href.removeprefix(hub.url)
    host, port = hub.url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    sock.sendall(f"PUT {target} HTTP/1.1\r\nHost: x\r\nContent-Length: {size}\r\n\r\n".encode() + b"x" * 1_000_000)
    deadline = time.monotonic() + 120
    while not list((hub.root / "objects").rglob(".upload-*")):  # the upload is under way: its temporary file
        assert time.monotonic() < deadline, "the server never started writing the upload"
        time.sleep(0.01)  # polling a condition, with a generous bound; the body stays incomplete meanwhile
    assert hub.process is not None
    hub.process.kill()
    hub.process.wait()
    sock.close()
    hub.process = None
    hub.start()
    assert "removed 1 partial upload" in hub.announce
    assert list((hub.root / "objects").rglob(".upload-*")) == []


def test_a_request_the_server_cannot_parse_gets_a_400_that_echoes_nothing_and_logs_no_request_text(
    hub: LocalHub,
) -> None:
    host, port = hub.url.removeprefix("http://").split(":")
    answer = b""
    with socket.create_connection((host, int(port)), timeout=30) as connection:
        connection.sendall(b"GET /api/whoami-v2 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer hf_SECRET\x01x\r\n\r\n")
        while chunk := connection.recv(65536):  # the server closes the connection after its answer
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.split(b"\r\n")[0].split(b" ")[1] == b"400", answer
    assert body == b"400 Bad Request" and b"SECRET" not in answer
    process = hub.process
    assert process is not None and process.stderr is not None
    hub.stop()
    log = process.stderr.read()
    assert "SECRET" not in log and "Bearer" not in log, log


def test_tokens_are_not_on_the_server_command_line(tmp_path: Path) -> None:
    hub = LocalHub(tmp_path / "hub", tmp_path / "netguard.log", fresh=True).start()  # its own command line
    try:
        assert isinstance(hub.process, subprocess.Popen)
        cmdline = Path(f"/proc/{hub.process.pid}/cmdline").read_bytes()
        assert b"hub\x00serve" in cmdline
        assert WRITE_TOKEN.encode() not in cmdline and READ_TOKEN.encode() not in cmdline
        assert hub.raw("GET", "/api/whoami-v2", token=READ_TOKEN)[0] == 200  # the environment's read token counts
    finally:
        hub.stop()


# -- fuzz --------------------------------------------------------------------------------------------------------
_FUZZ = settings(
    max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@_FUZZ
@given(path=st.text(min_size=0, max_size=40))
def test_fuzzed_commit_paths_are_taken_only_when_they_follow_the_rules(hub: LocalHub, repo: str, path: str) -> None:
    status, answer = _commit(hub, repo, _header(), _file(path))
    assert status in (200, 400), answer
    assert (status == 200) == (path_problem(path) is None)
    if status == 200:
        assert path in _tree(hub, repo)


_HEADER_TEXT = st.text(
    st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"), min_size=1, max_size=60
)


@_FUZZ
@given(value=_HEADER_TEXT, segment=st.text(min_size=1, max_size=30))
def test_fuzzed_headers_and_urls_never_break_the_server_or_come_back(
    hub: LocalHub, repo: str, value: str, segment: str
) -> None:
    from urllib.parse import quote

    for target in (
        f"/api/models/me/{quote(segment, safe='')}",
        f"/me/box/resolve/main/{quote(segment, safe='')}",
        f"/api/models/me/box/tree/{quote(segment, safe='')}",
    ):
        headers = {"X-Fuzz": value, "Range": value, "Authorization": f"Bearer {value}"}
        status, answer_headers, _ = hub.raw("GET", target, headers=headers, token=None)
        assert status < 500 or (status == 500 and answer_headers.get("x-error-code") == "StoredObjectDamaged")
        assert all(value not in v for v in answer_headers.values() if len(value) > 3)


# -- load --------------------------------------------------------------------------------------------------------
def test_fifty_readers_during_uploads_always_see_a_whole_commit(hub: LocalHub, repo: str, online: None) -> None:
    """50 concurrent readers (127.0.0.1, bounded) while commits land: each read matches one commit."""
    from huggingface_hub import CommitOperationAdd, HfApi

    api = HfApi(endpoint=hub.url, token=WRITE_TOKEN)
    expected: dict[str, bytes] = {}
    done = threading.Event()
    seen: list[tuple[int, str, bytes, int]] = []  # status, X-Repo-Commit, bytes read, size listed at that commit

    def reader() -> None:
        for _ in range(400):
            try:
                status, headers, data = hub.raw("GET", "/me/box/resolve/main/state.txt")
                commit = headers.get("x-repo-commit", "")
                tree = {e["path"]: e for e in hub.api(f"/api/models/me/box/tree/{commit}")}
                seen.append((status, commit, data, tree["state.txt"]["size"]))
            except Exception as exc:
                seen.append((0, repr(exc), b"", -1))
            if done.is_set():
                return

    for n in range(3):  # before the readers: the file exists
        expected[api.create_commit("me/box", [CommitOperationAdd("state.txt", b"x" * n)], commit_message="s").oid] = (
            b"x" * n
        )
    readers = [threading.Thread(target=reader) for _ in range(50)]
    for thread in readers:
        thread.start()
    for n in range(3, 13):
        content = f"state {n} ".encode() * (n * 100)
        info = api.create_commit(
            "me/box",
            [CommitOperationAdd("state.txt", content), CommitOperationAdd(f"big-{n}.bin", bytes([n]) * 300_000)],
            commit_message=f"state {n}",
        )
        expected[info.oid] = content
    done.set()
    for thread in readers:
        thread.join(timeout=300)
    assert len(seen) >= 50 and {commit for _, commit, _, _ in seen} <= set(expected), seen[:3]
    assert all(status == 200 and data == expected[commit] and size == len(data) for status, commit, data, size in seen)


def test_fault_rules_can_answer_a_share_of_every_request_and_never_the_test_hooks(hub: LocalHub, repo: str) -> None:
    """A busy Hub (bench/matrix_bench.py): 429 to every 6th request of any method, 503 to every 5th of the rest,
    a third in all; the hooks' own routes pass."""
    hub.faults(
        {"method": "*", "path": "/", "status": 429, "every": 6, "times": 1000, "retry_after": 1},
        {"method": "*", "path": "/", "status": 503, "every": 5, "times": 1000},
    )
    answers = []
    for n in range(30):
        status, headers, _ = hub.raw("GET" if n % 2 else "HEAD", "/api/models/me/box")
        answers.append((status, headers.get("retry-after")))
        assert hub.stats()["faults_left"] == 2000 - sum(1 for s, _ in answers if s != 200)
    assert answers.count((429, "1")) == 5 and answers.count((503, None)) == 5 and answers.count((200, None)) == 20
    assert [s for s, _ in answers[:6]] == [200, 200, 200, 200, 503, 429]
