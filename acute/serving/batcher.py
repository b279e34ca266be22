"""The :class:`Batcher`: jobs from any thread grouped into batches run by one worker thread."""

from __future__ import annotations

import collections
import dataclasses
import logging
import threading
import time
from typing import Callable, Hashable, Sequence

from ..errors import InputError
from .errors import ServerBusyError
from .jobs import Job, settle

__all__ = ["MAX_GROUP_WAIT_S", "Batcher", "BatchStats"]

logger = logging.getLogger(__name__)


#: a group of jobs (one generation setting) that has waited this long runs next, even while a
#: larger group waits
MAX_GROUP_WAIT_S = 2.0
#: after the grace period, how long :meth:`Batcher.close` waits for the worker to reach its next
#: decoding step (where abandoned work stops)
_STOP_JOIN_S = 10.0


@dataclasses.dataclass
class BatchStats:
    """Counters of a :class:`Batcher`: batches run, requests scored, how many batches had each
    size, requests dropped before they ran because their client went away (``cancelled``) or
    stopped while they ran (``stopped``: client gone, or the server's grace period over), and
    the largest batch."""

    batches: int = 0
    requests: int = 0
    sizes: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    cancelled: int = 0
    stopped: int = 0
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

    def record_stopped(self, n: int) -> None:
        """Count ``n`` requests abandoned while the worker ran them."""
        with self._lock:
            self.stopped += n

    def to_dict(self) -> dict:
        """A JSON-ready copy (safe to call while the worker records)."""
        with self._lock:
            return {"batches": self.batches, "requests": self.requests, "cancelled": self.cancelled,
                    "stopped": self.stopped, "largest": self.largest,
                    "sizes": {str(k): v for k, v in sorted(self.sizes.items())}}


