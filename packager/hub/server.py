"""A Hub-compatible HTTP server for huggingface_hub's real client: plain LFS (no Xet), tokens, commits, tags,
tree listing, resolve with Range. Model repos only. With test hooks on, /_faults injects failures.
"""

import io
import json
import re
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable
from urllib.parse import parse_qs, unquote

from .endpoints import Endpoints
from .state import Hub, HubConfig, HubError
from .store import StoreError

REPO = r"(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+?)"


class Handler(Endpoints, BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "packager-hub"
    hub: Hub  # set on the subclass made by make_server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass  # quiet; tokens travel in headers, never in logs

    # -- plumbing ----------------------------------------------------------------------------------------
    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send(self, status: int, body: bytes = b"", content_type: str = "application/json",
              headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, data: Any, headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps(data).encode(), headers=headers)

    def _error(self, exc: HubError) -> None:
        headers = {"X-Error-Code": exc.code, "X-Error-Message": exc.message, **exc.headers}
        self._json(exc.status, {"error": exc.message}, headers)

    @property
    def base(self) -> str:
        return f"http://{self.headers.get('Host', '127.0.0.1')}"

    def _token(self) -> str | None:
        auth = self.headers.get("Authorization") or ""
        return auth[7:].strip() if auth.lower().startswith("bearer ") else None

    def _authenticated(self, required: bool) -> str | None:
        """The request's token; 401 for an unknown one, and for none when `required`."""
        token = self._token()
        if (token is None and required) or (token is not None and token not in self.hub.config.known_tokens):
            raise HubError(401, "Unauthorized", "Invalid credentials in Authorization header")
        return token

    def _can_read(self, repo: str) -> None:
        info = self.hub.store.repo(repo)
        token = self._authenticated(required=False)
        if info is None or (info["private"] and token is None):
            raise HubError(404, "RepoNotFound", f"Repository {repo} not found")

    def _can_write(self) -> None:
        if self._authenticated(required=True) not in self.hub.config.write_tokens:
            raise HubError(403, "Forbidden", "This token has read access only")

    def _dispatch(self) -> None:
        path, _, query = self.path.partition("?")
        self.query = parse_qs(query)
        body = self._body() if self.command in ("POST", "DELETE") else None
        fault = self.hub.faults.take(self.command, path)
        if fault is not None and fault.drop_after_bytes is not None:
            # A lost connection: read part of the upload, then hang up without an answer.
            self.rfile.read(min(fault.drop_after_bytes, int(self.headers.get("Content-Length") or 0)))
            self.close_connection = True
            return
        if fault is not None and not fault.after:
            if self.command == "PUT":
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self._error(HubError(fault.status, "InjectedFault", "injected fault", fault.headers()))
            return
        if fault is not None:
            # The operation happens; only its answer is lost (e.g. a commit that landed but answered 500).
            real, self.wfile = self.wfile, io.BytesIO()
            try:
                self._route(path, body)
            finally:
                self.wfile = real
            self._error(HubError(fault.status, "InjectedFault", "injected fault after the operation",
                                 fault.headers()))
            return
        self._route(path, body)

    def _route(self, path: str, body: bytes | None) -> None:
        try:
            for method, pattern, action in ROUTES:
                match = re.fullmatch(pattern, path)
                if match and (method == self.command or (method == "GET" and self.command == "HEAD")):
                    action(self, {k: unquote(v) for k, v in match.groupdict().items() if v is not None}, body)
                    return
            raise HubError(404, "NotFound", f"no route for {self.command} {path}")
        except StoreError as exc:
            self._error(HubError(exc.status, exc.code, exc.message))
        except HubError as exc:
            self._error(exc)
        except Exception as exc:  # noqa: BLE001 - a server bug must still answer, not hang up
            self._error(HubError(500, "InternalError", f"{type(exc).__name__}: {exc}"))

    def do_GET(self) -> None:  # noqa: N802 - stdlib names
        self._dispatch()

    do_HEAD = do_GET
    do_POST = do_GET
    do_PUT = do_GET
    do_DELETE = do_GET


ROUTES: list[tuple[str, str, Callable[..., None]]] = [
    ("POST", r"/api/repos/create", Endpoints.create_repo),
    ("DELETE", r"/api/repos/delete", Endpoints.delete_repo),
    ("GET", r"/api/whoami-v2", Endpoints.whoami),
    ("POST", r"/api/validate-yaml", Endpoints.validate_yaml),
    ("GET", rf"/api/models/{REPO}/xet-(?:write|read)-token/(?P<rev>[^/]+)", Endpoints.no_xet),
    ("POST", rf"/api/models/{REPO}/preupload/(?P<rev>[^/]+)", Endpoints.preupload),
    ("POST", rf"/api/models/{REPO}/commit/(?P<rev>[^/]+)", Endpoints.commit),
    ("GET", rf"/api/models/{REPO}/tree/(?P<rev>[^/]+)(?:/(?P<path>.+))?", Endpoints.list_tree),
    ("POST", rf"/api/models/{REPO}/paths-info/(?P<rev>[^/]+)", Endpoints.paths_info),
    ("GET", rf"/api/models/{REPO}/refs", Endpoints.refs),
    ("GET", rf"/api/models/{REPO}/commits/(?P<rev>[^/]+)", Endpoints.commits),
    ("POST", rf"/api/models/{REPO}/tag/(?P<rev>[^/]+)", Endpoints.tag),
    ("POST", rf"/api/models/{REPO}/branch/(?P<branch>[^/]+)", Endpoints.branch),
    ("GET", rf"/api/models/{REPO}/revision/(?P<rev>[^/]+)", Endpoints.model_info),
    ("GET", rf"/api/models/{REPO}", Endpoints.model_info),
    ("POST", rf"/{REPO}\.git/info/lfs/objects/batch", Endpoints.lfs_batch),
    ("PUT", rf"/lfs-upload/{REPO}/(?P<oid>[0-9a-f]{{64}})", Endpoints.lfs_upload),
    ("POST", rf"/lfs-verify/{REPO}/(?P<oid>[0-9a-f]{{64}})", Endpoints.lfs_verify),
    ("GET", rf"/{REPO}/resolve/(?P<rev>[^/]+)/(?P<path>.+)", Endpoints.resolve),
    ("POST", r"/_faults", Endpoints.set_faults),
    ("GET", r"/_stats", Endpoints.stats),
]


def make_server(config: HubConfig, host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    hub = Hub(config)
    handler = type("BoundHandler", (Handler,), {"hub": hub})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    return server


def url_of(server: ThreadingHTTPServer) -> str:
    host, port = server.server_address[:2]
    return f"http://{host}:{port}"
