"""Reading a request body: at most ``--max-request-bytes`` bytes within ``--read-timeout``
seconds, parsed as JSON nested at most :data:`MAX_JSON_DEPTH` levels, holding only encodable
text. Every failure is a :class:`RequestError` (4xx) or, for a client that left, :class:`ClientGone`."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from .errors import RequestError, param_name
from .user_text import check_text

__all__ = ["MAX_JSON_DEPTH", "ClientGone", "json_depth", "read_json"]

#: the deepest nesting of a request body (a chat request needs 5: messages, a message, its
#: content parts, a part, its text)
MAX_JSON_DEPTH = 32


class ClientGone(Exception):
    """The client disconnected before its request was answered."""


def json_depth(value: Any, limit: int) -> int:
    """How deep ``value`` nests (a scalar: 0), counted up to ``limit + 1`` (iteratively)."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, (dict, list)):
            deepest = max(deepest, d)
            if d > limit:
                return d
            stack.extend((item, d + 1) for item in (v.values() if isinstance(v, dict) else v))
    return deepest


async def _body(request, max_bytes: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise RequestError(f"the request body has {declared} bytes, more than the server's limit of "
                           f"{max_bytes} (--max-request-bytes)", status=413, code="request_too_large")
    body = bytearray()
    async for part in request.stream():
        body += part
        if len(body) > max_bytes:
            raise RequestError(f"the request body exceeds the server's limit of {max_bytes} bytes "
                               "(--max-request-bytes)", status=413, code="request_too_large")
    return bytes(body)


def _too_deep() -> RequestError:
    return RequestError(f"the request body nests deeper than {MAX_JSON_DEPTH} levels of lists and objects")


def _no_constant(name):
    raise ValueError(f"{name} is not valid JSON")


async def read_json(request, max_bytes: int, timeout_s: float) -> Any:
    """The request body parsed as JSON: 413 beyond ``max_bytes``, 408 when it has not arrived
    within ``timeout_s``, 400 when it is not JSON, nests deeper than :data:`MAX_JSON_DEPTH` or
    holds a string that is not text; :class:`ClientGone` when the client leaves mid-body."""
    from starlette.requests import ClientDisconnect  # optional: serve

    try:
        body = await asyncio.wait_for(_body(request, max_bytes), timeout_s)
    except asyncio.TimeoutError:
        raise RequestError(f"the request body did not arrive within {timeout_s:g} s (--read-timeout)",
                           status=408, code="request_timeout", headers={"Connection": "close"}) from None
    except ClientDisconnect:
        raise ClientGone() from None
    if not body:
        raise RequestError("the request body is empty; send a JSON object")
    try:
        value = json.loads(body, parse_constant=_no_constant)
    except RecursionError:  # nested past the parser's recursion limit
        raise _too_deep() from None
    except (ValueError, UnicodeDecodeError) as e:
        raise RequestError(f"the request body is not valid JSON: {str(e)[:200]}") from None
    if json_depth(value, MAX_JSON_DEPTH) > MAX_JSON_DEPTH:
        raise _too_deep()
    check_text(value, param_name)
    return value
