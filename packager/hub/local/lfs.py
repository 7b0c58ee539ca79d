"""The local Hub's content endpoints: LFS batch, upload and verify; `resolve` (HEAD/GET with Range)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

from aiohttp import web

from .app import answer, base_url, can_download, can_read, can_write, hub_of, read_chunk, read_json, repo_of
from .rules import HubError, bad_request
from .state import LFS_CAP

OID = re.compile(r"[0-9a-f]{64}")


def _objects(data: dict[str, Any]) -> list[tuple[str, int]]:
    objects = data.get("objects")
    if not isinstance(objects, list):
        raise bad_request("batch: 'objects' must be a list")
    out = []
    for obj in objects:
        oid, size = (obj.get("oid"), obj.get("size")) if isinstance(obj, dict) else (None, None)
        if not (isinstance(oid, str) and OID.fullmatch(oid) and isinstance(size, int) and 0 <= size <= LFS_CAP):
            raise bad_request("batch: every object needs a sha256 'oid' and a 'size'")
        out.append((oid, size))
    return out


async def batch(request: web.Request) -> web.Response:
    can_read(request)
    can_write(request)
    hub, repo = hub_of(request), repo_of(request)
    wanted, answers = _objects(await read_json(request)), []
    for oid, size in wanted:
        # "Already present" only for an object that is there whole and hashes to its oid; anything else is
        # asked for again, so a damaged object gets replaced by the next upload.
        if hub.store.has_lfs(repo, oid, size) and await asyncio.to_thread(hub.store.objects.intact, repo, oid, size):
            answers.append({"oid": oid, "size": size})
            continue
        cap = hub.capability(repo, oid)
        answers.append(
            {
                "oid": oid,
                "size": size,
                "authenticated": True,
                "actions": {
                    "upload": {
                        "href": f"{base_url(request)}/lfs-upload/{repo}/{oid}?t={cap}&size={size}",
                        "header": {},
                    },
                    "verify": {"href": f"{base_url(request)}/lfs-verify/{repo}/{oid}", "header": {}},
                },
            }
        )
    return answer({"transfer": "basic", "objects": answers}, content_type="application/vnd.git-lfs+json")


async def upload(request: web.Request) -> web.Response:
    """PUT of one LFS object. It carries no token: the capability in its URL is checked before the body."""
    hub, repo, oid = hub_of(request), repo_of(request), request.match_info["oid"]
    if request.query.get("t") != hub.capability(repo, oid):
        raise HubError(403, "Forbidden", "invalid upload capability")
    size = request.content_length
    if size is None or str(size) != request.query.get("size"):
        raise HubError(411, "LengthRequired", "the upload needs the Content-Length the batch announced")

    async def counted() -> bytes:
        chunk = await read_chunk(request)
        hub.count_bytes(len(chunk))
        return chunk

    await hub.store.objects.receive_lfs(repo, oid, size, counted, asyncio.to_thread)
    hub.store.record_lfs(repo, oid, size)
    return answer({})


async def verify(request: web.Request) -> web.Response:
    can_read(request)
    can_write(request)
    hub, repo, oid = hub_of(request), repo_of(request), request.match_info["oid"]
    size = (await read_json(request)).get("size")
    if not isinstance(size, int) or not hub.store.has_lfs(repo, oid, size):
        raise HubError(404, "LfsObjectMissing", f"object {oid} is not stored")
    return answer({})


class _StoredFile(web.FileResponse):
    """aiohttp's FileResponse (Range, 416, HEAD, sendfile) with the Hub's ETag instead of mtime-size."""

    def __init__(self, path: Path, etag: str, headers: dict[str, str]) -> None:
        super().__init__(path, headers=headers)
        self._hub_etag = etag

    @property
    def etag(self) -> Any:
        return web.StreamResponse.etag.fget(self)  # type: ignore[attr-defined]

    @etag.setter
    def etag(self, _: Any) -> None:
        web.StreamResponse.etag.fset(self, self._hub_etag)  # type: ignore[attr-defined]


async def resolve(request: web.Request) -> web.StreamResponse:
    can_read(request)
    store, repo, path = hub_of(request).store, repo_of(request), request.match_info["path"]
    can_download(request, repo)
    commit = store.resolve(repo, request.match_info["rev"])
    entry = store.tree(commit).get(path)
    if entry is None:
        raise HubError(404, "EntryNotFound", f"{path} does not exist", {"X-Repo-Commit": str(commit)})
    stored = store.content_path(repo, entry)
    if not store.objects.sound(stored, entry.size):
        raise HubError(
            500,
            "StoredObjectDamaged",
            f"the stored content of {path} is damaged or missing; upload the file again to replace it",
            {"X-Repo-Commit": str(commit)},
        )
    headers = {"X-Repo-Commit": str(commit), "Content-Type": "application/octet-stream"}
    return _StoredFile(stored, entry.lfs or entry.oid, headers)
