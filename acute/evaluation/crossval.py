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

import hashlib
import json
import logging
import math
import os
import time
import warnings
from itertools import islice
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from ..estimators.folds import out_of_fold, stratified_folds
from ..estimators.inputs import CONFIDENCE, Inputs
from ..estimators.plan import FitPlan, store_inputs
from ..estimators.registry import estimator_sources, make_estimator
from ..errors import InputError
from ..metrics import metric_over_resamples
from ..fileio import atomic_path

logger = logging.getLogger(__name__)

__all__ = ["DEFAULT_TEST_FRACTION", "check_folds", "cross_val_predictions", "cv_folds", "cv_metric", "cv_metric_draws", "fit_predict",
           "ids_digest", "inputs_for", "split_ids"]

#: The share of records a single split by id holds out (:func:`split_ids`; ``evaluate_store``'s
#: ``test_fraction``, ``acute train --test-fraction``, a run config's ``test_fraction``).
DEFAULT_TEST_FRACTION = 0.3


def inputs_for(store: Any, names: Sequence[str], metadata_fields: Sequence[str] | None = None,
               leave_out: Sequence[str] = ()) -> Inputs:
    """The :class:`acute.estimators.inputs.Inputs` of every record of ``store`` holding the sources
    the estimators ``names`` read (:func:`acute.estimators.registry.estimator_sources`), each
    computed once (:func:`acute.estimators.plan.store_inputs`: hidden states float32 in memory, the
    ``[n, fields]`` metadata strings of ``metadata_fields``, texts, the visible array), but the
    sources ``leave_out`` (those the store cannot feed, which a stack then does without)."""
    sources = dict.fromkeys(s for name in names for s in estimator_sources(name) if s not in leave_out)
    return store_inputs(store, list(sources), metadata_fields)


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
             seed: int = 0, groups: Sequence[Any] | None = None,
             group_name: str = "record ids") -> list[list[tuple[np.ndarray, np.ndarray]]]:
    """``n_repeats`` lists of ``n_splits`` ``(train_index, test_index)`` pairs over the records.

    Stratified by ``correct`` and grouped by ``ids`` (``StratifiedGroupKFold(shuffle=True,
    random_state=seed + repeat)``, :func:`acute.estimators.folds.stratified_folds`), or by
    ``groups`` when given (one value per record, e.g. a metadata field: leave-category-out folds
    keep each value on one side of every split). Every record is in exactly one test fold per
    repeat.
    """
    check_folds(correct, n_splits)
    if isinstance(n_repeats, bool) or not isinstance(n_repeats, (int, np.integer)) or n_repeats < 1:
        raise InputError(f"the number of repeats must be an int >= 1, got {n_repeats!r}")
    keys = ids if groups is None else groups
    if len(keys) != len(ids):
        raise InputError(f"groups has {len(keys)} values but there are {len(ids)} records")
    return [stratified_folds(correct, int(n_splits), int(seed) + r, groups=keys, group_name=group_name)
            for r in range(int(n_repeats))]


def fit_predict(names: Sequence[str], X_train: Inputs, correct_train: Any, X_test: Inputs, *,
                random_state: int = 0, n_jobs: int | None = None, probe_params: Mapping[str, Any] | None = None,
                on_fit: Callable[[str, Any], None] | None = None,
                timings: dict[str, float] | None = None) -> dict[str, np.ndarray]:
    """Fit each named estimator on the training records' inputs ``X_train`` (labels
    ``correct_train``) and predict P(correct) on the test records' ``X_test``.

    The estimators are fitted by one :class:`acute.estimators.plan.FitPlan`: each declares what
    it needs, then each is fitted in the order given, and every piece two of them need (a view's
    forest, a calibration's fold forests, ``auto``'s candidates) is fitted once for both; each
    prediction equals the estimator's own fit to the last bit (tests/estimators/test_shared_fits.py).

    ``X_*`` hold every source the estimators read (:func:`inputs_for` and its rows).
    ``on_fit(name, estimator)`` is called after each fit (e.g. to record a chosen layer).
    ``timings`` (a dict), when given, gets each estimator's seconds (fit and prediction) added
    under its name; a piece shared with an estimator fitted earlier is counted there.
    ``n_jobs``: threads of each forest fit (None: the probes' default, all cores).
    """
    made = {name: make_estimator(name, random_state=random_state, n_jobs=n_jobs, probe_params=probe_params)
            for name in names}
    plan = FitPlan(X_train, correct_train)
    for est in made.values():
        plan.declare(est)
    out: dict[str, np.ndarray] = {}
    for name, est in made.items():
        t0 = time.perf_counter()
        est = plan.fit(est)
        p = est.predict_proba(X_test)[:, 1]
        out[name] = np.clip(np.asarray(p, dtype=np.float64), 0.0, 1.0)
        if timings is not None:
            timings[name] = timings.get(name, 0.0) + time.perf_counter() - t0
        if on_fit is not None:
            on_fit(name, est)
    return {n: out[n] for n in names}


