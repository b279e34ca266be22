"""The :class:`Batcher`: jobs from any thread grouped into batches run by one worker thread."""

from __future__ import annotations

import collections
import dataclasses
import logging
import threading
import time
from typing import Callable, Sequence

from ..errors import InputError
from .errors import ServerBusyError
from .jobs import Job

__all__ = ["Batcher", "BatchStats"]

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class BatchStats:
    """Counters of a :class:`Batcher`: batches run, requests scored, how many batches had each
    size, requests dropped because their client went away, and the largest batch."""

    batches: int = 0
    requests: int = 0
    sizes: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    cancelled: int = 0
    largest: int = 0
    _lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, repr=False, compare=False)

    def record(self, size: int, cancelled: int) -> None:
        """Count a batch of ``size`` requests (0: all of it was cancelled) and ``cancelled`` dropped ones."""
        with self._lock:
            self.cancelled += cancelled
            if size:
                self.batches += 1
                self.requests += size
                self.sizes[size] += 1
                self.largest = max(self.largest, size)

    def to_dict(self) -> dict:
        """A JSON-ready copy (safe to call while the worker records)."""
        with self._lock:
            return {"batches": self.batches, "requests": self.requests, "cancelled": self.cancelled,
                    "largest": self.largest, "sizes": {str(k): v for k, v in sorted(self.sizes.items())}}


class Batcher:
    """Group jobs submitted from any thread into batches run by one worker thread.

    The worker takes the first waiting job, waits up to ``max_wait_s`` for more (never past
    ``max_batch``), drops jobs whose future was cancelled (their client went away) and calls
    ``run_batch(jobs)``, which returns one result or exception per job; each job's future gets
    its own. :meth:`submit` raises :class:`ServerBusyError` when ``max_queue`` jobs are waiting
    or after :meth:`close`, which lets the worker finish every waiting job and then stop.
    """

    def __init__(self, run_batch: Callable[[list[Job]], list], *, max_batch: int = 16,
                 max_wait_s: float = 0.01, max_queue: int = 256):
        if max_batch < 1 or max_queue < 1 or max_wait_s < 0:
            raise InputError(f"max_batch and max_queue must be >= 1 and max_wait_s >= 0, got "
                             f"{max_batch}, {max_queue}, {max_wait_s}")
        self.run_batch = run_batch
        self.max_batch, self.max_wait_s, self.max_queue = max_batch, max_wait_s, max_queue
        self.stats = BatchStats()
        self._pending: collections.deque[Job] = collections.deque()
        self._cond = threading.Condition()
        self._closing = False
        self._running = 0
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> int:
        """Jobs the worker is scoring now."""
        return self._running

    @property
    def depth(self) -> int:
        """Jobs waiting (not yet taken by the worker), not counting cancelled ones."""
        with self._cond:
            return sum(not j.future.cancelled() for j in self._pending)

    def start(self) -> None:
        """Start the worker thread (idempotent)."""
        with self._cond:
            if self._thread is None and not self._closing:
                self._thread = threading.Thread(target=self._loop, name="acute-batcher", daemon=True)
                self._thread.start()

    def submit(self, jobs: Sequence[Job]) -> None:
        """Queue ``jobs`` (all or none); ``ServerBusyError`` when they do not fit or after close."""
        with self._cond:
            if self._closing:
                raise ServerBusyError("the server is shutting down")
            self._pending = collections.deque(j for j in self._pending if not j.future.cancelled())
            if len(self._pending) + len(jobs) > self.max_queue:
                raise ServerBusyError(f"the request queue is full ({len(self._pending)} of "
                                      f"{self.max_queue} waiting); retry later")
            self._pending.extend(jobs)
            self._cond.notify_all()
        self.start()

    def close(self, timeout: float | None = None) -> None:
        """Accept no more jobs, let the worker finish the waiting ones, and join it."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def _next_batch(self) -> list[Job] | None:
        with self._cond:
            while not self._pending:
                if self._closing:
                    return None
                self._cond.wait()
            deadline = time.monotonic() + self.max_wait_s
            while len(self._pending) < self.max_batch and not self._closing:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            return [self._pending.popleft() for _ in range(min(self.max_batch, len(self._pending)))]

    def _loop(self) -> None:
        while (batch := self._next_batch()) is not None:
            live = [j for j in batch if j.future.set_running_or_notify_cancel()]
            self.stats.record(len(live), len(batch) - len(live))
            if not live:
                continue
            self._running = len(live)
            try:
                outcomes = self.run_batch(live)
            except Exception as e:  # noqa: BLE001 - every request of the batch gets it
                logger.exception("a batch of %d requests failed", len(live))
                outcomes = [e] * len(live)
            self._running = 0
            for job, outcome in zip(live, outcomes):
                if isinstance(outcome, BaseException):
                    job.future.set_exception(outcome)
                else:
                    job.future.set_result(outcome)
