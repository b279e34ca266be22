"""Jobs (one prompt to score each) and :func:`score_jobs`, which runs a batch of them on the scorer."""

from __future__ import annotations

import collections
import copy
import dataclasses
import logging
from concurrent.futures import Future
from typing import Any, Sequence

from ..errors import AcuteError
from .errors import RequestError

__all__ = ["Job", "JobResult", "score_jobs"]

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class Job:
    """One prompt to score: ``item`` (a string or chat messages), the ``risk`` level, optional
    generation settings (``None``/empty: the scorer's), and ``param``, the request field that
    errors about the prompt name. ``future`` receives a :class:`JobResult` or an exception."""

    item: Any
    risk: float
    max_new_tokens: int | None = None
    stop: tuple[str, ...] = ()
    param: str = "prompt"
    response: str | None = None  #: an answer to score as given (teacher-forced), not generated
    future: Future = dataclasses.field(default_factory=Future, repr=False)


@dataclasses.dataclass
class JobResult:
    """A scored job: the :class:`acute.scoring.ScoredGeneration` and the prompt's token count."""

    scored: Any
    prompt_tokens: int


def _generation_key(scorer, job: Job) -> tuple[int, tuple[str, ...]]:
    """(max new tokens, stop strings) a job is generated with: its own, else the scorer's; its
    stop strings are added to the scorer's (those the probe was trained with)."""
    n = job.max_new_tokens or scorer.max_new_tokens
    return n, tuple(dict.fromkeys((*scorer.stop_strings, *job.stop)))


def _scorer_for(scorer, key: tuple[int, tuple[str, ...]], batch_size: int):
    """A shallow copy of ``scorer`` (same model, tokenizer and probe) with other generation settings."""
    if (scorer.max_new_tokens, scorer.stop_strings) == key and scorer.batch_size >= batch_size:
        return scorer
    variant = copy.copy(scorer)
    variant.max_new_tokens, variant.stop_strings = key
    variant.batch_size = max(batch_size, scorer.batch_size)
    return variant


def _prompt_tokens(scorer, item, max_new_tokens: int, param: str) -> int:
    """Tokens of the formatted prompt; ``RequestError`` when it is empty or does not fit the
    context window together with ``max_new_tokens``."""
    from ..extraction.layers import context_window

    text = scorer.format(item)
    n = len(scorer.tokenizer(text, add_special_tokens=False)["input_ids"])
    if n == 0:
        raise RequestError(f"{param} is empty", param=param)
    limit = context_window(scorer.model)
    if limit is not None and n + max_new_tokens > limit:
        raise RequestError(f"{param} has {n} tokens; with {max_new_tokens} new tokens it exceeds the "
                           f"model's context window of {limit} tokens", param=param)
    return n


def _run_jobs(scorer, jobs: Sequence[Job]) -> list:
    """Generate and score the jobs, or (when they carry responses) score the given responses."""
    items = [job.item for job in jobs]
    if jobs[0].response is None:
        return scorer.generate(items, risk=0.5)
    return scorer.score_responses(items, [job.response for job in jobs], risk=0.5)


def _score_group(scorer, jobs: Sequence[Job], key, batch_size: int) -> list:
    """Score jobs that share generation settings in one call; a failed batch is retried one job
    at a time so that one bad prompt fails only its own request."""
    from ..scoring import decide

    variant = _scorer_for(scorer, key, batch_size)
    out: list = [None] * len(jobs)
    ready = []
    for i, job in enumerate(jobs):
        try:
            ready.append((i, _prompt_tokens(variant, job.item, key[0], job.param)))
        except (AcuteError, ValueError) as e:
            out[i] = e
    if not ready:
        return out
    try:
        scored = _run_jobs(variant, [jobs[i] for i, _ in ready])
    except Exception:  # isolate the failing prompt(s)
        if len(ready) == 1:
            raise
        logger.warning("a batch of %d failed; scoring its requests one by one", len(ready), exc_info=True)
        scored = []
        for i, _ in ready:
            try:
                scored.append(_run_jobs(variant, [jobs[i]])[0])
            except Exception as e:  # noqa: BLE001 - handed to that request
                scored.append(e)
    for (i, n_prompt), s in zip(ready, scored):
        if isinstance(s, BaseException):
            out[i] = s
            continue
        risk = jobs[i].risk
        s = dataclasses.replace(s, risk=risk, trust=bool(decide([s.confidence], risk)[0]))
        out[i] = JobResult(scored=s, prompt_tokens=n_prompt)
    return out


def score_jobs(scorer, jobs: Sequence[Job], batch_size: int = 16) -> list:
    """Score ``jobs`` with ``scorer``: one ``Scorer.generate`` call per group of jobs with the
    same generation settings (one ``Scorer.score_responses`` call for the jobs that carry a
    response). Returns, in order, a :class:`JobResult` or the exception of each job. Each result
    equals scoring the job alone with the job's settings."""
    groups: dict[tuple, list[int]] = collections.defaultdict(list)
    for i, job in enumerate(jobs):  # a group either generates or scores given responses
        groups[(_generation_key(scorer, job), job.response is not None)].append(i)
    out: list = [None] * len(jobs)
    for (key, _), idx in groups.items():
        try:
            results = _score_group(scorer, [jobs[i] for i in idx], key, batch_size)
        except Exception as e:  # noqa: BLE001 - handed to the group's requests
            logger.exception("scoring a group of %d requests failed", len(idx))
            results = [e] * len(idx)
        for i, r in zip(idx, results):
            out[i] = r
    return out
