"""The FastAPI app (:func:`create_app`): routes, request reading, waiting for results, errors."""

from __future__ import annotations

import asyncio
import functools
import hmac
import json
import logging
import time
import uuid
from typing import Any

from ..errors import AcuteError
from .batcher import Batcher
from .errors import RequestError, ServerBusyError, require_serve_extra
from .jobs import Job, JobResult, score_jobs
from .openai_bodies import chat_body, chat_chunks, estimator_name, models_body, score_body, sse_events
from .schemas import chat_job, score_job
from .settings import ServeSettings

__all__ = ["create_app"]

logger = logging.getLogger(__name__)

#: how often a waiting request checks whether its client went away
_DISCONNECT_POLL_S = 0.25


async def _read_json(request, max_bytes: int) -> Any:
    """The request body parsed as JSON; 413 beyond ``max_bytes``, 400 when it is not JSON."""
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
    if not body:
        raise RequestError("the request body is empty; send a JSON object")

    def no_constant(name):
        raise ValueError(f"{name} is not valid JSON")

    try:
        return json.loads(bytes(body), parse_constant=no_constant)
    except (ValueError, UnicodeDecodeError) as e:
        raise RequestError(f"the request body is not valid JSON: {e}") from None


def _authorize(request, api_key: str | None) -> None:
    if api_key is None:
        return
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    ok = scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), api_key.encode())
    if not ok:
        raise RequestError("missing or wrong API key: send 'Authorization: Bearer KEY'", status=401,
                           code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})


async def _results(request, batcher: Batcher, jobs: list[Job], retry_after_s: int) -> list[JobResult]:
    """Queue ``jobs`` and wait for them; cancels the waiting ones if the client goes away (the
    batch is never held up). Job errors become :class:`RequestError` (500 for unexpected ones)."""
    try:
        batcher.submit(jobs)
    except ServerBusyError as e:
        raise RequestError(str(e), status=503, type="server_error", code="server_overloaded",
                           headers={"Retry-After": str(retry_after_s)}) from None
    waiting = [asyncio.wrap_future(j.future) for j in jobs]
    pending = set(waiting)
    while pending:
        _, pending = await asyncio.wait(pending, timeout=_DISCONNECT_POLL_S)
        if pending and await request.is_disconnected():
            for f in waiting:
                f.cancel()  # a job the worker has not taken is dropped; a running one finishes
            raise _ClientGone()
    out = []
    for job, f in zip(jobs, waiting):
        error = f.exception()
        if isinstance(error, RequestError):
            raise error
        if isinstance(error, (AcuteError, ValueError)):
            raise RequestError(str(error), param=job.param) from None
        if error is not None:
            logger.error("scoring failed", exc_info=error)
            raise RequestError(f"internal error while scoring: {type(error).__name__}", status=500,
                               type="server_error")
        out.append(f.result())
    return out


class _ClientGone(Exception):
    """The client disconnected while its request waited."""


def _add_error_handlers(app) -> None:
    """Every error as OpenAI's ``{"error": {...}}`` body: ours and Starlette's 404 / 405."""
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException

    async def request_error(request, exc: RequestError):
        return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)

    async def http_error(request, exc: HTTPException):
        err = RequestError(str(exc.detail), status=exc.status_code,
                           code="not_found" if exc.status_code == 404 else None)
        return JSONResponse(err.body(), status_code=exc.status_code, headers=exc.headers)

    app.add_exception_handler(RequestError, request_error)
    app.add_exception_handler(HTTPException, http_error)


def create_app(scorer, settings: ServeSettings | None = None, **options):
    """The FastAPI app serving ``scorer`` (an :class:`acute.scoring.Scorer`).

    ``settings`` (or its fields as keyword arguments, e.g. ``max_batch=8``) configure batching,
    limits and the API key. ``app.state.batcher`` is the :class:`Batcher` (its ``stats`` count
    batches and their sizes), ``app.state.settings`` the settings. The batcher's worker starts
    with the app (or on the first request) and is drained when the app shuts down.
    """
    require_serve_extra()
    from contextlib import asynccontextmanager

    from fastapi import FastAPI
    from fastapi.responses import JSONResponse, Response, StreamingResponse

    settings = settings or ServeSettings(**options)
    estimator = estimator_name(scorer.probe)
    batcher = Batcher(functools.partial(score_jobs, scorer, batch_size=settings.max_batch),
                      max_batch=settings.max_batch, max_wait_s=settings.max_wait_ms / 1000.0,
                      max_queue=settings.max_queue)
    started = int(time.time())

    @asynccontextmanager
    async def lifespan(app):
        batcher.start()
        yield
        await asyncio.to_thread(batcher.close)  # in-flight and queued requests finish first

    app = FastAPI(title="acute trust gate", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.state.batcher, app.state.settings, app.state.scorer = batcher, settings, scorer
    _add_error_handlers(app)

    # Plain Starlette routes (the endpoint gets the request): bodies are parsed and validated
    # here, so that every error names its field in OpenAI's error format.
    async def healthz(request):
        return JSONResponse({"status": "ok", "model": settings.model_name, "queue": batcher.depth,
                             "running": batcher.running, "batches": batcher.stats.to_dict()})

    async def models(request):
        _authorize(request, settings.api_key)
        return JSONResponse(models_body(settings, scorer.probe, started))

    async def score(request):
        _authorize(request, settings.api_key)
        t0 = time.perf_counter()
        body = await _read_json(request, settings.max_request_bytes)
        single = not isinstance(body, list)
        items = [body] if single else body
        if not items or len(items) > settings.max_queue:
            raise RequestError(f"a list of requests must hold 1 to {settings.max_queue} of them, "
                               f"got {len(items)}")
        jobs = [score_job(obj, () if single else (i,)) for i, obj in enumerate(items)]
        try:
            results = await _results(request, batcher, jobs, settings.retry_after_s)
        except _ClientGone:
            return Response(status_code=499)
        ms = (time.perf_counter() - t0) * 1000.0
        out = [score_body(r, model=settings.model_name, estimator=estimator, latency_ms=ms) for r in results]
        return JSONResponse(out[0] if single else out)

    async def chat(request):
        _authorize(request, settings.api_key)
        job, req = chat_job(await _read_json(request, settings.max_request_bytes), settings)
        try:
            [result] = await _results(request, batcher, [job], settings.retry_after_s)
        except _ClientGone:
            return Response(status_code=499)
        meta = {"model": settings.model_name, "estimator": estimator,
                "id": f"chatcmpl-{uuid.uuid4().hex}", "created": int(time.time())}
        if not req.stream:
            return JSONResponse(chat_body(result, **meta))
        usage = bool(req.stream_options and req.stream_options.include_usage)
        events = sse_events(chat_chunks(result, include_usage=usage, **meta))
        return StreamingResponse(iter(events), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})

    app.add_route("/healthz", healthz, methods=["GET"])
    app.add_route("/v1/models", models, methods=["GET"])
    app.add_route("/v1/score", score, methods=["POST"])
    app.add_route("/v1/chat/completions", chat, methods=["POST"])
    return app
