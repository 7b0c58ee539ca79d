"""The local Hub's API endpoints: repos, settings, preupload, commits, tree, paths-info, refs, history."""

from __future__ import annotations

import asyncio
import base64
import binascii
from typing import Any, cast
from urllib.parse import parse_qs

from aiohttp import web

from .app import (
    answer,
    base_url,
    can_read,
    can_write,
    hub_of,
    identity,
    parse_json,
    read_body,
    read_json,
    repo_of,
    role,
)
from .rules import HubError, bad_request, check, path_problem, ref_problem, repo_id_problem
from .state import COMMIT_CAP
from .store import Entry, lfs_entry, regular_entry

LFS_THRESHOLD = 1_000_000


async def create_repo(request: web.Request) -> web.Response:
    user = can_write(request)
    data = await read_json(request)
    if data.get("type") not in (None, "model"):
        raise bad_request("only model repos are supported")
    name, organization = data.get("name"), data.get("organization") or user
    if not isinstance(name, str) or not isinstance(organization, str):
        raise bad_request("name and organization must be strings")
    repo = f"{organization}/{name}"
    check(repo_id_problem(repo))
    can_write(request, organization)
    private = data.get("visibility") == "private" or data.get("private") is True
    created = await asyncio.to_thread(hub_of(request).store.create_repo, repo, private)
    url = f"{base_url(request)}/{repo}"
    if created:
        return answer({"url": url, "name": repo})
    return answer({"url": url, "error": "You already created this model repo"}, 409)


async def delete_repo(request: web.Request) -> web.Response:
    can_write(request)
    data = await read_json(request)
    repo = f"{data.get('organization')}/{data.get('name')}"
    can_read(request, repo)
    can_write(request, repo.split("/")[0])
    await asyncio.to_thread(hub_of(request).store.delete_repo, repo)
    return answer({})


_VISIBILITY: dict[Any, bool] = {"private": True, "public": False}


async def settings(request: web.Request) -> web.Response:
    can_read(request)
    can_write(request)
    data = await read_json(request)
    private = data.get("private", _VISIBILITY.get(data.get("visibility"), "?") if "visibility" in data else None)
    if private is not None and not isinstance(private, bool):
        raise bad_request("settings: give visibility 'private' or 'public'")
    if "gated" in data and not (data["gated"] is False or data["gated"] in ("auto", "manual")):
        raise bad_request("settings: gated is 'auto', 'manual' or false")
    if private is None and "gated" not in data:
        raise bad_request("settings: give visibility, private or gated")
    store = hub_of(request).store
    if private is not None:
        store.set_private(repo_of(request), private)
    if "gated" in data:
        store.set_gated(repo_of(request), data["gated"])
    return answer({})


async def whoami(request: web.Request) -> web.Response:
    user, access = identity(request, required=True) or ("", "")
    return answer({"type": "user", "name": user, "orgs": [], "auth": {"accessToken": {"role": access}}})


async def validate_yaml(request: web.Request) -> web.Response:
    role(request, required=False)
    await read_json(request)
    return answer({"errors": [], "warnings": []})


async def no_xet(request: web.Request) -> web.Response:
    raise HubError(404, "XetNotSupported", "this Hub stores LFS objects without Xet")


async def preupload(request: web.Request) -> web.Response:
    can_read(request)
    can_write(request)
    store = hub_of(request).store
    tree = store.tree(store.resolve(repo_of(request), request.match_info["rev"]))
    files = (await read_json(request)).get("files")
    if not isinstance(files, list):
        raise bad_request("preupload: 'files' must be a list")
    out = []
    for item in files:
        if not isinstance(item, dict) or not isinstance(item.get("size", 0), int):
            raise bad_request("preupload: every file is an object with path, size and sample")
        check(path_problem(item.get("path")))
        try:
            sample = base64.b64decode(item.get("sample", ""), validate=True)
        except (binascii.Error, TypeError, ValueError):
            raise bad_request("preupload: 'sample' must be base64") from None
        mode = "lfs" if item.get("size", 0) >= LFS_THRESHOLD or b"\x00" in sample else "regular"
        found = {"path": item["path"], "uploadMode": mode, "shouldIgnore": False}
        if (existing := tree.get(item["path"])) is not None:
            found["oid"] = existing.lfs or existing.oid
        out.append(found)
    return answer({"files": out, "commitOid": None})


def _commit_lines(body: bytes) -> tuple[dict[str, Any], list[tuple[str, Entry | None]], dict[str, bytes]]:
    """The NDJSON commit -> header, changes (Entry to add, None to delete), regular blobs; 400 when malformed."""
    header: dict[str, Any] = {}
    changes: list[tuple[str, Entry | None]] = []
    blobs: dict[str, bytes] = {}
    for number, line in enumerate(body.splitlines(), 1):
        if not line.strip():
            continue
        item = parse_json(line, f"commit line {number}")
        key, value = item.get("key"), item.get("value")
        if not isinstance(value, dict):
            raise bad_request(f"commit line {number}: 'value' must be an object")
        if key == "header":
            header = value
            continue
        path = value.get("path")
        check(path_problem(path.rstrip("/") if key == "deletedFolder" and isinstance(path, str) else path))
        path = cast(str, path)  # path_problem refuses anything but a text path
        try:
            if key == "file":
                data = base64.b64decode(value["content"], validate=True)
                entry = regular_entry(path, data)
                blobs[entry.oid] = data
                changes.append((path, entry))
            elif key == "lfsFile":
                oid, size = value["oid"], value["size"]
                if not (isinstance(oid, str) and len(oid) == 64 and isinstance(size, int) and size >= 0):
                    raise ValueError
                changes.append((path, lfs_entry(path, oid, size)))
            elif key in ("deletedFile", "deletedFolder"):
                changes.append((path, None))
            else:
                raise bad_request(f"commit line {number}: unknown key {str(key)[:40]!r}")
        except (KeyError, TypeError, ValueError, binascii.Error):
            raise bad_request(f"commit line {number}: malformed {str(key)[:40]} entry") from None
    return header, changes, blobs


