"""What a deployment sees of a reply without the model's states, and the controls that read it.

A probe over the answer's hidden states may beat the question controls only because it reads
what anyone holding the reply could read: its length, whether it parsed, how sure each token
was, how many calls it made, what it says. :func:`visible_inputs` turns a store's records and
token log-probs into one per-record array of those, :data:`VISIBLE_COLUMNS` then the question
and the reply texts (the ``visible`` source of :mod:`acute.estimators.inputs`), and three
controls read the records:

* ``visible`` (:class:`VisibleControl`): scikit-learn's ``HistGradientBoostingClassifier`` on
  logit(raw confidence), every numeric column and the question's and the reply's TF-IDF, each
  text in its own vocabulary reduced by its own ``TruncatedSVD``; every piece is fitted in
  :meth:`VisibleControl.fit` (a ``Pipeline`` of a ``ColumnTransformer`` and the boosting), so on
  the training fold only. Its settings are constants committed before it was fitted on any store
  (``benchmarks/visible_control.md``).
* ``answer-surface`` (:class:`SurfacePlatt`): regularised logistic regression on logit(raw
  confidence), the mean token log-prob, log(tokens), parse status and "stopped at the token
  cap", plus one-hots of the reply-structure columns.
* ``answer-text``: :class:`acute.estimators.controls.TextPlatt` over the prompt followed by the
  reply (:func:`reply_texts`, the ``prompt+reply`` source).

The reply-structure columns are the record ``meta`` keys
:data:`acute.tasks.tool_calls.REPLY_FIELDS` (function calling), used when every record has them
(:func:`reply_fields`); no column describes the gold answer.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted
from threadpoolctl import threadpool_limits

from ..errors import InputError
from ..tasks.tool_calls import REPLY_FIELDS
from ..validation import check_correct
from .controls import logistic_cv, logit_confidence
from .inputs import CONFIDENCE, VISIBLE, check_inputs, check_no_weights

__all__ = [
    "FINISH_REASONS",
    "HGB_SETTINGS",
    "SVD_COMPONENTS",
    "SurfacePlatt",
    "TEXT_COLUMNS",
    "TextComponents",
    "VISIBLE_COLUMNS",
    "VisibleControl",
    "reply_fields",
    "reply_texts",
    "surface_features",
    "visible_column_names",
    "visible_inputs",
]

#: The finish reasons one-hot encoded (another value, or none, is all zeros).
FINISH_REASONS: tuple[str, ...] = ("eos", "stop", "length")
#: The numeric columns every visible input starts with, in order: statistics of the generated
#: tokens' log-probs (all 0 for a generation of no tokens, whose raw confidence is 1), the
#: number of tokens, the finish reason one-hot, 1 when the task could not parse the reply.
VISIBLE_COLUMNS: tuple[str, ...] = (
    "logprob_mean", "logprob_min", "logprob_std", "logprob_first", "logprob_last", "n_tokens",
    *(f"finish_{r}" for r in FINISH_REASONS), "parse_error",
)
#: The two text columns every visible input ends with: the prompt as the model saw it, the reply.
TEXT_COLUMNS: tuple[str, ...] = ("question", "reply")

# The visible control's settings, fixed before it was fitted on any store; one reason each in
# benchmarks/visible_control.md. Never tuned to a result.
SVD_COMPONENTS = 20
HGB_SETTINGS: dict[str, Any] = {"max_iter": 200, "learning_rate": 0.05, "max_leaf_nodes": 15,
                                "min_samples_leaf": 20, "l2_regularization": 1.0, "early_stopping": False}
# the TF-IDF of both texts, as tfidf+platt's (TextPlatt): word 1-2 grams, sublinear tf, at most
# this many terms, terms in at least 2 training texts (1 below _MIN_DF_RECORDS records)
_MAX_TERMS = 20000
_MIN_DF_RECORDS = 20
_EMPTY_LOGPROB_STATS = (0.0, 0.0, 0.0, 0.0, 0.0)


# ------------------------------------------------------------------------------ the inputs
def reply_fields(records: Sequence[dict]) -> tuple[str, ...]:
    """:data:`REPLY_FIELDS` when every record's ``meta`` has each of them (not None), else ``()``."""
    for rec in records:
        meta = rec.get("meta") or {}
        if any(meta.get(f) is None for f in REPLY_FIELDS):
            return ()
    return REPLY_FIELDS if records else ()


