"""The local Hub's routes and its process: build the aiohttp application, bind, announce the URL, serve."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from . import api, collections, jobs, lfs, models
from .app import HUB, answer, errors, faults, hub_of, read_json
from .rules import HubError, bad_request
from .state import Hub, HubConfig

MODEL = "/api/models/{ns}/{name}"
REV = "{rev:[^/]+}"


async def set_faults(request: web.Request) -> web.Response:
    hub = hub_of(request)
    if not hub.config.test_hooks:
        raise HubError(404, "NotFound", "test hooks are off")
    try:
        hub.faults.replace((await read_json(request)).get("rules", []))
    except TypeError:
        raise bad_request("faults: unknown rule field") from None
    return answer({})


async def stats(request: web.Request) -> web.Response:
    hub = hub_of(request)
    if not hub.config.test_hooks:
        raise HubError(404, "NotFound", "test hooks are off")
    return answer(
        {
            "lfs_bytes_received": hub.lfs_bytes_received,
            "commits_received": hub.commits_received,
            "unpinned_commits": hub.unpinned_commits,
            "faults_left": hub.faults.left(),
        }
    )


def make_app(config: HubConfig) -> web.Application:
    app = web.Application(middlewares=[errors, faults], client_max_size=1024)  # bodies: app.read_body's caps
    app[HUB] = Hub(config)

    def add(method: str, path: str, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> None:
        # GET routes answer HEAD too (aiohttp's add_get), as the Hub's resolve must.
        app.router.add_get(path, handler) if method == "GET" else app.router.add_route(method, path, handler)

    add("POST", "/api/repos/create", api.create_repo)
    add("DELETE", "/api/repos/delete", api.delete_repo)
    add("GET", "/api/whoami-v2", api.whoami)
    add("POST", "/api/validate-yaml", api.validate_yaml)
    add("PUT", f"{MODEL}/settings", api.settings)
    add("GET", f"{MODEL}/xet-{{kind:write|read}}-token/{REV}", api.no_xet)
    add("POST", f"{MODEL}/preupload/{REV}", api.preupload)
    add("POST", f"{MODEL}/commit/{REV}", api.commit)
    add("GET", f"{MODEL}/tree/{REV}", api.list_tree)
    add("GET", f"{MODEL}/tree/{REV}/{{path:.+}}", api.list_tree)
    add("POST", f"{MODEL}/paths-info/{REV}", api.paths_info)
    add("GET", f"{MODEL}/refs", api.refs)
    add("GET", f"{MODEL}/commits/{REV}", api.commits)
    add("POST", f"{MODEL}/tag/{REV}", api.tag)
    add("POST", f"{MODEL}/branch/{{branch:[^/]+}}", api.branch)
    add("GET", f"{MODEL}/revision/{REV}", models.model_info)
    add("GET", MODEL, models.model_info)
    add("GET", "/api/models", models.list_models)
    add("POST", "/api/collections", collections.create)
    add("GET", "/api/collections", collections.listing)
    add("GET", "/api/collections/{ns}/{slug}", collections.get)
    add("POST", "/api/collections/{ns}/{slug}/items", collections.add_item)
    add("PATCH", "/api/collections/{ns}/{slug}/items/{item}", collections.update_item)
    add("DELETE", "/api/collections/{ns}/{slug}/items/{item}", collections.delete_item)
    add("POST", "/{ns}/{name}.git/info/lfs/objects/batch", lfs.batch)
    add("PUT", "/lfs-upload/{ns}/{name}/{oid:[0-9a-f]{64}}", lfs.upload)
    add("POST", "/lfs-verify/{ns}/{name}/{oid:[0-9a-f]{64}}", lfs.verify)
    add("GET", f"/{{ns}}/{{name}}/resolve/{REV}/{{path:.+}}", lfs.resolve)
    add("POST", "/api/jobs/{ns}", jobs.create)
    add("GET", "/api/jobs/{ns}", jobs.listing)
    add("GET", "/api/jobs/{ns}/{id}", jobs.inspect)
    add("GET", "/api/jobs/{ns}/{id}/logs", jobs.logs)
    if config.run_jobs:
        jobs.enable(app, config.root)
    add("POST", "/_faults", set_faults)
    add("GET", "/_stats", stats)
    return app


class _Connection(RequestHandler):
    """aiohttp's connection handler, except that a request it cannot parse (or a failure outside the routes) is
    answered with the status's name alone and logged without the exception: aiohttp's own text quotes the raw
    request line or header, which may hold a token (`Authorization: Bearer hf_...` with a control character)."""

    def handle_error(
        self, request: Any, status: int = 500, exc: BaseException | None = None, message: str | None = None
    ) -> web.StreamResponse:
        try:
            phrase = HTTPStatus(status).phrase
        except ValueError:
            phrase = "Error"
        return super().handle_error(request, status, None, None if status == 500 else f"{status} {phrase}")


class _Server(web.Server):
    def __call__(self) -> RequestHandler:
        return _Connection(self, loop=self._loop, **self._kwargs)


class _Runner(web.AppRunner):
    """web.AppRunner whose server makes `_Connection`s (aiohttp has no option for the handler class)."""

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        server.__class__ = _Server  # the same object, only its protocol factory differs
        return server


async def serve(config: HubConfig, host: str, port: int, announce: Callable[[str, int], None]) -> None:
    """Serve until cancelled. lingering_time=0: an unread body closes its connection, never becomes a request;
    keepalive_timeout also closes a connection whose first request line or headers never finish (slowloris)."""
    runner = _Runner(
        make_app(config),
        access_log=None,
        handle_signals=True,
        shutdown_timeout=2,
        lingering_time=0,
        keepalive_timeout=30,
        max_line_size=8190,
        max_field_size=8190,
    )
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = runner.addresses[0]
    announce(f"http://{bound[0]}:{bound[1]}", runner.app[HUB].store.objects.removed_partials)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
