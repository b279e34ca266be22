"""Stacks: one logistic regression over the logits of several estimators' out-of-fold predictions.

:class:`StackEstimator` is a stacked generalisation in acute's estimator contract: its first
level is a list of ``(name, estimator)`` pairs (as scikit-learn's ``StackingClassifier``), each an
acute estimator over :class:`acute.estimators.inputs.Inputs`; its second level is a logistic
regression (L2, ``C``) on the logits, clipped to ``[clip, 1 - clip]``, of the first level's
P(correct). The second level's weights are fitted on **inner out-of-fold** predictions: the
training records are split into ``n_splits`` stratified inner folds, each first-level estimator
is fitted on each inner training part and predicts the held-out part; then every first-level
estimator is refitted on all the training records, and those refits score new records.

**Groups.** The inner folds honour groups the scikit-learn way, as a side input that travels in
``X`` rather than in ``fit``'s signature: when ``X`` holds the :data:`~acute.estimators.inputs.GROUPS`
source (one value per record, e.g. a tool set), records sharing a value are never on both sides
of an inner split (:func:`acute.estimators.folds.stratified_folds` with ``groups``); without it,
every record is its own group. An evaluation adds the source when its folds are grouped
(:func:`acute.evaluation.evaluate.evaluate_store`), so the inner folds keep apart what the outer
ones do.

**Missing sources.** A first-level estimator whose sources are not all in ``X`` is dropped (the
same rule for every stack); ``estimators_used_`` names the ones the fit used, and
``predict_proba`` needs their sources only. ``sources`` lists everything the stack may read.

**Sharing.** The refits on all training records are taken from the planner's pieces
(:func:`acute.estimators.plan.shared_pieces`): in an evaluation fold they are the very fits of the
same estimators' own rows. The inner out-of-fold predictions of one estimator over the same
inner folds are kept on ``X`` (:meth:`~acute.estimators.inputs.Inputs.shared`), so two stacks
that share a first-level estimator fit it once per inner fold.

The two stacks of every evaluation, ``acute-all`` and ``visible-all``
(:data:`STACK_MEMBERS`), are built by :func:`acute.estimators.registry.make_estimator`; their
settings are fixed in ``benchmarks/every_signal.md``.
"""

from __future__ import annotations

import hashlib
from typing import Any, Sequence

import numpy as np
from scipy.special import logit
from sklearn.base import BaseEstimator, ClassifierMixin, clone
from sklearn.exceptions import NotFittedError
from sklearn.linear_model import LogisticRegression

from ..errors import InputError
from ..validation import check_correct
from .folds import Folds, folds_digest, out_of_fold, stratified_folds
from .inputs import GROUPS, Inputs, check_inputs, check_no_weights
from .plan import Piece, estimator_key, needs, shared_pieces

__all__ = ["STACKS", "STACK_MEMBERS", "StackEstimator", "stack_logits"]

#: The first level of each stack, by estimator name (``raw``: the raw confidence itself).
#: ``visible-all`` is ``acute-all`` without the two estimators over hidden states.
STACK_MEMBERS: dict[str, tuple[str, ...]] = {
    "acute-all": ("acute-pca10", "question-only", "visible", "answer-surface", "answer-text", "tfidf+platt",
                  "platt+meta", "raw"),
    "visible-all": ("visible", "answer-surface", "answer-text", "tfidf+platt", "platt+meta", "raw"),
}
#: The stacks' names.
STACKS: tuple[str, ...] = tuple(STACK_MEMBERS)
#: The stacks' settings (benchmarks/every_signal.md): inner folds, the second level's C, the clip
INNER_SPLITS = 5
STACK_C = 1.0
CLIP = 1e-4


def stack_logits(p: Any, clip: float = CLIP) -> np.ndarray:
    """The second level's features: ``logit(clip(p, clip, 1 - clip))``, float64, shape kept."""
    return logit(np.clip(np.asarray(p, dtype=np.float64), clip, 1 - clip))


