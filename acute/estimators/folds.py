"""Folds over records and the one out-of-fold routine of acute.

Every out-of-fold prediction in the package comes from :func:`out_of_fold`: the probes'
calibration forests, ``auto``'s comparison, the layer search's held-out Brier scores, the
evaluation's cross-validation (:func:`acute.evaluation.crossval.cross_val_predictions`) and a
certified threshold's cross-fitted confidences (:mod:`acute.evaluation.certification`). What
is fitted on each fold is the caller's (a function of the fold's indices); the routine only
walks the folds, puts each fold's predictions on its held-out records, and checks that every
record was held out exactly once.

:func:`stratified_folds` draws the folds: stratified by the label, and, when the records carry
groups (a record id, a metadata field such as a tool set), grouped so that no group sits on both
sides of a split.
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from ..errors import InputError

__all__ = ["Folds", "check_splits", "folds_digest", "out_of_fold", "stratified_folds"]

#: ``(train_index, test_index)`` pairs, one per fold, the test parts a partition of the records
Folds = list[tuple[np.ndarray, np.ndarray]]


def stratified_folds(correct: Any, n_splits: int, seed: int | None, groups: Sequence[Any] | None = None,
                     group_name: str = "groups") -> Folds:
    """``n_splits`` ``(train_index, test_index)`` pairs over the records, stratified by ``correct``.

    Without ``groups``: ``StratifiedKFold(n_splits, shuffle=True, random_state=seed)``. With
    ``groups`` (one value per record, compared as strings): ``StratifiedGroupKFold`` with the
    same settings, so the records sharing a value are held out together; fewer distinct values
    than folds is an :class:`InputError` naming ``group_name``.
    """
    from sklearn.model_selection import StratifiedGroupKFold, StratifiedKFold  # heavy: sklearn

    y = np.asarray(correct).astype(np.int64)
    if groups is None:
        return list(StratifiedKFold(n_splits, shuffle=True, random_state=seed).split(np.zeros(y.size), y))
    if len(groups) != y.size:
        raise InputError(f"groups has {len(groups)} values but there are {y.size} records")
    codes = np.unique(np.asarray([str(g) for g in groups]), return_inverse=True)[1]
    n_groups = int(np.unique(codes).size)
    if n_groups < n_splits:
        raise InputError(f"{n_groups} distinct {group_name} are fewer than {n_splits} folds")
    splitter = StratifiedGroupKFold(int(n_splits), shuffle=True, random_state=seed)
    return list(splitter.split(np.zeros(y.size), y, codes))


def check_splits(splits: Any, n: int, name: str = "cv") -> Folds:
    """``splits`` (``(train_index, test_index)`` pairs, as scikit-learn's ``cv=`` iterable) as
    :data:`Folds` over ``n`` records, or an :class:`InputError` naming ``name``: at least two
    pairs, integer indices in ``[0, n)``, no record on both sides of a pair, and the test parts a
    partition of the records (each held out exactly once)."""
    try:
        folds = [(np.asarray(tr), np.asarray(te)) for tr, te in splits]
    except (TypeError, ValueError):
        raise InputError(f"{name} must be a number of folds or (train_index, test_index) pairs") from None
    if len(folds) < 2:
        raise InputError(f"{name} must hold at least 2 (train_index, test_index) pairs, got {len(folds)}")
    held = np.zeros(int(n), dtype=np.int64)
    for k, (tr, te) in enumerate(folds):
        for part in (tr, te):
            if part.ndim != 1 or (part.size and (part.dtype.kind not in "iu" or part.min() < 0 or part.max() >= n)):
                raise InputError(f"{name}: fold {k} holds indices that are not record numbers in [0, {n})")
        if np.intersect1d(tr, te).size:
            raise InputError(f"{name}: fold {k} has records on both its train and test side")
        np.add.at(held, te, 1)
    if (held != 1).any():
        raise InputError(f"{name}: the test parts must hold out every one of the {n} records exactly once "
                         f"({int((held == 0).sum())} never, {int((held > 1).sum())} more than once)")
    return folds


def folds_digest(folds: Folds) -> str:
    """sha256 of the folds' train and test indices, in order: equal for equal folds, however drawn."""
    h = hashlib.sha256()
    for train, test, *_ in folds:
        for part in (train, test):
            h.update(np.asarray(part, dtype=np.int64).tobytes())
            h.update(b"|")
    return h.hexdigest()


def out_of_fold(fit_predict: Callable[..., Any], folds: Iterable[tuple], n: int) -> np.ndarray:
    """Out-of-fold predictions of ``n`` records: for each ``(train, test)`` of ``folds``,
    ``fit_predict(train, test)`` fits on the records ``train`` and returns the predictions of the
    records ``test``, in that order (``[len(test)]``, or ``[len(test), ...]`` for several columns,
    e.g. several estimators). Returns float64 ``[n]`` (or ``[n, ...]``): each record's prediction
    from the fold that held it out. A fold may carry more items after its indices (e.g. its
    repeat and number, ``(train, test, repeat, k)``), passed on to ``fit_predict``. ``folds`` is
    walked once (it may be a progress bar's iterator). Raises :class:`InputError` unless every
    record is held out by exactly one fold."""
    out: np.ndarray | None = None
    held = np.zeros(int(n), dtype=np.int64)
    for train, test, *tags in folds:
        test = np.asarray(test)
        p = np.asarray(fit_predict(train, test, *tags), dtype=np.float64)
        if p.shape[:1] != (test.size,):
            raise InputError(f"a fold returned {p.shape[0] if p.ndim else 0} predictions for its "
                             f"{test.size} held-out records")
        if out is None:
            out = np.full((int(n),) + p.shape[1:], np.nan)
        out[test] = p
        np.add.at(held, test, 1)
    if out is None or (held != 1).any():
        missing, twice = int((held == 0).sum()), int((held > 1).sum())
        raise InputError(f"the folds do not hold out every record exactly once ({missing} of {n} never, "
                         f"{twice} more than once)")
    return out
