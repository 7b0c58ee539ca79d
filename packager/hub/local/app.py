"""The local Hub's HTTP layer on aiohttp: routes, authentication before any body is read, capped and timed
body reads, errors as JSON (no request text in headers, no server paths), fault injection for tests.

aiohttp owns the protocol: request parsing and header encoding, framing, keep-alive, Range and 416. The
server is started with lingering_time=0, so a body the handler did not read closes the connection instead
of being parsed as the next request.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from .rules import HubError, bad_request
from .state import JSON_CAP, Hub

HUB: web.AppKey[Hub] = web.AppKey("hub", Hub)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def hub_of(request: web.Request) -> Hub:
    return request.app[HUB]


def repo_of(request: web.Request) -> str:
    return f"{request.match_info['ns']}/{request.match_info['name']}"


def base_url(request: web.Request) -> str:
    return f"http://{request.host}"


def answer(
    data: Any, status: int = 200, headers: dict[str, str] | None = None, content_type: str = "application/json"
) -> web.Response:
    return web.Response(status=status, body=json.dumps(data).encode(), content_type=content_type, headers=headers)


def error_response(exc: HubError) -> web.Response:
    # The message goes in the JSON body only; headers carry fixed texts chosen by this code.
    return answer({"error": exc.message}, exc.status, {"X-Error-Code": exc.code, **exc.headers})


# -- who is asking -----------------------------------------------------------------------------------------
def identity(request: web.Request, required: bool) -> tuple[str, str] | None:
    """(user, 'write' or 'read') for a known token; 401 for an unknown one, and for none when `required`."""
    auth = request.headers.get("Authorization", "")
    token = auth[7:].strip() if auth[:7].lower() == "bearer " else None
    found = hub_of(request).config.identify(token) if token else None
    if (token is None and required) or (token is not None and found is None):
        raise HubError(401, "Unauthorized", "Invalid credentials in Authorization header")
    return found


def role(request: web.Request, required: bool) -> str | None:
    """'write' or 'read' for a known token; 401 for an unknown one, and for none when `required`."""
    found = identity(request, required)
    return found[1] if found else None


def can_read(request: web.Request, repo: str | None = None) -> dict[str, Any]:
    """The repo's info; 404 if it does not exist or is private and the request has no token."""
    repo = repo or repo_of(request)
    info = hub_of(request).store.repo(repo)
    if info is None or (info["private"] and role(request, required=False) is None):
        raise HubError(404, "RepoNotFound", f"Repository {repo} not found")
    return info


def can_download(request: web.Request, repo: str) -> None:
    """A gated repo's files go only to its owners (users who may write its namespace), as on the Hub: 401 without
    a token, 403 for anyone else (on the Hub: not yet granted; this Hub has no access requests to grant)."""
    if not hub_of(request).store.gated(repo):
        return
    found = identity(request, required=False)
    if found is None:
        raise HubError(
            401,
            "GatedRepo",
            f"Access to model {repo} is restricted. You must have access to it and be "
            "authenticated to access it. Please log in.",
        )
    if not hub_of(request).config.may_write(found[0], repo.split("/")[0]):
        raise HubError(
            403,
            "GatedRepo",
            f"Access to model {repo} is restricted and you are not in the authorized "
            f"list. Visit {base_url(request)}/{repo} to ask for access.",
        )


def can_write(request: web.Request, namespace: str | None = None) -> str:
    """The writing user; 403 for a read-only token or a namespace (default: the route's) the user may not write.
    Checked before any body is read; routes whose namespace is in the body check it again once read."""
    user, access = identity(request, required=True) or ("", "")
    if access != "write":
        raise HubError(403, "Forbidden", "This token has read access only")
    namespace = namespace or request.match_info.get("ns")
    if namespace is not None and not hub_of(request).config.may_write(user, namespace):
        raise HubError(403, "Forbidden", f"{user} may not write in the namespace {namespace}")
    return user


# -- bodies --------------------------------------------------------------------------------------------------
async def read_chunk(request: web.Request) -> bytes:
    """The next piece of the body; 408 if the client sends nothing for the configured idle time."""
    try:
        return await asyncio.wait_for(request.content.readany(), hub_of(request).config.body_idle_seconds)
    except TimeoutError:
        raise HubError(408, "RequestTimeout", "the request body stopped arriving") from None


async def read_body(request: web.Request, cap: int = JSON_CAP) -> bytes:
    """The whole body, at most `cap` bytes (413 beyond), read only after the caller has authorised it."""
    if request.content_length is not None and request.content_length > cap:
        raise HubError(413, "PayloadTooLarge", f"the request body is larger than {cap} bytes")
    parts, size = [], 0
    while chunk := await read_chunk(request):
        size += len(chunk)
        if size > cap:
            raise HubError(413, "PayloadTooLarge", f"the request body is larger than {cap} bytes")
        parts.append(chunk)
    return b"".join(parts)


def parse_json(body: bytes, what: str = "the request body") -> dict[str, Any]:
    try:
        data = json.loads(body or b"{}")
    except (ValueError, UnicodeDecodeError):
        raise bad_request(f"{what} is not valid JSON") from None
    if not isinstance(data, dict):
        raise bad_request(f"{what} must be a JSON object")
    return data


async def read_json(request: web.Request, cap: int = JSON_CAP) -> dict[str, Any]:
    return parse_json(await read_body(request, cap))


# -- middleware ---------------------------------------------------------------------------------------------
@web.middleware
async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except HubError as exc:
        return error_response(exc)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return error_response(HubError(exc.status, "NotFound" if exc.status == 404 else "BadRequest", exc.reason))
    except (asyncio.CancelledError, ConnectionError):
        raise
    except Exception as exc:
        print(f"packager hub: internal error {type(exc).__name__} on {request.method}", file=sys.stderr)
        return error_response(HubError(500, "InternalError", "internal error"))


@web.middleware
async def faults(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Test hooks: answer with a status, drop the connection, stall a download, or lose an answer."""
    fault = hub_of(request).faults.take(request.method, request.path)
    if fault is None:
        return await handler(request)
    if fault.barrier:
        await hub_of(request).faults.meet(fault)
        return await handler(request)
    if fault.foreign:
        request["foreign"] = True  # the commit handler lands it as someone else's
    if fault.drop_after_bytes is not None:
        await request.content.read(fault.drop_after_bytes)
        assert request.transport is not None
        request.transport.abort()
        raise ConnectionResetError("injected drop")
    if fault.stall_after_bytes is not None:
        response = await handler(request)
        return _Stalled(response, fault.stall_after_bytes)
    if not (fault.after or fault.foreign):
        return error_response(HubError(fault.status, "InjectedFault", "injected fault", fault.headers()))
    await handler(request)
    return error_response(
        HubError(fault.status, "InjectedFault", "injected fault after the operation", fault.headers())
    )


class _Stalled(web.StreamResponse):
    """Sends the real response's headers and its first bytes, then nothing (the client must time out)."""

    def __init__(self, real: web.StreamResponse, after: int) -> None:
        super().__init__(status=real.status, headers=real.headers)
        self._real_path = getattr(real, "_path", None)
        self._after = after

    async def prepare(self, request: web.BaseRequest) -> Any:
        writer = await super().prepare(request)
        if self._real_path is not None and request.method == "GET":
            with open(self._real_path, "rb") as handle:
                await self.write(handle.read(self._after))
            await asyncio.sleep(120)
        return writer