def cross_val_predictions(names: Sequence[str], X: Inputs, correct: Any,
                          folds: list[list[tuple[np.ndarray, np.ndarray]]], *, random_state: int = 0,
                          n_jobs: int | None = None, probe_params: Mapping[str, Any] | None = None,
                          progress: Callable[[Iterable], Iterable] | None = None,
                          on_fit: Callable[[str, Any], None] | None = None,
                          cache_dir: str | os.PathLike | None = None,
                          cache_key: str = "", timings: dict[str, float] | None = None) -> dict[str, np.ndarray]:
    """Out-of-fold P(correct) ``{name: [repeats, n]}`` of every estimator over ``folds``
    (from :func:`cv_folds`), each repeat by :func:`acute.estimators.folds.out_of_fold` over
    :func:`fit_predict` of its folds. ``X`` (the inputs of every record, :func:`inputs_for`)
    gives each fold its rows (:meth:`~acute.estimators.inputs.Inputs.take`). ``progress`` wraps
    the iterable of (repeat, fold) pairs.

    ``cache_dir``: each finished fold's predictions are written there (one ``.npz`` per fold,
    atomically), keyed by ``cache_key`` (what identifies the data: e.g. the store's collection
    key and record ids), the estimator names, the fold's indices, the labels, the confidences,
    ``random_state`` and ``probe_params``; a rerun reads a fold whose key matches instead of
    refitting it, so an evaluation that is killed resumes fold by fold (its predictions equal a
    run without a cache: the fits are deterministic). ``on_fit`` is not called for read folds,
    nor are their seconds added to ``timings`` (see :func:`fit_predict`).
    The key does not cover acute's own code: after changing an estimator's code, delete the
    folder."""
    y = np.asarray(correct).astype(np.int64)
    conf = np.asarray(X.get(CONFIDENCE, np.zeros(0)), dtype=np.float64)
    n = y.size
    pairs = [(r, k, tr, te) for r, rep in enumerate(folds) for k, (tr, te) in enumerate(rep)]
    walk = iter(pairs if progress is None else progress(pairs))
    base = _fold_key_base(names, y, conf, random_state, probe_params, cache_key) if cache_dir else None

    def repeat_folds(size: int):  # the next ``size`` folds of the progress walk, each with its place
        for r, k, tr, te in islice(walk, size):
            yield np.sort(tr), np.sort(te), r, k

    def fold(tr: np.ndarray, te: np.ndarray, r: int, k: int) -> np.ndarray:
        path = None
        if cache_dir is not None:
            path = Path(cache_dir) / f"r{r}-f{k}-{_fold_key(base, tr, te)}.npz"
            cached = _read_fold(path, names, te.size)
            if cached is not None:
                return np.column_stack([cached[nm] for nm in names])
        preds = fit_predict(names, X.take(tr), y[tr], X.take(te), random_state=random_state,
                            n_jobs=n_jobs, probe_params=probe_params, on_fit=on_fit, timings=timings)
        if path is not None:
            _write_fold(path, preds)
        return np.column_stack([preds[nm] for nm in names])

    per_repeat = [out_of_fold(fold, repeat_folds(len(rep)), n) for rep in folds]
    next(walk, None)  # the end of the pairs: a progress bar closes
    return {nm: np.stack([p[:, i] for p in per_repeat]) for i, nm in enumerate(names)}


def _fold_key_base(names, y, conf, random_state, probe_params, cache_key: str):
    h = hashlib.sha256()
    h.update(json.dumps({"names": list(names), "random_state": int(random_state), "key": cache_key,
                         "probe_params": {k: v for k, v in sorted((probe_params or {}).items())}},
                        sort_keys=True, default=str).encode())
    h.update(np.ascontiguousarray(y, dtype=np.int64).tobytes())
    h.update(np.ascontiguousarray(conf, dtype=np.float64).tobytes())
    return h


