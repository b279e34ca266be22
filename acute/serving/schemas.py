"""Request bodies: the pydantic schemas of ``/v1/score`` and ``/v1/chat/completions`` and the
:class:`~acute.serving.jobs.Job` each becomes (every error a :class:`RequestError` naming its field)."""

from __future__ import annotations

import functools
import json
from types import SimpleNamespace
from typing import Any, Sequence

from .errors import RequestError, param_name
from .jobs import Job
from .settings import ServeSettings

__all__ = ["chat_job", "score_job"]

#: OpenAI's limit on stop sequences
_MAX_STOP = 4


@functools.lru_cache(maxsize=None)
def _schemas() -> SimpleNamespace:
    """The pydantic request models (built on first use: pydantic comes with the serve extra)."""
    from typing import Annotated, Literal, Optional

    from pydantic import BaseModel, ConfigDict, Field

    from ..scoring.risk import RISK_MAX, RISK_MIN

    Risk = Annotated[float, Field(gt=RISK_MIN, lt=RISK_MAX, allow_inf_nan=False)]  # check_risk(strict=True)
    MaxError = Annotated[float, Field(gt=0.0, lt=1.0, allow_inf_nan=False)]  # check_max_error
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
        risk: Optional[Risk] = None  # exactly one of risk and max_error (checked by _rule)
        max_error: Optional[MaxError] = None
        precheck: Optional[Risk] = None  # generate only when the question-only P(correct) exceeds it
        max_new_tokens: Optional[Count] = None

    class StreamOptions(Strict):
        include_usage: Optional[bool] = None
        include_obfuscation: Optional[bool] = None

    class ChatRequest(Strict):
        messages: list[Message]
        model: Optional[str] = None
        risk: Optional[Risk] = None  # acute's own fields, at most one of them
        max_error: Optional[MaxError] = None
        precheck: Optional[Risk] = None
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


def _validate(model, obj: Any, what: str, prefix: tuple = ()):
    """``model.model_validate(obj)``; the first error becomes a :class:`RequestError` naming its field."""
    from pydantic import ValidationError

    try:
        return model.model_validate(obj)
    except ValidationError as e:
        err = e.errors(include_url=False)[0]
        param = param_name((*prefix, *err["loc"]))
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


def _check_new_tokens(n: int | None, limit: int | None, param: str) -> None:
    """``RequestError`` naming ``param`` when ``n`` new tokens are more than the server allows."""
    if n is not None and limit is not None and n > limit:
        raise RequestError(f"{param}={n} is more new tokens than this server allows ({limit}, "
                           "--max-new-tokens-limit)", param=param, code="max_tokens_exceeded")


def _shown(value: Any, width: int = 80) -> str:
    """``value`` as JSON for an error message, cut to ``width`` characters."""
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= width else text[:width] + "..."


def _rule(probe, risk: float | None, max_error: float | None, name) -> dict:
    """``{"risk", "max_error"}`` of a job, at most one set; ``RequestError`` naming ``max_error``
    when both are given or when ``probe`` carries no valid certificate at it (checked here, so
    the request is refused before anything is generated)."""
    if risk is not None and max_error is not None:
        raise RequestError(f"give {name('risk')} (a risk level) or {name('max_error')} (a certified "
                           "threshold), not both", param=name("max_error"))
    if max_error is not None and probe is not None:
        from ..errors import InputError
        from ..scoring.rules import decision_rule

        try:
            decision_rule(probe, max_error=max_error, max_error_name=name("max_error"))
        except InputError as e:
            raise RequestError(str(e), param=name("max_error"), code="certificate_not_available") from None
    return {"risk": risk, "max_error": max_error}


def _precheck(threshold: float | None, precheck_probe, name, response: str | None = None) -> dict:
    """``{"precheck": threshold}`` of a job; ``RequestError`` naming ``precheck`` when the server
    has no question-only probe (code ``precheck_not_available``) or the request gives an answer
    to score (nothing to skip)."""
    if threshold is None:
        return {}
    if response is not None:
        raise RequestError(f"{name('precheck')} decides before generating, and {name('response')} gives "
                           "an answer to score as given; leave out one of them", param=name("precheck"))
    if precheck_probe is None:
        from ..errors import InputError
        from ..scoring.precheck import require_precheck

        try:
            require_precheck(None, name("precheck"))
        except InputError as e:
            raise RequestError(f"{e} (then serve that probe folder)", param=name("precheck"),
                               code="precheck_not_available") from None
    return {"precheck": threshold}


