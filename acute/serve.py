"""The trust-gate service behind ``acute serve``: live scoring over HTTP.

Endpoints (built by :func:`create_app` around one :class:`acute.scoring.Scorer`):

* ``POST /v1/score``: ``{"prompt" | "messages", "risk", "max_new_tokens"?}`` -> the answer, its raw
  and probe confidence and the decision at that risk; a JSON list of requests is scored together
  and answered as a list.
* ``POST /v1/chat/completions``: OpenAI-compatible (greedy decoding only), streaming or not, with
  an ``acute`` object (confidence, raw confidence, decision, risk) on each choice.
* ``GET /v1/models``, ``GET /healthz``.

Concurrent requests are grouped by a :class:`Batcher` (up to ``max_batch`` requests, waiting at
most ``max_wait_ms`` for more) and generated together by its one worker thread: the scorer (model,
recorder hooks, tokenizer) is used from that thread only. Requests of one batch with different
generation settings (``max_new_tokens``, stop strings) are generated in separate groups, so every
result equals scoring that request alone (:func:`score_jobs`).

FastAPI, pydantic and uvicorn are imported inside functions: ``import acute.serve`` works without
the ``serve`` extra, and :func:`require_serve_extra` says what to install.
"""

from __future__ import annotations

import asyncio
import collections
import copy
import dataclasses
import functools
import hmac
import ipaddress
import json
import logging
import os
import signal
import socket
import threading
import time
import uuid
from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any, Callable, Sequence

from .errors import AcuteError, InputError

__all__ = [
    "API_KEY_ENV",
    "Batcher",
    "BatchStats",
    "Job",
    "JobResult",
    "MissingExtraError",
    "RequestError",
    "ServerBusyError",
    "ServeSettings",
    "bind_socket",
    "check_bind",
    "create_app",
    "estimator_name",
    "require_serve_extra",
    "resolve_api_key",
    "run_server",
    "score_jobs",
]

logger = logging.getLogger(__name__)

#: environment variable holding the API key when ``--api-key`` is not given
API_KEY_ENV = "ACUTE_API_KEY"
#: how long a stopping server waits for in-flight requests before cancelling them
GRACEFUL_SHUTDOWN_S = 120.0
#: how often a waiting request checks whether its client went away
_DISCONNECT_POLL_S = 0.25
#: OpenAI's limit on stop sequences
_MAX_STOP = 4


# ------------------------------------------------------------------------------ errors
class MissingExtraError(InputError):
    """FastAPI / uvicorn are not installed (the message gives the pip command)."""


