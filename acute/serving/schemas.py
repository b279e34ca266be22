"""Request bodies: the pydantic schemas of ``/v1/score`` and ``/v1/chat/completions`` and the
:class:`~acute.serving.jobs.Job` each becomes (every error a :class:`RequestError` naming its field)."""

from __future__ import annotations

import dataclasses
import functools
import json
from types import SimpleNamespace
from typing import Any, Sequence

from ..errors import InputError
from ..models.prompts import ToolChat, ToolsError, check_tools, normalize_messages
from ..scoring.gate import LEVEL_CHECKS, Gate, resolve_gate
from .errors import RequestError, param_name
from .jobs import Job
from .settings import ServeSettings
from ..scoring.precheck import require_precheck

__all__ = ["chat_job", "score_job"]

#: OpenAI's limit on stop sequences
_MAX_STOP = 4


@functools.lru_cache(maxsize=None)
def _schemas() -> SimpleNamespace:
    """The pydantic request models (built on first use: pydantic comes with the serve extra)."""
    from typing import Annotated, Literal, Optional  # beside pydantic

    from pydantic import BaseModel, ConfigDict, Field  # optional: serve

    # risk, max_error and precheck are read as given and checked by acute's own level checkers
    # (_levels), so that a bad one is refused in the words of the command line and the library
    Level = Any
    Count = Annotated[int, Field(ge=1)]
    Number = Annotated[float, Field(allow_inf_nan=False)]

    class Strict(BaseModel):
        model_config = ConfigDict(extra="forbid", strict=True)

    class Message(Strict):
        role: Literal["system", "developer", "user", "assistant", "tool"]
        content: Any = None  # a string or a list of text parts, checked by _message_text
        name: Optional[str] = None
        tool_calls: Any = None  # an assistant's calls, with the request's tools (checked by _messages)
        tool_call_id: Optional[str] = None  # a tool message's call
        # in OpenAI's schema but not supported here (refused by _messages):
        function_call: Any = None
        refusal: Any = None
        audio: Any = None

    class ScoreRequest(Strict):
        prompt: Optional[str] = None
        messages: Optional[list[Message]] = None
        response: Optional[str] = None  # an answer produced elsewhere: scored as given, not generated
        tools: Optional[list] = None  # function tools offered with the messages (checked by _tools)
        risk: Level = None  # exactly one of risk and max_error (checked by _gate)
        max_error: Level = None
        precheck: Level = None  # generate only when the question-only P(correct) exceeds it
        max_new_tokens: Optional[Count] = None

    class StreamOptions(Strict):
        include_usage: Optional[bool] = None
        include_obfuscation: Optional[bool] = None

    class ChatRequest(Strict):
        messages: list[Message]
        model: Optional[str] = None
        risk: Level = None  # acute's own fields, at most one of risk and max_error
        max_error: Level = None
        precheck: Level = None
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
        tools: Optional[list] = None  # function tools, shown by the chat template (checked by _tools)
        tool_choice: Any = None  # "auto" (the model decides) with tools; "none" without (_tools)
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
    "functions": (None, []),
    "function_call": (None, "none"), "response_format": (None, {"type": "text"}),
    "modalities": (None, ["text"]), "audio": (None,), "prediction": (None,),
    "web_search_options": (None,), "reasoning_effort": (None,), "verbosity": (None,),
    "moderation": (None,),
}


def _validate(model, obj: Any, what: str, prefix: tuple = ()):
    """``model.model_validate(obj)``; the first error becomes a :class:`RequestError` naming its field."""
    from pydantic import ValidationError  # optional: serve

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


