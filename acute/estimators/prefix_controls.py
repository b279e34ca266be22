"""What a deployment sees of an answer after ``k`` generated tokens without the model's states,
and the controls that read it (the rows of :mod:`acute.evaluation.prefix` beside the probe).

After ``k`` tokens a gate holds the prompt, the first ``k`` generated tokens (their ids, the text
they decode to, their log-probs) and whether the answer has already ended (its length is at most
``k``: it then holds all of it). It does not hold how a running answer will end, how long it will
be, or anything past token ``k``. :func:`prefix_records` writes that down as one record per answer,
in the form of a store's records (the prompt, ``generation`` = the reply so far, no finish reason,
the structure so far in ``meta``) with the first ``k`` token log-probs, so the finished-answer
controls' own inputs (:func:`acute.estimators.visible.visible_inputs`,
:func:`~acute.estimators.visible.reply_texts`) are built from it and from nothing else
(:func:`prefix_sources`). The reply so far is the first ``k`` of the record's ``token_ids``
decoded with the tokenizer that generated them (special tokens skipped), the record's own
``generation`` once the answer has ended.

The controls (:func:`prefix_controls`, in table order; :data:`PREFIX_CONTROL_USES` says what each
may use):

* ``log-prob`` (:class:`LogprobRule`): a logistic regression on the prefix's mean token log-prob
  and its lowest mean over sliding windows of :data:`LOGPROB_WINDOW` tokens (DeepConf's signal,
  the ``logprob-stats`` source).
* ``surface-so-far``: ``answer-surface``'s model (:class:`acute.estimators.visible.SurfacePlatt`) on
  the prefix's visible array: logit(prefix confidence), the mean prefix log-prob, log(tokens so
  far), whether the calls parse so far (function calling; 0 where no parser applies), the finish
  columns all 0, and one-hots of :data:`PREFIX_FIELDS` (whether the answer has ended, brackets or
  tool-call tags opened and closed so far) and, for function calling (records with
  :data:`acute.tasks.tool_calls.REPLY_FIELDS`), :data:`CALL_FIELDS` (the calls parsed so far).
* ``text-so-far``: ``answer-text``'s model (:class:`acute.estimators.controls.TextPlatt` over the
  ``prompt+reply`` source): the prompt followed by the reply so far, and logit(prefix confidence).
* ``visible-so-far``: the stack of :mod:`acute.estimators.stacks` (``visible-all``'s settings) over
  the three and the raw prefix confidence: everything above at once.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.validation import check_is_fitted

from ..errors import InputError
from ..tasks.tool_calls import bracket_depths, parse_reply_calls
from ..validation import check_correct
from .baselines import ConfidenceEstimator
from .controls import TextPlatt
from .inputs import CONFIDENCE, LOGPROB_STATS, PROMPT_REPLY, VISIBLE, Inputs, check_inputs, check_no_weights
from .stacks import StackEstimator
from .visible import SurfacePlatt, reply_fields, reply_texts, visible_inputs

__all__ = ["CALL_FIELDS", "LOGPROB_WINDOW", "MAX_OPEN", "PREFIX_CONTROLS", "PREFIX_CONTROL_USES", "PREFIX_FIELDS",
           "LogprobRule", "bracket_state", "logprob_stats", "prefix_confidence", "prefix_controls",
           "prefix_records", "prefix_sources", "reply_so_far"]

#: Tokens per sliding window of the log-prob rule's lowest window mean.
LOGPROB_WINDOW = 4
#: The controls' row names, in table order.
PREFIX_CONTROLS: tuple[str, ...] = ("log-prob", "surface-so-far", "text-so-far", "visible-so-far")
#: What each control may use after ``k`` tokens (the prefix table's "uses").
PREFIX_CONTROL_USES: dict[str, str] = {
    "log-prob": "the first k tokens' log-probs: their mean and lowest 4-token window mean (no text, no states)",
    "surface-so-far": "the first k tokens' confidence and mean log-prob, tokens so far, whether the answer has "
                      "ended by k, brackets and tool-call tags opened and closed so far, the calls parsed so far "
                      "(function calling); never the finish reason of a running answer nor anything past token k "
                      "(no text, no states)",
    "text-so-far": "the prompt and the reply so far (the first k tokens decoded) + their confidence (no states)",
    "visible-so-far": "stack of log-prob, surface-so-far, text-so-far and the first k tokens' confidence: "
                      "everything visible at k (no states)",
}
#: The prefix-structure columns every prefix record's ``meta`` holds (one-hot levels of
#: ``surface-so-far``): 1 when the answer has ended by ``k``; 1 when a ``[`` / ``{`` or a
#: ``<tool_call>`` tag has opened; the brackets still open at the end (capped at
#: :data:`MAX_OPEN`); 1 when a bracketed value or a tool-call tag has closed again.
PREFIX_FIELDS: tuple[str, ...] = ("ended", "opened", "open_brackets", "closed")
#: The function-calling columns (records with :data:`~acute.tasks.tool_calls.REPLY_FIELDS`): of
#: the calls the reply so far parses into (:func:`acute.tasks.tool_calls.parse_reply_calls`, none
#: when it does not parse yet), their number, their distinct functions, their arguments and the
#: calls to a function the prompt did not offer (the record's ``meta["toolset"]``; NaN without it).
CALL_FIELDS: tuple[str, ...] = ("calls", "functions", "arguments", "unknown_functions")
#: Open brackets counted in :data:`PREFIX_FIELDS` (more count as this many).
MAX_OPEN = 3


# ------------------------------------------------------------------------- log-prob signals
def prefix_confidence(token_logprobs: Sequence[np.ndarray], k: int | None) -> np.ndarray:
    """float64 [n]: the product of the probabilities of each answer's first ``k`` tokens (all of
    them for ``k`` None)."""
    return np.array([math.exp(math.fsum(np.asarray(lp[:k], dtype=np.float64))) for lp in token_logprobs])


def logprob_stats(token_logprobs: Sequence[np.ndarray], k: int | None, window: int = LOGPROB_WINDOW) -> np.ndarray:
    """float64 [n, 2]: per answer, over its first ``k`` tokens (all of them for ``k`` None), the
    mean token log-probability and the lowest mean over sliding windows of ``window`` tokens (the
    whole prefix when shorter); 0 for an empty answer."""
    out = np.zeros((len(token_logprobs), 2))
    for i, lp in enumerate(token_logprobs):
        x = np.asarray(lp[:k], dtype=np.float64)
        if x.size == 0:
            continue
        w = min(window, x.size)
        sums = np.convolve(x, np.ones(w), mode="valid") / w
        out[i] = x.mean(), sums.min()
    return out


class LogprobRule(ClassifierMixin, BaseEstimator):
    """The log-prob rule: logistic regression (L2 strength ``C``) on the standardised
    ``logprob-stats`` source; trained on records of one class it predicts their share.
    Fitted: ``model_`` (None for one class), ``base_rate_``, ``classes_``."""

    sources = (LOGPROB_STATS,)

    def __init__(self, C: float = 1.0):
        self.C = C

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> LogprobRule:
        check_no_weights(self, sample_weight)
        stats = check_inputs(X, self)[LOGPROB_STATS]
        y = check_correct(y, stats.shape[0])
        if y.size == 0:
            raise InputError("correct is empty: no training records")
        self.base_rate_ = float(y.mean())
        self.model_ = None
        if np.unique(y).size == 2:
            self.model_ = make_pipeline(StandardScaler(), LogisticRegression(C=float(self.C), max_iter=1000))
            self.model_.fit(stats, y)
        self.classes_ = np.array([0, 1])
        return self

    def predict_proba(self, X: Any) -> np.ndarray:
        check_is_fitted(self, "base_rate_")
        stats = check_inputs(X, self)[LOGPROB_STATS]
        if self.model_ is None:
            p = np.full(stats.shape[0], self.base_rate_)
            return np.column_stack([1 - p, p])
        return self.model_.predict_proba(stats)


# ------------------------------------------------------------------------- the reply so far
def _where(rec: dict, where: str) -> str:
    return f"{where}: record {rec.get('id')!r}"


def reply_so_far(records: Sequence[dict], token_logprobs: Sequence[np.ndarray], k: int, tokenizer: Any,
                 where: str = "the store") -> list[str]:
    """Each answer's text after ``k`` generated tokens: its first ``k`` ``token_ids`` decoded by
    ``tokenizer`` (``decode(ids, skip_special_tokens=True)``: the tokenizer that generated them)
    while it runs longer than ``k``, its ``generation`` once it has ended. InputError naming the
    record when it has no ``token_ids`` (or no ``generation``), or not as many ids as log-probs."""
    out = []
    for rec, lp in zip(records, token_logprobs):
        ids = rec.get("token_ids")
        if ids is None:
            raise InputError(f"{_where(rec, where)} has no token_ids, so its reply after k tokens is unknown; "
                             "collect the task again with `acute collect` (its records keep them)")
        if len(ids) != len(lp):
            raise InputError(f"{_where(rec, where)} has {len(ids)} token_ids but {len(lp)} token log-probs")
        if len(ids) <= k:
            text = rec.get("generation")
            if not isinstance(text, str):
                raise InputError(f"{_where(rec, where)} has no reply text ('generation')")
        else:
            text = tokenizer.decode([int(t) for t in ids[:k]], skip_special_tokens=True)
        out.append(text)
    return out


def bracket_state(text: str) -> tuple[bool, int, bool]:
    """``(opened, open, closed)`` of a reply so far: whether a ``[`` / ``{`` or a ``<tool_call>``
    tag has opened, how many brackets are open at its end (JSON strings inside brackets
    respected), whether a bracketed value has closed back to no open bracket or a
    ``</tool_call>`` tag has closed."""
    depth, opened, closed = 0, False, False
    for _, after in bracket_depths(text):
        opened = opened or after > depth
        closed = closed or (after < depth and after == 0)
        depth = after
    return opened or "<tool_call>" in text, depth, closed or "</tool_call>" in text


def _call_structure(text: str, offered: set[str] | None) -> tuple[bool, list[float]]:
    """``(parses, CALL_FIELDS values)`` of a reply so far."""
    calls = parse_reply_calls(text)
    if calls is None:
        return False, [0.0, 0.0, 0.0, 0.0 if offered is not None else math.nan]
    unknown = math.nan if offered is None else float(sum(1 for c in calls if str(c["name"]) not in offered))
    return True, [float(len(calls)), float(len({str(c["name"]) for c in calls})),
                  float(sum(len(c.get("arguments") or {}) for c in calls)), unknown]


def prefix_records(records: Sequence[dict], token_logprobs: Sequence[np.ndarray], k: int, tokenizer: Any,
                   where: str = "the store") -> tuple[list[dict], list[np.ndarray]]:
    """``(records, token log-probs)`` of what a deployment holds after ``k`` generated tokens (module
    doc): per answer ``{"id", "prompt", "generation": the reply so far, "finish_reason": None,
    "parse_error", "meta"}`` with the structure so far in ``meta`` (:data:`PREFIX_FIELDS`, and
    :data:`CALL_FIELDS` when every record has the function-calling reply fields; ``parse_error``
    then says whether the calls do not parse yet, else it is False), and its first ``k`` log-probs."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise InputError(f"k (generated tokens) must be a positive int, got {k!r}")
    texts = reply_so_far(records, token_logprobs, int(k), tokenizer, where)
    calling = bool(reply_fields(records))
    out = []
    for rec, lp, text in zip(records, token_logprobs, texts):
        opened, depth, closed = bracket_state(text)
        meta = {"ended": float(len(lp) <= k), "opened": float(opened), "open_brackets": float(min(depth, MAX_OPEN)),
                "closed": float(closed)}
        parses = True
        if calling:
            toolset = (rec.get("meta") or {}).get("toolset")
            parses, values = _call_structure(text, None if toolset is None else set(str(toolset).split("|")))
            meta.update(zip(CALL_FIELDS, values))
        out.append({"id": rec.get("id"), "prompt": rec.get("prompt"), "generation": text, "finish_reason": None,
                    "parse_error": not parses, "meta": meta})
    return out, [np.asarray(lp[:k]) for lp in token_logprobs]


def prefix_sources(records: Sequence[dict], token_logprobs: Sequence[np.ndarray], k: int, tokenizer: Any,
                   where: str = "the store") -> Inputs:
    """The :class:`~acute.estimators.inputs.Inputs` the controls read after ``k`` tokens, all built
    from :func:`prefix_records` only: ``confidence`` (:func:`prefix_confidence`),
    ``logprob-stats`` (:func:`logprob_stats`), ``visible`` (the prefix records'
    :func:`~acute.estimators.visible.visible_inputs`, their structure columns those of
    :func:`prefix_records`) and ``prompt+reply`` (their
    :func:`~acute.estimators.visible.reply_texts`); without a ``tokenizer`` the first two only
    (what ``log-prob`` reads)."""
    if tokenizer is None:
        return Inputs({CONFIDENCE: prefix_confidence(token_logprobs, k), LOGPROB_STATS: logprob_stats(token_logprobs, k)})
    recs, lps = prefix_records(records, token_logprobs, k, tokenizer, where)
    fields = PREFIX_FIELDS + (CALL_FIELDS if reply_fields(records) else ())
    return Inputs({CONFIDENCE: prefix_confidence(lps, None), LOGPROB_STATS: logprob_stats(lps, None),
                   VISIBLE: visible_inputs(recs, lps, fields=fields, where=where),
                   PROMPT_REPLY: reply_texts(recs, where=where)})


def prefix_controls(random_state: int = 0) -> dict[str, Any]:
    """The unfitted controls of :data:`PREFIX_CONTROLS` by name (module doc); the stack's first
    level are the same estimators as the rows, so a plan that fits both fits each once."""
    def members() -> dict[str, Any]:
        return {"log-prob": LogprobRule(), "surface-so-far": SurfacePlatt(random_state=random_state),
                "text-so-far": TextPlatt(random_state=random_state, source=PROMPT_REPLY)}

    stack = StackEstimator([*members().items(), ("raw", ConfidenceEstimator("raw"))], random_state=random_state)
    return {**members(), "visible-so-far": stack}