class RequestError(InputError):
    """A request the service refuses: HTTP ``status``, the OpenAI error ``type``, the request
    field ``param`` it is about (``None`` for the body as a whole) and an optional ``code``."""

    def __init__(self, message: str, param: str | None = None, status: int = 400,
                 type: str = "invalid_request_error", code: str | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.param, self.status, self.type, self.code = param, status, type, code
        self.headers = headers or {}

    def body(self) -> dict:
        """The OpenAI error body ``{"error": {message, type, param, code}}``."""
        return {"error": {"message": str(self), "type": self.type, "param": self.param,
                          "code": self.code}}


class ServerBusyError(AcuteError):
    """The request queue is full, or the server is shutting down."""


def require_serve_extra() -> None:
    """Raise :class:`MissingExtraError` unless FastAPI and uvicorn can be imported."""
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as e:
        raise MissingExtraError(f"acute serve needs FastAPI and uvicorn ({e.name} is missing): "
                                "pip install 'acute[serve]'") from None


# ------------------------------------------------------------------------------ settings
@dataclasses.dataclass(frozen=True)
class ServeSettings:
    """What :func:`create_app` serves with; checked on construction (``InputError``).

    ``max_batch`` requests at most per batch, ``max_wait_ms`` the longest a batch waits for more
    requests after its first, ``max_queue`` the most requests waiting (more get 503),
    ``max_request_bytes`` the largest request body (more get 413), ``api_key`` the bearer key
    every ``/v1`` request must carry (``None``: none needed), ``default_risk`` the risk of a chat
    request without one, ``model_name`` the model id clients see and send.
    """

    model_name: str = "model"
    max_batch: int = 16
    max_wait_ms: float = 10.0
    max_queue: int = 256
    max_request_bytes: int = 1_000_000
    api_key: str | None = None
    default_risk: float = 0.5
    retry_after_s: int = 1

    def __post_init__(self):
        for name in ("max_batch", "max_queue", "max_request_bytes", "retry_after_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"{name} must be an integer >= 1, got {value!r}")
        if not 0 <= float(self.max_wait_ms) <= 60_000:
            raise InputError(f"max_wait_ms must be in [0, 60000], got {self.max_wait_ms!r}")
        if not 0.0 < float(self.default_risk) < 1.0:
            raise InputError(f"default risk must be in (0, 1), got {self.default_risk!r}")
        if self.api_key is not None and not self.api_key.strip():
            raise InputError("the API key is empty; give a non-empty key or none")
        if not self.model_name:
            raise InputError("model_name must be a non-empty string")


def resolve_api_key(given: str | None) -> str | None:
    """The API key: ``given`` (``--api-key``), else ``$ACUTE_API_KEY``, else ``None``."""
    key = given if given is not None else os.environ.get(API_KEY_ENV)
    return key or None


def _is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, api_key: str | None, allow_remote: bool) -> None:
    """Refuse (``InputError``) to serve a non-loopback host without an API key unless
    ``allow_remote``: anyone who can reach the port could otherwise use the model."""
    if not _is_loopback(host) and api_key is None and not allow_remote:
        raise InputError(f"refusing to listen on non-loopback host {host!r} without an API key: set "
                         f"--api-key or ${API_KEY_ENV}, or pass --allow-remote to serve without one")


# ------------------------------------------------------------------------------ jobs
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
    from .extraction.layers import context_window

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
    from .scoring import decide

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


# ------------------------------------------------------------------------------ batcher
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


# ------------------------------------------------------------------------------ request schemas
@functools.lru_cache(maxsize=None)
def _schemas() -> SimpleNamespace:
    """The pydantic request models (built on first use: pydantic comes with the serve extra)."""
    from typing import Annotated, Literal, Optional

    from pydantic import BaseModel, ConfigDict, Field

    Risk = Annotated[float, Field(gt=0, lt=1, allow_inf_nan=False)]
    Count = Annotated[int, Field(ge=1)]
    Number = Annotated[float, Field(allow_inf_nan=False)]

    class Strict(BaseModel):
        model_config = ConfigDict(extra="forbid", strict=True)

    class Message(Strict):
        role: Literal["system", "developer", "user", "assistant"]
        content: Any = None  # a string or a list of text parts, checked by _message_text
        name: Optional[str] = None
        # in OpenAI's schema but not supported here (refused by _messages):
        tool_calls: Any = None
        function_call: Any = None
        refusal: Any = None
        audio: Any = None

    class ScoreRequest(Strict):
        prompt: Optional[str] = None
        messages: Optional[list[Message]] = None
        response: Optional[str] = None  # an answer produced elsewhere: scored as given, not generated
        risk: Risk
        max_new_tokens: Optional[Count] = None

    class StreamOptions(Strict):
        include_usage: Optional[bool] = None
        include_obfuscation: Optional[bool] = None

    class ChatRequest(Strict):
        messages: list[Message]
        model: Optional[str] = None
        risk: Optional[Risk] = None  # acute's own field
        stream: Optional[bool] = None
        stream_options: Optional[StreamOptions] = None
        max_tokens: Optional[Count] = None
        max_completion_tokens: Optional[Count] = None
        stop: Any = None  # a string or up to 4 strings, checked by _stop_strings
        # accepted, they do not change a greedy answer
        user: Optional[str] = None
        seed: Optional[int] = None
        metadata: Optional[dict[str, str]] = None
        store: Optional[bool] = None
        service_tier: Optional[str] = None
        parallel_tool_calls: Optional[bool] = None
        prompt_cache_key: Optional[str] = None
        prompt_cache_retention: Optional[str] = None
        prompt_cache_options: Any = None
        safety_identifier: Optional[str] = None
        # accepted only at their greedy / neutral values (see _UNSUPPORTED)
        n: Optional[int] = None
        temperature: Optional[Annotated[float, Field(ge=0, le=2, allow_inf_nan=False)]] = None
        top_p: Optional[Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]] = None
        presence_penalty: Optional[Number] = None
        frequency_penalty: Optional[Number] = None
        logprobs: Optional[bool] = None
        top_logprobs: Optional[int] = None
        logit_bias: Optional[dict[str, Number]] = None
        tools: Optional[list] = None
        tool_choice: Any = None
        functions: Optional[list] = None
        function_call: Any = None
        response_format: Any = None
        modalities: Optional[list[str]] = None
        audio: Any = None
        prediction: Any = None
        web_search_options: Any = None
        reasoning_effort: Any = None
        verbosity: Any = None
        moderation: Any = None

    return SimpleNamespace(Message=Message, ScoreRequest=ScoreRequest, ChatRequest=ChatRequest)


