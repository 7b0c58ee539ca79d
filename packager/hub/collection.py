"""Put a released repo into its publisher's Hub collection: found by title in the owner's collections, created
when missing, the repo added once however often this runs, its note kept as asked, and the result read back.

Runs only after the commit is verified and tagged; `check` beforehand refuses (nothing sent) what cannot work.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import CollectionForbidden, CollectionNotUpdated, HubForbidden, PackagerError, shorten
from .client import Hub, with_retries


@dataclass(frozen=True)
class CollectionRequest:
    title: str
    owner: str
    note: str | None = None


@dataclass(frozen=True)
class CollectionResult:
    title: str
    slug: str | None  # None: a dry run for a collection that does not exist yet
    url: str | None
    created: bool  # made by this run (or, in a dry run, would be)
    added: bool  # the repo was added by this run (False: it was in already)
    note_updated: bool = False


def find(hub: Hub, request: CollectionRequest) -> Any | None:
    """The owner's collection with exactly this title, read whole (a listing shows only four items)."""

    def lookup() -> str | None:
        for listed in hub.api.list_collections(owner=request.owner):
            if listed.title == request.title:
                return str(listed.slug)
        return None

    what = f"the collection {request.title!r} of {request.owner}"
    slug = with_retries(hub, f"looking for {what}", lookup)  # then its read, retried on its own
    return None if slug is None else with_retries(hub, f"reading {what}", lambda: hub.api.get_collection(slug))


def _owner(collection: Any) -> tuple[str, str | None]:
    owner = collection.owner
    return (owner.get("name", ""), owner.get("type")) if isinstance(owner, dict) else (str(owner), None)


def check(hub: Hub, request: CollectionRequest, repo_id: str) -> CollectionResult:
    """Before anything is sent: refuse a collection that belongs to another user, or an owner the token's user
    may not write for; what would happen."""
    found = find(hub, request)
    if hub.token is not None:
        whoami = with_retries(hub, "asking whose token this is", lambda: hub.api.whoami())
        me = whoami.get("name")
        name, kind = _owner(found) if found is not None else (request.owner, None)
        if kind == "user" and name != me:
            raise CollectionForbidden(
                f"the collection {request.title!r} belongs to the user {name}, not to {me}; nothing was sent"
            )
        if not may_write(whoami, request.owner, repo_id):
            raise CollectionForbidden(
                f"the collection owner {shorten(request.owner, 100)} is not a namespace {me} "
                f"may write (neither {me}, nor the repo's namespace, nor an organization of "
                f"{me}'s with write access); nothing was sent"
            )
    added = found is None or not any(i.item_id == repo_id and i.item_type == "model" for i in found.items)
    return CollectionResult(
        request.title, found.slug if found else None, found.url if found else None, created=found is None, added=added
    )


def may_write(whoami: dict[str, Any], owner: str, repo_id: str) -> bool:
    """Whether the token's user (the Hub's whoami answer) may write collections for `owner`: its own namespace,
    the repo's (the upload itself writes there), or an organization it belongs to with more than read access."""
    if owner in (whoami.get("name"), repo_id.split("/")[0]):
        return True
    roles = {org.get("name"): org.get("roleInOrg") for org in whoami.get("orgs") or [] if isinstance(org, dict)}
    return owner in roles and roles[owner] != "read"


def place(
    hub: Hub, request: CollectionRequest, repo_id: str, private: bool, sleep: Callable[[float], None]
) -> CollectionResult:
    """Create the collection when missing, add the repo (exists_ok: once), set its note, then read it back."""
    found = find(hub, request)
    what = f"the collection {request.title!r} of {request.owner}"
    collection = found or with_retries(
        hub,
        f"creating {what}",
        lambda: hub.api.create_collection(request.title, namespace=request.owner, private=private, exists_ok=True),
        sleep=sleep,
    )
    slug = collection.slug
    was_in = any(_is_repo(i, repo_id) for i in collection.items)
    collection = with_retries(
        hub,
        f"adding {repo_id} to {what}",
        lambda: hub.api.add_collection_item(slug, repo_id, "model", note=request.note, exists_ok=True),
        sleep=sleep,
    )
    item = next((i for i in collection.items if _is_repo(i, repo_id)), None)
    updated = False
    if item is not None and request.note is not None and item.note != request.note:
        with_retries(
            hub,
            f"setting the note of {repo_id} in {what}",
            lambda: hub.api.update_collection_item(slug, item.item_object_id, note=request.note),
            sleep=sleep,
        )
        updated = True
    final = with_retries(hub, f"reading {what} back", lambda: hub.api.get_collection(slug), sleep=sleep)
    entries = [i for i in final.items if _is_repo(i, repo_id)]
    if len(entries) != 1 or (request.note is not None and entries[0].note != request.note):
        raise CollectionNotUpdated(
            f"{what} ({slug}) holds {len(entries)} entries for {repo_id}"
            + (f" (note {entries[0].note!r})" if entries else "")
        )
    return CollectionResult(
        request.title, slug, final.url, created=found is None, added=not was_in, note_updated=updated
    )


def describe(result: CollectionResult, dry_run: bool = False) -> str:
    """One line: what this run did to the collection (or, in a dry run, would do)."""
    where = f"{result.title!r} ({result.slug})" if result.slug else repr(result.title)
    if dry_run:
        if result.created:
            return f"would create the collection {result.title!r} and add the repo"
        return (
            f"would add the repo to the collection {where}"
            if result.added
            else f"the collection {where} already holds the repo"
        )
    made = "created " if result.created else ""
    if result.added:
        return f"{made}collection {where}, repo added"
    return f"collection {where} already holds the repo" + ("; note updated" if result.note_updated else "")


def _is_repo(item: Any, repo_id: str) -> bool:
    return item.item_type == "model" and item.item_id == repo_id


def place_after_commit(
    hub: Hub, request: CollectionRequest, upload: Any, private: bool, sleep: Callable[[float], None]
) -> CollectionResult:
    """`place`, once `upload` (its UploadResult) is verified and tagged. A failure says what is done and what is
    not, and carries that result."""
    done = (
        f"{upload.repo_id}@{upload.commit[:12]} is {'committed' if upload.committed else 'unchanged'}, verified"
        f"{' and tagged ' + upload.tag if upload.tag else ''}"
    )
    try:
        return place(hub, request, upload.repo_id, private, sleep)
    except PackagerError as exc:
        cls = CollectionForbidden if isinstance(exc, (HubForbidden, CollectionForbidden)) else CollectionNotUpdated
        error = cls(f"{done}; the collection {request.title!r} of {request.owner} was NOT updated: {exc.message}")
        error.upload = upload
        raise error from None
