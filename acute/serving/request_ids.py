"""Request ids: every request gets one, every answer carries it (``X-Request-Id``), and every
log line about a request names it, so that a client's report of a failed request finds its line
in the server's log.

A client (or a proxy in front) may send its own ``X-Request-Id``: it is kept when it is 1 to 64
letters, digits, ``.``, ``_`` or ``-`` (nothing a log line could be forged with); otherwise, or
without one, the server makes one (32 hex digits).
"""

from __future__ import annotations

import re
import uuid

__all__ = ["HEADER", "RequestIds", "request_id"]

#: the header that carries a request's id, both ways
HEADER = "x-request-id"
_SCOPE_KEY = "acute.request_id"
_ACCEPTED = re.compile(r"[A-Za-z0-9._-]{1,64}")


def request_id(request) -> str:
    """The id of ``request`` (a Starlette request served behind :class:`RequestIds`), or ``"-"``."""
    return request.scope.get(_SCOPE_KEY, "-")


def _given_or_new(headers) -> str:
    for name, value in headers:
        if name.decode("latin-1").lower() == HEADER:
            given = value.decode("latin-1")
            if _ACCEPTED.fullmatch(given):
                return given
            break
    return uuid.uuid4().hex


class RequestIds:
    """ASGI middleware: gives each HTTP request its id (:func:`request_id`) and adds it to the
    answer's headers as ``X-Request-Id``."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = _given_or_new(scope.get("headers", ()))
        scope[_SCOPE_KEY] = rid

        async def send_with_id(message):
            if message["type"] == "http.response.start":
                headers = [h for h in message.get("headers", []) if h[0].lower() != HEADER.encode()]
                message = {**message, "headers": [*headers, (HEADER.encode(), rid.encode())]}
            await send(message)

        await self.app(scope, receive, send_with_id)