#: chat request fields that would change decoding, with the values that do not
_UNSUPPORTED: dict[str, tuple] = {
    "n": (None, 1), "temperature": (None, 0), "top_p": (None, 1),
    "presence_penalty": (None, 0), "frequency_penalty": (None, 0),
    "logprobs": (None, False), "top_logprobs": (None, 0), "logit_bias": (None, {}),
    "tools": (None, []), "tool_choice": (None, "none"), "functions": (None, []),
    "function_call": (None, "none"), "response_format": (None, {"type": "text"}),
    "modalities": (None, ["text"]), "audio": (None,), "prediction": (None,),
    "web_search_options": (None,), "reasoning_effort": (None,), "verbosity": (None,),
    "moderation": (None,),
}


def _param_name(loc: Sequence) -> str | None:
    """``("messages", 0, "content")`` -> ``"messages[0].content"``; ``()`` -> ``None``."""
    name = ""
    for part in loc:
        name += f"[{part}]" if isinstance(part, int) else (f".{part}" if name else str(part))
    return name or None


def _validate(model, obj: Any, what: str, prefix: tuple = ()):
    """``model.model_validate(obj)``; the first error becomes a :class:`RequestError` naming its field."""
    from pydantic import ValidationError

    try:
        return model.model_validate(obj)
    except ValidationError as e:
        err = e.errors(include_url=False)[0]
        param = _param_name((*prefix, *err["loc"]))
        if err["type"] == "extra_forbidden":
            message = f"unknown field {param!r}: it is not part of the {what} request"
        elif err["type"] == "missing":
            message = f"{param} is required"
        elif err["type"] == "model_type":
            message = f"{param or 'the request body'} must be a JSON object"
        else:
            message = f"{param}: {err['msg']}"
        raise RequestError(message, param=param) from None


