"""What ``GET /metrics`` shows: :class:`ServiceMetrics` (Prometheus collectors in a registry of the
app's own, so two apps in one process never share or clash), :class:`RequestMetrics` (the ASGI
middleware counting every answer) and :class:`DriftWindow` (the label-free drift signal).

Metrics (the text format of ``prometheus_client``; counters end in ``_total``):

=====================================  =================================================================
``acute_requests_total``               answers by ``endpoint`` (the route; ``other`` for any other
                                       path) and ``status``
``acute_request_errors_total``         the same, for statuses >= 400 only
``acute_request_duration_seconds``     histogram of the time from request to answer, by ``endpoint``
``acute_decisions_total``              scored answers by ``rule`` (``risk``, ``certificate``) and
                                       ``decision`` (``trust``, ``abstain``; a precheck refusal is an
                                       ``abstain``)
``acute_prechecks_total``              prechecked prompts by ``outcome``: ``pass`` (generated) or
                                       ``refuse`` (abstained without generating)
``acute_queue_wait_seconds``           histogram: from a request's arrival in the queue to its batch's start
``acute_generation_seconds``           histogram: its batch's generation (or, for a given response, recording)
``acute_scoring_seconds``              histogram: its batch's probe scoring
``acute_prompt_tokens_total``          prompt tokens of the scored requests
``acute_generated_tokens_total``       tokens generated
``acute_confidence``                   histogram of the probe's confidence (buckets of 0.05)
``acute_confidence_drift``             the KS distance of the last ``drift_window`` confidences from the
                                       probe's calibration confidences (:mod:`acute.metrics.drift`);
                                       NaN until the window is full, or when the probe keeps no reference
``acute_confidence_drift_threshold``   the setting above which the drift is logged
``acute_confidence_drift_available``   1 when the probe keeps a reference, else 0
``acute_queue_depth``, ``acute_running``  requests waiting and being scored now
``acute_recorded_answers_total``       answers written to the ``--record-to`` store
``acute_record_errors_total``          served answers that could not be recorded (the log says why)
``acute_feedback_total``               labels attached by ``POST /v1/feedback``, by ``correct``
=====================================  =================================================================

The drift is logged (a warning naming the distance, the threshold, the window and the
reference) when it rises above ``drift_threshold``, once per crossing, and again (info) when it
falls back to it or below.
"""

from __future__ import annotations

import collections
import logging
import math
import threading
import time
from typing import Any, Iterable, Sequence

from .errors import MissingExtraError

__all__ = ["CONFIDENCE_BUCKETS", "LATENCY_BUCKETS", "DriftWindow", "RequestMetrics", "ServiceMetrics",
           "require_prometheus"]

logger = logging.getLogger(__name__)

#: seconds: the buckets of every latency histogram (a tiny model's 5 ms to a long generation's minutes)
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
#: the confidence histogram's buckets: 0.05, 0.10, ..., 1.0
CONFIDENCE_BUCKETS = tuple(round(0.05 * i, 2) for i in range(1, 21))


def require_prometheus() -> None:
    """Raise :class:`MissingExtraError` unless ``prometheus_client`` can be imported."""
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        raise MissingExtraError("acute serve's /metrics needs prometheus_client: pip install 'acute[serve]'") from None


class DriftWindow:
    """The last ``window`` live confidences against the probe's ``reference``
    (:func:`acute.metrics.drift.confidence_reference`; None: the probe keeps none, and the
    signal is unavailable). :meth:`add` returns the KS distance once the window is full (None
    before) and logs each crossing of ``threshold`` (module doc). Thread-safe."""

    def __init__(self, reference: dict | None, window: int, threshold: float):
        self.reference, self.window, self.threshold = reference, int(window), float(threshold)
        self._values: collections.deque = collections.deque(maxlen=self.window)
        self._above = False
        self._lock = threading.Lock()
        self.statistic: float | None = None

    @property
    def available(self) -> bool:
        return self.reference is not None

    def add(self, confidences: Iterable[float]) -> float | None:
        from ..metrics.drift import drift_statistic

        if self.reference is None:
            return None
        with self._lock:
            self._values.extend(float(c) for c in confidences)
            if len(self._values) < self.window:
                return None
            d = drift_statistic(list(self._values), self.reference)
            self.statistic = d
            crossed = (d > self.threshold) != self._above
            self._above = d > self.threshold
        if crossed and self._above:
            logger.warning("confidence drift: the last %d confidences are %.3f (KS distance) from the probe's "
                           "%d calibration confidences (%s), above the threshold %g: the questions, the model "
                           "or its engine moved from those the probe was calibrated on; its promises may "
                           "not hold (label some answers and re-export or recertify)", self.window, d,
                           self.reference["n"], self.reference["source"], self.threshold)
        elif crossed:
            logger.info("confidence drift back to %.3f, at or below the threshold %g", d, self.threshold)
        return d