def _messages(messages: Sequence, param: str = "messages", tools: bool = False) -> list[dict]:
    """Validated chat messages as ``[{"role", "content"}]`` ("developer" becomes "system"); with
    ``tools`` (the request offers tools) also the turns of a function-calling exchange: an
    assistant message's ``tool_calls`` and ``tool`` messages (their results)."""
    if not messages:
        raise RequestError(f"{param} must be a non-empty list of messages", param=param)
    out = []
    for i, m in enumerate(messages):
        for field in ("function_call", "refusal", "audio"):
            if getattr(m, field) is not None:
                raise RequestError(f"{param}[{i}].{field} is not supported (text messages only)",
                                   param=f"{param}[{i}].{field}")
        turn = m.tool_calls is not None or m.role == "tool" or m.tool_call_id is not None
        if turn and not tools:
            field = "tool_calls" if m.tool_calls is not None else "role" if m.role == "tool" else "tool_call_id"
            raise RequestError(f"{param}[{i}].{field}: a function-calling turn needs the request's 'tools' "
                               "(the functions the model was offered)", param=f"{param}[{i}].{field}")
        if m.tool_calls is not None and m.role != "assistant":
            raise RequestError(f"{param}[{i}].tool_calls: only an assistant message makes tool calls",
                               param=f"{param}[{i}].tool_calls")
        content = "" if m.content is None and m.tool_calls is not None else m.content
        text = _message_text(content, f"{param}[{i}].content")
        out.append({"role": "system" if m.role == "developer" else m.role, "content": text})
        if m.tool_calls is not None:
            out[-1]["tool_calls"] = m.tool_calls
        if m.tool_call_id is not None:
            out[-1]["tool_call_id"] = m.tool_call_id
    if not any(m["content"].strip() or m.get("tool_calls") for m in out):
        raise RequestError(f"{param} has no text", param=param)
    return out


def _tools(tools: list | None, choice: Any = None, name=lambda field: field) -> list[dict] | None:
    """A request's function tools (None: it offers none), each ``{"type": "function", "function":
    {"name", ...}}``; ``RequestError`` naming the field (``name(field)``) for another kind of tool
    or a ``tool_choice`` greedy decoding cannot honour (``"required"``, a named function: acute
    does not constrain decoding, so the model decides: ``"auto"``)."""
    if not tools:
        if choice is not None and choice != "none":
            raise RequestError(f"tool_choice={_shown(choice)} needs 'tools'", param=name("tool_choice"))
        return None
    if choice is not None and choice != "auto":
        raise RequestError(f"tool_choice={_shown(choice)} is not supported: acute serves unconstrained greedy "
                           "decoding, so the model decides whether to call a tool (tool_choice 'auto')",
                           param=name("tool_choice"), code="unsupported_parameter")
    try:
        return check_tools(tools)
    except ToolsError as e:
        raise RequestError(str(e), param=name(e.field)) from None


def _chat_item(messages: Sequence, tools: list | None, name=lambda field: field) -> list[dict] | ToolChat:
    """The prompt of a request's ``messages``: the checked messages, or with ``tools`` (already
    checked by :func:`_tools`) a :class:`~acute.models.ToolChat` of them."""
    item = _messages(messages, name("messages"), tools=tools is not None)
    if tools is None:
        return item
    try:
        return ToolChat(normalize_messages(item, tool_turns=True, name=name("messages")), tools)
    except InputError as e:  # a tool call's arguments that are not a JSON object
        raise RequestError(str(e), param=name("messages")) from None


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


def _levels(req, name) -> dict[str, float | None]:
    """The request's ``risk``, ``max_error`` and ``precheck``, each checked by its one checker
    (:data:`acute.scoring.gate.LEVEL_CHECKS`): a :class:`RequestError` naming the field otherwise.
    ``stop_early`` is the server's (``acute serve --stop-early``), never a request's."""
    out = {}
    for field, check in LEVEL_CHECKS.items():
        if field == "stop_early":
            continue
        value = getattr(req, field)
        try:
            out[field] = None if value is None else check(value, name(field))
        except InputError as e:
            raise RequestError(str(e), param=name(field)) from None
    return out


def _gate(probe, precheck_probe, levels: dict, name, response: str | None = None,
          default: Gate | None = None, stop=None) -> Gate:
    """The job's :class:`Gate`, parsed once from its checked ``levels`` (``default``'s rule when
    it names neither ``risk`` nor ``max_error``). ``RequestError`` naming ``max_error`` when both
    are given or when ``probe`` carries no valid certificate at it (code
    ``certificate_not_available``), naming ``precheck`` when the server has no question-only
    probe (code ``precheck_not_available``) or the request gives an answer to score (nothing to
    skip); all before anything is generated. ``stop``: the server's stop rule (``acute serve
    --stop-early``), which every generated answer gets (a given response is not generated)."""
    stop = None if response is not None else stop
    if levels["precheck"] is not None:
        if response is not None:
            raise RequestError(f"{name('precheck')} decides before generating, and {name('response')} gives "
                               "an answer to score as given; leave out one of them", param=name("precheck"))
        if precheck_probe is None:
            try:
                require_precheck(None, name("precheck"))
            except InputError as e:
                raise RequestError(f"{e} (then serve that probe folder)", param=name("precheck"),
                                   code="precheck_not_available") from None
    if default is not None and levels["risk"] is None and levels["max_error"] is None:
        return Gate(rule=default.rule, precheck=levels["precheck"], stop=stop)
    try:
        return dataclasses.replace(resolve_gate(probe, **levels, name=name), stop=stop)
    except InputError as e:
        both = levels["risk"] is not None and levels["max_error"] is not None
        raise RequestError(str(e), param=name("max_error"),
                           code=None if both else "certificate_not_available") from None


