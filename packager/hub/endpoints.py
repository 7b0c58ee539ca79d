"""The local Hub's endpoints, as a mixin of the request handler: what each Hub API call does."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any, Callable
from urllib.parse import parse_qs

from .state import Hub, HubError
from .store import Entry, lfs_entry, regular_entry

LFS_THRESHOLD = 1_000_000




class Endpoints:
    """Endpoint methods; `server.Handler` supplies the plumbing (_json, _send, _can_read, _can_write, ...)."""

    hub: Hub
    query: dict[str, list[str]]
    headers: Any
    command: str
    rfile: Any
    _json: Callable[..., None]
    _send: Callable[..., None]
    _body: Callable[[], bytes]
    _can_read: Callable[[str], None]
    _can_write: Callable[[], None]
    _authenticated: Callable[[bool], str | None]
    base: str

    # -- API -----------------------------------------------------------------------------------------------
    def create_repo(self, _: dict[str, str], body: bytes | None) -> None:
        self._can_write()
        data = json.loads(body or b"{}")
        if data.get("type") not in (None, "model"):
            raise HubError(400, "BadRequest", "only model repos are supported")
        repo = f"{data.get('organization') or 'local'}/{data['name']}"
        created = self.hub.store.create_repo(repo, data.get("visibility") == "private" or bool(data.get("private")))
        self._json(200 if created else 409, {"url": f"{self.base}/{repo}", "name": repo}
                   if created else {"url": f"{self.base}/{repo}", "error": "You already created this model repo"})

    def delete_repo(self, _: dict[str, str], body: bytes | None) -> None:
        self._can_write()
        data = json.loads(body or b"{}")
        self.hub.store.delete_repo(f"{data.get('organization')}/{data['name']}")
        self._json(200, {})

    def whoami(self, _: dict[str, str], __: bytes | None) -> None:
        role = "write" if self._authenticated(required=True) in self.hub.config.write_tokens else "read"
        self._json(200, {"type": "user", "name": "local", "auth": {"accessToken": {"role": role}}})

    def validate_yaml(self, _: dict[str, str], __: bytes | None) -> None:
        self._json(200, {"errors": [], "warnings": []})

    def model_info(self, m: dict[str, str], _: bytes | None) -> None:
        self._can_read(m["repo"])
        store = self.hub.store
        commit = store.resolve(m["repo"], m.get("rev") or "main")
        tree = store.tree(commit)
        blobs = self.query.get("blobs") == ["true"]
        siblings = []
        for entry in tree.values():
            item: dict[str, Any] = {"rfilename": entry.path}
            if blobs:
                item.update(size=entry.size, blobId=entry.oid)
                if entry.lfs:
                    item["lfs"] = {"sha256": entry.lfs, "size": entry.size, "pointerSize": 134}
            siblings.append(item)
        info = store.repo(m["repo"]) or {}
        last = store.commit_info(commit)["date"] if commit else info.get("created")
        self._json(200, {"id": m["repo"], "modelId": m["repo"], "sha": commit, "private": info.get("private"),
                         "disabled": False, "gated": False, "tags": [], "siblings": siblings,
                         "lastModified": last, "createdAt": info.get("created")})

    def no_xet(self, m: dict[str, str], _: bytes | None) -> None:
        raise HubError(404, "XetNotSupported", "this Hub stores LFS objects without Xet")

    def preupload(self, m: dict[str, str], body: bytes | None) -> None:
        self._can_read(m["repo"])
        self._can_write()
        tree = self.hub.store.tree(self.hub.store.resolve(m["repo"], m["rev"]))
        files = []
        for item in json.loads(body or b"{}").get("files", []):
            sample = base64.b64decode(item.get("sample", ""))
            mode = "lfs" if item.get("size", 0) >= LFS_THRESHOLD or b"\x00" in sample else "regular"
            answer = {"path": item["path"], "uploadMode": mode, "shouldIgnore": False}
            existing = tree.get(item["path"])
            if existing is not None:
                answer["oid"] = existing.lfs or existing.oid
            files.append(answer)
        self._json(200, {"files": files, "commitOid": None})

    def lfs_batch(self, m: dict[str, str], body: bytes | None) -> None:
        self._can_read(m["repo"])
        self._can_write()
        repo, store = m["repo"], self.hub.store
        objects = []
        for obj in json.loads(body or b"{}").get("objects", []):
            oid, size = obj["oid"], int(obj["size"])
            if store.has_lfs(repo, oid, size):
                objects.append({"oid": oid, "size": size})
                continue
            cap = self.hub.capability(repo, oid)
            objects.append({"oid": oid, "size": size, "authenticated": True, "actions": {
                "upload": {"href": f"{self.base}/lfs-upload/{repo}/{oid}?t={cap}&size={size}", "header": {}},
                "verify": {"href": f"{self.base}/lfs-verify/{repo}/{oid}", "header": {}}}})
        self._send(200, json.dumps({"transfer": "basic", "objects": objects}).encode(),
                   content_type="application/vnd.git-lfs+json")

    def lfs_upload(self, m: dict[str, str], _: bytes | None) -> None:
        repo, oid = m["repo"], m["oid"]
        if self.query.get("t") != [self.hub.capability(repo, oid)]:
            self._body()
            raise HubError(403, "Forbidden", "invalid upload capability")
        size = int(self.headers.get("Content-Length") or 0)
        counted = _Counting(self.rfile, self.hub.count_bytes)
        self.hub.store.put_lfs(repo, oid, size, counted)
        self._json(200, {})

    def lfs_verify(self, m: dict[str, str], body: bytes | None) -> None:
        data = json.loads(body or b"{}")
        if not self.hub.store.has_lfs(m["repo"], m["oid"], int(data.get("size", -1))):
            raise HubError(404, "LfsObjectMissing", f"object {m['oid']} is not stored")
        self._json(200, {})

    def commit(self, m: dict[str, str], body: bytes | None) -> None:
        self._can_read(m["repo"])
        self._can_write()
        if self.query.get("create_pr") == ["1"]:
            raise HubError(400, "BadRequest", "pull requests are not supported by this Hub")
        header: dict[str, Any] = {}
        changes: list[tuple[str, Entry | None]] = []
        blobs: dict[str, bytes] = {}
        for line in (body or b"").splitlines():
            if not line.strip():
                continue
            item = json.loads(line)
            key, value = item["key"], item["value"]
            if key == "header":
                header = value
            elif key == "file":
                data = base64.b64decode(value["content"])
                entry = regular_entry(value["path"], data)
                blobs[entry.oid] = data
                changes.append((value["path"], entry))
            elif key == "lfsFile":
                changes.append((value["path"], lfs_entry(value["path"], value["oid"], int(value["size"]))))
            elif key in ("deletedFile", "deletedFolder"):
                changes.append((value["path"], None))
        self.hub.commits_received += 1
        oid = self.hub.store.commit(m["repo"], m["rev"], header.get("parentCommit"), header.get("summary", ""),
                                    header.get("description", ""), changes, blobs)
        self._json(200, {"commitOid": oid, "commitUrl": f"{self.base}/{m['repo']}/commit/{oid}",
                         "pullRequestUrl": None})

    def _entry_json(self, entry: Entry, commit: str, expand: bool) -> dict[str, Any]:
        item: dict[str, Any] = {"type": "file", "path": entry.path, "size": entry.size, "oid": entry.oid}
        if entry.lfs:
            item["lfs"] = {"oid": entry.lfs, "size": entry.size, "pointerSize": 134}
        if expand:
            info = self.hub.store.commit_info(commit)
            item["lastCommit"] = {"id": info["id"], "title": info["title"], "date": info["date"]}
        return item

    def list_tree(self, m: dict[str, str], _: bytes | None) -> None:
        self._can_read(m["repo"])
        commit = self.hub.store.resolve(m["repo"], m["rev"])
        tree = self.hub.store.tree(commit)
        prefix = (m.get("path") or "").strip("/")
        recursive = self.query.get("recursive") == ["true"]
        expand = self.query.get("expand") == ["true"]
        out, folders = [], set()
        for path, entry in sorted(tree.items()):
            if prefix and not path.startswith(prefix + "/"):
                continue
            rest = path[len(prefix) + 1:] if prefix else path
            if "/" in rest and not recursive:
                folders.add((prefix + "/" if prefix else "") + rest.split("/")[0])
                continue
            out.append(self._entry_json(entry, commit, expand))  # type: ignore[arg-type]
        if prefix and not out and not folders:
            raise HubError(404, "EntryNotFound", f"{prefix} does not exist")
        out += [{"type": "directory", "path": f, "oid": "0" * 40, "size": 0} for f in sorted(folders)]
        self._json(200, out)

    def paths_info(self, m: dict[str, str], body: bytes | None) -> None:
        self._can_read(m["repo"])
        commit = self.hub.store.resolve(m["repo"], m["rev"])
        tree = self.hub.store.tree(commit)
        form = parse_qs((body or b"").decode())
        expand = form.get("expand") == ["true"]
        self._json(200, [self._entry_json(tree[p], commit, expand) for p in form.get("paths", []) if p in tree])  # type: ignore[arg-type]

    def refs(self, m: dict[str, str], _: bytes | None) -> None:
        self._can_read(m["repo"])
        self._json(200, self.hub.store.refs(m["repo"]))

    def commits(self, m: dict[str, str], _: bytes | None) -> None:
        self._can_read(m["repo"])
        history = self.hub.store.history(self.hub.store.resolve(m["repo"], m["rev"]))
        self._json(200, [{"id": c["id"], "authors": [{"user": "local"}], "date": c["date"], "title": c["title"],
                          "message": c["message"]} for c in history])

    def tag(self, m: dict[str, str], body: bytes | None) -> None:
        self._can_read(m["repo"])
        self._can_write()
        commit = self.hub.store.resolve(m["repo"], m["rev"])
        if commit is None:
            raise HubError(400, "BadRequest", "cannot tag an empty repo")
        self.hub.store.tag(m["repo"], json.loads(body or b"{}")["tag"], commit)
        self._json(200, {})

    def branch(self, m: dict[str, str], body: bytes | None) -> None:
        self._can_read(m["repo"])
        self._can_write()
        start = json.loads(body or b"{}").get("startingPoint") or "main"
        self.hub.store.branch(m["repo"], m["branch"], self.hub.store.resolve(m["repo"], start))
        self._json(200, {})

    def resolve(self, m: dict[str, str], _: bytes | None) -> None:
        self._can_read(m["repo"])
        commit = self.hub.store.resolve(m["repo"], m["rev"])
        entry = self.hub.store.tree(commit).get(m["path"])
        if entry is None:
            raise HubError(404, "EntryNotFound", f"{m['path']} does not exist", {"X-Repo-Commit": str(commit)})
        _serve_file(self, self.hub.store.content_path(m["repo"], entry), entry, str(commit))

    # -- test hooks ------------------------------------------------------------------------------------------
    def set_faults(self, _: dict[str, str], body: bytes | None) -> None:
        if not self.hub.config.test_hooks:
            raise HubError(404, "NotFound", "test hooks are off")
        self.hub.faults.replace(json.loads(body or b"{}").get("rules", []))
        self._json(200, {})

    def stats(self, _: dict[str, str], __: bytes | None) -> None:
        if not self.hub.config.test_hooks:
            raise HubError(404, "NotFound", "test hooks are off")
        self._json(200, {"lfs_bytes_received": self.hub.lfs_bytes_received,
                         "commits_received": self.hub.commits_received, "faults_left": self.hub.faults.left()})


class _Counting:
    def __init__(self, raw: Any, count: Callable[[int], None]) -> None:
        self.raw, self.count = raw, count

    def read(self, n: int) -> bytes:
        data = self.raw.read(n)
        self.count(len(data))
        return data


def _serve_file(handler: Any, path: Path, entry: Entry, commit: str) -> None:
    size = entry.size
    headers = {"X-Repo-Commit": commit, "ETag": f'"{entry.lfs or entry.oid}"', "Accept-Ranges": "bytes"}
    start, end, status = 0, size - 1, 200
    wanted = re.fullmatch(r"bytes=(\d*)-(\d*)", handler.headers.get("Range") or "")
    if wanted and size:
        start = int(wanted[1]) if wanted[1] else max(0, size - int(wanted[2] or 0))
        end = min(int(wanted[2]), size - 1) if wanted[1] and wanted[2] else size - 1
        status = 206
        headers["Content-Range"] = f"bytes {start}-{end}/{size}"
    length = max(0, end - start + 1)
    handler.send_response(status)
    handler.send_header("Content-Type", "application/octet-stream")
    handler.send_header("Content-Length", str(length))
    for key, value in headers.items():
        handler.send_header(key, value)
    handler.end_headers()
    if handler.command == "HEAD":
        return
    with open(path, "rb") as source:
        source.seek(start)
        remaining = length
        while remaining:
            chunk = source.read(min(remaining, 1024 * 1024))
            if not chunk:
                break
            handler.wfile.write(chunk)
            remaining -= len(chunk)
