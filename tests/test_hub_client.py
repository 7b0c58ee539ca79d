"""The retry policy around huggingface_hub calls: backoff, Retry-After, no repeat of a commit that landed."""

from __future__ import annotations

import httpx2
import pytest
from huggingface_hub.errors import HfHubHTTPError

from packager.errors import HubAuthError, HubError, InvalidOption
from packager.hub.client import ATTEMPTS, FIRST_WAIT_VARIABLE, TOLD_ATTEMPTS, Hub, translate, with_retries
from tests.localhub import WRITE_TOKEN, LocalHub, hub, online

HUB = Hub(api=None, endpoint="http://127.0.0.1:1", token="hf_secret_value")


def _http_error(status: int, retry_after: str | None = None, message: str = "") -> HfHubHTTPError:
    request = httpx2.Request("POST", "http://127.0.0.1:1/api/models/a/b/commit/main")
    headers = {"Retry-After": retry_after} if retry_after else {}
    response = httpx2.Response(status, headers=headers, request=request, json={"error": message})
    return HfHubHTTPError(f"{status} error", response=response, server_message=message or None)


def test_transient_failures_back_off_and_honour_retry_after(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(FIRST_WAIT_VARIABLE, raising=False)  # (the test session sets it: tests/conftest.py)
    failures = [_http_error(503), _http_error(429, retry_after="7"), httpx2.ConnectError("reset")]
    slept: list[float] = []

    def action() -> str:
        if failures:
            raise failures.pop(0)
        return "ok"

    assert with_retries(HUB, "committing", action, attempts=4, sleep=slept.append) == "ok"
    assert slept == [0.5, 7.0, 2.0]


@pytest.mark.parametrize("given, waits", [("0.01", [0.01, 7.0, 0.04]), ("0", [0.0, 7.0, 0.0]), ("8", [8.0, 7.0, 8.0])])
def test_the_first_wait_is_the_variables_and_doubles_from_there(
    monkeypatch: pytest.MonkeyPatch, given: str, waits: list[float]
) -> None:
    monkeypatch.setenv(FIRST_WAIT_VARIABLE, given)
    failures = [_http_error(503), _http_error(429, retry_after="7"), httpx2.ConnectError("reset")]
    slept: list[float] = []
    assert with_retries(HUB, "x", lambda: _fail_then(failures, "ok"), attempts=4, sleep=slept.append) == "ok"
    assert slept == waits


@pytest.mark.parametrize("given", ["soon", "-1", "9", "nan", "1e400"])
def test_a_first_wait_that_is_no_number_of_seconds_is_one_line(monkeypatch: pytest.MonkeyPatch, given: str) -> None:
    monkeypatch.setenv(FIRST_WAIT_VARIABLE, given)
    with pytest.raises(InvalidOption, match="PACKAGER_HUB_RETRY_WAIT is .*, not a number of seconds from 0 to 8"):
        with_retries(HUB, "x", lambda: _fail_then([_http_error(503)], "ok"), sleep=lambda _: None)


def test_a_rate_limit_that_says_when_to_come_back_does_not_use_up_the_attempts() -> None:
    """A busy Hub (429 with Retry-After) is waited for up to TOLD_ATTEMPTS; failures that say nothing get
    ATTEMPTS, as huggingface_hub's own retries."""
    told = [_http_error(429, retry_after="1") for _ in range(TOLD_ATTEMPTS - 1)]
    slept: list[float] = []
    assert with_retries(HUB, "x", lambda: _fail_then(told, "ok"), sleep=slept.append) == "ok"
    assert slept == [1.0] * (TOLD_ATTEMPTS - 1)
    untold = [_http_error(503) for _ in range(ATTEMPTS)]
    with pytest.raises(HubError, match="503 error"):
        with_retries(HUB, "x", lambda: _fail_then(untold, "ok"), sleep=lambda _: None)
    assert untold == []  # ATTEMPTS tries, then the error


def _fail_then(failures: list[BaseException], result: str) -> str:
    if failures:
        raise failures.pop(0)
    return result


def test_a_commit_that_landed_is_not_made_again() -> None:
    calls = []

    def action() -> str:
        calls.append(1)
        raise _http_error(500)

    result = with_retries(HUB, "committing", action, before_retry=lambda: "landed-oid", sleep=lambda _: None)
    assert result == "landed-oid" and len(calls) == 1


def test_permanent_errors_are_not_retried_and_become_one_line() -> None:
    calls = []

    def action() -> str:
        calls.append(1)
        raise _http_error(401, message="Invalid credentials for hf_secret_value")

    with pytest.raises(HubAuthError) as caught:
        with_retries(HUB, "creating a/b", action, sleep=lambda _: None)
    assert len(calls) == 1
    assert "hf_secret_value" not in caught.value.one_line() and "(401)" in caught.value.one_line()


def test_retries_run_out_with_a_clear_error() -> None:
    with pytest.raises(HubError, match="rate limiting"):
        with_retries(HUB, "x", lambda: (_ for _ in ()).throw(_http_error(429)), attempts=2, sleep=lambda _: None)


def test_translate_never_leaks_the_token() -> None:
    error = translate(HUB, RuntimeError("boom hf_secret_value"), "uploading")
    assert "hf_secret_value" not in error.one_line()


def test_token_is_not_in_reprs(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from packager.hub.local.state import HubConfig

    assert "hf_secret_value" not in repr(HUB)
    assert "hf_secret_value" not in repr(HubConfig(root=tmp_path, write_tokens=frozenset({"hf_secret_value"})))


def test_only_transient_failures_advise_a_rerun() -> None:
    from packager.errors import HubBadTarget

    assert "rerun" in translate(HUB, httpx2.ConnectError("refused"), "reading").one_line()
    assert "rerun" in translate(HUB, _http_error(503), "reading").one_line()
    for permanent in (
        _http_error(400, message="a file path must be relative"),
        _http_error(422),
        ValueError("Malformed response from server"),
    ):
        error = translate(HUB, permanent, "committing")
        assert isinstance(error, HubBadTarget) and error.exit_code == 48
        assert "rerun the same" not in error.one_line()


@pytest.mark.parametrize(
    "endpoint", ["127.0.0.1:8765", "ftp://host", "http://", "http://host:99999", "http://host/?q=1", "huggingface.co"]
)
def test_endpoint_that_is_not_an_http_url_is_refused(endpoint: str) -> None:
    from packager.errors import HubBadTarget
    from packager.hub.client import endpoint_url

    with pytest.raises(HubBadTarget):
        endpoint_url(endpoint)


def test_endpoint_url_keeps_a_valid_one() -> None:
    from packager.hub.client import endpoint_url

    assert endpoint_url("http://127.0.0.1:8765/") == "http://127.0.0.1:8765"
    assert endpoint_url("https://huggingface.co") == "https://huggingface.co"


@pytest.mark.parametrize(
    "name, refused",
    [
        ("main", False),
        ("release/v3", False),
        ("v1.0", False),
        ("a..b", True),
        ("-x", True),
        ("x.lock", True),
        ("a b", True),
        ("refs/heads/x", True),
        ("x/", True),
        ("", True),
        ("a~1", True),
        ("0123456789abcdef0123456789abcdef01234567", True),
    ],
)
def test_ref_names_follow_git_rules_and_exclude_commit_ids(name: str, refused: bool) -> None:
    from packager.hub.names import ref_problem

    assert (ref_problem(name) is not None) == refused


@pytest.mark.parametrize(
    "repo_id, refused",
    [
        ("me/draft", False),
        ("me/Qwen3-0.6B.mnn", False),
        ("draft", True),
        ("a/b/c", True),
        ("a/../b", True),
        ("me/a--b", True),
        ("me/x.git", True),
        (".me/x", True),
    ],
)
def test_repo_ids_follow_the_hub_rules(repo_id: str, refused: bool) -> None:
    from packager.hub.names import repo_id_problem

    assert (repo_id_problem(repo_id) is not None) == refused


def test_token_file_gives_its_first_line_and_never_shows_it(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from packager.hub.client import read_token_file

    (tmp_path / "token").write_text("\n  hf_secret_value  \nsecond\n")
    assert read_token_file(tmp_path / "token") == "hf_secret_value"
    (tmp_path / "empty").write_text("\n\n")
    with pytest.raises(HubAuthError) as caught:
        read_token_file(tmp_path / "empty")
    assert caught.value.exit_code == 41


def test_a_repo_is_read_through_a_hub_that_fails_every_other_read(hub: LocalHub, online: None) -> None:
    """Reading a repo takes two requests (its info, its refs), each retried on its own: retried as a pair, every
    attempt would meet one failure on this Hub (bench/matrix_bench.py's busy Hub failed jobs so)."""
    from huggingface_hub import HfApi

    from packager.hub.client import connect
    from packager.hub.remote import read_repo

    HfApi(endpoint=hub.url, token=WRITE_TOKEN).create_repo("me/box")
    hub.faults({"method": "GET", "path": "/api/models/me/box", "status": 503, "every": 2, "times": 100})
    repo = read_repo(connect(hub.url, WRITE_TOKEN), "me/box")
    assert repo.exists and list(repo.branches) == ["main"]
    assert hub.stats()["faults_left"] == 99  # the refs failed once, then came through
