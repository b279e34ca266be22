"""The errors of the trust-gate service: refused requests, a busy server, a missing extra."""

from __future__ import annotations

from ..errors import AcuteError, InputError

__all__ = ["MissingExtraError", "RequestError", "ServerBusyError", "require_serve_extra"]


class MissingExtraError(InputError):
    """FastAPI / uvicorn are not installed (the message gives the pip command)."""


class RequestError(InputError):
    """A request the service refuses: HTTP ``status``, the OpenAI error ``type``, the request
    field ``param`` it is about (``None`` for the body as a whole) and an optional ``code``."""

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
    """Raise :class:`MissingExtraError` unless FastAPI and uvicorn can be imported."""
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as e:
        raise MissingExtraError(f"acute serve needs FastAPI and uvicorn ({e.name} is missing): "
                                "pip install 'acute[serve]'") from None
