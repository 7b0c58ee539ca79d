"""The one seam to huggingface_hub: a configured HfApi, Xet only where the endpoint has it, errors mapped.

The client's telemetry call is switched off before huggingface_hub is imported, and tokens are never put in
messages: every error text passes through `redact`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from ..errors import (
    HubAuthError,
    HubBadTarget,
    HubConflict,
    HubError,
    HubForbidden,
    HubGated,
    HubNotFound,
    InvalidOption,
    PackagerError,
    shorten,
)

os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

PUBLIC_HUB = "https://huggingface.co"
T = TypeVar("T")


# What to do when a command that only reads (pull, verify-remote) fails: the classes' own hints speak of uploads.
READING_HINTS: Mapping[type, str] = {
    HubAuthError: "the token was refused: log in again (hf auth login), or set HF_TOKEN or --token-file to a "
    "valid token (one that may read the repo is enough)",
    HubForbidden: "use a token that may read this repo",
    HubNotFound: "check the repo id and the revision (a private repo is found only with a token that may read it)",
}


@dataclass(frozen=True)
class Hub:
    api: Any = field(repr=False)  # huggingface_hub.HfApi
    endpoint: str
    token: str | None = field(repr=False)  # never in a repr, a log or a message
    # {error class: hint} replacing the classes' own hints, for a command whose next step differs (pull).
    hints: Mapping[type, str] = field(default_factory=dict, repr=False, compare=False, hash=False)

    def redact(self, text: str) -> str:
        return text.replace(self.token, "***") if self.token else text


def endpoint_url(endpoint: str | None) -> str:
    """`endpoint` (default HF_ENDPOINT, else the public Hub) as scheme://host[:port]; 48 if it is not one."""
    from urllib.parse import urlsplit

    url = (endpoint or os.environ.get("HF_ENDPOINT") or PUBLIC_HUB).strip().rstrip("/")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise HubBadTarget(f"--endpoint {url[:200]!r} is not an http:// or https:// URL of a Hub")
    return url


def read_token_file(path: Path) -> str:
    """The token in `path` (its first non-empty line); the token itself never appears in a message."""
    from ..infra.userfile import TOKEN_BYTES, read_text

    shown = f"--token-file {shorten(str(path), 120)}"
    text = read_text(path, TOKEN_BYTES, what="--token-file", unreadable=HubAuthError)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        raise HubAuthError(f"{shown} is empty")
    check_token(lines[0], shown)
    return lines[0]


def check_token(token: str, source: str) -> None:
    """Refuse, before any request, a token that cannot travel in an HTTP header; its value is never shown."""
    import unicodedata

    odd = next((i for i, c in enumerate(token) if not "!" <= c <= "~"), None)
    if odd is not None:
        kind = (
            "a control character"
            if unicodedata.category(token[odd]) == "Cc"
            else "a space"
            if token[odd].isspace()
            else "a character outside ASCII"
        )
        raise HubAuthError(
            f"the token from {source} holds {kind} (character {odd + 1} of {len(token)}), which no "
            "Hub token has; nothing was sent",
            "copy the token again from your Hub account's token settings (hf auth login, HF_TOKEN or --token-file)",
        )


