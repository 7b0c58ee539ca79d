"""The local Hub's model pages as huggingface_hub reads them: `model_info` (GET /api/models/NS/NAME[/revision/REV])
and `list_models` (GET /api/models). What the Hub derives from a repo's card is derived here the same way: the
README.md front matter is `cardData`, and `library_name`, `pipeline_tag`, `model-index` and the tags come from it."""

from __future__ import annotations

import asyncio
import re
import typing
from typing import Any

from aiohttp import web

from .app import answer, can_read, hub_of, repo_of, role
from .rules import bad_request
from .store import Store

CARD = "README.md"
CARD_CAP = 1_000_000  # a card's bytes read for its front matter; a larger card has none here
YAML_NODES = 100_000  # a front matter that expands beyond this (YAML aliases) is no card data
# https://github.com/huggingface/huggingface_hub/blob/main/src/huggingface_hub/repocard.py (REGEX_YAML_BLOCK)
_FRONT_MATTER = re.compile(r"^(\s*---[\r\n]+)([\S\s]*?)([\r\n]+---(\r\n|\n|$))")
# Listed by default, as the Hub lists them; `full=true` adds the rest of a page but cardData, `cardData=true` that.
LISTED = ("id", "modelId", "private", "downloads", "likes", "tags", "pipeline_tag", "library_name", "createdAt")
FULL = ("author", "sha", "lastModified", "gated", "disabled", "siblings")
SORTS = {"lastModified": "lastModified", "createdAt": "createdAt", "last_modified": "lastModified"}


def _expandable() -> frozenset[str]:
    from huggingface_hub.hf_api import ExpandModelProperty_T

    return frozenset(typing.get_args(ExpandModelProperty_T))


def front_matter(text: str) -> dict[str, Any] | None:
    """The card's YAML header as a mapping, or None (no header, not YAML, not a mapping, an alias bomb)."""
    import yaml

    found = _FRONT_MATTER.search(text)
    if found is None:
        return None
    try:
        data = yaml.safe_load(found.group(2))
    except (yaml.YAMLError, RecursionError, ValueError):
        return None
    return data if isinstance(data, dict) and _small(data) else None


def _small(value: Any) -> bool:
    """Whether `value`, expanded (as JSON writes it), has at most YAML_NODES nodes."""
    seen, stack = 0, [value]
    while stack:
        item = stack.pop()
        seen += 1
        if seen > YAML_NODES:
            return False
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return True


def _strings(value: Any) -> list[str]:
    items = value if isinstance(value, list) else [value]
    return [item for item in items if isinstance(item, str) and item]


def tags(card: dict[str, Any]) -> list[str]:
    """The Hub's tags of a model: its library, the card's tags, its pipeline, `base_model:` (and with the relation
    `base_model:RELATION:`) for each base model, and `license:`."""
    found = [*_strings(card.get("library_name")), *_strings(card.get("tags")), *_strings(card.get("pipeline_tag"))]
    relation = _strings(card.get("base_model_relation"))
    for base in _strings(card.get("base_model")):
        found += [f"base_model:{base}", *(f"base_model:{relation[0]}:{base}" for _ in relation[:1])]
    found += [f"license:{name}" for name in _strings(card.get("license"))]
    return list(dict.fromkeys(found))


