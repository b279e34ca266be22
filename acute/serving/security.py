"""What keeps other clients and web pages out: the API key, and without one the ``Host`` and
``Origin`` checks against DNS rebinding and cross-site requests; ``Content-Type: application/json``
on every POST (a page elsewhere can send ``text/plain`` without the browser's preflight).
"""

from __future__ import annotations

import hmac
from urllib.parse import urlsplit

from .errors import RequestError
from .settings import is_loopback

__all__ = ["HostGuard", "authorize", "check_json_content_type", "host_allowed"]


def authorize(request, api_key: str | None) -> None:
    """``RequestError`` 401 unless the request carries ``Authorization: Bearer <api_key>``
    (compared in constant time); nothing to check without a key."""
    if api_key is None:
        return
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    ok = scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), api_key.encode())
    if not ok:
        raise RequestError("missing or wrong API key: send 'Authorization: Bearer KEY'", status=401,
                           code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})


def check_json_content_type(request) -> None:
    """``RequestError`` 415 unless the body is declared ``application/json`` (parameters such as
    ``charset`` allowed)."""
    declared = request.headers.get("content-type", "")
    if declared.split(";", 1)[0].strip().lower() != "application/json":
        shown = declared[:60] + ("..." if len(declared) > 60 else "")
        raise RequestError(f"send the body as JSON with 'Content-Type: application/json' (got "
                           f"{shown!r})" if declared else "send the body as JSON with 'Content-Type: "
                           "application/json' (the request has no Content-Type)", status=415,
                           code="unsupported_media_type")


def _host_name(host: str) -> str:
    """The name in a ``Host`` value: ``"[::1]:8000"`` -> ``"::1"``, ``"Localhost:80"`` -> ``"localhost"``."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].partition("]")[0]
    return host.rpartition(":")[0] if host.count(":") == 1 else host


def host_allowed(name: str, allowed: tuple[str, ...]) -> bool:
    """Whether a host name is this machine (loopback) or one of ``allowed`` (``"*"``: any)."""
    return bool(name) and ("*" in allowed or name in allowed or is_loopback(name))


class HostGuard:
    """ASGI middleware for a server without an API key: a request whose ``Host`` is not loopback
    (or in ``allowed_hosts``) gets 400 (DNS rebinding: a page whose name now resolves to
    127.0.0.1 sends its own name), one with an ``Origin`` elsewhere gets 403 (a page on another
    site); both as OpenAI-style JSON errors."""

    def __init__(self, app, allowed_hosts: tuple[str, ...] = ()):
        self.app = app
        self.allowed = tuple(allowed_hosts)

    def refusal(self, headers: dict[str, str]) -> RequestError | None:
        host = headers.get("host", "")
        if not host_allowed(_host_name(host), self.allowed):
            shown = host[:60] or "none"
            return RequestError(f"Host {shown!r} is not served without an API key (only loopback "
                                "names are); set --api-key, or name it with --allowed-host",
                                status=400, code="host_not_allowed")
        origin = headers.get("origin")
        if origin is not None:
            try:
                name = (urlsplit(origin).hostname or "") if origin != "null" else ""
            except ValueError:
                name = ""
            if not host_allowed(name, self.allowed):
                return RequestError(f"requests from the web origin {origin[:60]!r} are refused without "
                                    "an API key; set --api-key, or name its host with --allowed-host",
                                    status=403, code="origin_not_allowed")
        return None

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
            error = self.refusal(headers)
            if error is not None:
                from starlette.responses import JSONResponse  # optional: serve

                await JSONResponse(error.body(), status_code=error.status)(scope, receive, send)
                return
        await self.app(scope, receive, send)
