"""The FastAPI app (:func:`create_app`): routes, waiting for results, errors, shutdown."""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
import uuid
from contextlib import asynccontextmanager

from ..errors import EngineError, InputError
from ..scoring.sources import SourceError
from .batcher import Batcher
from .errors import RequestError, ServerBusyError, require_serve_extra
from .jobs import Job, JobCancelled, JobResult, group_key, score_jobs
from .monitoring import RequestMetrics, ServiceMetrics
from .openai_bodies import chat_body, chat_chunks, estimator_name, models_body, score_body, sse_events
from .recording import AnswerRecorder, feedback_fields
from .request_body import ClientGone, read_json
from .request_ids import RequestIds, request_id
from .schemas import chat_job, score_job
from .security import HostGuard, authorize, check_json_content_type
from .settings import ServeSettings, resolve_settings
from .threads import concurrent_scorer

__all__ = ["ROUTES", "create_app"]

logger = logging.getLogger(__name__)

#: the routes of the service (what ``/metrics`` counts answers by)
ROUTES = ("/healthz", "/metrics", "/v1/models", "/v1/score", "/v1/chat/completions", "/v1/feedback")


class _FailureLog:
    """Logs an unexpected error as one line naming the request id, with its traceback the first
    time its type occurs only, so that a client repeating a failing request cannot flood the log."""

    def __init__(self):
        self._seen: set[type] = set()
        self._lock = threading.Lock()

    def __call__(self, error: BaseException, rid: str) -> None:
        with self._lock:
            first = type(error) not in self._seen
            self._seen.add(type(error))
        logger.error("request %s failed: %s: %s%s", rid, type(error).__name__, str(error)[:200],
                     "" if first else " (traceback logged before)", exc_info=error if first else None)


def _request_error(error: BaseException, retry_after_s: int, log: _FailureLog, rid: str) -> RequestError:
    """The HTTP error an exception raised for request ``rid`` becomes. The origin was decided
    where the request was parsed: parsing raises :class:`RequestError` (a 4xx naming the field),
    so that is the only client's fault. A busy or stopping server is a 503; anything else, an
    ``InputError`` raised inside scoring, the store or the probe included, is the server's:
    logged as one line naming the request id, and a 502 when the inference engine failed the
    request, else a 500, whose message gives the id."""
    if isinstance(error, RequestError):
        return error
    if isinstance(error, SourceError):  # the request's answer lacks a source the probe reads: that request's 400
        return RequestError(str(error))
    if isinstance(error, ServerBusyError):
        return RequestError(str(error), status=503, type="server_error", code="server_overloaded",
                            headers={"Retry-After": str(retry_after_s)})
    log(error, rid)
    if isinstance(error, EngineError):  # vLLM failed this request (gone, refused, no states): 502
        return RequestError(f"the inference engine failed this request (request id {rid}): "
                            f"{str(error).splitlines()[0][:300]}", status=502, type="server_error",
                            code="engine_error")
    return RequestError(f"internal error: {type(error).__name__} (request id {rid}, named in the "
                        f"server's log)", status=500, type="server_error")


async def _client_left(request) -> None:
    """Return when the client disconnects: after its body was read, the next ASGI message of the
    request is ``http.disconnect`` (what Starlette's streaming responses listen for)."""
    while (await request.receive())["type"] != "http.disconnect":
        await asyncio.sleep(0.05)  # a stray message (none is expected): never a busy loop


async def _results(request, batcher: Batcher, jobs: list[Job], retry_after_s: int,
                   log: _FailureLog) -> list[JobResult]:
    """Queue ``jobs`` and wait for them. If the client goes away, or the handler is cancelled
    (uvicorn past its shutdown timeout), the jobs are abandoned at once: dropped if waiting,
    stopped between decoding steps if running. Job errors become :class:`RequestError`."""
    for job in jobs:
        job.request_id = request_id(request)
    try:
        batcher.submit(jobs)
    except ServerBusyError as e:
        raise _request_error(e, retry_after_s, log, request_id(request)) from None
    waiting = [asyncio.wrap_future(j.future) for j in jobs]
    left = asyncio.ensure_future(_client_left(request))
    pending = set(waiting)
    try:
        while pending:
            done, _ = await asyncio.wait({left, *pending}, return_when=asyncio.FIRST_COMPLETED)
            pending -= done
            if left in done and pending:
                raise ClientGone()
    except (ClientGone, asyncio.CancelledError):
        for job, f in zip(jobs, waiting):
            job.cancel()
            f.cancel()  # its outcome, arriving later, is then dropped (not an unretrieved exception)
        raise
    finally:
        left.cancel()
        if left.done() and not left.cancelled():
            left.exception()  # retrieved: a receive that failed means the client is gone anyway
    # every outcome is looked at (an exception left unretrieved would be logged by asyncio)
    errors = [JobCancelled("the request was cancelled") if f.cancelled() else f.exception() for f in waiting]
    for job, error in zip(jobs, errors):
        if error is not None:
            raise _request_error(error, retry_after_s, log, request_id(request)) from None
    return [f.result() for f in waiting]


