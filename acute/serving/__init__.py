"""The trust-gate service behind ``acute serve``: live scoring over HTTP.

Endpoints (built by :func:`create_app` around one :class:`acute.scoring.scorer.Scorer`):

* ``POST /v1/score``: ``{"prompt" | "messages", "risk" | "max_error", "max_new_tokens"?}`` -> the
  answer, its raw and probe confidence and the decision at that risk, or by the threshold the
  probe certified at that max_error, naming its rule and threshold; a JSON list of requests is
  scored together and answered as a list.
* ``POST /v1/chat/completions``: OpenAI-compatible (greedy decoding only), streaming or not, with
  an ``acute`` object (confidence, raw confidence, decision, its rule and threshold) on each choice.
* ``GET /v1/models``, ``GET /healthz``.
* ``GET /metrics``: Prometheus' text format (:mod:`.monitoring`), with the label-free drift signal.
* ``POST /v1/feedback``: ``{"id", "correct"}`` labels an answer recorded with ``record_to``
  (``acute serve --record-to STORE``, :mod:`.recording`).

Concurrent requests are grouped by a :class:`~acute.serving.batcher.Batcher` (up to ``max_batch`` requests, waiting at
most ``max_wait_ms`` for more) and generated together by its one worker thread: the scorer (model,
recorder hooks, tokenizer) is used from that thread only. Requests of one batch with different
generation settings (``max_new_tokens``, stop strings) are generated in separate groups, so every
result equals scoring that request alone (:func:`~acute.serving.jobs.score_jobs`).

Modules, one concept each: :mod:`.errors`, :mod:`.settings`, :mod:`.jobs` (scoring a batch,
one job's failure its own), :mod:`.batcher`, :mod:`.user_text` (request text stays text),
:mod:`.request_body` (reading and parsing a body), :mod:`.request_ids` (every request's id, in
its answer and its log lines), :mod:`.schemas` (validating a body),
:mod:`.security` (API key, Host, Origin, Content-Type), :mod:`.openai_bodies` (response bodies),
:mod:`.monitoring` (``/metrics``), :mod:`.recording` (served answers to a store, feedback),
:mod:`.app` (the routes) and :mod:`.server` (the socket and uvicorn's limits).

FastAPI, pydantic, uvicorn and prometheus_client are imported inside functions: ``import acute.serving`` works
without the ``serve`` extra, and :func:`require_serve_extra` says what to install.
"""

from __future__ import annotations

from .app import create_app
from .errors import require_serve_extra
from .server import bind_socket, make_server, run_server
from .settings import API_KEY_ENV, ServeSettings

__all__ = [
    "API_KEY_ENV",
    "ServeSettings",
    "bind_socket",
    "create_app",
    "make_server",
    "require_serve_extra",
    "run_server",
]
