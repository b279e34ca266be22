"""Controls: the estimators that say what a probe's gain is made of.

A probe over the answer's hidden states may beat calibrated confidence because the states read
the answer, or only because they encode what kind of question was asked (a category, a subject,
a template), which a calibrator could learn from the record's metadata or the question's words
without any hidden state, or because they read what anyone holding the reply sees (its length,
whether it parsed, its text). Each control answers one of those alternatives, and each row says
what it may use (:data:`CONTROL_USES`):

* ``constant``: the training fold's base rate for every record. Uses nothing; the floor every
  estimator's auc-euro is measured from (the skill column).
* ``platt+meta``: logistic regression on logit(raw confidence) plus one-hot columns of the
  record's metadata (built-in questions: category and difficulty; MMLU: subject; TruthfulQA:
  category; APIGen: the gold's number of calls), L2-regularised with the strength chosen by an
  inner 5-fold cross-validation (``GridSearchCV`` over ``C``, log-loss). A metadata value unseen in training gets no column (its
  one-hots are all zero), so under folds grouped by that field the control falls back to the
  confidence term. Uses the confidence and the metadata.
* ``tfidf+platt``: the prompt text's TF-IDF (word 1-2 grams, scikit-learn) plus logit(raw
  confidence), in the same regularised logistic regression. Sees the question as the model saw
  it (its template and demonstrations included), never the model's states.
* ``answer-surface``: the same regularised logistic regression on logit(raw confidence), the
  mean token log-prob, log(tokens), parse status and "stopped at the token cap", plus one-hots of
  the reply's structure (function calling: :data:`acute.tasks.tool_calls.REPLY_FIELDS`). Sees
  the reply's surface, not its words.
* ``answer-text``: ``tfidf+platt``'s model over the prompt followed by the reply.
* ``visible``: gradient boosting over everything a deployment sees without hidden states: the
  confidence, the token log-probs' statistics, the reply's length, finish reason, parse status
  and structure, and the question's and the reply's TF-IDF (two vocabularies, each reduced by a
  truncated SVD fitted on the training fold). Settings committed before it was fitted on any
  store (``benchmarks/visible_control.md``).
* ``question-only``: the PCA-10 forest over the hidden states at the prompt's last token, before
  any answer token, Platt-calibrated on its out-of-bag probabilities, without the raw confidence
  (which does not exist before answering). Says how much of the signal exists before the model
  answers.
* ``acute-all`` and ``visible-all``: every signal in, the stacks of :mod:`acute.estimators.stacks`
  (a logistic regression over the logits of first-level estimators' inner out-of-fold
  predictions): ``acute-all`` over ``acute-pca10``, ``question-only``, ``visible``,
  ``answer-surface``, ``answer-text``, ``tfidf+platt``, ``platt+meta`` (where the task declares
  metadata) and the raw confidence; ``visible-all`` the same without the two over hidden states.
  ``acute-all`` minus ``visible-all`` is what the states add to everything else.
* ``question+confidence``: the same forest stacked with the raw confidence (logistic regression
  on its out-of-bag P(correct) and logit(raw confidence), as ``acute-pca10-stacked`` stacks the
  answer's forest), so "question-only vs the default" and "question+confidence vs the default"
  separate the missing confidence from the missing answer states.

``constant``, ``platt+meta`` and ``tfidf+platt`` (and ``answer-text``, a ``tfidf+platt`` over
the ``prompt+reply`` source) are defined here; ``visible`` and ``answer-surface``, with the
per-record array they read, in :mod:`acute.estimators.visible`; the two question probes are
:class:`acute.estimators.probes.ActivationProbe` registered in :mod:`acute.estimators.registry`.
Each reads the sources of :mod:`acute.estimators.inputs` its ``sources`` names (``metadata``,
``question``, ``prompt+reply``, ``visible``, ``confidence``).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from scipy.special import logit
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import NotFittedError
from threadpoolctl import threadpool_limits

from ..errors import InputError
from ..validation import check_confidence, check_correct
from .inputs import CONFIDENCE, METADATA, QUESTION, check_inputs, check_no_weights
from ..metrics import auroc

__all__ = [
    "CONTROLS",
    "CONTROL_USES",
    "ConstantEstimator",
    "MetadataPlatt",
    "TextPlatt",
    "logistic_cv",
    "logit_confidence",
    "metadata_matrix",
    "within_group_auroc",
]

#: The control rows of every evaluation table, in table order.
CONTROLS: tuple[str, ...] = ("constant", "platt+meta", "tfidf+platt", "answer-surface", "answer-text", "visible",
                              "question-only", "question+confidence", "consistency", "semantic-entropy",
                              "acute-all", "visible-all")
#: What each control row may use (shown in the evaluation table's "uses" column).
CONTROL_USES: dict[str, str] = {
    "constant": "training base rate only",
    "platt+meta": "confidence + metadata",
    "tfidf+platt": "confidence + question text",
    "answer-surface": "confidence + token log-probs + reply length/finish/parse + reply structure (no text, no states)",
    "answer-text": "confidence + question and reply text (no states)",
    "visible": "confidence + token log-probs + reply length/finish/parse + reply structure + question and "
               "reply text (no states)",
    "question-only": "prompt states (no answer, no confidence)",
    "question+confidence": "prompt states + confidence (no answer states)",
    "consistency": "K sampled answers' agreement with the greedy one (no states; K + 1 generations per answer)",
    "semantic-entropy": "entropy of K sampled answers over equivalent answers (no states; K + 1 generations)",
    "acute-all": "stack of acute-pca10, question-only, visible, answer-surface, answer-text, tfidf+platt, "
                 "platt+meta (with metadata) and raw confidence: answer and prompt states + everything visible",
    "visible-all": "stack of visible, answer-surface, answer-text, tfidf+platt, platt+meta (with metadata) and raw "
                   "confidence (no states)",
}
_EPS = 1e-6
# Regularisation strengths searched by the inner cross-validation of the logistic controls.
_CS = np.logspace(-3, 2, 8)
_INNER_CV = 5


def logit_confidence(confidence: Any, n: int) -> np.ndarray:
    """``[n, 1]``: logit of the checked raw confidence, clipped to [1e-6, 1 - 1e-6]."""
    conf = check_confidence(confidence, n)
    return logit(np.clip(conf, _EPS, 1 - _EPS)).reshape(-1, 1)


def _unfitted(obj: Any, attr: str) -> None:
    if not hasattr(obj, attr):
        raise NotFittedError(f"{type(obj).__name__} is not fitted yet; call fit first")


def logistic_cv(features, y: np.ndarray, random_state: int):
    """L2 logistic regression, strength by inner stratified CV on log-loss (fewer folds when a
    class is rare). Fitted on one BLAS thread: on a thousand records threads only cost (a
    reply-surface fit took 6.3 s on two threads of a busy 2-core machine, 0.5 s on one)."""
    from sklearn.linear_model import LogisticRegression  # heavy: sklearn
    from sklearn.model_selection import GridSearchCV, StratifiedKFold  # heavy: sklearn

    k = int(min(_INNER_CV, np.bincount(y, minlength=2).min()))
    if k < 2:
        raise InputError("the training records need at least 2 correct and 2 wrong answers")
    search = GridSearchCV(LogisticRegression(max_iter=2000), {"C": list(_CS)},
                          cv=StratifiedKFold(k, shuffle=True, random_state=random_state), scoring="neg_log_loss")
    with threadpool_limits(1, user_api="blas"):
        return search.fit(features, y).best_estimator_


class ConstantEstimator(ClassifierMixin, BaseEstimator):
    """P(correct) = the training records' base rate (weighted by ``sample_weight``), for every
    record; reads no source (the inputs only say how many records). Fitted: ``base_rate_``,
    ``classes_``."""

    sources: tuple[str, ...] = ()

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> ConstantEstimator:
        check_inputs(X, self)
        labels = check_correct(y)
        if labels.size == 0:
            raise InputError("correct is empty: no training records")
        self.base_rate_ = (float(labels.mean()) if sample_weight is None
                           else float(np.average(labels, weights=np.asarray(sample_weight, dtype=np.float64))))
        self.classes_ = np.array([0, 1])
        return self

    def predict_proba(self, X: Any) -> np.ndarray:
        _unfitted(self, "base_rate_")
        p = np.full(len(check_inputs(X, self)), self.base_rate_)
        return np.column_stack([1 - p, p])


def metadata_matrix(records: Sequence[dict], fields: Sequence[str], where: str = "the store") -> np.ndarray:
    """``[n, len(fields)]`` array of strings: each record's ``meta[field]``. Raises
    :class:`InputError` naming the field and the first record id that lacks it."""
    if not fields:
        raise InputError("no metadata fields given")
    out = np.empty((len(records), len(fields)), dtype=object)
    for i, rec in enumerate(records):
        meta = rec.get("meta") or {}
        for j, f in enumerate(fields):
            if f not in meta or meta[f] is None:
                raise InputError(f"{where}: record {rec.get('id')!r} has no metadata field {f!r}")
            out[i, j] = str(meta[f])
    return out


class MetadataPlatt(ClassifierMixin, BaseEstimator):
    """Platt scaling that knows the record's metadata: regularised logistic regression on
    ``[logit(confidence), one-hot(metadata)]``, over the ``metadata`` source (the ``[n, k]`` string
    array of :func:`metadata_matrix`) and the ``confidence`` source. Fitted: ``encoder_``,
    ``model_``, ``classes_``."""

    sources = (METADATA, CONFIDENCE)

    def __init__(self, random_state: int = 0):
        self.random_state = random_state

    def _features(self, X: Any):
        import scipy.sparse as sp  # heavy: scipy

        meta = np.asarray(X[METADATA], dtype=object)
        if meta.ndim != 2:
            raise InputError(f"metadata must be a 2-d array [n, fields], got shape {meta.shape}")
        return sp.hstack([sp.csr_matrix(logit_confidence(X[CONFIDENCE], meta.shape[0])),
                          self.encoder_.transform(meta)]).tocsr()

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> MetadataPlatt:
        from sklearn.preprocessing import OneHotEncoder  # heavy: sklearn

        check_no_weights(self, sample_weight)
        X = check_inputs(X, self)
        meta = np.asarray(X[METADATA], dtype=object)
        labels = check_correct(y, meta.shape[0], both_classes=True).astype(np.int64)
        self.encoder_ = OneHotEncoder(handle_unknown="ignore").fit(meta)
        self.model_ = logistic_cv(self._features(X), labels, self.random_state)
        self.classes_ = np.array([0, 1])
        return self

    def predict_proba(self, X: Any) -> np.ndarray:
        _unfitted(self, "model_")
        return self.model_.predict_proba(self._features(check_inputs(X, self)))


class TextPlatt(ClassifierMixin, BaseEstimator):
    """The text control: TF-IDF of a text source (``source``: the ``question`` for
    ``tfidf+platt``, ``prompt+reply`` for ``answer-text``; word 1-2 grams, sublinear tf, terms
    in at least 2 training texts) plus logit(confidence), in a regularised logistic regression.
    Fitted: ``vectorizer_``, ``model_``, ``classes_``."""

    def __init__(self, random_state: int = 0, max_features: int = 20000, source: str = QUESTION):
        self.random_state = random_state
        self.max_features = max_features
        self.source = source

    @property
    def sources(self) -> tuple[str, ...]:
        """The text ``source`` and the ``confidence``."""
        return (self.source, CONFIDENCE)

    def _texts(self, X: Any) -> list[str]:
        texts = list(X[self.source])
        bad = next((i for i, t in enumerate(texts) if not isinstance(t, str)), None)
        if bad is not None:
            raise InputError(f"the {self.source!r} source's record {bad} is {type(texts[bad]).__name__}, not a string")
        return texts

    def _features(self, texts: list[str], confidence: Any):
        import scipy.sparse as sp  # heavy: scipy

        return sp.hstack([sp.csr_matrix(logit_confidence(confidence, len(texts))),
                          self.vectorizer_.transform(texts)]).tocsr()

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> TextPlatt:
        from sklearn.feature_extraction.text import TfidfVectorizer  # heavy: sklearn

        check_no_weights(self, sample_weight)
        X = check_inputs(X, self)
        texts = self._texts(X)
        labels = check_correct(y, len(texts), both_classes=True).astype(np.int64)
        min_df = 2 if len(texts) >= 20 else 1
        self.vectorizer_ = TfidfVectorizer(ngram_range=(1, 2), min_df=min_df, sublinear_tf=True,
                                           max_features=self.max_features).fit(texts)
        self.model_ = logistic_cv(self._features(texts, X[CONFIDENCE]), labels, self.random_state)
        self.classes_ = np.array([0, 1])
        return self

    def predict_proba(self, X: Any) -> np.ndarray:
        _unfitted(self, "model_")
        X = check_inputs(X, self)
        return self.model_.predict_proba(self._features(self._texts(X), X[CONFIDENCE]))


def within_group_auroc(confidence: Any, correct: Any, groups: Sequence[Any]) -> tuple[float, list[str]]:
    """AUROC inside each group (a category, a subject), averaged with weights equal to the
    groups' sizes: how well the confidence ranks answers to questions of the same kind, which a
    calibrator that only knows the kind cannot do. Groups with one class have no AUROC and are
    left out; returns ``(value, names of the groups left out)``, value NaN when none is left."""
    conf = check_confidence(confidence)
    y = check_correct(correct, conf.size)
    g = np.asarray([str(v) for v in groups], dtype=object)
    if g.size != conf.size:
        raise InputError(f"groups has {g.size} values but there are {conf.size} records")
    total, weight, skipped = 0.0, 0, []
    for name in sorted(set(g)):
        m = g == name
        if y[m].min() == y[m].max():
            skipped.append(name)
            continue
        total += float(auroc(conf[m], y[m])) * int(m.sum())
        weight += int(m.sum())
    return (total / weight if weight else float("nan")), skipped
