"""What the service serves with (:class:`ServeSettings`), the API key and the bind check."""

from __future__ import annotations

import dataclasses
import ipaddress
import os

from ..errors import InputError
from ..scoring.gate import Gate, check_certified
from ..validation import check_level

__all__ = ["API_KEY_ENV", "DEFAULT_MAX_ERROR_NAME", "NEW_TOKENS_LIMIT_FACTOR", "ServeSettings", "check_bind",
           "is_loopback", "resolve_api_key", "resolve_settings"]

#: environment variable holding the API key when ``--api-key`` is not given
API_KEY_ENV = "ACUTE_API_KEY"
#: without ``--max-new-tokens-limit`` a request may ask for this many times the new tokens the
#: probe was trained with (the scorer's default ``max_new_tokens``), no more
NEW_TOKENS_LIMIT_FACTOR = 4
#: how errors name the certificate of the server's default gate (``acute serve --max-error``)
DEFAULT_MAX_ERROR_NAME = "default max_error (--max-error)"


@dataclasses.dataclass(frozen=True)
class ServeSettings:
    """What :func:`create_app` serves with; checked on construction (``InputError``).

    ``max_batch`` requests at most per batch (and items in a ``/v1/score`` list), ``max_wait_ms``
    the longest a batch waits for more requests after its first, ``max_queue`` the most requests
    waiting (more get 503), ``max_request_bytes`` the largest request body (more get 413),
    ``max_new_tokens_limit`` the most new tokens a request may ask for (``None``:
    :data:`NEW_TOKENS_LIMIT_FACTOR` times the scorer's default), ``api_key`` the bearer key every
    ``/v1`` request must carry (``None``: none needed, and then only loopback ``Host`` values,
    or those in ``allowed_hosts``, are served), ``model_name`` the model id clients see and send.

    ``default_gate``: the server's :class:`~acute.scoring.gate.Gate`, parsed once for the served
    probe by whoever builds the settings (``acute serve`` from ``--risk``, ``--max-error`` and
    ``--stop-early``; in Python :func:`acute.scoring.gate.parse_gate`, e.g.
    ``parse_gate(probe, max_error=0.1, stop_early=0.05)``). Its rule decides a chat request
    that names neither ``risk`` nor ``max_error``; its ``stop`` rule (when set) stops every
    generated answer early (:mod:`acute.scoring.stop_early`; transformers only). It holds no
    precheck: a request names its own. Default ``Gate()``: the risk rule at
    :data:`~acute.scoring.risk.DEFAULT_RISK`, never stopped.

    Connections (uvicorn's settings where it has one, see :func:`acute.serving.server.make_server`):
    ``max_connections`` open connections or running requests before new requests get 503,
    ``read_timeout_s`` the longest a request's head may take to arrive (from the connection's
    opening or its previous answer) and then its body, ``keep_alive_s`` how long an idle
    connection stays open, ``shutdown_timeout_s`` how long a stopping server lets in-flight
    requests finish before it answers them with a 503 error. ``allow_control_tokens``: text in
    request fields may become the tokenizer's special (control) tokens, as in a plain
    ``tokenizer(text)`` call; by default it is tokenized as text (:mod:`acute.serving.user_text`).
    ``concurrent_batches``: batches scored at once (1: one at a time, as a transformers model
    runs; more only with an engine that batches continuously, vLLM, :mod:`acute.serving.threads`).

    Monitoring (``GET /metrics``, :mod:`acute.serving.monitoring`): ``drift_window`` the live
    confidences the drift signal compares with the probe's calibration confidences (the last
    that many answers; none is reported until it is full), ``drift_threshold`` the KS distance
    above which the drift is logged as a warning (once per crossing).

    Recording (:mod:`acute.serving.recording`): ``record_to`` a store folder every served answer
    is written to (``None``: none; opt-in), committed in shards of ``record_shard_size`` answers
    or once the oldest uncommitted one is ``record_flush_s`` seconds old, and on shutdown.
    """

    model_name: str = "model"
    max_batch: int = 16
    max_wait_ms: float = 10.0
    max_queue: int = 256
    max_request_bytes: int = 1_000_000
    max_new_tokens_limit: int | None = None
    api_key: str | None = None
    allowed_hosts: tuple[str, ...] = ()
    default_gate: Gate = dataclasses.field(default_factory=Gate)
    retry_after_s: int = 1
    max_connections: int = 512
    read_timeout_s: float = 10.0
    keep_alive_s: float = 5.0
    shutdown_timeout_s: float = 30.0
    allow_control_tokens: bool = False
    concurrent_batches: int = 1
    drift_window: int = 500
    drift_threshold: float = 0.2
    record_to: str | None = None
    record_shard_size: int = 64
    record_flush_s: float = 60.0

    def __post_init__(self):
        for name in ("max_batch", "max_queue", "max_request_bytes", "retry_after_s", "max_connections",
                     "drift_window", "record_shard_size", "concurrent_batches"):
            _check_count(name, getattr(self, name))
        if self.max_new_tokens_limit is not None:
            _check_count("max_new_tokens_limit", self.max_new_tokens_limit)
        if not 0 <= float(self.max_wait_ms) <= 60_000:
            raise InputError(f"max_wait_ms must be in [0, 60000], got {self.max_wait_ms!r}")
        for name in ("read_timeout_s", "keep_alive_s"):
            if not 0 < float(getattr(self, name)) <= 3600:
                raise InputError(f"{name} must be in (0, 3600] seconds, got {getattr(self, name)!r}")
        object.__setattr__(self, "drift_threshold", check_level(
            self.drift_threshold, "drift_threshold", "the KS distance of live from calibration confidences "
            "that is logged as drift"))
        if not 0 < float(self.record_flush_s) <= 86400:
            raise InputError(f"record_flush_s must be in (0, 86400] seconds, got {self.record_flush_s!r}")
        if self.record_to is not None:
            if not isinstance(self.record_to, (str, os.PathLike)) or not str(self.record_to).strip():
                raise InputError(f"record_to must be a store folder, got {self.record_to!r}")
            object.__setattr__(self, "record_to", str(self.record_to))
        if not 0 <= float(self.shutdown_timeout_s) <= 3600:
            raise InputError(f"shutdown_timeout_s must be in [0, 3600] seconds, got {self.shutdown_timeout_s!r}")
        if not isinstance(self.default_gate, Gate):
            raise InputError(f"default_gate must be an acute.scoring.gate.Gate (parse_gate makes one), got "
                             f"{type(self.default_gate).__name__}")
        if self.default_gate.precheck is not None:
            raise InputError("default_gate has a precheck; the server's gate holds none (a request names "
                             "its own precheck)")
        if self.api_key is not None and not self.api_key.strip():
            raise InputError("the API key is empty; give a non-empty key or none")
        if not self.model_name:
            raise InputError("model_name must be a non-empty string")
        if isinstance(self.allowed_hosts, str) or not all(isinstance(h, str) and h.strip()
                                                          for h in self.allowed_hosts):
            raise InputError(f"allowed_hosts must be a list of host names, got {self.allowed_hosts!r}")
        object.__setattr__(self, "allowed_hosts", tuple(h.strip().lower() for h in self.allowed_hosts))