def score_job(obj: Any, prefix: tuple = (), max_new_tokens_limit: int | None = None, probe=None,
              precheck_probe=None) -> Job:
    """A :class:`Job` from one ``/v1/score`` request object (``RequestError`` naming the field,
    also for more new tokens than ``max_new_tokens_limit``, for neither or both of ``risk`` and
    ``max_error``, for a ``max_error`` ``probe`` carries no valid certificate for, and for a
    ``precheck`` without a question-only probe ``precheck_probe`` or with a ``response``)."""
    req = _validate(_schemas().ScoreRequest, obj, "/v1/score", prefix)
    where = param_name(prefix)
    name = (lambda field: f"{where}.{field}" if where else field)
    if req.risk is None and req.max_error is None:
        raise RequestError(f"{name('risk')} is required (a risk level in (0, 1)), or "
                           f"{name('max_error')} (decide by the probe's certified threshold)",
                           param=name("risk"))
    rule = {**_rule(probe, req.risk, req.max_error, name),
            **_precheck(req.precheck, precheck_probe, name, req.response)}
    if (req.prompt is None) == (req.messages is None):
        raise RequestError("give exactly one of 'prompt' and 'messages'", param=name("prompt"))
    if req.response is not None and not req.response.strip():
        raise RequestError(f"{name('response')} is empty", param=name("response"))
    _check_new_tokens(req.max_new_tokens, max_new_tokens_limit, name("max_new_tokens"))
    if req.prompt is not None:
        if not req.prompt.strip():
            raise RequestError(f"{name('prompt')} is empty", param=name("prompt"))
        return Job(item=req.prompt, max_new_tokens=req.max_new_tokens, param=name("prompt"),
                   response=req.response, **rule)
    return Job(item=_messages(req.messages, name("messages")), max_new_tokens=req.max_new_tokens,
               param=name("messages"), response=req.response, **rule)


def chat_job(obj: Any, settings: ServeSettings, probe=None, precheck_probe=None):
    """``(job, request)`` from a ``/v1/chat/completions`` body; ``RequestError`` (400, or 404 for
    another model) naming the field for anything not in OpenAI's schema, of the wrong type, that
    would change greedy decoding, that asks for more than ``settings.max_new_tokens_limit``
    new tokens, that gives both ``risk`` and ``max_error``, a ``max_error`` ``probe`` carries
    no valid certificate for, or a ``precheck`` without a question-only probe
    (``precheck_probe``). A request naming neither rule is decided by the server's default
    (``settings.default_max_error`` when set, else ``settings.default_risk``)."""
    req = _validate(_schemas().ChatRequest, obj, "chat completion")
    for field, neutral in _UNSUPPORTED.items():
        value = getattr(req, field)
        if value is not None and not any(value == v for v in neutral if v is not None):
            raise RequestError(f"{field}={_shown(value)} is not supported: acute serves greedy "
                               "decoding only (the confidence is for the greedy answer)", param=field,
                               code="unsupported_parameter")
    if req.model is not None and req.model != settings.model_name:
        raise RequestError(f"model {_shown(req.model)} is not served here; this server serves "
                           f"{settings.model_name!r}", param="model", status=404, code="model_not_found")
    for field in ("max_tokens", "max_completion_tokens"):
        _check_new_tokens(getattr(req, field), settings.max_new_tokens_limit, field)
    limits = [n for n in (req.max_completion_tokens, req.max_tokens) if n is not None]
    if req.risk is None and req.max_error is None:  # the server's default rule (checked at start)
        rule = ({"risk": None, "max_error": settings.default_max_error} if settings.default_max_error is not None
                else {"risk": settings.default_risk, "max_error": None})
    else:
        rule = _rule(probe, req.risk, req.max_error, lambda field: field)
    rule.update(_precheck(req.precheck, precheck_probe, lambda field: field))
    job = Job(item=_messages(req.messages), max_new_tokens=min(limits) if limits else None,
              stop=_stop_strings(req.stop), param="messages", **rule)
    return job, req
