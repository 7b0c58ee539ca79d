"""What the local Hub accepts as a file path (repo ids and ref names: packager.hub.names), and its error type."""

from __future__ import annotations

import re

from ..names import ref_problem, repo_id_problem  # noqa: F401 - the Hub's rules, one copy

MAX_PATH = 1000
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class HubError(Exception):
    """An answer other than 2xx: status, a fixed error code for the header, a message for the JSON body."""

    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers or {}


def bad_request(message: str) -> HubError:
    return HubError(400, "BadRequest", message)


def path_problem(path: object) -> str | None:
    """Why `path` cannot be a file in a repo (absolute, `..`, `.git`, empty parts, control characters), or None."""
    if not isinstance(path, str) or not path:
        return "a file path must be a non-empty string"
    if len(path) > MAX_PATH:
        return f"a file path is at most {MAX_PATH} characters"
    if _CONTROL.search(path) or "\\" in path:
        return "a file path may not contain control characters or backslashes"
    parts = path.split("/")
    if path.startswith("/") or any(part in ("", ".", "..") for part in parts):
        return "a file path must be relative, without empty, '.' or '..' parts"
    if ".git" in parts:
        return "a file path may not contain a .git folder"
    return None


def check(problem: str | None) -> None:
    if problem is not None:
        raise bad_request(problem)
