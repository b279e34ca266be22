"""The sampling-consistency controls: what a deployment gets by sampling the model K more times
and measuring how much the answers agree (no hidden states, K + 1 generations per answer).

``agreement`` is a source of :mod:`acute.estimators.inputs`: float64 ``[n, 3]``, per record its
``consistency``, ``semantic_entropy`` and ``semantic_entropy_weighted``
(:data:`acute.tasks.agreement.AGREEMENT_SIGNALS`), computed from the record's stored samples by
its task's equivalence (:func:`agreement_matrix`). Two controls read it:

* ``consistency``: Platt scaling (logistic regression on one feature) of the consistency;
* ``semantic-entropy``: Platt scaling of minus the discrete semantic entropy.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.linear_model import LogisticRegression
from sklearn.utils.validation import check_is_fitted

from ..errors import InputError
from ..tasks import get_task
from ..tasks.agreement import AGREEMENT_SIGNALS, record_agreement
from ..validation import check_correct
from .inputs import AGREEMENT, check_inputs, check_no_weights

__all__ = ["AGREEMENT_CONTROLS", "AgreementPlatt", "agreement_matrix", "sampling_cost", "store_task"]

#: control name -> (the agreement column it reads, its sign: higher = more likely correct)
AGREEMENT_CONTROLS: dict[str, tuple[str, float]] = {"consistency": ("consistency", 1.0),
                                                    "semantic-entropy": ("semantic_entropy", -1.0)}
#: Platt scaling: a logistic regression this weakly regularised is the maximum-likelihood fit
_PLATT_C = 1e4


def store_task(manifest: dict) -> Any:
    """The task a store's manifest names (its equivalence is what agreement needs)."""
    name = manifest.get("task")
    if not isinstance(name, str) or not name:
        raise InputError("the store names no task: its samples cannot be compared by a task's equivalence")
    return get_task(name)


def agreement_matrix(records: Sequence[dict], task: Any, where: str = "the store") -> np.ndarray:
    """float64 ``[n, 3]``: :data:`~acute.tasks.agreement.AGREEMENT_SIGNALS` of every record, by
    ``task``'s equivalence (its stated fallback where it has none). InputError naming the store
    and the first record without samples."""
    out = np.empty((len(records), len(AGREEMENT_SIGNALS)))
    for i, rec in enumerate(records):
        if not rec.get("samples"):
            raise InputError(f"{where}: record {rec.get('id')!r} has no sampled answers; collect with "
                             "`acute collect --samples K` to have them")
        signals = record_agreement(task, rec, fallback=True)
        out[i] = [signals[name] for name in AGREEMENT_SIGNALS]
    return out


def sampling_cost(records: Sequence[dict]) -> float:
    """Tokens generated relative to the greedy answers alone, over the records with samples:
    (greedy tokens + sampled tokens) / greedy tokens, each summed over the records (the factor by
    which sampling multiplies decode work; a mean of per-record ratios would let a one-token
    greedy answer count as much as the whole workload); NaN without samples."""
    pairs = [(r["n_tokens"], sum(len(s["token_ids"]) for s in r["samples"])) for r in records if r.get("samples")]
    if not pairs:
        return float("nan")
    greedy, sampled = np.sum(pairs, axis=0, dtype=np.float64)
    return float((greedy + sampled) / max(1.0, greedy))


class AgreementPlatt(ClassifierMixin, BaseEstimator):
    """Platt scaling of one agreement signal (``signal``: a name of :data:`AGREEMENT_CONTROLS`),
    fitted on the training records. Fitted: ``model_``, ``classes_``."""

    sources = (AGREEMENT,)

    def __init__(self, signal: str = "consistency"):
        self.signal = signal

    def _feature(self, X: Any) -> np.ndarray:
        if self.signal not in AGREEMENT_CONTROLS:
            raise InputError(f"signal must be one of {', '.join(AGREEMENT_CONTROLS)}, got {self.signal!r}")
        column, sign = AGREEMENT_CONTROLS[self.signal]
        values = check_inputs(X, self)[AGREEMENT]
        return sign * values[:, AGREEMENT_SIGNALS.index(column)].reshape(-1, 1)

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> AgreementPlatt:
        check_no_weights(self, sample_weight)
        x = self._feature(X)
        labels = check_correct(y, x.shape[0], both_classes=True).astype(np.int64)
        self.model_ = LogisticRegression(C=_PLATT_C, max_iter=1000).fit(x, labels)
        self.classes_ = np.array([0, 1])
        return self

    def predict_proba(self, X: Any) -> np.ndarray:
        check_is_fitted(self, "model_")
        return self.model_.predict_proba(self._feature(X))