def _message_text(content: Any, param: str) -> str:
    """A message's text: a string, or the concatenated text of a list of ``{"type": "text"}`` parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for j, part in enumerate(content):
            if not (isinstance(part, dict) and set(part) == {"type", "text"}
                    and part["type"] == "text" and isinstance(part["text"], str)):
                raise RequestError(f"{param}[{j}]: only text parts {{\"type\": \"text\", \"text\": ...}} are "
                                   "supported", param=f"{param}[{j}]")
            texts.append(part["text"])
        return "".join(texts)
    raise RequestError(f"{param} must be a string or a list of text parts", param=param)


def _messages(messages: Sequence, param: str = "messages") -> list[dict[str, str]]:
    """Validated chat messages as ``[{"role", "content"}]`` ("developer" becomes "system")."""
    if not messages:
        raise RequestError(f"{param} must be a non-empty list of messages", param=param)
    out = []
    for i, m in enumerate(messages):
        for field in ("tool_calls", "function_call", "refusal", "audio"):
            if getattr(m, field) is not None:
                raise RequestError(f"{param}[{i}].{field} is not supported (text messages only)",
                                   param=f"{param}[{i}].{field}")
        text = _message_text(m.content, f"{param}[{i}].content")
        out.append({"role": "system" if m.role == "developer" else m.role, "content": text})
    if not any(m["content"].strip() for m in out):
        raise RequestError(f"{param} has no text", param=param)
    return out


def _stop_strings(stop: Any) -> tuple[str, ...]:
    if stop is None:
        return ()
    values = [stop] if isinstance(stop, str) else stop
    if not isinstance(values, list) or not all(isinstance(s, str) and s for s in values) \
            or len(values) > _MAX_STOP:
        raise RequestError(f"stop must be a non-empty string or a list of at most {_MAX_STOP} of them",
                           param="stop")
    return tuple(values)


def score_job(obj: Any, prefix: tuple = ()) -> Job:
    """A :class:`Job` from one ``/v1/score`` request object (``RequestError`` naming the field)."""
    req = _validate(_schemas().ScoreRequest, obj, "/v1/score", prefix)
    where = _param_name(prefix)
    name = (lambda field: f"{where}.{field}" if where else field)
    if (req.prompt is None) == (req.messages is None):
        raise RequestError("give exactly one of 'prompt' and 'messages'", param=name("prompt"))
    if req.response is not None and not req.response.strip():
        raise RequestError(f"{name('response')} is empty", param=name("response"))
    if req.prompt is not None:
        if not req.prompt.strip():
            raise RequestError(f"{name('prompt')} is empty", param=name("prompt"))
        return Job(item=req.prompt, risk=req.risk, max_new_tokens=req.max_new_tokens, param=name("prompt"),
                   response=req.response)
    return Job(item=_messages(req.messages, name("messages")), risk=req.risk,
               max_new_tokens=req.max_new_tokens, param=name("messages"), response=req.response)


def chat_job(obj: Any, settings: ServeSettings):
    """``(job, request)`` from a ``/v1/chat/completions`` body; ``RequestError`` (400, or 404 for
    another model) naming the field for anything not in OpenAI's schema, of the wrong type, or
    that would change greedy decoding."""
    req = _validate(_schemas().ChatRequest, obj, "chat completion")
    for field, neutral in _UNSUPPORTED.items():
        value = getattr(req, field)
        if value is not None and not any(value == v for v in neutral if v is not None):
            raise RequestError(f"{field}={json.dumps(value)} is not supported: acute serves greedy "
                               "decoding only (the confidence is for the greedy answer)", param=field,
                               code="unsupported_parameter")
    if req.model is not None and req.model != settings.model_name:
        raise RequestError(f"model {req.model!r} is not served here; this server serves "
                           f"{settings.model_name!r}", param="model", status=404, code="model_not_found")
    limits = [n for n in (req.max_completion_tokens, req.max_tokens) if n is not None]
    job = Job(item=_messages(req.messages), risk=settings.default_risk if req.risk is None else req.risk,
              max_new_tokens=min(limits) if limits else None, stop=_stop_strings(req.stop),
              param="messages")
    return job, req


# ------------------------------------------------------------------------------ response bodies
def estimator_name(probe) -> str:
    """The probe's estimator name (e.g. ``acute-cosine-stacked``): as its selection recorded it,
    else built from its view and calibration."""
    selection = getattr(probe, "selection", None) or getattr(probe, "selection_", None)
    if isinstance(selection, dict) and selection.get("chosen"):
        return str(selection["chosen"])
    calibration = getattr(probe, "calibration", None)
    suffix = "" if not calibration else ("-stacked" if calibration == "stacked" else f"-{calibration}")
    return f"acute-{getattr(probe, 'view', 'probe')}{suffix}"


def _finish_reason(reason: str) -> str:
    return "length" if reason == "length" else "stop"


def score_body(result: JobResult, *, model: str, estimator: str, latency_ms: float) -> dict:
    """The ``/v1/score`` answer for one scored job."""
    s = result.scored
    return {"answer": s.answer, "raw_confidence": s.raw_confidence, "confidence": s.confidence,
            "decision": s.decision, "risk": s.risk, "estimator": estimator, "model": model,
            "latency_ms": round(latency_ms, 3), "n_tokens": s.n_tokens,
            "finish_reason": _finish_reason(s.finish_reason)}


def acute_object(result: JobResult, estimator: str) -> dict:
    """The ``acute`` object added to a chat choice."""
    s = result.scored
    return {"confidence": s.confidence, "raw_confidence": s.raw_confidence, "decision": s.decision,
            "risk": s.risk, "estimator": estimator}


def _usage(result: JobResult) -> dict:
    n = result.scored.n_tokens
    return {"prompt_tokens": result.prompt_tokens, "completion_tokens": n,
            "total_tokens": result.prompt_tokens + n}


def chat_body(result: JobResult, *, model: str, estimator: str, id: str, created: int) -> dict:
    """An OpenAI ``chat.completion`` with the ``acute`` object on its choice."""
    s = result.scored
    choice = {"index": 0, "message": {"role": "assistant", "content": s.answer, "refusal": None},
              "logprobs": None, "finish_reason": _finish_reason(s.finish_reason),
              "acute": acute_object(result, estimator)}
    return {"id": id, "object": "chat.completion", "created": created, "model": model,
            "choices": [choice], "usage": _usage(result), "system_fingerprint": None}


def chat_chunks(result: JobResult, *, model: str, estimator: str, id: str, created: int,
                include_usage: bool = False) -> list[dict]:
    """The ``chat.completion.chunk`` objects of a streamed answer: the role, the text, then the
    finish reason with the ``acute`` object (and a usage chunk when ``include_usage``)."""
    s = result.scored
    head = {"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
            "system_fingerprint": None}

    def chunk(delta: dict, finish: str | None = None, **extra) -> dict:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish, **extra}
        return {**head, "choices": [choice], **({"usage": None} if include_usage else {})}

    chunks = [chunk({"role": "assistant", "content": ""})]
    if s.answer:
        chunks.append(chunk({"content": s.answer}))
    chunks.append(chunk({}, _finish_reason(s.finish_reason), acute=acute_object(result, estimator)))
    if include_usage:
        chunks.append({**head, "choices": [], "usage": _usage(result)})
    return chunks


def sse_events(chunks: Sequence[dict]) -> list[bytes]:
    """Server-sent events of ``chunks``, ending with ``data: [DONE]``."""
    events = [f"data: {json.dumps(c, ensure_ascii=False)}\n\n".encode() for c in chunks]
    return events + [b"data: [DONE]\n\n"]


def models_body(settings: ServeSettings, probe, created: int) -> dict:
    """``GET /v1/models``: the served model with its probe's estimator, fingerprint and summary."""
    fingerprint = getattr(probe, "model_fingerprint", None)
    summary = getattr(probe, "training_summary", None) or getattr(probe, "training_summary_", None)
    return {"object": "list", "data": [{
        "id": settings.model_name, "object": "model", "created": created, "owned_by": "acute",
        "estimator": estimator_name(probe), "fingerprint": fingerprint, "training_summary": summary,
    }]}