def _add_error_handlers(app) -> None:
    """Every error as OpenAI's ``{"error": {...}}`` body: ours and Starlette's 404 / 405."""
    from fastapi.responses import JSONResponse  # optional: fastapi
    from starlette.exceptions import HTTPException  # optional: fastapi

    async def request_error(request, exc: RequestError):
        return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)

    async def http_error(request, exc: HTTPException):
        err = RequestError(str(exc.detail), status=exc.status_code,
                           code="not_found" if exc.status_code == 404 else None)
        return JSONResponse(err.body(), status_code=exc.status_code, headers=exc.headers)

    app.add_exception_handler(RequestError, request_error)
    app.add_exception_handler(HTTPException, http_error)


def _close_in_background(batcher: Batcher, timeout_s: float) -> None:
    """Start closing the batcher (see :meth:`Batcher.close`) without waiting for it."""
    threading.Thread(target=batcher.close, args=(timeout_s,), name="acute-batcher-close", daemon=True).start()


async def _flush_periodically(recorder, every_s: float) -> None:
    """Commit the recorder's buffered answers once the oldest is ``recorder.flush_s`` old."""
    while True:
        await asyncio.sleep(every_s)
        try:
            await asyncio.to_thread(recorder.flush_if_due)
        except Exception:  # noqa: BLE001 - logged; the next try may succeed (disk space freed)
            logger.exception("committing the recorded answers to %s failed", recorder.path)


def _open_recorder(scorer, settings: ServeSettings) -> AnswerRecorder | None:
    """The :class:`~acute.serving.recording.AnswerRecorder` of ``settings.record_to`` (None without)."""
    if settings.record_to is None:
        return None
    return AnswerRecorder(settings.record_to, scorer, shard_size=settings.record_shard_size,
                          flush_s=settings.record_flush_s)


