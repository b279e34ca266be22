"""``acute serve --record-to STORE``: every served answer written to an ordinary acute store, and
the labels ``POST /v1/feedback`` attaches to them later (:class:`AnswerRecorder`).

What a record holds (one line of a shard's ``.jsonl``, its pooled states and log-probs in the
shard's ``.safetensors``, :mod:`acute.store`): ``id`` (the answer's id: the chat completion's
``id``, or the ``id`` of a ``/v1/score`` answer), ``prompt`` (the formatted prompt the model
saw), ``generation`` (the text generated), ``answer`` (stripped), ``correct`` (null: unknown
until feedback), ``n_tokens``, ``raw_confidence``, ``finish_reason``, ``token_ids``, and
``meta``: the ``question`` (the string asked, or the last user message), the probe's
``confidence``, the ``decision`` with its ``rule`` and ``threshold``, the ``endpoint``, when it
was ``served``, and the request's generation settings (``max_new_tokens``, ``stop_strings``).
``parse_error`` is the reply's parse status as live scoring computed it (the probe's task's
parser; False without one) and, for a function-calling reply to a request that offered tools,
``meta`` holds its calls counted against them (:mod:`acute.scoring.sources`), so a probe
retrained on served answers reads what it is served.
The three pooled states (``mean``, ``last-prompt``, ``last-answer``) are stored in the default
storage dtype. Answers refused by the precheck (nothing generated) and answers the request
gave (``response``: scored, not generated) are not recorded. Nothing leaves the machine: the
store is a folder on the operator's disk.

The store's manifest is a collection's (:func:`acute.collect.build_manifest`: model,
fingerprint, weights digest, tokenizer, task, the server's default generation settings) plus
``served``: the probe that decided the answers (its estimator and the sha256 of its arrays).
Restarting the server on the same store resumes it; a store of another model or generation
settings, or one recorded under another probe, is refused, naming both; so is a store that
was not recorded by ``acute serve``.

Durability: records are committed in shards (:class:`acute.store.StoreWriter`, atomic) when
``record_shard_size`` have been served, when the oldest uncommitted one is ``record_flush_s``
old, when feedback names one, and when the server stops (SIGTERM or SIGINT: the lifespan's
shutdown commits them). Only a hard kill loses the uncommitted ones. A label is written to the
store's ``labels.jsonl`` (:mod:`acute.store.labels`) and fsync'ed before the feedback is
answered, and only for a committed record.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..errors import InputError
from .errors import RequestError
from ..store.header import array_bytes_sha256
from ..collect.records import build_manifest
from ..scoring.sources import live_records
from ..store import POOLINGS, LabelFile, StoreWriter
from .openai_bodies import estimator_name
from ..store.commit import check_identity
from ..store.format import MANIFEST
from ..store.manifest import load_manifest, now

__all__ = ["AnswerRecorder", "feedback_fields", "probe_digest"]

logger = logging.getLogger(__name__)


_FEEDBACK = '{"id": "<the id of a served answer>", "correct": true or false}'


def feedback_fields(body: Any) -> tuple[str, bool]:
    """``(id, correct)`` of a ``POST /v1/feedback`` body; :class:`RequestError` naming the field:
    400 for a body that is not that object (a field missing, another field, an id that is not a
    non-empty string), 422 for a ``correct`` that is not a boolean."""
    if not isinstance(body, dict):
        raise RequestError(f"the body must be a JSON object {_FEEDBACK}")
    extra = sorted(set(body) - {"id", "correct"})
    if extra:
        raise RequestError(f"unknown field {extra[0][:80]!r}; the body is {_FEEDBACK}", param=extra[0][:80])
    rid = body.get("id")
    if not isinstance(rid, str) or not rid.strip():
        raise RequestError(f"id must be the id of a served answer (a non-empty string); the body is {_FEEDBACK}",
                           param="id")
    if "correct" not in body:
        raise RequestError(f"correct is missing; the body is {_FEEDBACK}", param="correct")
    if not isinstance(body["correct"], bool):
        raise RequestError(f"correct must be true or false, got {str(body['correct'])[:80]!r}",
                           param="correct", status=422)
    return rid, body["correct"]


def probe_digest(probe) -> str | None:
    """The sha256 of a probe's arrays (an exported probe: the forest, views and calibration),
    None for a probe without them (a fitted, not exported, one)."""
    arrays = getattr(probe, "arrays", None)
    return array_bytes_sha256(arrays) if isinstance(arrays, dict) and arrays else None


def _manifest(scorer) -> dict:
    """The store manifest of the answers ``scorer`` serves (see the module doc)."""
    manifest = build_manifest(scorer.model, scorer.tokenizer, scorer.task, scorer.generation)
    manifest["served"] = {"estimator": estimator_name(scorer.probe), "probe_sha256": probe_digest(scorer.probe)}
    manifest["poolings"] = list(POOLINGS)
    return manifest


def _check_served(path: Path, manifest: dict) -> None:
    """Refuse to resume a store that ``acute serve`` did not record, or recorded under another
    probe (naming both)."""
    if not (path / MANIFEST).is_file():
        if path.exists() and (not path.is_dir() or any(path.iterdir())):
            raise InputError(f"--record-to {path}: not an empty folder nor a store of served answers; "
                             "give a new folder")
        return
    stored = load_manifest(path)
    if "served" not in stored:
        raise InputError(f"--record-to {path}: this store was not recorded by `acute serve` (its "
                         f"{MANIFEST} has no 'served'): served answers are never mixed into a "
                         "collection; give a new folder")
    check_identity(path / MANIFEST, stored["served"], manifest["served"], what="recording served answers",
                   remedy="serve the probe that recorded this store, or give --record-to a new folder")


class AnswerRecorder:
    """Writes served answers to the store ``path`` and attaches feedback labels to them (module
    doc). Thread-safe; holds the store's writer lock until :meth:`close`."""

    def __init__(self, path: str | os.PathLike, scorer, *, shard_size: int, flush_s: float):
        self.path = Path(path)
        manifest = _manifest(scorer)
        _check_served(self.path, manifest)
        self._writer = StoreWriter(self.path, manifest, shard_size=shard_size)
        try:
            self._labels = LabelFile(self.path)
        except BaseException:
            self._writer.close()
            raise
        self.flush_s = float(flush_s)
        self._task = scorer.task  # the reply's parse, as live scoring parses it
        self._oldest: float | None = None  # when the oldest uncommitted record was added
        self._lock = threading.Lock()
        self._closed = False

    def __repr__(self) -> str:
        return f"AnswerRecorder({str(self.path)!r})"

    def record(self, answers: Sequence[tuple[str, Any, Any, str]]) -> int:
        """Add ``(response id, job, JobResult, endpoint)`` for each served answer; those without
        a generated answer (refused by the precheck, or a response given by the request) are
        skipped. Returns how many were added."""
        rows = [(rid, job, result.scored, endpoint) for rid, job, result, endpoint in answers
                if result.scored.recorded is not None and job.response is None and result.scored.generated]
        if not rows:
            return 0
        served = now()
        records = [self._record(rid, job, s, endpoint, served) for rid, job, s, endpoint in rows]
        gens = [s.recorded for _, _, s, _ in rows]
        with self._lock:
            if self._closed:
                raise InputError(f"{self.path}: the recorder is closed (the server is stopping)")
            self._writer.add(records, np.stack([g.layer_means for g in gens]), [g.token_logprobs for g in gens],
                             last_prompt=np.stack([g.last_prompt for g in gens]),
                             last_answer=np.stack([g.last_answer for g in gens]))
            if self._writer.num_buffered == 0:
                self._oldest = None
            elif self._oldest is None:
                self._oldest = time.monotonic()
        return len(rows)

    def _record(self, rid: str, job, s, endpoint: str, served: str) -> dict:
        g = s.recorded
        n_new = job.max_new_tokens or self._writer.manifest["generation"]["max_new_tokens"]
        stops = list(dict.fromkeys([*self._writer.manifest["generation"]["stop_strings"], *job.stop]))
        # the parse status (and a function-calling reply's calls counted against the offered
        # tools) as live scoring computed them, so a probe retrained on these records reads what it
        # will be served
        [parsed] = live_records([g], [s.prompt], [g.text], [job.item], self._task)
        return {"id": rid, "task": self._writer.manifest.get("task"), "prompt": s.prompt, "generation": g.text,
                "answer": s.answer, "gold": [], "correct": None, "parse_error": parsed["parse_error"],
                "n_tokens": int(len(g.token_ids)), "raw_confidence": float(g.raw_confidence),
                "finish_reason": g.finish_reason, "token_ids": [int(t) for t in g.token_ids],
                "meta": {"question": s.question, "confidence": s.confidence, "decision": s.decision,
                         "rule": s.rule, "threshold": s.threshold, "endpoint": endpoint, "served": served,
                         "max_new_tokens": int(n_new), "stop_strings": stops, **parsed["meta"],
                         **({} if s.stopped_at is None else {"stopped_at": s.stopped_at, "stop": s.stop})}}

    def label(self, record_id: Any, correct: bool) -> None:
        """Attach ``correct`` to the recorded answer ``record_id`` (its buffered shard committed
        first), durably. :class:`RequestError` 404 naming an id never recorded here, 409 for a
        second label."""
        with self._lock:
            if self._closed:
                raise RequestError("the server is stopping; send the feedback again once it is back",
                                   status=503, type="server_error")
            buffered = record_id in self._writer.buffered_ids
            if not buffered and not self._writer.is_committed(record_id):
                raise RequestError(f"no answer with id {record_id!r} was recorded by this server; "
                                   "feedback is for the id of an answer it served",
                                   param="id", status=404, code="not_found")
            if record_id in self._labels.labels:
                raise RequestError(f"the answer {record_id!r} is already labelled "
                                   f"(correct: {str(self._labels.labels[record_id]).lower()}); a label is final",
                                   param="id", status=409, code="already_labelled")
            if buffered:
                self._commit()
            self._labels.add(record_id, correct)

    def _commit(self) -> None:
        """Commit the buffered records (lock held)."""
        self._writer.flush()
        self._oldest = None

    def flush_if_due(self) -> bool:
        """Commit the buffered records when the oldest is ``flush_s`` old; whether it did."""
        with self._lock:
            if self._closed or self._oldest is None or time.monotonic() - self._oldest < self.flush_s:
                return False
            self._commit()
            return True

    def close(self) -> None:
        """Commit what is buffered, mark the store complete and release it (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            n = self._writer.num_buffered
            self._writer.close()
        logger.info("recorded answers committed to %s (%d on shutdown)", self.path, n)
