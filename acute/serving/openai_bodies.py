"""Response bodies: ``/v1/score`` answers, OpenAI chat completions and chunks, the model list."""

from __future__ import annotations

import json
from typing import Any, Sequence

from .jobs import JobResult
from .settings import ServeSettings
from ..estimators.certificates import certificate_summary
from ..tasks.tool_calls import reply_message

__all__ = ["acute_object", "chat_body", "chat_chunks", "estimator_name", "models_body", "public_summary", "score_body",
           "sse_events"]


def estimator_name(probe) -> str:
    """The probe's estimator name (e.g. ``acute-cosine-stacked``): as its selection recorded it,
    else built from its view and calibration."""
    if isinstance(getattr(probe, "estimator_name", None), str):  # a stack names itself
        return probe.estimator_name
    selection = getattr(probe, "selection", None) or getattr(probe, "selection_", None)
    if isinstance(selection, dict) and selection.get("chosen"):
        return str(selection["chosen"])
    calibration = getattr(probe, "calibration", None)
    suffix = "" if not calibration else ("-stacked" if calibration == "stacked" else f"-{calibration}")
    return f"acute-{getattr(probe, 'view', 'probe')}{suffix}"


def _finish_reason(reason: str) -> str:
    return "length" if reason == "length" else "stop"


def _precheck_fields(scored) -> dict:
    """``generated`` and ``precheck`` (its confidence, threshold and decision) of an answer
    decided in two stages; nothing for one without a precheck."""
    if scored.precheck is None:
        return {}
    return {"generated": scored.generated, "precheck": dict(scored.precheck)}


def _stop_fields(scored) -> dict:
    """``stopped_at`` (null, or the tokens generated before the stop) and ``stop`` (the stop rule,
    and for a stopped answer its checkpoint, confidence and reason) of an answer generated under
    ``acute serve --stop-early``; nothing without it."""
    if scored.stop is None:
        return {}
    return {"stopped_at": scored.stopped_at, "stop": dict(scored.stop)}


def score_body(result: JobResult, *, model: str, estimator: str, latency_ms: float) -> dict:
    """The ``/v1/score`` answer for one scored job (with ``generated`` and ``precheck`` when the
    request gave a precheck; refused before generating: ``answer`` ``""``, the confidences
    null, decision ``"abstain"``, ``n_tokens`` 0)."""
    s = result.scored
    return {"answer": s.answer, "raw_confidence": s.raw_confidence, "confidence": s.confidence,
            "decision": s.decision, **s.decision_fields(), "estimator": estimator, "model": model,
            "latency_ms": round(latency_ms, 3), "n_tokens": s.n_tokens,
            "finish_reason": _finish_reason(s.finish_reason), **_precheck_fields(s), **_stop_fields(s)}


def acute_object(result: JobResult, estimator: str) -> dict:
    """The ``acute`` object added to a chat choice: the confidences, the decision and its rule
    (``risk``, ``rule``, ``threshold``; for a certificate ``max_error`` and ``certificate``), and
    for a request with a precheck ``generated`` and ``precheck``; under ``--stop-early``
    ``stopped_at`` and ``stop``)."""
    s = result.scored
    return {"confidence": s.confidence, "raw_confidence": s.raw_confidence, "decision": s.decision,
            **s.decision_fields(), "estimator": estimator, **_precheck_fields(s), **_stop_fields(s)}


def _usage(result: JobResult) -> dict:
    n = result.scored.n_tokens
    return {"prompt_tokens": result.prompt_tokens, "completion_tokens": n,
            "total_tokens": result.prompt_tokens + n}


def _reply(result: JobResult, offered_tools: bool, id: str) -> tuple[str | None, list[dict], str]:
    """``(content, tool_calls, finish_reason)`` of an answer: for a request that offered tools, the
    calls of the reply (:func:`acute.tasks.tool_calls.reply_message`) as OpenAI tool calls, the
    text outside them as its content and ``"tool_calls"`` as its finish reason when it made any."""
    s = result.scored
    finish = _finish_reason(s.finish_reason)
    if not offered_tools:
        return s.answer, [], finish
    content, calls = reply_message(s.answer)
    tool_calls = [{"id": f"call_{id.rsplit('-', 1)[-1][:16]}_{i}", "type": "function",
                   "function": {"name": c["name"], "arguments": json.dumps(c.get("arguments") or {}, ensure_ascii=False)}}
                  for i, c in enumerate(calls)]
    return content, tool_calls, "tool_calls" if tool_calls else finish


def chat_body(result: JobResult, *, model: str, estimator: str, id: str, created: int,
              offered_tools: bool = False) -> dict:
    """An OpenAI ``chat.completion`` with the ``acute`` object on its choice; for a request that
    offered tools, the reply's calls as the message's ``tool_calls`` (:func:`_reply`)."""
    content, tool_calls, finish = _reply(result, offered_tools, id)
    message = {"role": "assistant", "content": content, "refusal": None}
    if tool_calls:
        message["tool_calls"] = tool_calls
    choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish,
              "acute": acute_object(result, estimator)}
    return {"id": id, "object": "chat.completion", "created": created, "model": model,
            "choices": [choice], "usage": _usage(result), "system_fingerprint": None}


