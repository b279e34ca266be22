"""What the service serves with (:class:`ServeSettings`), the API key and the bind check."""

from __future__ import annotations

import dataclasses
import ipaddress
import os

from ..errors import InputError

__all__ = ["API_KEY_ENV", "ServeSettings", "check_bind", "resolve_api_key"]

#: environment variable holding the API key when ``--api-key`` is not given
API_KEY_ENV = "ACUTE_API_KEY"


@dataclasses.dataclass(frozen=True)
class ServeSettings:
    """What :func:`create_app` serves with; checked on construction (``InputError``).

    ``max_batch`` requests at most per batch, ``max_wait_ms`` the longest a batch waits for more
    requests after its first, ``max_queue`` the most requests waiting (more get 503),
    ``max_request_bytes`` the largest request body (more get 413), ``api_key`` the bearer key
    every ``/v1`` request must carry (``None``: none needed), ``default_risk`` the risk of a chat
    request without one, ``model_name`` the model id clients see and send.
    """

    model_name: str = "model"
    max_batch: int = 16
    max_wait_ms: float = 10.0
    max_queue: int = 256
    max_request_bytes: int = 1_000_000
    api_key: str | None = None
    default_risk: float = 0.5
    retry_after_s: int = 1

    def __post_init__(self):
        for name in ("max_batch", "max_queue", "max_request_bytes", "retry_after_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"{name} must be an integer >= 1, got {value!r}")
        if not 0 <= float(self.max_wait_ms) <= 60_000:
            raise InputError(f"max_wait_ms must be in [0, 60000], got {self.max_wait_ms!r}")
        if not 0.0 < float(self.default_risk) < 1.0:
            raise InputError(f"default risk must be in (0, 1), got {self.default_risk!r}")
        if self.api_key is not None and not self.api_key.strip():
            raise InputError("the API key is empty; give a non-empty key or none")
        if not self.model_name:
            raise InputError("model_name must be a non-empty string")


def resolve_api_key(given: str | None) -> str | None:
    """The API key: ``given`` (``--api-key``), else ``$ACUTE_API_KEY``, else ``None``."""
    key = given if given is not None else os.environ.get(API_KEY_ENV)
    return key or None


def _is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, api_key: str | None, allow_remote: bool) -> None:
    """Refuse (``InputError``) to serve a non-loopback host without an API key unless
    ``allow_remote``: anyone who can reach the port could otherwise use the model."""
    if not _is_loopback(host) and api_key is None and not allow_remote:
        raise InputError(f"refusing to listen on non-loopback host {host!r} without an API key: set "
                         f"--api-key or ${API_KEY_ENV}, or pass --allow-remote to serve without one")
