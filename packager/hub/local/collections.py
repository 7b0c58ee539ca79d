"""The local Hub's collection endpoints, as huggingface_hub calls them: create, get, list by owner, and add,
update and delete an item. Writing needs a write token of a user who may write the owner's namespace (as for
repos); a private collection, like a private repo, is visible only with a token."""

from __future__ import annotations

import html
import re
from typing import Any

from aiohttp import web

from .app import answer, can_write, hub_of, identity, read_json
from .rules import HubError, bad_request
from .store import now

MAX_TITLE = 60
MAX_DESCRIPTION = 150  # the Hub's limits (huggingface_hub documents 150 and 500)
MAX_NOTE = 500
PREVIEW_ITEMS = 4  # a listing shows the first four items of each collection, as the Hub does
ITEM_TYPES = ("model", "dataset", "space", "paper", "collection", "bucket")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_NAMESPACE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}")


def _text(value: object, what: str, limit: int, required: bool) -> str | None:
    if value is None and not required:
        return None
    if not isinstance(value, str) or (required and not value.strip()):
        raise bad_request(f"{what} must be a non-empty string")
    if len(value) > limit:
        raise bad_request(f"{what} is longer than {limit} characters")
    if _CONTROL.search(value) and what != "note":
        raise bad_request(f"{what} may not contain control characters")
    return value


def _json(hub: Any, row: dict[str, Any], items: list[dict[str, Any]]) -> dict[str, Any]:
    owner = row["owner"]
    return {
        "slug": row["slug"],
        "title": row["title"],
        "description": row["description"],
        "owner": {"name": owner, "fullname": owner, "type": hub.config.kind(owner)},
        "items": [_item_json(i) for i in items],
        "lastUpdated": row["updated"],
        "position": 0,
        "private": bool(row["private"]),
        "theme": "blue",
        "upvotes": 0,
        "gating": False,
    }


def _item_json(item: dict[str, Any]) -> dict[str, Any]:
    found = {"_id": item["oid"], "id": item["id"], "type": item["type"], "position": item["position"]}
    if item["note"]:
        found["note"] = {"text": item["note"], "html": html.escape(item["note"])}
    return found


def _visible(request: web.Request, slug: str) -> dict[str, Any]:
    """The collection; 404 if it does not exist or is private and the request has no token."""
    row = hub_of(request).store.collections.get(slug)
    if row is None or (row["private"] and identity(request, required=False) is None):
        raise HubError(404, "NotFound", f"collection {slug[:200]} not found")
    return row


def _slug(request: web.Request) -> str:
    return f"{request.match_info['ns']}/{request.match_info['slug']}"


async def create(request: web.Request) -> web.Response:
    user = can_write(request)
    data = await read_json(request)
    title = _text(data.get("title"), "title", MAX_TITLE, required=True)
    description = _text(data.get("description"), "description", MAX_DESCRIPTION, required=False)
    namespace = data.get("namespace", user)
    if not isinstance(namespace, str) or not _NAMESPACE.fullmatch(namespace):
        raise bad_request("namespace must be a user or organization name")
    if not isinstance(data.get("private", False), bool):
        raise bad_request("private must be true or false")
    can_write(request, namespace)
    hub = hub_of(request)
    created, slug = hub.store.collections.create(namespace, str(title), description, data.get("private", False), now())
    if not created:
        return answer({"error": "You already have a collection with this title", "slug": slug}, 409)
    return answer(_json(hub, hub.store.collections.get(slug) or {}, []))


async def get(request: web.Request) -> web.Response:
    slug = _slug(request)
    row = _visible(request, slug)
    hub = hub_of(request)
    return answer(_json(hub, row, hub.store.collections.items(slug)))


async def listing(request: web.Request) -> web.Response:
    signed_in = identity(request, required=False) is not None
    hub = hub_of(request)
    wanted = request.query.getall("item", [])
    limit = request.query.get("limit")
    if limit is not None and not limit.isdigit():
        raise bad_request("limit must be a number")
    out = []
    for row in hub.store.collections.owned_by(request.query.getall("owner", [])):
        if row["private"] and not signed_in:
            continue
        items = hub.store.collections.items(row["slug"])
        if wanted and not any(f"{i['type']}s/{i['id']}" in wanted for i in items):
            continue
        listed = _json(hub, row, items[:PREVIEW_ITEMS])
        del listed["position"]  # a listing leaves it out: the client numbers the collections itself
        out.append(listed)
    return answer(out[: int(limit)] if limit is not None else out)


async def add_item(request: web.Request) -> web.Response:
    slug = _slug(request)
    row = _visible(request, slug)
    can_write(request)
    data = await read_json(request)
    item = data.get("item")
    if not isinstance(item, dict) or not isinstance(item.get("id"), str) or item.get("type") not in ITEM_TYPES:
        raise bad_request(f"item must be {{id, type}} with a type among {', '.join(ITEM_TYPES)}")
    if item["type"] != "model":
        raise bad_request("this Hub holds model repos only")
    note = _text(data.get("note"), "note", MAX_NOTE, required=False)
    hub = hub_of(request)
    repo = hub.store.repo(item["id"])
    if repo is None or (repo["private"] and identity(request, required=False) is None):
        raise HubError(404, "RepoNotFound", f"Repository {item['id'][:200]} not found")
    if not hub.store.collections.add(slug, item["id"], "model", note, now()):
        raise HubError(409, "Conflict", "This item is already in the collection")
    return answer(_json(hub, row, hub.store.collections.items(slug)))


async def update_item(request: web.Request) -> web.Response:
    slug = _slug(request)
    _visible(request, slug)
    can_write(request)
    data = await read_json(request)
    changes: dict[str, Any] = {}
    if "note" in data:
        changes["note"] = _text(data["note"], "note", MAX_NOTE, required=False) or None
    if "position" in data:
        if not isinstance(data["position"], int) or isinstance(data["position"], bool) or data["position"] < 0:
            raise bad_request("position must be a whole number, 0 or more")
        changes["position"] = data["position"]
    if not changes:
        raise bad_request("give a note or a position")
    hub_of(request).store.collections.update(slug, request.match_info["item"], changes, now())
    return answer({"success": True})


async def delete_item(request: web.Request) -> web.Response:
    slug = _slug(request)
    _visible(request, slug)
    can_write(request)
    hub_of(request).store.collections.delete(slug, request.match_info["item"], now())
    return answer({"success": True})