def visible_column_names(fields: Sequence[str] = ()) -> tuple[str, ...]:
    """The columns of :func:`visible_inputs` with reply-structure ``fields``, in order."""
    return VISIBLE_COLUMNS + tuple(fields) + TEXT_COLUMNS


def _text(rec: dict, key: str, what: str, where: str) -> str:
    value = rec.get(key)
    if not isinstance(value, str):
        raise InputError(f"{where}: record {rec.get('id')!r} has no {what} text ({key!r})")
    return value


def _logprob_stats(lp: Any) -> tuple[float, ...]:
    lp = np.asarray(lp, dtype=np.float64).reshape(-1)
    if lp.size == 0:
        return _EMPTY_LOGPROB_STATS
    return float(lp.mean()), float(lp.min()), float(lp.std()), float(lp[0]), float(lp[-1])


def _number(rec: dict, field: str, where: str) -> float:
    value = (rec.get("meta") or {}).get(field)
    if value is None:
        return float("nan")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise InputError(f"{where}: record {rec.get('id')!r} has a non-numeric reply field "
                         f"{field!r} = {value!r}") from None


def visible_inputs(records: Sequence[dict], token_logprobs: Sequence[Any] | None,
                   fields: Sequence[str] | None = None, where: str = "the store") -> np.ndarray:
    """``[n, len(visible_column_names(fields))]`` object array, one row per record: the
    :data:`VISIBLE_COLUMNS` (floats), the reply-structure ``fields`` of the record's ``meta``
    (floats, NaN where a record lacks one; default :func:`reply_fields`), the prompt and the
    generation (strings). ``token_logprobs[i]`` are record ``i``'s generated tokens' log-probs
    (a store's :attr:`acute.store.Store.token_logprobs`). Raises :class:`InputError` naming what
    is missing: the log-probs, or the first record without a prompt or a generation."""
    if token_logprobs is None:
        raise InputError(f"{where} has no per-token log-probs (token_logprobs)")
    if len(token_logprobs) != len(records):
        raise InputError(f"{where} has {len(token_logprobs)} token log-prob arrays for {len(records)} records")
    fields = reply_fields(records) if fields is None else tuple(fields)
    out = np.empty((len(records), len(visible_column_names(fields))), dtype=object)
    for i, (rec, lp) in enumerate(zip(records, token_logprobs)):
        question = _text(rec, "prompt", "prompt", where)
        reply = _text(rec, "generation", "reply", where)
        stats = _logprob_stats(lp)
        finish = [float(rec.get("finish_reason") == r) for r in FINISH_REASONS]
        parse_error = float(bool(rec.get("parse_error")))
        structure = [_number(rec, f, where) for f in fields]
        out[i] = [*stats, float(np.size(lp)), *finish, parse_error, *structure, question, reply]
    return out


def reply_texts(records: Sequence[dict], where: str = "the store") -> np.ndarray:
    """``[n]`` object array: each record's prompt, a newline, its generation (what
    ``answer-text`` reads). Raises :class:`InputError` naming the first record without either."""
    return np.asarray([f"{_text(r, 'prompt', 'prompt', where)}\n{_text(r, 'generation', 'reply', where)}"
                       for r in records], dtype=object)


def _check_visible(inputs: Any) -> np.ndarray:
    X = np.asarray(inputs, dtype=object)
    least = len(VISIBLE_COLUMNS) + len(TEXT_COLUMNS)
    if X.ndim != 2 or X.shape[1] < least:
        raise InputError(f"the visible input must be the [n, >= {least}] array of visible_inputs, "
                         f"got shape {X.shape}")
    return X


def _check_columns(fitted: int, X: np.ndarray) -> None:
    if X.shape[1] != fitted:
        raise InputError(f"the visible input has {X.shape[1]} columns but the control was fitted on {fitted}: "
                         "the training and the scored records differ in their reply-structure fields "
                         "(REPLY_FIELDS in every record's meta, or not)")


