"""The Hub's naming rules, shared by the client (checked before anything is sent) and the local Hub."""

from __future__ import annotations

import re

COMMIT_ID = re.compile(r"[0-9a-f]{40}")
_REF_BAD = re.compile(r"(^[./-]|\.\.|//|@\{|[\x00-\x20\x7f~^:?*\[\\]|\.lock$|/$|\.$|/\.)")


def repo_id_problem(repo_id: str) -> str | None:
    """Why `repo_id` is not a valid `namespace/name` (huggingface_hub's own rule, plus a namespace), or None."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    if repo_id.count("/") != 1:
        return f"{repo_id!r} is not a repo id of the form namespace/name"
    try:
        validate_repo_id(repo_id)
    except HFValidationError as exc:
        return " ".join(str(exc).split())
    return None


def ref_problem(name: str) -> str | None:
    """Why `name` cannot be a branch or tag name (git's check-ref-format rules, no commit ids), or None."""
    if not name or len(name) > 255 or _REF_BAD.search(name) or name.startswith("refs/"):
        return f"{name!r} is not a valid branch or tag name"
    if COMMIT_ID.fullmatch(name):
        return f"{name!r} is a commit id, not a branch name"
    return None


def revision_problem(revision: str) -> str | None:
    """Why `revision` (after REPO_ID@) cannot name a revision to read, or None; the Hub judges the rest."""
    if not revision:
        return "the revision after @ is empty"
    return None