def page(store: Store, repo: str, info: dict[str, Any], rev: str, blobs: bool = False) -> dict[str, Any]:
    """Everything this Hub knows of `repo` at `rev`, under the keys the Hub uses."""
    commit = store.resolve(repo, rev)
    tree = store.tree(commit)
    siblings = []
    for entry in tree.values():
        item: dict[str, Any] = {"rfilename": entry.path}
        if blobs:
            item.update(size=entry.size, blobId=entry.oid)
            if entry.lfs:
                item["lfs"] = {"sha256": entry.lfs, "size": entry.size, "pointerSize": 134}
        siblings.append(item)
    card = None
    if (readme := tree.get(CARD)) is not None and readme.size <= CARD_CAP:
        path = store.content_path(repo, readme)
        if store.objects.sound(path, readme.size):  # a damaged card is no card data (its download says so)
            card = front_matter(path.read_bytes().decode("utf-8", errors="replace"))
    found: dict[str, Any] = {
        "id": repo,
        "modelId": repo,
        "author": repo.split("/")[0],
        "sha": commit,
        "private": info["private"],
        "disabled": False,
        "gated": store.gated(repo),
        "downloads": 0,  # this Hub counts none
        "likes": 0,
        "tags": tags(card or {}),
        "siblings": siblings,
        "lastModified": store.commit_info(commit)["date"] if commit else info["created"],
        "createdAt": info["created"],
    }
    if card is not None:
        found["cardData"] = card
        for key in ("library_name", "pipeline_tag", "model-index"):
            if key in card:
                found[key] = card[key]
    return found


def _expand(request: web.Request) -> list[str] | None:
    wanted = request.query.getall("expand", []) or request.query.getall("expand[]", [])
    if not wanted:
        return None
    if unknown := sorted(set(wanted) - _expandable()):
        raise bad_request(f"expand: unknown properties {', '.join(name[:40] for name in unknown[:5])}")
    return wanted


def _only(data: dict[str, Any], keys: typing.Iterable[str]) -> dict[str, Any]:
    return {key: data[key] for key in ("id", *keys) if key in data}


async def model_info(request: web.Request) -> web.Response:
    info = can_read(request)
    repo, expand = repo_of(request), _expand(request)
    rev = request.match_info.get("rev") or "main"
    blobs = request.query.get("blobs") == "true"
    data = await asyncio.to_thread(page, hub_of(request).store, repo, info, rev, blobs)
    return answer(_only(data, expand) if expand is not None else data)


def _matches(data: dict[str, Any], query: Any) -> bool:
    if (author := query.get("author")) is not None and data["author"] != author:
        return False
    if (search := query.get("search")) is not None and search.lower() not in data["id"].lower():
        return False
    if (pipeline := query.get("pipeline_tag")) is not None and data.get("pipeline_tag") != pipeline:
        return False
    if (gated := query.get("gated")) is not None and bool(data["gated"]) != (gated.lower() == "true"):
        return False
    return set(query.getall("filter", [])) <= set(data["tags"])


async def list_models(request: web.Request) -> web.Response:
    """Every model the request may read that matches author, search, filter (tags), pipeline_tag and gated; sorted
    by lastModified or createdAt (newest first) when asked, else by id; at most `limit`."""
    query, expand = request.query, _expand(request)
    if expand is not None and any(query.get(key) == "true" for key in ("full", "cardData", "config")):
        raise bad_request("expand cannot be combined with full, cardData or config")
    try:
        limit = int(query["limit"]) if "limit" in query else None
    except ValueError:
        limit = -1
    if limit is not None and limit < 0:
        raise bad_request("limit must be a whole number, 0 or more")
    store, reader = hub_of(request).store, role(request, required=False)

    def gather() -> list[dict[str, Any]]:
        infos = [info for info in store.repos() if reader is not None or not info["private"]]
        pages = [page(store, info["id"], info, "main") for info in infos]
        return [data for data in pages if _matches(data, query)]

    found = await asyncio.to_thread(gather)
    sort = SORTS.get(query.get("sort", ""))
    found.sort(key=lambda data: data["id"])
    if sort is not None:
        found.sort(key=lambda data: data[sort], reverse=query.get("direction", "-1") == "-1")
    if expand is not None:
        keys: typing.Iterable[str] = expand
    else:
        keys = [
            *LISTED,
            *(FULL if query.get("full") == "true" else ()),
            *(("cardData",) if query.get("cardData") == "true" else ()),
        ]
    listed = [_only(data, keys) for data in found[:limit]]
    if expand is None and query.get("full") == "true":
        for data in listed:  # a listing names the files only
            data["siblings"] = [{"rfilename": s["rfilename"]} for s in data["siblings"]]
    return answer(listed)
