"""Jobs (one prompt to score each) and :func:`score_jobs`, which runs a batch of them on the scorer.

A job's failure, of any exception type, is that job's result: the other jobs of its batch are
scored as if alone. Preparing a job (checking its prompt against the model: tokens, context
window, chat template) is the last step of parsing its request, so its refusals are
:class:`RequestError` s naming the field; whatever the scorer raises once the job runs (an
``InputError`` of the probe or the store included) is the server's. A job can be abandoned
(:meth:`Job.cancel`: its client left, or the server stopped); a group whose jobs are all
abandoned stops before the model's next forward pass, i.e. between decoding steps.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import dataclasses
import logging
import threading
from concurrent.futures import Future, InvalidStateError
from typing import Any, Sequence

from ..errors import InputError
from ..models.loading import holds_no_weights
from ..models.prompts import ToolChat
from ..scoring.gate import Gate
from ..store.generation import GenerationSettings
from .errors import RequestError, param_name
from .user_text import UserTextGuard, check_text, tools_param

__all__ = ["Job", "JobCancelled", "JobResult", "group_key", "score_jobs", "settle"]

logger = logging.getLogger(__name__)


class JobCancelled(Exception):
    """Every job of a group was abandoned: generation stopped before the next forward pass."""


@dataclasses.dataclass
class Job:
    """One prompt to score: ``item`` (a string or chat messages), its ``gate`` (the rule, a risk
    level or the probe's certified threshold, and an optional precheck threshold: generated only
    when the question-only probe's P(correct) exceeds it; parsed from the request once,
    :mod:`acute.scoring.gate`), optional generation settings (``None``/empty: the scorer's), and
    ``param``, the request field that errors about the prompt name, and ``request_id``, the id of
    the HTTP request it came from (:mod:`acute.serving.request_ids`: log lines about the job name
    it). ``future`` receives a :class:`JobResult` or an exception."""

    item: Any
    gate: Gate = dataclasses.field(default_factory=Gate)  #: default: the risk rule at DEFAULT_RISK
    max_new_tokens: int | None = None
    stop: tuple[str, ...] = ()
    param: str = "prompt"
    response: str | None = None  #: an answer to score as given (teacher-forced), not generated
    request_id: str = "-"
    future: Future = dataclasses.field(default_factory=Future, repr=False)
    abandoned: threading.Event = dataclasses.field(default_factory=threading.Event, repr=False)
    queued_at: float = dataclasses.field(default=0.0, repr=False)  #: when the batcher took it (monotonic)
    started_at: float = dataclasses.field(default=0.0, repr=False)  #: when its batch began (monotonic)
    response_id: str | None = None  #: the id its answer carries (a record's id with --record-to)

    def cancel(self, error: BaseException | None = None) -> None:
        """Abandon the job: dropped if not started, stopped between decoding steps once every job
        of its group is abandoned. ``error`` (e.g. the server is stopping) becomes its result for
        whoever waits on it; without one a waiting future is cancelled."""
        self.abandoned.set()
        if error is not None:
            settle(self, error)
        else:
            self.future.cancel()


@dataclasses.dataclass
class JobResult:
    """A scored job: the :class:`acute.scoring.scorer.ScoredGeneration` and the prompt's token count."""

    scored: Any
    prompt_tokens: int


def settle(job: Job, outcome: Any) -> None:
    """Give ``job`` its result or exception, unless it already has one (or was cancelled)."""
    if job.future.done():
        return
    with contextlib.suppress(InvalidStateError):  # settled by another thread meanwhile
        if isinstance(outcome, BaseException):
            job.future.set_exception(outcome)
        else:
            job.future.set_result(outcome)


def _generation_key(scorer, job: Job) -> GenerationSettings:
    """The generation settings a job is generated with: the scorer's, with the job's own max new
    tokens when it asks for them and its stop strings added to the scorer's (those the probe was
    trained with)."""
    ours = scorer.generation
    return dataclasses.replace(ours, max_new_tokens=job.max_new_tokens or ours.max_new_tokens,
                               stop_strings=tuple(dict.fromkeys((*ours.stop_strings, *job.stop))))


def group_key(scorer, job: Job) -> tuple:
    """The group a job is scored in, with the others of the same key in one call: its generation
    settings, and whether it generates or scores a given response."""
    return _generation_key(scorer, job), job.response is not None


def _scorer_for(scorer, key: GenerationSettings, batch_size: int):
    """A shallow copy of ``scorer`` (same model, tokenizer and probe) generating with ``key``
    in batches of at least ``batch_size``."""
    settings = dataclasses.replace(key, batch_size=max(batch_size, key.batch_size))
    if settings == scorer.generation:
        return scorer
    variant = copy.copy(scorer)
    variant.generation = settings
    return variant


def _response_param(job: Job) -> str:
    """The request field of ``job``'s response (``response``, ``[1].response``)."""
    where, _, _ = job.param.rpartition(".")
    return f"{where}.response" if where else "response"


def _token_count(scorer, text: str, param: str) -> int:
    """Tokens of the formatted prompt ``text``; ``RequestError`` naming ``param`` when there are none."""
    n = len(scorer.tokenizer(text, add_special_tokens=False)["input_ids"])
    if n == 0:
        raise RequestError(f"{param} is empty", param=param)
    return n


def _prompt_tokens(scorer, job: Job, max_new_tokens: int) -> int:
    """Tokens of the job's formatted prompt; ``RequestError`` when it is empty or does not fit,
    together with ``max_new_tokens``, the model's context window or the engine's
    (``max_model_len``: vLLM may be started with a shorter one)."""
    from ..extraction.layers import context_window  # torch: imported once a batch is scored

    n = _token_count(scorer, scorer.format(job.item), job.param)
    limits = ((context_window(scorer.model), "the model's context window"),
              (getattr(getattr(scorer, "engine", None), "max_model_len", None),
               "the engine's context (vLLM's max_model_len)"))
    for limit, what in limits:
        if isinstance(limit, int) and n + max_new_tokens > limit:
            raise RequestError(f"{job.param} has {n} tokens; with {max_new_tokens} new tokens it exceeds "
                               f"{what} of {limit} tokens", param=job.param)
    return n


def _response_tokens(scorer, job: Job) -> int:
    """Tokens of the prompt a job's given response answers (formatted as the probe's training
    store was, :meth:`acute.scoring.Scorer.response_prompt`), checked as the scorer would check
    them: ``RequestError`` when the gate holds no weights to record a response with, when the
    prompt is of the other kind than the probe was trained on, empty, or does not fit the
    context window together with the response and the EOS token the recorder appends to it."""
    from ..extraction.layers import context_window  # torch: imported once a batch is scored

    response = _response_param(job)
    if holds_no_weights(scorer.model):
        raise RequestError(f"{response}: scoring a given response records it by teacher forcing, which needs "
                           "the model's weights, and this server holds none (start it with --load-weights)",
                           param=response)
    try:
        text = scorer.response_prompt(job.item, job.param)
    except InputError as e:  # the request's prompt is of the other kind than the probe's
        raise RequestError(str(e), param=job.param) from None
    n = _token_count(scorer, text, job.param)
    total = n + len(scorer.tokenizer(job.response, add_special_tokens=False)["input_ids"]) + 1
    limit = context_window(scorer.model)
    if limit is not None and total > limit:
        raise RequestError(f"{job.param} and {response} have {total} tokens (with the EOS token appended to "
                           f"the response), more than the model's context window of {limit}", param=response)
    return n


def _is_template_error(error: Exception) -> bool:
    try:
        from jinja2 import TemplateError  # optional: jinja2
    except ImportError:  # pragma: no cover - jinja2 comes with transformers' chat templates
        return False
    return isinstance(error, TemplateError)


def _refused(error: Exception, job: Job) -> Exception:
    """What preparing ``job`` raised, as that job's result: a chat template refusing the
    request's messages is the client's fault (a :class:`RequestError` naming its field), like
    the :class:`RequestError` s of the checks themselves; anything else is the error itself (a 500)."""
    if _is_template_error(error):  # e.g. two user turns in a row, where the template refuses them
        return RequestError(f"{job.param}: the model's chat template refused these messages: "
                            f"{str(error)[:200]}", param=job.param)
    return error


def _prepare(scorer, guard: UserTextGuard | None, job: Job, max_new_tokens: int) -> int:
    """The job's prompt token count, checked against the model before anything is generated:
    the last step of parsing the request, so that every error about the request is a
    :class:`RequestError` naming its field (text that cannot be encoded, control-token text that
    cannot be kept as text, a prompt that is empty or does not fit, a given response the
    server cannot score). Errors raised once the job runs are the server's."""
    if isinstance(job.item, ToolChat):
        check_text(list(job.item.messages), lambda loc: param_name((job.param, *loc)))
        tools = tools_param(job.param)
        check_text(list(job.item.tools), lambda loc: param_name((tools, *loc)))
        try:
            scorer.format(job.item)
        except InputError as e:  # the model's chat template does not show tools
            raise RequestError(f"{tools}: {e}", param=tools) from None
    else:
        check_text(job.item, lambda loc: param_name((job.param, *loc)))
    if job.response is not None:
        check_text(job.response, lambda loc: _response_param(job))
    if guard is not None:
        guard.add(job.item, job.response, job.param)
        scorer = guard.scorer
    if job.response is not None:
        return _response_tokens(scorer, job)
    return _prompt_tokens(scorer, job, max_new_tokens)


@contextlib.contextmanager
def _stop_when_abandoned(model, jobs: Sequence[Job], engine=None):
    """Raise :class:`JobCancelled` before the model's next forward pass (decoding step) once every
    job in ``jobs`` is abandoned; the recorder detaches its hooks on the way out. With an
    ``engine`` (vLLM), its requests for these jobs are cancelled instead (vLLM aborts them)."""
    def check(*_):
        if all(j.abandoned.is_set() for j in jobs):
            raise JobCancelled(f"all {len(jobs)} requests of this group were abandoned")

    if engine is not None:
        with engine.stopping(check):
            yield
        return
    handle = model.register_forward_pre_hook(check)
    try:
        yield
    finally:
        handle.remove()


#: one transformers model runs one batch at a time: with an engine, batches run concurrently and
#: only given responses (recorded by teacher forcing on the model) take this lock
_MODEL_LOCK = threading.Lock()


def _ids(jobs: Sequence[Job]) -> str:
    """The request ids of ``jobs`` for a log line (each once, in order)."""
    return ", ".join(dict.fromkeys(job.request_id for job in jobs))


def _run_jobs(scorer, jobs: Sequence[Job]) -> list:
    """Generate and score the jobs, or (when they carry responses) score the given responses."""
    items = [job.item for job in jobs]
    gates = [job.gate for job in jobs]  # gates change no answer (a precheck only skips some): one call
    engine = getattr(scorer, "engine", None)
    if jobs[0].response is None:
        with _stop_when_abandoned(scorer.model, jobs, engine):
            return scorer.generate(items, gate=gates)
    with (_MODEL_LOCK if engine is not None else contextlib.nullcontext()), \
            _stop_when_abandoned(scorer.model, jobs):
        return scorer.score_responses(items, [job.response for job in jobs], gate=gates)


def _run_isolated(scorer, jobs: Sequence[Job]) -> list:
    """``_run_jobs`` on all of ``jobs``; when that fails, on each job alone, so that one bad
    prompt fails only its own request. Returns one scored generation or exception per job."""
    try:
        return list(_run_jobs(scorer, jobs))
    except JobCancelled as e:
        return [e] * len(jobs)
    except Exception as e:  # noqa: BLE001 - isolate the failing prompt(s)
        if len(jobs) == 1:
            return [e]
        logger.warning("a batch of %d failed (%s: %s); scoring its requests one by one (requests %s)",
                       len(jobs), type(e).__name__, str(e)[:200], _ids(jobs))
    out: list = []
    for job in jobs:
        try:
            out.append(_run_jobs(scorer, [job])[0])
        except Exception as e:  # noqa: BLE001 - handed to that request
            out.append(e)
    return out


def _score_group(scorer, jobs: Sequence[Job], key, batch_size: int, protect_text: bool) -> list:
    """Score jobs that share generation settings in one call; every job gets its own result or
    exception (never raises)."""
    variant = _scorer_for(scorer, key, batch_size)
    guard = UserTextGuard(variant) if protect_text else None
    out: list = [None] * len(jobs)
    ready = []
    for i, job in enumerate(jobs):
        try:
            ready.append((i, _prepare(variant, guard, job, key.max_new_tokens)))
        except Exception as e:  # noqa: BLE001 - that job's answer
            out[i] = _refused(e, job)
    live = [(i, n) for i, n in ready if not jobs[i].abandoned.is_set()]
    for i, _ in ready:
        if jobs[i].abandoned.is_set():
            out[i] = JobCancelled("the request was abandoned before it was scored")
    if not live:
        return out
    scored = _run_isolated(guard.scorer if guard is not None else variant, [jobs[i] for i, _ in live])
    for (i, n_prompt), s in zip(live, scored):
        if isinstance(s, BaseException):
            out[i] = s
            continue
        out[i] = JobResult(scored=s, prompt_tokens=n_prompt)
    return out


def score_jobs(scorer, jobs: Sequence[Job], batch_size: int = 16, *, protect_text: bool = True) -> list:
    """Score ``jobs`` with ``scorer``: one ``Scorer.generate`` call per group of jobs with the
    same generation settings (one ``Scorer.score_responses`` call for the jobs that carry a
    response), the group most jobs share first. Each job's future is settled as soon as its group
    is done; returns, in order, a :class:`JobResult` or the exception of each job. Each result
    equals scoring the job alone with the job's settings. ``protect_text``: text in a job's
    fields is tokenized as text, never as control tokens (:mod:`acute.serving.user_text`)."""
    groups: dict[tuple, list[int]] = collections.defaultdict(list)
    for i, job in enumerate(jobs):  # a group either generates or scores given responses
        groups[group_key(scorer, job)].append(i)
    out: list = [None] * len(jobs)
    # the group most jobs share first, then the one with the fewest new tokens
    order = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0][0].max_new_tokens))
    for (key, _), idx in order:
        group = [jobs[i] for i in idx]
        try:
            results = _score_group(scorer, group, key, batch_size, protect_text)
        except Exception as e:  # noqa: BLE001 - a bug in this module: still answer the group
            logger.exception("scoring a group of %d requests failed (requests %s)", len(idx), _ids(group))
            results = [e] * len(idx)
        for i, job, r in zip(idx, group, results):
            out[i] = r
            settle(job, r)
    return out