class _Service:
    """What the routes of one app share: the scorer, its settings, the batcher, the metrics, the
    recorder and the failure log, and the steps every route takes (reading a body, waiting for
    jobs, counting and recording answers, turning errors into answers)."""

    def __init__(self, scorer, settings: ServeSettings):
        self.settings = settings = resolve_settings(settings, scorer.probe, scorer.generation.max_new_tokens)
        self.estimator = estimator_name(scorer.probe)
        self.precheck_probe = getattr(scorer, "precheck_probe", None)
        self.log = _FailureLog()
        self.scorer = scorer = concurrent_scorer(scorer, settings.concurrent_batches)  # its tokenizer locked for several
        self.batcher = Batcher(functools.partial(score_jobs, scorer, batch_size=settings.max_batch,
                                                 protect_text=not settings.allow_control_tokens),
                               max_batch=settings.max_batch, max_wait_s=settings.max_wait_ms / 1000.0,
                               max_queue=settings.max_queue, key=functools.partial(group_key, scorer),
                               workers=settings.concurrent_batches)
        self.started = int(time.time())
        self.metrics = ServiceMetrics(self.batcher, getattr(scorer.probe, "confidence_reference", None),
                                      window=settings.drift_window, threshold=settings.drift_threshold)
        if not self.metrics.window.available:
            logger.info("no drift signal: the probe keeps no calibration confidences (exported before acute "
                        "kept them, or a named probe without a certificate); re-export it to have one")
        self.recorder = _open_recorder(scorer, settings)

    @asynccontextmanager
    async def lifespan(self, app):
        """The batcher's worker (and the recorder's periodic commit) while the app runs; on shutdown
        the batcher drained within ``shutdown_timeout_s`` and the recorder closed."""
        self.batcher.start()
        recorder = self.recorder
        flusher = (None if recorder is None else
                   asyncio.ensure_future(_flush_periodically(recorder, min(1.0, recorder.flush_s))))
        try:
            yield
        finally:
            # in-flight and queued requests finish first
            await asyncio.to_thread(self.batcher.close, self.settings.shutdown_timeout_s)
            if flusher is not None:
                flusher.cancel()
            if recorder is not None:
                await asyncio.to_thread(recorder.close)  # the buffered answers committed

    async def body_of(self, request):
        """The request's JSON body, once its API key and content type are checked."""
        authorize(request, self.settings.api_key)
        check_json_content_type(request)
        return await read_json(request, self.settings.max_request_bytes, self.settings.read_timeout_s)

    async def wait_for(self, request, jobs: list[Job]) -> list[JobResult]:
        """Queue ``jobs`` and wait for their results (:func:`_results`)."""
        return await _results(request, self.batcher, jobs, self.settings.retry_after_s, self.log)

    async def served(self, request, jobs, results, endpoint: str) -> None:
        """Count the scored answers and, with --record-to, record them before they are sent (so
        feedback can name them at once); an answer that cannot be recorded is still served,
        the failure logged and counted."""
        self.metrics.scored(jobs, results)
        if self.recorder is None:
            return
        try:
            self.metrics.recorded.inc(await asyncio.to_thread(
                self.recorder.record, [(j.response_id, j, r, endpoint) for j, r in zip(jobs, results)]))
        except Exception as e:  # noqa: BLE001 - the answer is served all the same
            self.metrics.record_errors.inc(len(jobs))
            self.log(e, request_id(request))

    def answered(self, endpoint):
        """``endpoint`` whose errors become the request's own answer: a :class:`RequestError`
        raised while parsing the request as it is, anything else a 500 (502 for the engine) logged
        with its request id (:func:`_request_error`), so that the server keeps serving."""
        @functools.wraps(endpoint)
        async def run(request):
            try:
                return await endpoint(request)
            except RequestError:
                raise  # answered by the error handler
            except Exception as e:  # noqa: BLE001 - the server's fault: that request's 500
                raise _request_error(e, self.settings.retry_after_s, self.log, request_id(request)) from None
        return run


def _add_middleware(app, service: _Service) -> None:
    """The host guard (without an API key), the request metrics and the request ids."""
    if service.settings.api_key is None:
        app.add_middleware(HostGuard, allowed_hosts=service.settings.allowed_hosts)
    app.add_middleware(RequestMetrics, metrics=service.metrics, endpoints=ROUTES)  # every answer counted
    app.add_middleware(RequestIds)  # the outermost: every answer, refusals included, carries its id


def _add_service_routes(app, service: _Service) -> None:
    """``GET /metrics``, ``POST /v1/feedback``, ``GET /healthz`` and ``GET /v1/models``."""
    from fastapi.responses import JSONResponse, Response  # optional: fastapi

    settings, batcher, metrics = service.settings, service.batcher, service.metrics

    async def healthz(request):
        return JSONResponse({"status": "ok", "model": settings.model_name, "queue": batcher.depth,
                             "running": batcher.running, "batches": batcher.stats.to_dict()})

    async def models(request):
        authorize(request, settings.api_key)
        return JSONResponse(models_body(settings, service.scorer.probe, service.started, service.precheck_probe))

    async def metrics_text(request):
        authorize(request, settings.api_key)
        text, content_type = metrics.text()
        return Response(text, headers={"Content-Type": content_type})

    async def feedback(request):
        body = await service.body_of(request)
        if service.recorder is None:
            raise RequestError("this server records no answers, so it takes no feedback: start it with "
                               "--record-to STORE", status=404, code="not_found")
        rid, correct = feedback_fields(body)
        await asyncio.to_thread(service.recorder.label, rid, correct)
        metrics.feedback.labels(correct=str(correct).lower()).inc()
        return JSONResponse({"object": "feedback", "id": rid, "correct": correct})

    app.add_route("/metrics", service.answered(metrics_text), methods=["GET"])
    app.add_route("/v1/feedback", service.answered(feedback), methods=["POST"])
    app.add_route("/healthz", service.answered(healthz), methods=["GET"])
    app.add_route("/v1/models", service.answered(models), methods=["GET"])


