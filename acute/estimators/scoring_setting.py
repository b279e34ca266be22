"""Scoring settings: which sources (:mod:`acute.estimators.inputs`) a place that scores a probe can
compute for a record, and why it cannot compute the others.

A probe is fitted for the setting it will score in (``acute train`` / ``acute export --for``) and
records it; a setting that cannot provide a source the probe reads refuses the probe at load
(:func:`missing_sources`, named by source), never scores without it. The settings:

* ``serve`` (:data:`SERVE`, the default): ``acute serve``'s chat and score requests. The model's
  states, the raw confidence and the token log-probs come with every generation, and the texts
  are the formatted prompt and the reply. A reply's parse status comes from the probe's task's
  parser, only where that parser reads the reply alone (an open-QA task, :attr:`Parser.live`);
  a function-calling task's parse and the reply's calls counted against the tools offered
  (:attr:`Parser.tools`) come from a request that offers tools (a chat request's ``tools``, a
  :class:`acute.models.ToolChat`; one that offers none is refused, naming the source); a
  request carries no benchmark metadata and no sampled answers.
* ``score`` (:data:`SCORE`): ``acute score`` and :class:`acute.scoring.Scorer` with the probe's
  task: what ``serve`` provides (the same parser rule; questions are asked through the task's
  prompt).
* ``store`` (:data:`STORE`): everything a store holds (rescoring recorded records): every source.

The sources: ``confidence``, ``states@*``, ``logprob-stats``, ``question``, ``prompt+reply`` are
provided everywhere; ``visible`` needs the log-probs and the reply's parse status and, where the
training records had them, the reply-structure columns; ``metadata`` and ``agreement`` only in
``store``. ``groups`` is not a signal: never needed to predict.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from ..errors import InputError
from ..tasks import OpenQATask
from .inputs import AGREEMENT, CONFIDENCE, GROUPS, LOGPROB_STATS, METADATA, PROMPT_REPLY, QUESTION, VISIBLE, is_states_source

__all__ = ["DEFAULT_SCORING_SETTING", "SCORE", "SCORING_SETTINGS", "SERVE", "STORE", "Parser", "check_setting",
           "missing_sources", "parser_for", "provided_sources", "setting_record"]

SERVE = "serve"
SCORE = "score"
STORE = "store"
#: The scoring settings, in the order ``--for`` lists them.
SCORING_SETTINGS: tuple[str, ...] = (SERVE, SCORE, STORE)
#: What ``acute train`` / ``acute export`` fit for when ``--for`` is not given.
DEFAULT_SCORING_SETTING = SERVE

#: Sources every live setting computes from a generation and its formatted prompt.
_LIVE = (CONFIDENCE, LOGPROB_STATS, QUESTION, PROMPT_REPLY)


@dataclass(frozen=True)
class Parser:
    """What the probe's task can say of a reply at scoring time: ``task`` (its name, or None when
    the probe records no task or it cannot be rebuilt here), ``live`` (its parser reads the reply
    alone, so a live setting computes the parse status; an open-QA task), ``reply_fields`` (the
    reply-structure columns the training records had: function calling's counts against the
    offered tools), ``tools`` (a function-calling task: its parser reads the reply's calls alone,
    :attr:`acute.tasks.Task.calls_parser`, and the reply-structure columns count them against the
    tools a live request offers; a probe exported before this existed records none)."""

    task: str | None = None
    live: bool = False
    reply_fields: tuple[str, ...] = ()
    tools: bool = False

    def to_json(self) -> dict:
        return {"task": self.task, "live": bool(self.live), "reply_fields": list(self.reply_fields),
                "tools": bool(self.tools)}

    @classmethod
    def from_json(cls, data: Any) -> Parser:
        data = data if isinstance(data, dict) else {}
        return cls(data.get("task"), bool(data.get("live")), tuple(data.get("reply_fields") or ()),
                   bool(data.get("tools")))


def parser_for(task: Any, reply_fields: Sequence[str] = ()) -> Parser:
    """The :class:`Parser` of a task object (None: no task), with the training records'
    ``reply_fields`` (:func:`acute.estimators.visible.reply_fields`)."""
    return Parser(getattr(task, "name", None), isinstance(task, OpenQATask), tuple(reply_fields),
                  getattr(task, "calls_parser", None) is not None)


def check_setting(name: Any, option: str = "scoring_setting") -> str:
    """``name`` if it is a scoring setting, else an :class:`InputError` naming ``option`` and the choices."""
    if name not in SCORING_SETTINGS:
        raise InputError(f"{option} must be one of {', '.join(SCORING_SETTINGS)}, got {name!r}")
    return name


def _why_not(source: str, setting: str, parser: Parser) -> str | None:
    """Why ``setting`` cannot provide ``source`` (None: it can)."""
    if setting == STORE or source in _LIVE or is_states_source(source) or source == GROUPS:
        return None
    where = "a chat request" if setting == SERVE else "acute score"
    if source == METADATA:
        return f"{where} carries no benchmark metadata (the store's task metadata)"
    if source == AGREEMENT:
        return f"{where} generates one answer, not the sampled answers the agreement compares"
    if source == VISIBLE:
        if parser.tools:
            return None  # per request: one that offers no tools is refused (acute.scoring.sources)
        if not parser.live:
            if parser.task is None:
                return ("the reply's parse status needs the task's parser, and there is no task here (none "
                        "recorded, not rebuildable here, or scoring without one: --task none)")
            return (f"the reply's parse status needs a parser that reads the reply alone, and task "
                    f"{parser.task!r} has none (open-QA tasks parse a reply without the benchmark's example, "
                    "function-calling tasks against the tools a request offers)")
        return None
    return f"{source!r} is not computed at scoring time"


def missing_sources(sources: Iterable[str], setting: str, parser: Parser | None = None) -> dict[str, str]:
    """``{source: why}`` for each of ``sources`` the scoring ``setting`` cannot provide (empty: all
    provided)."""
    setting = check_setting(setting)
    parser = parser or Parser()
    out = {}
    for s in dict.fromkeys(sources):
        why = _why_not(s, setting, parser)
        if why is not None:
            out[s] = why
    return out


def provided_sources(sources: Sequence[str], setting: str, parser: Parser | None = None) -> tuple[str, ...]:
    """Those of ``sources`` the scoring ``setting`` provides, in order."""
    missing = missing_sources(sources, setting, parser)
    return tuple(s for s in dict.fromkeys(sources) if s not in missing)


def setting_record(setting: str, parser: Parser, sources: Sequence[str]) -> dict:
    """``probe.json``'s ``scoring`` block: the setting a probe was fitted for, its task's parser and
    the sources it reads."""
    return {"setting": check_setting(setting), "parser": parser.to_json(), "sources": list(dict.fromkeys(sources))}
