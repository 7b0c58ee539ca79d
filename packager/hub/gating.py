"""Gated access ([release] gated, upload --gated): set with the client's repo settings call, then read back."""

from __future__ import annotations

from collections.abc import Callable

from ..errors import GatingFailed, PackagerError
from .client import Hub, with_retries
from .remote import Repo, read_repo


def gate(hub: Hub, repo_id: str, wanted: str | None, repo: Repo, sleep: Callable[[float], None]) -> str | bool:
    """Gate the repo as asked (before the commit, so its files are never public ungated); the gating it now has.
    None leaves the repo's setting as it is."""
    if wanted is None or repo.gated == wanted:
        return repo.gated
    what = f"{repo_id}: gated access ({wanted}) was not set"
    try:
        with_retries(hub, f"gating {repo_id}", lambda: hub.api.update_repo_settings(repo_id, gated=wanted), sleep=sleep)
        now = read_repo(hub, repo_id).gated
    except PackagerError as exc:
        raise GatingFailed(f"{what} ({exc.message}); nothing was committed") from None
    if now != wanted:
        raise GatingFailed(f"{what}: the Hub reports gated={now!r} after the change; nothing was committed")
    return now