def _add_scoring_routes(app, service: _Service) -> None:
    """``POST /v1/score`` and ``POST /v1/chat/completions``. Plain Starlette routes (the endpoint
    gets the request): bodies are parsed and validated here, so that every error names its field
    in OpenAI's error format."""
    from fastapi.responses import JSONResponse, Response, StreamingResponse  # optional: fastapi

    settings, scorer, precheck_probe = service.settings, service.scorer, service.precheck_probe

    async def score(request):
        t0 = time.perf_counter()
        try:
            body = await service.body_of(request)
            single = not isinstance(body, list)
            items = [body] if single else body
            if not items or len(items) > settings.max_batch:
                raise RequestError(f"a list of requests must hold 1 to {settings.max_batch} of them "
                                   f"(--max-batch), got {len(items)}")
            jobs = [score_job(obj, () if single else (i,), settings.max_new_tokens_limit, scorer.probe,
                              precheck_probe, stop=settings.default_gate.stop) for i, obj in enumerate(items)]
            for job in jobs:
                job.response_id = f"score-{uuid.uuid4().hex}"
            results = await service.wait_for(request, jobs)
        except ClientGone:
            return Response(status_code=499)
        await service.served(request, jobs, results, "/v1/score")
        ms = (time.perf_counter() - t0) * 1000.0
        out = [{"id": j.response_id, **score_body(r, model=settings.model_name, estimator=service.estimator,
                                                   latency_ms=ms)}
               for j, r in zip(jobs, results)]
        return JSONResponse(out[0] if single else out)

    async def chat(request):
        try:
            job, req = chat_job(await service.body_of(request), settings, scorer.probe, precheck_probe)
            job.response_id = f"chatcmpl-{uuid.uuid4().hex}"
            [result] = await service.wait_for(request, [job])
        except ClientGone:
            return Response(status_code=499)
        await service.served(request, [job], [result], "/v1/chat/completions")
        meta = {"model": settings.model_name, "estimator": service.estimator,
                "id": job.response_id, "created": int(time.time()), "offered_tools": bool(req.tools)}
        if not req.stream:
            return JSONResponse(chat_body(result, **meta))
        usage = bool(req.stream_options and req.stream_options.include_usage)
        events = sse_events(chat_chunks(result, include_usage=usage, **meta))
        return StreamingResponse(iter(events), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})

    app.add_route("/v1/score", service.answered(score), methods=["POST"])
    app.add_route("/v1/chat/completions", service.answered(chat), methods=["POST"])


def create_app(scorer, settings: ServeSettings | None = None, **options):
    """The FastAPI app serving ``scorer`` (an :class:`acute.scoring.scorer.Scorer`).

    ``settings`` (or its fields as keyword arguments, e.g. ``max_batch=8``) configure batching,
    limits and the API key. ``app.state.batcher`` is the :class:`Batcher` (its ``stats`` count
    batches and their sizes), ``app.state.settings`` the settings (with the new-token limit
    resolved), ``app.state.begin_shutdown()`` starts the graceful stop
    (:func:`acute.serving.server.make_server` calls it when the server is told to stop). The
    batcher's worker starts with the app (or on the first request) and is drained when the app
    shuts down, within ``settings.shutdown_timeout_s``. ``app.state.metrics`` is the
    :class:`~acute.serving.monitoring.ServiceMetrics` ``GET /metrics`` shows;
    ``app.state.recorder`` the :class:`~acute.serving.recording.AnswerRecorder` writing served
    answers to ``settings.record_to`` (None without), opened here (a store it cannot resume is
    refused now) and closed, its buffered answers committed, when the app shuts down.
    """
    require_serve_extra()
    from fastapi import FastAPI  # optional: fastapi

    if settings is not None and options:
        raise InputError("give settings or its fields as keyword arguments, not both")
    service = _Service(scorer, settings or ServeSettings(**options))
    app = FastAPI(title="acute trust gate", lifespan=service.lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.state.batcher, app.state.settings, app.state.scorer = service.batcher, service.settings, service.scorer
    app.state.metrics, app.state.recorder = service.metrics, service.recorder
    app.state.begin_shutdown = functools.partial(_close_in_background, service.batcher,
                                                 service.settings.shutdown_timeout_s)
    _add_error_handlers(app)
    _add_middleware(app, service)
    _add_service_routes(app, service)
    _add_scoring_routes(app, service)
    return app
