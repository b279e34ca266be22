"""The errors of the trust-gate service: refused requests, a busy server, a missing extra."""

from __future__ import annotations

from typing import Sequence

from ..errors import AcuteError, InputError

__all__ = ["MissingExtraError", "RequestError", "ServerBusyError", "param_name", "require_serve_extra"]


class MissingExtraError(InputError):
    """FastAPI / uvicorn are not installed (the message gives the pip command)."""


class RequestError(InputError):
    """A request the service refuses: HTTP ``status``, the OpenAI error ``type``, the request
    field ``param`` it is about (``None`` for the body as a whole) and an optional ``code``.

    Raised only where the service parses a request (its body, fields, options, a feedback id,
    its prompt checked against the model) or refuses it as a whole (busy, stopping): it is what
    makes an error the client's. Any other error raised while answering, an ``InputError`` of
    the library included, is the server's (a 500)."""

    def __init__(self, message: str, param: str | None = None, status: int = 400,
                 type: str = "invalid_request_error", code: str | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.param, self.status, self.type, self.code = param, status, type, code
        self.headers = headers or {}

    def body(self) -> dict:
        """The OpenAI error body ``{"error": {message, type, param, code}}``."""
        return {"error": {"message": str(self), "type": self.type, "param": self.param,
                          "code": self.code}}


class ServerBusyError(AcuteError):
    """The request queue is full, or the server is shutting down."""


def require_serve_extra() -> None:
    """Raise :class:`MissingExtraError` unless FastAPI, uvicorn and prometheus_client (``/metrics``)
    can be imported."""
    try:
        import fastapi  # noqa: F401
        import prometheus_client  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as e:
        raise MissingExtraError(f"acute serve needs FastAPI, uvicorn and prometheus_client ({e.name} is "
                                "missing): pip install 'acute[serve]'") from None


def param_name(loc: Sequence) -> str | None:
    """The request field at a location: ``("messages", 0, "content")`` -> ``"messages[0].content"``,
    ``(1, "prompt")`` -> ``"[1].prompt"``; ``()`` -> ``None``. Names longer than 80 characters
    are cut (a client chooses unknown keys)."""
    name = ""
    for part in loc:
        name += f"[{part}]" if isinstance(part, int) else (f".{part}" if name else str(part))
    return (name if len(name) <= 80 else name[:80] + "...") or None
