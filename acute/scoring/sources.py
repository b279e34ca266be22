"""Live sources: the :class:`acute.estimators.inputs.Inputs` of generated (or given) answers at
scoring time, computed the way a store's are (:func:`acute.estimators.plan.store_inputs`), so that
a probe scores a live answer as its pipeline scored the same record.

:func:`live_inputs` builds, for the sources a probe reads only: the raw confidence, the pooled
states of each pooling, the token log-prob statistics, the formatted prompt (``question``), the
prompt and the reply (``prompt+reply``), the visible array (:func:`acute.estimators.visible.visible_inputs`
of a record made of the prompt, the reply, its finish reason, its token log-probs and its parse
status by the probe's task's parser) and, when given, the metadata. A record that lacks what a
source needs (a reply without token log-probs, no metadata given, a non-finite value) is a
:class:`SourceError` naming the source and the record; :class:`acute.scoring.Scorer` scores a
batch at once and the service retries a failing batch one request at a time, so only that
request fails (a 400 naming the source, :mod:`acute.serving.app`).

:func:`check_live` is the check at load: a probe reading a source its scoring setting cannot
provide (:mod:`acute.estimators.scoring_setting`) is refused, naming the source and why.
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

import numpy as np

from ..errors import InputError
from ..estimators.controls import metadata_matrix
from ..estimators.inputs import (
    AGREEMENT, CONFIDENCE, GROUPS, LOGPROB_STATS, METADATA, PROMPT_REPLY, QUESTION, VISIBLE, Inputs, is_states_source,
    source_pooling,
)
from ..estimators.prefix_controls import logprob_stats
from ..estimators.scoring_setting import Parser, check_setting, missing_sources, parser_for
from ..estimators.visible import visible_inputs
from ..models import ToolChat
from ..models.prompts import template_prompt_with_tools
from ..store.pooling import generation_states
from ..tasks import Example
from ..tasks.tool_calls import offered_functions, reply_structure
from .results import question_of

__all__ = ["SourceError", "check_live", "check_tools_shown", "live_inputs", "live_parser", "live_records",
           "probe_sources"]

logger = logging.getLogger(__name__)


class SourceError(InputError):
    """A record lacks a source its probe reads, or holds a non-finite value in one: ``source``
    names it, ``record`` the record (an index, a request's prompt)."""

    def __init__(self, message: str, source: str, record: Any = None):
        super().__init__(message)
        self.source, self.record = source, record


def probe_sources(probe: Any) -> tuple[str, ...]:
    """The sources ``probe`` reads to predict (its ``sources``, without ``groups``)."""
    return tuple(s for s in getattr(probe, "sources", ()) if s != GROUPS)


def live_parser(probe: Any, task: Any = None) -> Parser:
    """The parser a live setting has for ``probe`` scored with ``task`` (the scorer's task, None for
    none): the one its folder records (``probe.json``'s ``scoring.parser``: a stack), live only
    when there is a task to parse with; else that of ``task`` with no reply fields."""
    recorded = getattr(probe, "parser", None)
    if isinstance(recorded, Parser):
        return recorded if task is not None else Parser(None, False, recorded.reply_fields)
    return parser_for(task)


def check_live(probe: Any, setting: str, parser: Parser | None = None) -> None:
    """Refuse ``probe`` for the scoring ``setting`` (``serve``, ``score``, ``store``) when it reads
    a source the setting cannot provide: an :class:`InputError` naming each such source, why, and
    what to do."""
    missing = missing_sources(probe_sources(probe), check_setting(setting), parser or live_parser(probe))
    if missing:
        fitted = getattr(probe, "scoring", None)
        lines = "; ".join(f"the {s!r} source: {why}" for s, why in missing.items())
        fix = (f"it was fitted for {fitted!r}: score it with the task it was fitted with"
               if fitted == setting else
               f"export it again for this setting (acute export --for {setting}), which leaves out what reads them")
        raise InputError(f"this probe reads what {setting!r} scoring cannot provide ({lines}); {fix}")


_PROBE_TOOL = {"type": "function", "function": {"name": "acute_probe", "description": "",
                                                "parameters": {"type": "object", "properties": {}}}}


def check_tools_shown(probe: Any, tokenizer, chat: bool | None, task: Any = None) -> None:
    """Refuse a probe that reads a reply's calls counted against the offered tools when no prompt
    of this setting can offer them: the tokenizer's chat template does not show tools, or prompts
    are formatted without it (``chat`` False). An :class:`InputError` naming the source, at load,
    rather than a refusal of every request."""
    parser = live_parser(probe, task)
    if not (parser.tools and parser.reply_fields and VISIBLE in probe_sources(probe)):
        return
    shown = chat is not False and getattr(tokenizer, "chat_template", None) and template_prompt_with_tools(
        tokenizer, [{"role": "user", "content": "?"}], [_PROBE_TOOL]) is not None
    if not shown:
        why = ("prompts are formatted without the chat template (chat=False)" if chat is False else
               "this model's chat template does not show tools")
        raise InputError(f"this probe's {VISIBLE!r} source reads the reply's calls counted against the tools a "
                         f"prompt offers, and {why}: no prompt here can offer them (score it with chat prompts and a "
                         "chat template that renders apply_chat_template's tools, as its store was collected)")


def live_records(gens: Sequence[Any], prompts: Sequence[str], replies: Sequence[str], items: Sequence[Any],
                 task: Any = None, metadata: Sequence[dict | None] | None = None) -> list[dict]:
    """One store-like record per answer: ``id`` (its index), ``prompt`` (formatted), ``generation``
    (the reply as scored), ``finish_reason``, ``parse_error`` (``task``'s parser on the reply of an
    :class:`~acute.tasks.Example` of the question; a function-calling task's
    :attr:`~acute.tasks.Task.calls_parser` on the reply; False without a task), ``meta`` and
    ``offers_tools`` (the item is a :class:`~acute.models.ToolChat`). A function-calling task's
    reply to a :class:`~acute.models.ToolChat` has its calls counted against the offered tools in
    ``meta`` (:func:`~acute.tasks.tool_calls.reply_structure`), as the store's records have them."""
    calls_parser = getattr(task, "calls_parser", None)
    out = []
    for i, (g, prompt, reply, item) in enumerate(zip(gens, prompts, replies, items)):
        meta = dict((metadata[i] if metadata is not None else None) or {})
        offers_tools = isinstance(item, ToolChat)
        if calls_parser is not None:
            calls = calls_parser(reply)
            parse_error = calls is None
            if offers_tools:
                meta.update(reply_structure(calls, offered_functions(item.tools)))
        elif task is not None:
            question = item.strip() if isinstance(item, str) else question_of(item)
            parse_error = task.extract(Example(id="live", question=question, answers=[]), reply) is None
        else:
            parse_error = False
        out.append({"id": i, "prompt": prompt, "generation": reply, "finish_reason": g.finish_reason,
                    "parse_error": bool(parse_error), "meta": meta, "offers_tools": offers_tools})
    return out


def _offered_tools(records: list[dict], fields: Sequence[str], names: Sequence[str]) -> None:
    """:class:`SourceError` naming the first record whose reply-structure ``fields`` the probe reads
    and whose prompt offered no tools to count its calls against."""
    if not fields:
        return
    for rec, name in zip(records, names):
        if not rec["offers_tools"]:
            raise SourceError(f"{name}: the probe's {VISIBLE!r} source reads the reply's calls counted against "
                              f"the tools offered ({', '.join(fields)}), and this prompt offers none (give the "
                              "tools: a chat request's 'tools', a ToolChat)", VISIBLE, name)


def _logprobs(gens: Sequence[Any], source: str, names: Sequence[str]) -> list[np.ndarray]:
    out = []
    for g, name in zip(gens, names):
        lp = getattr(g, "token_logprobs", None)
        if lp is None:
            raise SourceError(f"{name}: the answer has no token log-probs, which the probe's {source!r} source "
                              "reads (a response without log-probs cannot be scored by this probe)", source, name)
        out.append(np.asarray(lp))
    return out


def _finite(name: str, values: np.ndarray, names: Sequence[str]) -> None:
    """:class:`SourceError` naming the first record whose numbers in source ``name`` are not finite."""
    arr = np.asarray(values)
    if arr.dtype == object:
        numeric = np.array([[isinstance(v, (float, int, np.floating, np.integer)) and not np.isfinite(v)
                             for v in row] for row in arr.reshape(arr.shape[0], -1)], dtype=bool)
        bad = numeric.any(axis=1)
    else:
        bad = ~np.isfinite(arr.reshape(arr.shape[0], -1)).all(axis=1)
    if bad.any():
        i = int(np.argmax(bad))
        raise SourceError(f"{names[i]}: the {name!r} source holds a NaN or infinite value", name, names[i])


def live_inputs(probe: Any, gens: Sequence[Any], prompts: Sequence[str], replies: Sequence[str],
                items: Sequence[Any] | None = None, *, task: Any = None,
                metadata: Sequence[dict | None] | None = None, metadata_fields: Sequence[str] | None = None,
                names: Sequence[str] | None = None) -> Inputs:
    """The :class:`Inputs` of the answers ``gens`` (:class:`acute.extraction.Generation` s) to the
    formatted ``prompts``, scored as ``replies`` (the generated text, or the responses given),
    holding the sources ``probe`` reads (module doc). ``items``: the prompts as asked (questions
    the task's parser reads; default ``prompts``); ``task``: the probe's task (its parser);
    ``metadata``: one ``meta`` dict per answer (fields ``metadata_fields``, default the probe's
    recorded ones); ``names``: how errors name each answer (default ``prompts[i]``). A source a
    record cannot have is a :class:`SourceError` naming it and the record."""
    n = len(gens)
    items = list(prompts) if items is None else list(items)
    names = [f"prompts[{i}]" for i in range(n)] if names is None else list(names)
    needed = probe_sources(probe)
    out: dict[str, Any] = {}
    records = None
    for s in needed:
        if s == CONFIDENCE:
            _logprobs(gens, s, names)
            out[s] = np.array([g.raw_confidence for g in gens], dtype=np.float64)
        elif is_states_source(s):
            out[s] = generation_states(gens, source_pooling(s))
        elif s == LOGPROB_STATS:
            out[s] = logprob_stats(_logprobs(gens, s, names), None)
        elif s == QUESTION:
            out[s] = np.asarray(list(prompts), dtype=object)
        elif s in (PROMPT_REPLY, VISIBLE, METADATA):
            if records is None:
                records = live_records(gens, prompts, replies, items, task, metadata)
            if s == PROMPT_REPLY:
                out[s] = np.asarray([f"{r['prompt']}\n{r['generation']}" for r in records], dtype=object)
            elif s == VISIBLE:
                fields = getattr(live_parser(probe, task), "reply_fields", ())
                _offered_tools(records, fields, names)
                out[s] = visible_inputs(records, _logprobs(gens, s, names), fields=fields, where="the live answers")
            else:
                out[s] = _metadata(probe, records, metadata, metadata_fields, names)
        elif s == AGREEMENT:
            raise SourceError("the probe reads the agreement of sampled answers, which live scoring does not "
                              "generate", s)
        else:
            raise SourceError(f"the probe reads the {s!r} source, which live scoring does not compute", s)
        if s != QUESTION and s != PROMPT_REPLY:
            _finite(s, out[s], names)
    return Inputs(out, n=n)


def _metadata(probe: Any, records: list[dict], metadata, fields, names) -> np.ndarray:
    if metadata is None:
        raise SourceError(f"{names[0] if names else 'the answers'}: the probe reads the task metadata, and none "
                          "was given with the request", METADATA, names[0] if names else None)
    if fields is None:
        fields = (getattr(probe, "training_summary", None) or {}).get("metadata_fields")
    for i, rec in enumerate(records):
        missing = [f for f in fields or () if rec["meta"].get(f) is None]
        if missing:
            raise SourceError(f"{names[i]}: the probe reads the metadata field(s) {missing}, which were not given",
                              METADATA, names[i])
    return metadata_matrix(records, list(fields or ()), where="the live answers")