def token_source() -> str:
    """Where huggingface_hub's get_token() takes the token from, as a user would name it."""
    from huggingface_hub import constants

    for name in ("HF_OIDC_RESOURCE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        if os.environ.get(name):
            return f"the OIDC exchange for ${name}" if name == "HF_OIDC_RESOURCE" else f"${name}"
    return f"the huggingface login ({shorten(str(constants.HF_TOKEN_PATH), 120)})"


def connect(endpoint: str | None, token: str | None = None, hints: Mapping[type, str] | None = None) -> Hub:
    """HfApi for `endpoint` with `token` (default: HF_TOKEN or the huggingface login); `hints` replace the error
    classes' own for a command whose next step differs."""
    from huggingface_hub import HfApi, constants, get_token

    constants.HF_HUB_DISABLE_TELEMETRY = True
    url = endpoint_url(endpoint)
    if token:
        check_token(token, "the caller")
    else:
        token = get_token()
        if token:
            check_token(token, token_source())
    return Hub(api=HfApi(endpoint=url, token=token), endpoint=url, token=token, hints=dict(hints or {}))


def configure_xet(hub: Hub, repo_id: str) -> bool:
    """Keep Xet where the endpoint offers it; turn it off (plain LFS) where it does not. Returns Xet on/off."""
    from huggingface_hub import constants
    from huggingface_hub.utils import build_hf_headers, get_session

    if hub.endpoint == PUBLIC_HUB:
        return True
    response = get_session().get(
        f"{hub.endpoint}/api/models/{repo_id}/xet-write-token/main",
        headers=build_hf_headers(token=hub.token),
        timeout=10,
    )
    available = response.status_code == 200 and "casUrl" in (response.text or "")
    constants.HF_HUB_DISABLE_XET = not available
    return available


def status_of(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    return getattr(response, "status_code", None)


def is_transient(exc: BaseException) -> bool:
    import httpx2

    if isinstance(exc, (httpx2.TimeoutException, httpx2.NetworkError, httpx2.RemoteProtocolError, ConnectionError)):
        return True
    return status_of(exc) in (408, 429, 500, 502, 503, 504)


def retry_after(exc: BaseException) -> float | None:
    response = getattr(exc, "response", None)
    value = getattr(response, "headers", {}).get("Retry-After") if response is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def translate(hub: Hub, exc: BaseException, what: str) -> PackagerError:
    """One clear line with the next step; never the token. "Rerun" only where a rerun can help."""
    error = _translated(hub, exc, what)
    if type(error) in hub.hints:
        error.hint = hub.hints[type(error)]
    return error


def _translated(hub: Hub, exc: BaseException, what: str) -> PackagerError:
    from huggingface_hub.errors import GatedRepoError, HfUriError, HFValidationError

    status = status_of(exc)
    server = getattr(exc, "server_message", None) or ""
    detail = f" ({shorten(hub.redact(server))})" if server else ""
    if isinstance(exc, GatedRepoError):
        who = "this token has not been granted access" if hub.token else "no token was given"
        return HubGated(f"{what}: the repo is gated and {who} ({status}){detail}")
    if status == 401:
        return HubAuthError(f"{what}: the Hub at {hub.endpoint} rejected the credentials (401){detail}")
    if status == 403:
        return HubForbidden(f"{what}: the token may not write here (403){detail}")
    if status == 404:
        return HubNotFound(f"{what}: not found on {hub.endpoint} (404){detail}")
    if status in (409, 412):
        return HubConflict(f"{what}: conflict ({status}){detail}")
    if status == 429:
        return HubError(
            f"{what}: the Hub is rate limiting (429) and retries ran out{detail}",
            "wait a while, then rerun the same command",
        )
    cause = exc.__cause__ or exc
    text = shorten(hub.redact(f"{type(cause).__name__}: {cause}"))
    if is_transient(exc):
        return HubError(f"{what} failed: {text}")
    if status is not None and 400 <= status < 500:
        return HubBadTarget(
            f"{what}: the Hub refused the request ({status}){detail}",
            "the request is invalid for this Hub; rerunning cannot help",
        )
    if isinstance(exc, (HFValidationError, HfUriError, ValueError, KeyError, TypeError)):
        return HubBadTarget(f"{what}: {hub.endpoint} does not answer like a Hugging Face Hub ({text})")
    return HubError(f"{what} failed: {text}")


ATTEMPTS = 6  # one request: huggingface_hub's own http_backoff makes 6 (5 retries)
# An action whose requests huggingface_hub already retries (a commit: its preupload, LFS batch and uploads), or
# that waits its own timeout each time (a download), is retried as a whole fewer times.
WHOLE_ATTEMPTS = 4
TOLD_ATTEMPTS = 12  # answers that say when to come back (Retry-After: a rate limit) may take this many in all
FIRST_WAIT = 0.5  # seconds, doubled after each failure up to LONGEST_WAIT: 15.5 s in all before the sixth attempt
LONGEST_WAIT = 8.0
# The first wait, when set: seconds (the test session sets a hundredth of a second, so that a test of what
# packager does once the retries run out does not sit through 15 s of them).
FIRST_WAIT_VARIABLE = "PACKAGER_HUB_RETRY_WAIT"


def first_wait() -> float:
    """FIRST_WAIT, or $PACKAGER_HUB_RETRY_WAIT's seconds (0 to LONGEST_WAIT)."""
    given = os.environ.get(FIRST_WAIT_VARIABLE)
    if not given:
        return FIRST_WAIT
    try:
        seconds = float(given)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds <= LONGEST_WAIT:  # (NaN too)
        raise InvalidOption(
            f"{FIRST_WAIT_VARIABLE} is {shorten(given, 40)!r}, not a number of seconds from 0 to {LONGEST_WAIT:g}",
            f"unset it (the first retry then waits {FIRST_WAIT:g} s) or give seconds",
        )
    return seconds


def with_retries(
    hub: Hub,
    what: str,
    action: Callable[[], T],
    *,
    attempts: int = ATTEMPTS,
    before_retry: Callable[[], T | None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    on_retry: Callable[[BaseException, int, int, float], None] | None = None,
) -> T:
    """Run `action`, retrying transient failures with backoff (Retry-After wins). `action` should be one request
    (or one that cannot be split, as a commit): retried as a whole, a sequence of k requests must get all of them
    through in one attempt, and on a Hub that fails a share of requests that is far less likely than one.

    An answer with Retry-After (a rate limit: the Hub says when to come back) does not use up `attempts`, which
    count the failures that say nothing; TOLD_ATTEMPTS bounds all of them. `before_retry` may find that the failed
    attempt in fact succeeded (a commit whose answer was lost) and return its result, so nothing is done twice.
    `on_retry(failure, next attempt, attempts allowed so far, wait)` is told of each retry before its wait. A
    PackagerError from `action` is already one line: passed on as it is.
    """
    delay = first_wait()
    untold = told = 0
    while True:
        try:
            return action()
        except PackagerError:
            raise
        except Exception as exc:
            if not is_transient(exc):
                raise translate(hub, exc, what) from None
            said = retry_after(exc)
            told, untold = (told + 1, untold) if said is not None else (told, untold + 1)
            if untold >= attempts or told + untold >= max(attempts, TOLD_ATTEMPTS):
                raise translate(hub, exc, what) from None
            wait = said if said else delay
            if on_retry is not None:
                on_retry(exc, told + untold + 1, min(attempts + told, max(attempts, TOLD_ATTEMPTS)), wait)
            sleep(wait)
            delay = min(delay * 2, LONGEST_WAIT)
            if before_retry is not None:
                try:
                    done = before_retry()
                except PackagerError:
                    raise
                except Exception as check_exc:
                    raise translate(hub, check_exc, what) from None
                if done is not None:
                    return done