def score_job(obj: Any, prefix: tuple = (), max_new_tokens_limit: int | None = None, probe=None,
              precheck_probe=None, stop=None) -> Job:
    """A :class:`Job` from one ``/v1/score`` request object (``RequestError`` naming the field,
    also for more new tokens than ``max_new_tokens_limit``, for neither or both of ``risk`` and
    ``max_error``, for a ``max_error`` ``probe`` carries no valid certificate for, and for a
    ``precheck`` without a question-only probe ``precheck_probe`` or with a ``response``).
    ``stop``: the server's stop rule, which a generated answer gets."""
    req = _validate(_schemas().ScoreRequest, obj, "/v1/score", prefix)
    where = param_name(prefix)
    name = (lambda field: f"{where}.{field}" if where else field)
    levels = _levels(req, name)
    if levels["risk"] is None and levels["max_error"] is None:
        raise RequestError(f"{name('risk')} is required (a risk level in [0, 1]), or "
                           f"{name('max_error')} (decide by the probe's certified threshold)",
                           param=name("risk"))
    gate = _gate(probe, precheck_probe, levels, name, req.response, stop=stop)
    if (req.prompt is None) == (req.messages is None):
        raise RequestError("give exactly one of 'prompt' and 'messages'", param=name("prompt"))
    if req.response is not None and not req.response.strip():
        raise RequestError(f"{name('response')} is empty", param=name("response"))
    _check_new_tokens(req.max_new_tokens, max_new_tokens_limit, name("max_new_tokens"))
    if req.prompt is not None:
        if not req.prompt.strip():
            raise RequestError(f"{name('prompt')} is empty", param=name("prompt"))
        if req.tools:
            raise RequestError(f"{name('tools')} are offered with 'messages' (a chat), not with a prompt",
                               param=name("tools"))
        return Job(item=req.prompt, gate=gate, max_new_tokens=req.max_new_tokens, param=name("prompt"),
                   response=req.response)
    item = _chat_item(req.messages, _tools(req.tools, name=name), name)
    return Job(item=item, gate=gate, max_new_tokens=req.max_new_tokens, param=name("messages"), response=req.response)


def chat_job(obj: Any, settings: ServeSettings, probe=None, precheck_probe=None):
    """``(job, request)`` from a ``/v1/chat/completions`` body; ``RequestError`` (400, or 404 for
    another model) naming the field for anything not in OpenAI's schema, of the wrong type, that
    would change greedy decoding, that asks for more than ``settings.max_new_tokens_limit``
    new tokens, that gives both ``risk`` and ``max_error``, a ``max_error`` ``probe`` carries
    no valid certificate for, or a ``precheck`` without a question-only probe
    (``precheck_probe``). A request naming neither rule is decided by the rule of the server's
    gate, ``settings.default_gate`` (parsed once, before the server starts), and every generated
    answer gets its stop rule. A request offering ``tools`` becomes a
    :class:`~acute.models.ToolChat` (its function-calling turns checked by :func:`_messages`,
    its tools and ``tool_choice`` by :func:`_tools`)."""
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
    same = (lambda field: field)
    default = settings.default_gate
    gate = _gate(probe, precheck_probe, _levels(req, same), same, default=default, stop=default.stop)
    item = _chat_item(req.messages, _tools(req.tools, req.tool_choice))
    job = Job(item=item, gate=gate, max_new_tokens=min(limits) if limits else None,
              stop=_stop_strings(req.stop), param="messages")
    return job, req