# ------------------------------------------------------------------------------ the app
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


# ------------------------------------------------------------------------------ running
def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (``port=0``: a free one); ``OSError`` (e.g. the
    port is taken) before any model is served."""
    if not 0 <= port <= 65535:
        raise InputError(f"--port must be in 0..65535, got {port}")
    family, kind, proto, _, address = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    return sock


def _already_stopped(signum, frame) -> None:
    """uvicorn re-raises the signal that stopped it after its graceful shutdown: nothing left to do."""


def run_server(app, sock: socket.socket, *, graceful_timeout_s: float = GRACEFUL_SHUTDOWN_S,
               log_level: str = "warning") -> None:
    """Serve ``app`` on ``sock`` with uvicorn until SIGTERM / SIGINT, then stop accepting, finish
    in-flight requests (at most ``graceful_timeout_s``), drain the batcher and return."""
    require_serve_extra()
    import uvicorn

    config = uvicorn.Config(app, log_level=log_level, access_log=False, lifespan="on",
                            timeout_graceful_shutdown=graceful_timeout_s)
    server = uvicorn.Server(config)
    main = threading.current_thread() is threading.main_thread()
    # uvicorn owns SIGTERM / SIGINT while it runs and re-raises the one it caught afterwards;
    # the handlers installed here only absorb that second delivery, so a stop exits cleanly.
    stops = (signal.SIGTERM, signal.SIGINT) if main else ()
    previous = {s: signal.signal(s, _already_stopped) for s in stops}
    try:
        server.run(sockets=[sock])
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        sock.close()
