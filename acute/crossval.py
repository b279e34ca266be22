"""Repeated stratified k-fold cross-validation of the estimators, and paired comparisons.

Every record gets an out-of-fold prediction from every estimator in every repeat:
``cross_val_predictions`` returns ``{name: [repeats, n]}``. Folds are stratified by the label
and grouped by record id (``StratifiedGroupKFold``), so records that share an id never sit on
both sides of a split; repeat ``r`` shuffles with seed ``seed + r``.

Metrics of repeated cross-validation (:func:`cv_metric`) are the mean over repeats of the
metric on that repeat's out-of-fold predictions. Intervals resample records (the same
bootstrap indices for every repeat and every estimator: :func:`acute.metrics.bootstrap_indices`),
so a difference between two estimators is a paired comparison on the same records.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from .estimators import PROBE_ESTIMATORS, STACKED_VARIANTS, estimator_group, make_estimator, probe_kwargs
from .errors import InputError

__all__ = ["check_folds", "cross_val_predictions", "cv_folds", "cv_metric", "fit_predict"]


def check_folds(correct: np.ndarray, n_splits: int, what: str = "the store") -> None:
    """Raise ``ValueError`` unless each class has at least ``n_splits`` records (stratified
    k-fold puts at least one of each class into every fold)."""
    if isinstance(n_splits, bool) or not isinstance(n_splits, (int, np.integer)) or n_splits < 2:
        raise InputError(f"the number of folds must be an int >= 2, got {n_splits!r}")
    y = np.asarray(correct).astype(np.int64)
    n_pos = int(y.sum())
    n_neg = int(y.size - n_pos)
    if min(n_pos, n_neg) < n_splits:
        raise InputError(
            f"{what} has {n_pos} correct and {n_neg} wrong records; {n_splits}-fold stratified "
            f"cross-validation needs at least {n_splits} of each class (and the probes' inner "
            f"folds about {n_splits * 5}): collect more records or use fewer folds")


def cv_folds(ids: Sequence[Any], correct: np.ndarray, n_splits: int = 5, n_repeats: int = 1,
             seed: int = 0) -> list[list[tuple[np.ndarray, np.ndarray]]]:
    """``n_repeats`` lists of ``n_splits`` ``(train_index, test_index)`` pairs over the records.

    Stratified by ``correct`` and grouped by ``ids`` (``StratifiedGroupKFold(shuffle=True,
    random_state=seed + repeat)``). Every record is in exactly one test fold per repeat.
    """
    from sklearn.model_selection import StratifiedGroupKFold

    check_folds(correct, n_splits)
    if isinstance(n_repeats, bool) or not isinstance(n_repeats, (int, np.integer)) or n_repeats < 1:
        raise InputError(f"the number of repeats must be an int >= 1, got {n_repeats!r}")
    groups = np.unique(np.asarray([str(i) for i in ids]), return_inverse=True)[1]
    if np.unique(groups).size < n_splits:
        raise InputError(f"{np.unique(groups).size} distinct record ids are fewer than {n_splits} folds")
    y = np.asarray(correct).astype(np.int64)
    out = []
    for r in range(int(n_repeats)):
        skf = StratifiedGroupKFold(int(n_splits), shuffle=True, random_state=int(seed) + r)
        out.append([(tr, te) for tr, te in skf.split(np.zeros(y.size), y, groups)])
    return out


def fit_predict(names: Sequence[str], layer_means_train, correct_train, confidence_train,
                layer_means_test, confidence_test, *, random_state: int = 0,
                n_jobs: int | None = None, probe_params: Mapping[str, Any] | None = None,
                on_fit: Callable[[str, Any], None] | None = None) -> dict[str, np.ndarray]:
    """Fit each named estimator on the training records and predict P(correct) on the test ones.

    A plain probe whose stacked variant is also requested is read off the stacked probe's final
    forest (``predict_proba(..., calibrated=False)``: the same forest, fitted once), except for
    the views that search their layer (early/mid/late): a stacked probe searches with its own
    5 folds, the plain one with 3, so their layers and forests may differ.
    ``layer_means_*`` may be None when only baselines are named. ``on_fit(name, estimator)`` is
    called after each fit (e.g. to record a chosen layer).
    """
    out: dict[str, np.ndarray] = {}
    fitted: dict[str, Any] = {}
    order = sorted(names, key=lambda n: 0 if n in STACKED_VARIANTS else 1)  # stacked first
    for name in order:
        plain_of = f"{name}-stacked"
        if name in PROBE_ESTIMATORS and plain_of in fitted and not _searches_layer(name):
            est = fitted[plain_of]
            p = est.predict_proba(layer_means_test, confidence=confidence_test, calibrated=False)[:, 1]
        else:
            est = make_estimator(name, random_state=random_state, n_jobs=n_jobs, probe_params=probe_params)
            est.fit(layer_means_train, correct_train, confidence=confidence_train)
            p = est.predict_proba(layer_means_test, confidence=confidence_test)[:, 1]
            fitted[name] = est
        out[name] = np.clip(np.asarray(p, dtype=np.float64), 0.0, 1.0)
        if on_fit is not None:
            on_fit(name, est)
    return {n: out[n] for n in names}


def _searches_layer(name: str) -> bool:
    from .features import NAMED_LAYERS

    kw = probe_kwargs(name)
    return kw.get("view") in NAMED_LAYERS or kw.get("layer") in NAMED_LAYERS


def cross_val_predictions(names: Sequence[str], layer_means, correct, confidence,
                          folds: list[list[tuple[np.ndarray, np.ndarray]]], *, random_state: int = 0,
                          n_jobs: int | None = None, probe_params: Mapping[str, Any] | None = None,
                          progress: Callable[[Iterable], Iterable] | None = None,
                          on_fit: Callable[[str, Any], None] | None = None) -> dict[str, np.ndarray]:
    """Out-of-fold P(correct) ``{name: [repeats, n]}`` of every estimator over ``folds``
    (from :func:`cv_folds`). ``layer_means`` may be a memory-mapped array: each fold reads its
    rows once (as float32). ``progress`` wraps the iterable of (repeat, fold) pairs."""
    y = np.asarray(correct).astype(np.int64)
    conf = np.asarray(confidence, dtype=np.float64)
    n = y.size
    needs_states = any(estimator_group(nm) != "baseline" for nm in names)
    out = {nm: np.full((len(folds), n), np.nan) for nm in names}
    pairs = [(r, tr, te) for r, rep in enumerate(folds) for tr, te in rep]
    it: Iterable = pairs if progress is None else progress(pairs)
    for r, tr, te in it:
        tr, te = np.sort(tr), np.sort(te)
        lm_tr = np.asarray(layer_means[tr], dtype=np.float32) if needs_states else None
        lm_te = np.asarray(layer_means[te], dtype=np.float32) if needs_states else None
        preds = fit_predict(names, lm_tr, y[tr], conf[tr], lm_te, conf[te], random_state=random_state,
                            n_jobs=n_jobs, probe_params=probe_params, on_fit=on_fit)
        for nm, p in preds.items():
            out[nm][r, te] = p
    for nm, p in out.items():
        if np.isnan(p).any():
            raise InputError(f"folds do not cover every record in every repeat ({nm})")
    return out


def cv_metric(metric: Callable[[np.ndarray, np.ndarray], float], predictions: np.ndarray,
              correct: np.ndarray, index: np.ndarray | None = None) -> float:
    """Mean over repeats (rows of ``predictions`` ``[repeats, n]``, or one 1-d row) of
    ``metric`` on the records ``index`` (all when None). NaN when the metric is undefined."""
    p = np.atleast_2d(np.asarray(predictions, dtype=np.float64))
    y = np.asarray(correct)
    if index is not None:
        p, y = p[:, index], y[index]
    if metric.__name__ == "auroc" and y.min() == y.max():
        return math.nan
    return float(np.mean([metric(row, y) for row in p]))
