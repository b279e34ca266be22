"""Running the app: the listening socket and uvicorn (:func:`run_server`)."""

from __future__ import annotations

import signal
import socket
import threading

from ..errors import InputError
from .errors import require_serve_extra

__all__ = ["GRACEFUL_SHUTDOWN_S", "bind_socket", "run_server"]

#: how long a stopping server waits for in-flight requests before cancelling them
GRACEFUL_SHUTDOWN_S = 120.0


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (``port=0``: a free one); ``OSError`` (e.g. the
    port is taken) before any model is served."""
    if not 0 <= port <= 65535:
        raise InputError(f"--port must be in 0..65535, got {port}")
    family, kind, proto, _, address = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    return sock


def _already_stopped(signum, frame) -> None:
    """uvicorn re-raises the signal that stopped it after its graceful shutdown: nothing left to do."""


def run_server(app, sock: socket.socket, *, graceful_timeout_s: float = GRACEFUL_SHUTDOWN_S,
               log_level: str = "warning") -> None:
    """Serve ``app`` on ``sock`` with uvicorn until SIGTERM / SIGINT, then stop accepting, finish
    in-flight requests (at most ``graceful_timeout_s``), drain the batcher and return."""
    require_serve_extra()
    import uvicorn

    config = uvicorn.Config(app, log_level=log_level, access_log=False, lifespan="on",
                            timeout_graceful_shutdown=graceful_timeout_s)
    server = uvicorn.Server(config)
    main = threading.current_thread() is threading.main_thread()
    # uvicorn owns SIGTERM / SIGINT while it runs and re-raises the one it caught afterwards;
    # the handlers installed here only absorb that second delivery, so a stop exits cleanly.
    stops = (signal.SIGTERM, signal.SIGINT) if main else ()
    previous = {s: signal.signal(s, _already_stopped) for s in stops}
    try:
        server.run(sockets=[sock])
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        sock.close()
