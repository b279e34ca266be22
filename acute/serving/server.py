"""Running the app: the listening socket, the uvicorn server with the service's limits
(:func:`make_server`), and :func:`run_server` until SIGTERM / SIGINT.

uvicorn's own settings carry the limits it has: ``limit_concurrency`` (``--max-connections``:
more open connections or running requests get 503), ``timeout_keep_alive`` (an idle connection
is closed), ``h11_max_incomplete_event_size`` (:data:`MAX_HEADER_BYTES`: a larger request head
gets 400) and ``timeout_graceful_shutdown``. It has no read timeout for a request's head, so the
h11 protocol is extended with one (``--read-timeout``: a head that has not arrived that long after
the connection opened, or after its previous answer, gets 408 and the connection is closed); the
body's timeout is the app's (:func:`acute.serving.request_body.read_json`).
"""

from __future__ import annotations

import json
import logging
import signal
import socket
import threading

from ..errors import InputError
from .errors import RequestError, require_serve_extra

__all__ = ["MAX_HEADER_BYTES", "bind_socket", "make_server", "run_server"]

logger = logging.getLogger(__name__)

#: the largest request head (request line and headers) in bytes; uvicorn's own default
MAX_HEADER_BYTES = 16 * 1024
#: uvicorn cancels requests this long after the app's own grace period (which answers them with a
#: JSON 503 first), as a last resort
_SHUTDOWN_MARGIN_S = 2.0


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


def _timed_protocol(read_timeout_s: float):
    """uvicorn's h11 protocol, closing a connection whose request head does not arrive within
    ``read_timeout_s`` (a slowloris client, or one that connects and sends nothing)."""
    import h11  # optional: serve
    from uvicorn.protocols.http.h11_impl import H11Protocol  # optional: serve

    error = RequestError(f"the request head did not arrive within {read_timeout_s:g} s (--read-timeout)",
                         status=408, code="request_timeout")
    body = json.dumps(error.body()).encode()
    answer = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
              + f"content-length: {len(body)}\r\n\r\n".encode() + body)

    class TimedH11Protocol(H11Protocol):
        _head_timer = None

        def connection_made(self, transport):
            super().connection_made(transport)
            self._watch_head()

        def data_received(self, data):
            super().data_received(data)
            self._watch_head()

        def on_response_complete(self):
            super().on_response_complete()
            self._watch_head()

        def connection_lost(self, exc):
            self._stop_watching()
            super().connection_lost(exc)

        def _watch_head(self):
            """Time the head while one is awaited (no request yet in this cycle), from the moment
            it began to be awaited, whatever trickles in meanwhile."""
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                if self._head_timer is None:
                    self._head_timer = self.loop.call_later(read_timeout_s, self._head_timed_out)
            else:
                self._stop_watching()

        def _stop_watching(self):
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_timed_out(self):
            self._head_timer = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                logger.debug("closing a connection whose request head did not arrive in %g s", read_timeout_s)
                self.transport.write(answer)
                self.transport.close()

    return TimedH11Protocol


def make_server(app, *, log_level: str = "warning"):
    """A uvicorn server for ``app`` (from :func:`acute.serving.create_app`) with the limits of its
    ``app.state.settings``; run it with ``server.run(sockets=[sock])``. When told to stop (a
    signal, or ``server.should_exit = True``) it stops accepting, gives in-flight requests
    ``shutdown_timeout_s`` to finish, answers the rest with a JSON 503 and stops the worker
    between decoding steps (``app.state.begin_shutdown``)."""
    require_serve_extra()
    import uvicorn  # optional: serve

    settings = app.state.settings

    class GateServer(uvicorn.Server):
        async def shutdown(self, sockets=None):
            app.state.begin_shutdown()  # the grace period starts now, not after the connections close
            await super().shutdown(sockets=sockets)

    config = uvicorn.Config(app, log_level=log_level, access_log=False, lifespan="on",
                            http=_timed_protocol(settings.read_timeout_s), proxy_headers=False,
                            limit_concurrency=settings.max_connections,
                            timeout_keep_alive=settings.keep_alive_s,
                            h11_max_incomplete_event_size=MAX_HEADER_BYTES,
                            timeout_graceful_shutdown=settings.shutdown_timeout_s + _SHUTDOWN_MARGIN_S)
    return GateServer(config)


def _already_stopped(signum, frame) -> None:
    """uvicorn re-raises the signal that stopped it after its graceful shutdown: nothing left to do."""


def run_server(app, sock: socket.socket, *, log_level: str = "warning") -> None:
    """Serve ``app`` on ``sock`` (:func:`make_server`) until SIGTERM / SIGINT, then stop accepting,
    finish in-flight requests within the settings' ``shutdown_timeout_s`` (answering the rest with
    a JSON 503), drain the batcher and return."""
    server = make_server(app, log_level=log_level)
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