def _fold_key(base, tr: np.ndarray, te: np.ndarray) -> str:
    h = base.copy()
    h.update(np.ascontiguousarray(tr, dtype=np.int64).tobytes())
    h.update(b"|")
    h.update(np.ascontiguousarray(te, dtype=np.int64).tobytes())
    return h.hexdigest()[:20]


def _read_fold(path: Path, names: Sequence[str], size: int) -> dict[str, np.ndarray] | None:
    """A cached fold's predictions, or None when it is missing or unreadable (then refit)."""
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            got = {nm: np.asarray(z[f"p{i}"], dtype=np.float64) for i, nm in enumerate(names)}
    except (OSError, KeyError, ValueError) as e:
        logger.warning("fold cache %s unreadable (%s): refitting it", path, e)
        return None
    if any(v.shape != (size,) or not np.isfinite(v).all() for v in got.values()):
        logger.warning("fold cache %s does not match this fold: refitting it", path)
        return None
    return got


def _write_fold(path: Path, preds: Mapping[str, np.ndarray]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as fh:
            np.savez(fh, **{f"p{i}": np.asarray(p, dtype=np.float64) for i, p in enumerate(preds.values())})


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


def cv_metric_draws(metric: Callable[[np.ndarray, np.ndarray], float], predictions: np.ndarray,
                    correct: np.ndarray, index: np.ndarray) -> np.ndarray:
    """:func:`cv_metric` on every resample ``index[b]`` (rows of an integer array
    ``[n_resamples, size]``, e.g. :func:`acute.metrics.bootstrap_indices`): float64
    ``[n_resamples]``, NaN where the metric is undefined on a resample.

    Each repeat's resamples run at once through :func:`acute.metrics.metric_over_resamples`
    (vectorised for smECE, ECE, KDE-ECE, KS-Cal, Brier, NLL, AUROC and the auc-euro bands;
    AUROC is NaN on single-class resamples), so the values equal
    ``[cv_metric(metric, predictions, correct, i) for i in index]`` up to floating-point
    rounding (~1e-15), many times faster."""
    p = np.atleast_2d(np.asarray(predictions, dtype=np.float64))
    y = np.asarray(correct)
    index = np.asarray(index)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # undefined resamples are NaN, by design
        per_repeat = np.stack([metric_over_resamples(metric, row, y, index) for row in p])
    return per_repeat.mean(axis=0)


# ----------------------------------------------------------------------------- a split by id


def _unit_hash(seed: int, record_id: Any) -> float:
    digest = hashlib.sha256(f"{seed}:{record_id}".encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def split_ids(ids: Sequence[Any], test_fraction: float = DEFAULT_TEST_FRACTION, seed: int = 0,
              groups: Sequence[Any] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Deterministic train/test split by record id, or by group.

    A record is in the test split when ``sha256(f"{seed}:{id}")`` read as a number in [0, 1) is
    below ``test_fraction``. Its side therefore depends only on its own id and the seed: not on the
    order of ``ids``, nor on which other records exist (a store that grows keeps its old split). The
    test share is ``test_fraction`` in expectation (binomial spread around it). With ``groups``
    (one value per record, e.g. its tool set) the hash is of ``f"{seed}:group:{value}"``: the
    records sharing a value fall on one side together, the share of groups is ``test_fraction``
    in expectation.

    Returns ``(train_mask, test_mask)``, complementary boolean arrays aligned with ``ids``.
    ``test_fraction`` must be in [0, 1); ids must be unique (``ValueError`` otherwise).
    """
    if not (isinstance(test_fraction, (int, float)) and 0.0 <= float(test_fraction) < 1.0):
        raise InputError(f"test_fraction must be in [0, 1), got {test_fraction!r}")
    ids = list(ids)
    if len(set(map(str, ids))) != len(ids):
        seen: set[str] = set()
        dup = next(str(i) for i in ids if str(i) in seen or seen.add(str(i)))
        raise InputError(f"ids must be unique to split by id; {dup!r} occurs more than once")
    if groups is not None:
        if len(groups) != len(ids):
            raise InputError(f"groups has {len(groups)} values but there are {len(ids)} records")
        u = np.array([_unit_hash(seed, f"group:{g}") for g in groups], dtype=np.float64)
    else:
        u = np.array([_unit_hash(seed, i) for i in ids], dtype=np.float64)
    test = u < float(test_fraction)
    return ~test, test


def ids_digest(ids: Iterable[Any]) -> str:
    """sha256 of the sorted ids (one per line): identifies a split's records regardless of order."""
    return hashlib.sha256("\n".join(sorted(map(str, ids))).encode("utf-8")).hexdigest()