# ----------------------------------------------------------------------------- visible
class TextComponents(TransformerMixin, BaseEstimator):
    """A text column's TF-IDF (word 1-2 grams, sublinear tf, at most 20,000 terms, terms in at
    least 2 fitting texts, or 1 below 20 texts) reduced by ``TruncatedSVD`` to ``n_components``
    (fewer when the texts are fewer). A vocabulary of at most ``n_components`` terms is not
    reduced (its TF-IDF columns are the output); an empty one gives no column.
    Fitted: ``vectorizer_`` (None for an empty vocabulary), ``svd_`` (None when not reduced),
    ``n_components_`` (the output's columns)."""

    def __init__(self, n_components: int = SVD_COMPONENTS, random_state: int | None = 0):
        self.n_components = n_components
        self.random_state = random_state

    def fit(self, texts: Any, y: Any = None) -> TextComponents:
        from sklearn.decomposition import TruncatedSVD  # heavy: sklearn
        from sklearn.feature_extraction.text import TfidfVectorizer  # heavy: sklearn

        texts = list(texts)
        min_df = 2 if len(texts) >= _MIN_DF_RECORDS else 1
        self.vectorizer_ = TfidfVectorizer(ngram_range=(1, 2), min_df=min_df, sublinear_tf=True,
                                           max_features=_MAX_TERMS)
        try:
            tfidf = self.vectorizer_.fit_transform(texts)
        except ValueError:  # scikit-learn: "empty vocabulary" (no term in enough texts)
            self.vectorizer_, self.svd_, self.n_components_ = None, None, 0
            return self
        if tfidf.shape[1] <= self.n_components:  # nothing to reduce: the TF-IDF columns themselves
            self.svd_, self.n_components_ = None, int(tfidf.shape[1])
            return self
        self.svd_ = TruncatedSVD(min(self.n_components, tfidf.shape[0]), random_state=self.random_state).fit(tfidf)
        self.n_components_ = int(self.svd_.components_.shape[0])
        return self

    def transform(self, texts: Any) -> np.ndarray:
        check_is_fitted(self, "n_components_")
        texts = list(texts)
        if self.vectorizer_ is None:
            return np.zeros((len(texts), 0))
        tfidf = self.vectorizer_.transform(texts)
        return tfidf.toarray() if self.svd_ is None else self.svd_.transform(tfidf)


def _as_float(X: Any) -> np.ndarray:
    return np.asarray(X, dtype=np.float64)


def _with_confidence(X: np.ndarray, confidence: Any) -> np.ndarray:
    return np.hstack([logit_confidence(confidence, X.shape[0]).astype(object), X])


class VisibleControl(ClassifierMixin, BaseEstimator):
    """The ``visible`` control: gradient boosting over what a deployment sees without states.

    Reads the ``visible`` source (the object array of :func:`visible_inputs`) and the
    ``confidence`` source.
    A ``Pipeline`` of a ``ColumnTransformer`` (logit(confidence) and the numeric columns as
    floats; the question and the reply each through :class:`TextComponents`, two vocabularies)
    and ``HistGradientBoostingClassifier(**HGB_SETTINGS)``, all fitted in :meth:`fit`. The
    parameters' defaults are the committed settings (``benchmarks/visible_control.md``).
    Fitted: ``pipeline_``, ``n_columns_`` (of the visible input), ``classes_``."""

    sources = (VISIBLE, CONFIDENCE)

    def __init__(self, svd_components: int = SVD_COMPONENTS, max_iter: int = HGB_SETTINGS["max_iter"],
                 learning_rate: float = HGB_SETTINGS["learning_rate"],
                 max_leaf_nodes: int = HGB_SETTINGS["max_leaf_nodes"],
                 min_samples_leaf: int = HGB_SETTINGS["min_samples_leaf"],
                 l2_regularization: float = HGB_SETTINGS["l2_regularization"],
                 early_stopping: bool = HGB_SETTINGS["early_stopping"], random_state: int | None = 0):
        self.svd_components = svd_components
        self.max_iter = max_iter
        self.learning_rate = learning_rate
        self.max_leaf_nodes = max_leaf_nodes
        self.min_samples_leaf = min_samples_leaf
        self.l2_regularization = l2_regularization
        self.early_stopping = early_stopping
        self.random_state = random_state

    def _pipeline(self, n_numeric: int):
        from sklearn.compose import ColumnTransformer  # heavy: sklearn
        from sklearn.ensemble import HistGradientBoostingClassifier  # heavy: sklearn
        from sklearn.pipeline import Pipeline  # heavy: sklearn
        from sklearn.preprocessing import FunctionTransformer  # heavy: sklearn

        columns = ColumnTransformer([  # two TextComponents: two vocabularies, two SVDs
            ("numeric", FunctionTransformer(_as_float), list(range(n_numeric))),
            ("question", TextComponents(self.svd_components, self.random_state), n_numeric),
            ("reply", TextComponents(self.svd_components, self.random_state), n_numeric + 1)])
        boosting = HistGradientBoostingClassifier(
            max_iter=self.max_iter, learning_rate=self.learning_rate, max_leaf_nodes=self.max_leaf_nodes,
            min_samples_leaf=self.min_samples_leaf, l2_regularization=self.l2_regularization,
            early_stopping=self.early_stopping, random_state=self.random_state)
        return Pipeline([("columns", columns), ("boosting", boosting)])

    # The boosting runs on one OpenMP thread: on a thousand records threads cost more than they
    # gain (a fit took 14 s on two threads of a busy 2-core machine, 1.5 s on one); the trees and
    # the probabilities are the same either way (tests/evaluation/test_visible_control.py).
    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> VisibleControl:
        check_no_weights(self, sample_weight)
        inputs = check_inputs(X, self)
        X = _check_visible(inputs[VISIBLE])
        labels = check_correct(y, X.shape[0], both_classes=True).astype(np.int64)
        Z = _with_confidence(X, inputs[CONFIDENCE])
        with threadpool_limits(1, user_api="openmp"):
            self.pipeline_ = self._pipeline(Z.shape[1] - len(TEXT_COLUMNS)).fit(Z, labels)
        self.n_columns_ = int(X.shape[1])
        self.classes_ = np.array([0, 1])
        return self

    def predict_proba(self, X: Any) -> np.ndarray:
        check_is_fitted(self, "pipeline_")
        inputs = check_inputs(X, self)
        X = _check_visible(inputs[VISIBLE])
        _check_columns(self.n_columns_, X)
        with threadpool_limits(1, user_api="openmp"):
            return self.pipeline_.predict_proba(_with_confidence(X, inputs[CONFIDENCE]))