async def commit(request: web.Request) -> web.Response:
    can_read(request)
    can_write(request)
    if request.query.get("create_pr") == "1":
        raise bad_request("pull requests are not supported by this Hub")
    repo, branch = repo_of(request), request.match_info["rev"]
    header, changes, blobs = _commit_lines(await read_body(request, COMMIT_CAP))
    summary, description = header.get("summary", ""), header.get("description", "")
    if request.get("foreign"):
        description = "another uploader's commit (test hook)"
    parent = header.get("parentCommit")
    if not isinstance(summary, str) or not isinstance(description, str) or not isinstance(parent, (str, type(None))):
        raise bad_request("commit header: summary and description are strings, parentCommit a commit id")
    hub = hub_of(request)
    hub.commits_received += 1
    hub.unpinned_commits += parent is None
    oid = await asyncio.to_thread(hub.store.commit, repo, branch, parent, summary, description, changes, blobs)
    return answer({"commitOid": oid, "commitUrl": f"{base_url(request)}/{repo}/commit/{oid}", "pullRequestUrl": None})


def _entry_json(request: web.Request, entry: Entry, commit: str, expand: bool) -> dict[str, Any]:
    item: dict[str, Any] = {"type": "file", "path": entry.path, "size": entry.size, "oid": entry.oid}
    if entry.lfs:
        item["lfs"] = {"oid": entry.lfs, "size": entry.size, "pointerSize": 134}
    if expand:
        info = hub_of(request).store.commit_info(commit)
        item["lastCommit"] = {"id": info["id"], "title": info["title"], "date": info["date"]}
    return item


async def list_tree(request: web.Request) -> web.Response:
    can_read(request)
    store = hub_of(request).store
    commit = store.resolve(repo_of(request), request.match_info["rev"])
    prefix = request.match_info.get("path", "").strip("/")
    recursive, expand = request.query.get("recursive") == "true", request.query.get("expand") == "true"
    out, folders = [], set()
    for path, entry in sorted(store.tree(commit).items()):
        if prefix and not path.startswith(prefix + "/"):
            continue
        rest = path[len(prefix) + 1 :] if prefix else path
        if "/" in rest and not recursive:
            folders.add((prefix + "/" if prefix else "") + rest.split("/")[0])
            continue
        out.append(_entry_json(request, entry, str(commit), expand))
    if prefix and not out and not folders:
        raise HubError(404, "EntryNotFound", f"{prefix} does not exist")
    out += [{"type": "directory", "path": f, "oid": "0" * 40, "size": 0} for f in sorted(folders)]
    return answer(out)


async def paths_info(request: web.Request) -> web.Response:
    can_read(request)
    store = hub_of(request).store
    commit = store.resolve(repo_of(request), request.match_info["rev"])
    tree = store.tree(commit)
    try:
        form = parse_qs((await read_body(request)).decode(), strict_parsing=False)
    except UnicodeDecodeError:
        raise bad_request("paths-info: the form is not UTF-8") from None
    expand = form.get("expand") == ["true"]
    return answer([_entry_json(request, tree[p], str(commit), expand) for p in form.get("paths", []) if p in tree])


async def refs(request: web.Request) -> web.Response:
    can_read(request)
    return answer(hub_of(request).store.refs(repo_of(request)))


async def commits(request: web.Request) -> web.Response:
    can_read(request)
    store = hub_of(request).store
    history = store.history(store.resolve(repo_of(request), request.match_info["rev"]))
    return answer(
        [
            {
                "id": c["id"],
                "authors": [{"user": "local"}],
                "date": c["date"],
                "title": c["title"],
                "message": c["message"],
            }
            for c in history
        ]
    )


async def tag(request: web.Request) -> web.Response:
    can_read(request)
    can_write(request)
    store, repo = hub_of(request).store, repo_of(request)
    name = (await read_json(request)).get("tag")
    check(ref_problem(name) if isinstance(name, str) else "tag: give a tag name")
    name = cast(str, name)
    commit = store.resolve(repo, request.match_info["rev"])
    if commit is None:
        raise bad_request("cannot tag an empty repo")
    store.add_ref(repo, "tag", name, commit)
    return answer({})


async def branch(request: web.Request) -> web.Response:
    can_read(request)
    can_write(request)
    store, repo, name = hub_of(request).store, repo_of(request), request.match_info["branch"]
    check(ref_problem(name))
    start = (await read_json(request)).get("startingPoint") or "main"
    commit = store.resolve(repo, start) if isinstance(start, str) else None
    if commit is None:
        raise bad_request("startingPoint must name an existing revision")
    store.add_ref(repo, "branch", name, commit)
    return answer({})