class StackEstimator(ClassifierMixin, BaseEstimator):
    """A logistic regression over the logits of first-level estimators' inner out-of-fold
    P(correct) (module doc).

    ``estimators``: ``(name, estimator)`` pairs, unfitted acute estimators; ``n_splits``: the inner
    folds (stratified, grouped by the ``groups`` source when ``X`` holds one); ``C``: the L2
    strength of the second level; ``clip``: where the probabilities are clipped before the logit;
    ``random_state``: seeds the inner folds.

    Fitted: ``estimators_used_`` (the names whose sources ``X`` held, in order), ``estimators_``
    (those refitted on every training record), ``folds_`` (the inner folds, indices into the
    training records), ``oof_`` (``[n, used]``: the inner out-of-fold P(correct) the second level
    was fitted on), ``final_estimator_`` (the ``LogisticRegression``), ``classes_``.
    """

    def __init__(self, estimators: Sequence[tuple[str, Any]] = (), n_splits: int = INNER_SPLITS,
                 C: float = STACK_C, clip: float = CLIP, random_state: int | None = 0):
        self.estimators = estimators
        self.n_splits = n_splits
        self.C = C
        self.clip = clip
        self.random_state = random_state

    @property
    def sources(self) -> tuple[str, ...]:
        """Every source a first-level estimator reads (a fit uses those present)."""
        return tuple(dict.fromkeys(s for _, est in self._members() for s in est.sources))

    def _members(self) -> list[tuple[str, Any]]:
        members = list(self.estimators)
        names = [n for n, _ in members]
        if not members or len(set(names)) != len(names):
            raise InputError(f"a stack needs first-level estimators with distinct names, got {names}")
        return members

    def usable(self, X: Inputs) -> list[tuple[str, Any]]:
        """The first-level ``(name, estimator)`` pairs whose sources are all in ``X``."""
        return [(n, est) for n, est in self._members() if all(s in X for s in est.sources)]

    def needs(self) -> tuple[Piece, ...]:
        """The pieces of the first level's refits on all training records
        (:mod:`acute.estimators.plan`): those of the rows of the same estimators."""
        return tuple(p for _, est in self._members() for p in needs(est))

    def inner_folds(self, X: Inputs, y: np.ndarray) -> Folds:
        """The inner folds over the records of ``X``: stratified by ``y``, grouped by ``X``'s
        ``groups`` source when it has one."""
        groups = X.get(GROUPS)
        return stratified_folds(y, int(self.n_splits), self.random_state,
                                groups=None if groups is None else list(groups), group_name="groups")

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> StackEstimator:
        check_no_weights(self, sample_weight)
        X = check_inputs(X, self, sources=())
        y = check_correct(y, len(X), both_classes=True)
        used = self.usable(X)
        if not used:
            raise InputError(f"none of the stack's first-level estimators ({', '.join(n for n, _ in self._members())}) "
                             f"has its sources in these inputs (they hold: {', '.join(X.sources) or 'none'})")
        folds = self.inner_folds(X, y)
        oof = np.column_stack([self._inner_oof(X, y, est, folds) for _, est in used])
        self.final_estimator_ = LogisticRegression(C=float(self.C)).fit(stack_logits(oof, self.clip), y)
        pieces = shared_pieces(X, y)
        pieces.declare(p for _, est in used for p in needs(est))
        self.estimators_ = [pieces.fitted(clone(est)) for _, est in used]
        self.estimators_used_ = [n for n, _ in used]
        self.folds_, self.oof_ = folds, oof
        self.classes_ = np.array([0, 1])
        return self

    def _inner_oof(self, X: Inputs, y: np.ndarray, est: Any, folds: Folds) -> np.ndarray:
        """``est``'s out-of-fold P(correct) over ``folds``, kept on ``X`` for every stack that
        asks for the same estimator over the same folds and labels."""
        digest = hashlib.sha256(np.ascontiguousarray(y, dtype=np.int64).tobytes()).hexdigest()
        key = ("stack-inner", folds_digest(folds), digest, estimator_key(est))
        own = X.select(est.sources)

        def fit_predict(tr, te):
            return clone(est).fit(own.take(tr), y[tr]).predict_proba(own.take(te))[:, 1]

        return X.shared(key, lambda: out_of_fold(fit_predict, folds, len(X)))

    def first_level(self, X: Any) -> np.ndarray:
        """``[n, used]``: each used first-level estimator's P(correct) on ``X``."""
        if not hasattr(self, "estimators_"):
            raise NotFittedError("StackEstimator is not fitted yet; call fit first")
        X = check_inputs(X, self, sources=[s for est in self.estimators_ for s in est.sources])
        return np.column_stack([est.predict_proba(X)[:, 1] for est in self.estimators_])

    def predict_proba(self, X: Any) -> np.ndarray:
        return self.final_estimator_.predict_proba(stack_logits(self.first_level(X), self.clip))

    def predict(self, X: Any) -> np.ndarray:
        return (self.predict_proba(X)[:, 1] > 0.5).astype(np.int64)