# ----------------------------------------------------------------------- answer-surface
def surface_features(inputs: Any, confidence: Any) -> np.ndarray:
    """``[n, 5]`` float: logit(raw confidence), the mean token log-prob, log(tokens) (0 for no
    token), 1 when the reply did not parse, 1 when it stopped at the token cap; from the
    :func:`visible_inputs` array."""
    X = _check_visible(inputs)
    col = {c: _as_float(X[:, i]) for i, c in enumerate(VISIBLE_COLUMNS)}
    return np.column_stack([logit_confidence(confidence, X.shape[0])[:, 0], col["logprob_mean"],
                            np.log(np.maximum(col["n_tokens"], 1.0)), col["parse_error"], col["finish_length"]])


class SurfacePlatt(ClassifierMixin, BaseEstimator):
    """The ``answer-surface`` control: L2 logistic regression (strength by inner cross-validation,
    as ``platt+meta``) on :func:`surface_features` (standardised on the training records) and
    one-hots of the reply-structure columns of the :func:`visible_inputs` array (each value a
    level; an unseen one is all zeros; NaN is its own level). Fitted: ``scaler_``, ``encoder_``
    (None without reply-structure columns), ``model_``, ``n_columns_``, ``classes_``."""

    sources = (VISIBLE, CONFIDENCE)

    def __init__(self, random_state: int = 0):
        self.random_state = random_state

    @staticmethod
    def _levels(X: np.ndarray) -> np.ndarray:
        return X[:, len(VISIBLE_COLUMNS):X.shape[1] - len(TEXT_COLUMNS)].astype(str)

    def _features(self, X: np.ndarray, confidence: Any) -> np.ndarray:
        x = self.scaler_.transform(surface_features(X, confidence))
        return x if self.encoder_ is None else np.hstack([x, self.encoder_.transform(self._levels(X)).toarray()])

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> SurfacePlatt:
        from sklearn.preprocessing import OneHotEncoder, StandardScaler  # heavy: sklearn

        check_no_weights(self, sample_weight)
        inputs = check_inputs(X, self)
        confidence = inputs[CONFIDENCE]
        X = _check_visible(inputs[VISIBLE])
        y = check_correct(y, X.shape[0], both_classes=True).astype(np.int64)
        self.scaler_ = StandardScaler().fit(surface_features(X, confidence))
        levels = self._levels(X)
        self.encoder_ = OneHotEncoder(handle_unknown="ignore").fit(levels) if levels.shape[1] else None
        self.model_ = logistic_cv(self._features(X, confidence), y, self.random_state)
        self.n_columns_ = int(X.shape[1])
        self.classes_ = np.array([0, 1])
        return self

    def predict_proba(self, X: Any) -> np.ndarray:
        check_is_fitted(self, "model_")
        inputs = check_inputs(X, self)
        X = _check_visible(inputs[VISIBLE])
        _check_columns(self.n_columns_, X)
        return self.model_.predict_proba(self._features(X, inputs[CONFIDENCE]))