class Batcher:
    """Group jobs submitted from any thread into batches run by one worker thread.

    The worker takes the first waiting job, waits up to ``max_wait_s`` for more (until a group
    holds ``max_batch``), drops abandoned jobs (:meth:`Job.cancel`: their client went away) and runs
    one batch of jobs that share a ``key`` (a generation setting): the group most waiting jobs
    share, or one that has waited :data:`MAX_GROUP_WAIT_S`. So a request asking for unusual
    settings, or many of them, holds the others up by one group at a time, not by all of its
    groups. ``run_batch(jobs)`` returns one result or exception per job; each job's future gets
    its own (``run_batch`` may settle them earlier, :func:`acute.serving.jobs.settle`).
    :meth:`submit` raises :class:`ServerBusyError` when ``max_queue`` jobs are waiting or after
    :meth:`close`, which lets the worker finish the waiting jobs, within its timeout, and then stop.

    ``workers`` threads take batches (default 1: one batch at a time, as a transformers model
    runs). An engine that batches continuously itself (vLLM) takes several: a batch taken while
    others generate joins them in the engine at its next step; ``run_batch`` must then be safe
    to call from several threads at once.
    """

    def __init__(self, run_batch: Callable[[list[Job]], list], *, max_batch: int = 16,
                 max_wait_s: float = 0.01, max_queue: int = 256,
                 key: Callable[[Job], Hashable] | None = None, workers: int = 1):
        if max_batch < 1 or max_queue < 1 or max_wait_s < 0 or workers < 1:
            raise InputError(f"max_batch, max_queue and workers must be >= 1 and max_wait_s >= 0, got "
                             f"{max_batch}, {max_queue}, {workers}, {max_wait_s}")
        self.workers = workers
        self.run_batch = run_batch
        self.key = key or (lambda job: None)
        self.max_batch, self.max_wait_s, self.max_queue = max_batch, max_wait_s, max_queue
        self.stats = BatchStats()
        self._pending: collections.deque[Job] = collections.deque()
        self._cond = threading.Condition()
        self._closing = False
        self._deadline: float | None = None
        self._current: dict[int, list[Job]] = {}  #: per worker, the jobs it scores now
        self._threads: list[threading.Thread] = []

    @property
    def running(self) -> int:
        """Jobs the workers are scoring now."""
        return sum(len(jobs) for jobs in list(self._current.values()))

    @property
    def depth(self) -> int:
        """Jobs waiting (not yet taken by the worker), not counting abandoned ones."""
        with self._cond:
            return sum(not j.abandoned.is_set() and not j.future.done() for j in self._pending)

    def start(self) -> None:
        """Start the worker threads (idempotent)."""
        with self._cond:
            if not self._threads and not self._closing:
                self._threads = [threading.Thread(target=self._loop, args=(i,), daemon=True,
                                                  name="acute-batcher" + (f"-{i}" if i else ""))
                                 for i in range(self.workers)]
                for thread in self._threads:
                    thread.start()

    def submit(self, jobs: Sequence[Job]) -> None:
        """Queue ``jobs`` (all or none); ``ServerBusyError`` when they do not fit or after close."""
        with self._cond:
            if self._closing:
                raise ServerBusyError("the server is shutting down")
            self._pending = collections.deque(j for j in self._pending if not j.abandoned.is_set()
                                              and not j.future.done())
            if len(self._pending) + len(jobs) > self.max_queue:
                raise ServerBusyError(f"the request queue is full ({len(self._pending)} of "
                                      f"{self.max_queue} waiting); retry later")
            now = time.monotonic()
            for job in jobs:
                job.queued_at = now
            self._pending.extend(jobs)
            self._cond.notify_all()
        self.start()

    def close(self, timeout: float | None = None) -> None:
        """Accept no more jobs and let the worker finish the waiting ones; past ``timeout`` seconds
        (from the first call; ``None``: no limit) every job still waiting or running is answered
        with :class:`ServerBusyError` and stopped between decoding steps. Joins the worker."""
        with self._cond:
            self._closing = True
            if self._deadline is None:
                self._deadline = float("inf") if timeout is None else time.monotonic() + timeout
            deadline = self._deadline
            self._cond.notify_all()
            threads = list(self._threads)
        if not threads:
            return
        for thread in threads:
            thread.join(None if deadline == float("inf") else max(0.0, deadline - time.monotonic()))
        if any(thread.is_alive() for thread in threads):
            n = self.abandon(ServerBusyError("the server is shutting down: its grace period "
                                             "(--shutdown-timeout) ended before this request was scored"))
            if n:
                logger.warning("shutdown grace period over: %d request(s) answered 503 and stopped", n)
            for thread in threads:
                thread.join(_STOP_JOIN_S)

    def abandon(self, error: BaseException) -> int:
        """Answer every waiting and running job with ``error`` and abandon it; how many."""
        with self._cond:
            jobs = [*self._pending, *(j for running in self._current.values() for j in running)]
            self._pending.clear()
        for job in jobs:
            job.cancel(error)
        return len(jobs)

    def _next_batch(self, worker: int = 0) -> list[Job] | None:
        with self._cond:
            while not self._pending:
                if self._closing:
                    return None
                self._cond.wait()
            deadline = time.monotonic() + self.max_wait_s
            while self._largest_group() < self.max_batch and not self._closing:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            batch, dropped = self._take()
            live = [j for j in batch if _start(j)]
            self._current[worker] = live
            self.stats.record(len(live), dropped + len(batch) - len(live))
            return live

    def _largest_group(self) -> int:
        """How many waiting jobs the largest group holds (lock held)."""
        live = (j for j in self._pending if not j.abandoned.is_set())
        return max(collections.Counter(self.key(j) for j in live).values(), default=0)

    def _take(self) -> tuple[list[Job], int]:
        """Remove the next batch from the queue (lock held): up to ``max_batch`` jobs, oldest
        first, of one group (``key``): the group most waiting jobs share, or the longest-waiting
        group once its oldest job has waited :data:`MAX_GROUP_WAIT_S`. Also drops abandoned
        jobs; returns the batch and how many were dropped."""
        live = [j for j in self._pending if not j.abandoned.is_set() and not j.future.done()]
        dropped = len(self._pending) - len(live)
        groups: dict = {}
        for job in live:
            groups.setdefault(self.key(job), []).append(job)
        if not groups:
            self._pending.clear()
            return [], dropped
        now = time.monotonic()
        aged = [g for g in groups.values() if now - g[0].queued_at >= MAX_GROUP_WAIT_S]
        chosen = (min(aged, key=lambda g: g[0].queued_at) if aged
                  else max(groups.values(), key=len))  # ties: the group that waited longest
        batch = chosen[:self.max_batch]
        taken = {id(j) for j in batch}
        self._pending = collections.deque(j for j in live if id(j) not in taken)
        return batch, dropped

    def _loop(self, worker: int = 0) -> None:
        while (live := self._next_batch(worker)) is not None:
            if not live:
                continue
            try:
                outcomes = self.run_batch(live)
            except Exception as e:  # noqa: BLE001 - every request of the batch gets it
                logger.exception("a batch of %d requests failed (requests %s)", len(live),
                                 ", ".join(dict.fromkeys(getattr(job, "request_id", "-") for job in live)))
                outcomes = [e] * len(live)
            with self._cond:
                self._current.pop(worker, None)
            self.stats.record_stopped(sum(j.abandoned.is_set() for j in live))
            for job, outcome in zip(live, outcomes):
                settle(job, outcome)


def _start(job: Job) -> bool:
    """Mark the job's future running; ``False`` when the job was abandoned (its future cancelled
    or already answered, possibly by another thread just now)."""
    if job.abandoned.is_set():
        return False
    job.started_at = time.monotonic()
    try:
        return job.future.set_running_or_notify_cancel()
    except RuntimeError:  # answered meanwhile (the server's grace period ended)
        return False
