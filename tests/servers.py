"""A test helper (imported by the serving tests): an app served by uvicorn in a thread."""

from __future__ import annotations

import contextlib
import threading
import time

TIMEOUT = 60.0  # seconds: every wait is bounded


@contextlib.contextmanager
def running(app, timeout: float = TIMEOUT):
    """Serve ``app`` with uvicorn on a free loopback port in a thread; yields the base URL."""
    import uvicorn

    from acute.serving import bind_socket

    sock = bind_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    if hasattr(config, "install_signal_handlers"):
        config.install_signal_handlers = False
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "server did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout)
        sock.close()