def resolve_settings(settings: ServeSettings, probe, max_new_tokens: int) -> ServeSettings:
    """``settings`` for serving ``probe`` with ``max_new_tokens`` new tokens by default: the
    new-token limit filled in (:data:`NEW_TOKENS_LIMIT_FACTOR` times it) where it is not set;
    ``InputError`` when a set limit is below ``max_new_tokens``, or when the default gate
    decides by a certificate ``probe`` refuses (scored outside its validity domain: a gate
    parsed before the model loaded, :func:`acute.scoring.gate.check_certified`)."""
    check_certified([settings.default_gate], probe, DEFAULT_MAX_ERROR_NAME)
    limit = settings.max_new_tokens_limit
    if limit is None:
        return dataclasses.replace(settings, max_new_tokens_limit=NEW_TOKENS_LIMIT_FACTOR * max_new_tokens)
    if limit < max_new_tokens:
        raise InputError(f"max_new_tokens_limit ({limit}, --max-new-tokens-limit) is below the "
                         f"{max_new_tokens} new tokens requests get by default (--max-new-tokens)")
    return settings


def _check_count(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"{name} must be an integer >= 1, got {value!r}")


def resolve_api_key(given: str | None) -> str | None:
    """The API key: ``given`` (``--api-key``), else ``$ACUTE_API_KEY``, else ``None``."""
    key = given if given is not None else os.environ.get(API_KEY_ENV)
    return key or None


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or address, IPv6 with or without brackets) is this machine:
    ``localhost`` or a loopback address."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, api_key: str | None, allow_remote: bool) -> None:
    """Refuse (``InputError``) to serve a non-loopback host without an API key unless
    ``allow_remote``: anyone who can reach the port could otherwise use the model."""
    if not is_loopback(host) and api_key is None and not allow_remote:
        raise InputError(f"refusing to listen on non-loopback host {host!r} without an API key: set "
                         f"--api-key or ${API_KEY_ENV}, or pass --allow-remote to serve without one")