def chat_chunks(result: JobResult, *, model: str, estimator: str, id: str, created: int,
                include_usage: bool = False, offered_tools: bool = False) -> list[dict]:
    """The ``chat.completion.chunk`` objects of a streamed answer: the role, the text (and the
    reply's tool calls, each whole in one delta, for a request that offered tools), then the
    finish reason with the ``acute`` object (and a usage chunk when ``include_usage``)."""
    content, tool_calls, finish = _reply(result, offered_tools, id)
    head = {"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
            "system_fingerprint": None}

    def chunk(delta: dict, finish: str | None = None, **extra) -> dict:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish, **extra}
        return {**head, "choices": [choice], **({"usage": None} if include_usage else {})}

    chunks = [chunk({"role": "assistant", "content": ""})]
    if content:
        chunks.append(chunk({"content": content}))
    if tool_calls:
        chunks.append(chunk({"tool_calls": [{"index": i, **call} for i, call in enumerate(tool_calls)]}))
    chunks.append(chunk({}, finish, acute=acute_object(result, estimator)))
    if include_usage:
        chunks.append({**head, "choices": [], "usage": _usage(result)})
    return chunks


def sse_events(chunks: Sequence[dict]) -> list[bytes]:
    """Server-sent events of ``chunks``, ending with ``data: [DONE]``."""
    events = [f"data: {json.dumps(c, ensure_ascii=False)}\n\n".encode() for c in chunks]
    return events + [b"data: [DONE]\n\n"]


#: training-summary entries ``/v1/models`` shows (``store`` and anything unknown stay private)
_SHOWN_SUMMARY = ("n_records", "n_correct", "accuracy", "mean_raw_confidence", "n_train",
                  "accuracy_train", "split", "task", "task_settings", "generation", "responses")
#: keys whose values are file locations, left out wherever they occur
_PATH_KEYS = frozenset({"store", "path", "file", "dir", "directory", "root", "out"})
_HIDDEN = object()  # a value left out


def _public(value: Any, key: str | None = None) -> Any:
    """``value`` without file locations: no :data:`_PATH_KEYS` entries and no string holding a
    path separator (``/`` or ``\\``), except stop strings, which are text the model generates."""
    if isinstance(value, dict):
        kept = {k: _public(v, k) for k, v in value.items() if k not in _PATH_KEYS}
        return {k: v for k, v in kept.items() if v is not _HIDDEN}
    if isinstance(value, list):
        kept = [_public(v, key) for v in value]
        return [v for v in kept if v is not _HIDDEN]
    if isinstance(value, str) and key != "stop_strings" and ("/" in value or "\\" in value):
        return _HIDDEN
    return value



def public_summary(summary: Any) -> dict | None:
    """The part of a probe's ``training_summary`` a client may see: what it was trained on and
    how it generates, never where its files were (store, responses file, task file)."""
    if not isinstance(summary, dict):
        return None
    return _public({k: summary[k] for k in _SHOWN_SUMMARY if k in summary})


def _certificates(probe) -> list[dict]:
    """The certified thresholds a client may ask for by ``max_error`` (no file locations), each
    with ``refused``: why a request naming it is refused here (the probe is scored outside its
    validity domain, :meth:`acute.estimators.probe_file.ExportedProbe.outside_domain`), or null."""
    refused = getattr(probe, "certificates_refused", None)
    return [{**certificate_summary(e), "valid": e["valid"], "threshold": e["threshold"], "refused": refused}
            for e in getattr(probe, "certificates", None) or []]


def models_body(settings: ServeSettings, probe, created: int, precheck_probe=None) -> dict:
    """``GET /v1/models``: the served model with its probe's estimator, fingerprint, public
    training summary (:func:`public_summary`), certified thresholds (``certificates``: alpha,
    delta, threshold, valid, calibration n and coverage, backend, source, and ``refused``: why
    they cannot be asked for here, or null) and ``precheck`` (the
    question-only probe requests may precheck with: its estimator and the states it reads; null
    without one)."""
    fingerprint = getattr(probe, "model_fingerprint", None)
    summary = getattr(probe, "training_summary", None) or getattr(probe, "training_summary_", None)
    precheck = None if precheck_probe is None else {
        "estimator": "question-only", "pooling": getattr(precheck_probe, "pooling", None)}
    return {"object": "list", "data": [{
        "id": settings.model_name, "object": "model", "created": created, "owned_by": "acute",
        "estimator": estimator_name(probe), "fingerprint": fingerprint,
        "training_summary": public_summary(summary), "certificates": _certificates(probe),
        "precheck": precheck,
    }]}