class ServiceMetrics:
    """The service's Prometheus collectors (module doc) in ``self.registry``, a registry of its own.

    ``batcher`` gives the queue gauges, ``reference`` (the probe's confidence reference, or None)
    with ``window`` and ``threshold`` the drift signal."""

    def __init__(self, batcher, reference: dict | None, *, window: int, threshold: float):
        require_prometheus()
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        r = self.registry = CollectorRegistry()
        self.requests = Counter("acute_requests", "HTTP answers by endpoint and status", ["endpoint", "status"],
                                registry=r)
        self.errors = Counter("acute_request_errors", "HTTP answers with a status >= 400, by endpoint and status",
                              ["endpoint", "status"], registry=r)
        self.duration = Histogram("acute_request_duration_seconds", "time from request to answer, by endpoint",
                                  ["endpoint"], buckets=LATENCY_BUCKETS, registry=r)
        self.decisions = Counter("acute_decisions", "scored answers by rule and decision", ["rule", "decision"],
                                 registry=r)
        self.prechecks = Counter("acute_prechecks", "prechecked prompts by outcome (pass: generated; refuse: "
                                 "abstained without generating)", ["outcome"], registry=r)
        self.queue_wait = Histogram("acute_queue_wait_seconds", "time a request waited for its batch",
                                    buckets=LATENCY_BUCKETS, registry=r)
        self.generation = Histogram("acute_generation_seconds", "generation (or recording) time of a "
                                    "request's batch", buckets=LATENCY_BUCKETS, registry=r)
        self.scoring = Histogram("acute_scoring_seconds", "probe scoring time of a request's batch",
                                 buckets=LATENCY_BUCKETS, registry=r)
        self.prompt_tokens = Counter("acute_prompt_tokens", "prompt tokens of scored requests", registry=r)
        self.generated_tokens = Counter("acute_generated_tokens", "tokens generated", registry=r)
        self.confidence = Histogram("acute_confidence", "the probe's confidence of scored answers",
                                    buckets=CONFIDENCE_BUCKETS, registry=r)
        self.drift = Gauge("acute_confidence_drift", "KS distance of the last drift_window confidences from the "
                           "probe's calibration confidences (NaN: window not full or no reference)", registry=r)
        Gauge("acute_confidence_drift_threshold", "the drift above which a warning is logged",
              registry=r).set(threshold)
        Gauge("acute_confidence_drift_available", "1 when the probe keeps calibration confidences to compare "
              "with", registry=r).set(int(reference is not None))
        Gauge("acute_queue_depth", "requests waiting", registry=r).set_function(lambda: batcher.depth)
        Gauge("acute_running", "requests being scored", registry=r).set_function(lambda: batcher.running)
        self.recorded = Counter("acute_recorded_answers", "answers written to the --record-to store", registry=r)
        self.record_errors = Counter("acute_record_errors", "served answers that could not be recorded",
                                     registry=r)
        self.feedback = Counter("acute_feedback", "labels attached by POST /v1/feedback", ["correct"], registry=r)
        self.drift.set(math.nan)
        self.window = DriftWindow(reference, window, threshold)

    def answered(self, endpoint: str, status: int, seconds: float) -> None:
        """Count one HTTP answer."""
        self.requests.labels(endpoint=endpoint, status=str(status)).inc()
        if status >= 400:
            self.errors.labels(endpoint=endpoint, status=str(status)).inc()
        self.duration.labels(endpoint=endpoint).observe(seconds)

    def scored(self, jobs: Sequence[Any], results: Sequence[Any]) -> None:
        """Count the scored jobs (:class:`~acute.serving.jobs.Job`) of one request and their
        results (:class:`~acute.serving.jobs.JobResult`), and move the drift window."""
        confidences = []
        for job, result in zip(jobs, results):
            s = result.scored
            self.decisions.labels(rule=s.rule, decision=s.decision).inc()
            if s.precheck is not None:
                self.prechecks.labels(outcome="pass" if s.generated else "refuse").inc()
            if job.queued_at and job.started_at:
                self.queue_wait.observe(max(0.0, job.started_at - job.queued_at))
            if s.seconds:
                self.generation.observe(s.seconds["generation"])
                self.scoring.observe(s.seconds["scoring"])
            self.prompt_tokens.inc(result.prompt_tokens)
            self.generated_tokens.inc(s.n_tokens)
            if s.confidence is not None:
                self.confidence.observe(s.confidence)
                confidences.append(s.confidence)
        d = self.window.add(confidences) if confidences else None
        if d is not None:
            self.drift.set(d)

    def text(self) -> tuple[bytes, str]:
        """The metrics in Prometheus' text format and its content type."""
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class RequestMetrics:
    """ASGI middleware: every HTTP answer counted by :meth:`ServiceMetrics.answered`, under its
    route in ``endpoints`` (else ``"other"``: a client cannot add label values)."""

    def __init__(self, app, metrics: ServiceMetrics, endpoints: Iterable[str]):
        self.app, self.metrics, self.endpoints = app, metrics, frozenset(endpoints)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        endpoint = scope["path"] if scope["path"] in self.endpoints else "other"
        status = 500  # an exception that escapes the app is answered 500 by the server
        start = time.perf_counter()
        counted = False

        def count():
            nonlocal counted
            if not counted:
                counted = True
                self.metrics.answered(endpoint, status, time.perf_counter() - start)

        async def sending(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                count()  # before the client can have the whole answer (and scrape right after it)
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            count()
