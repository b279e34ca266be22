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
import warnings
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from .controls import META_INPUT, TEXT_INPUT, metadata_matrix
from .estimators import (PROBE_ESTIMATORS, STACKED_VARIANTS, estimator_input, make_estimator, probe_kwargs,
                         split_pooling)
from .errors import InputError
from .metrics import metric_over_resamples
from .pooling import DEFAULT_POOLING, store_states

logger = logging.getLogger(__name__)

__all__ = ["check_folds", "cross_val_predictions", "cv_folds", "cv_metric", "cv_metric_draws", "fit_predict", "states_for", "take_rows"]


def states_for(store: Any, names: Sequence[str], metadata_fields: Sequence[str] | None = None):
    """What the estimators ``names`` read from ``store`` beside the raw confidence
    (:func:`acute.estimators.estimator_input`): None when only baselines are named, the
    ``layer_means`` array (float32, in memory) when every reader reads the mean, else
    ``{input: array}``: hidden states per pooling spec (:mod:`acute.pooling`; the store names a
    pooling it lacks), the ``[n, fields]`` metadata strings of ``metadata_fields``
    (:func:`acute.controls.metadata_matrix`) and the prompt texts (object arrays)."""
    specs = list(dict.fromkeys(s for s in map(estimator_input, names) if s is not None))
    if not specs:
        return None
    if specs == [DEFAULT_POOLING]:
        return np.asarray(store.layer_means, dtype=np.float32)
    out = {}
    for s in specs:
        if s == META_INPUT:
            out[s] = metadata_matrix(store.records, list(metadata_fields or ()), where=str(getattr(store, "path", "the store")))
        elif s == TEXT_INPUT:
            out[s] = np.asarray([r.get("prompt") for r in store.records], dtype=object)
        else:
            out[s] = np.asarray(store_states(store, s), dtype=np.float32)
    return out


def _rows(values: np.ndarray, index: np.ndarray) -> np.ndarray:
    v = np.asarray(values)
    return v[index] if v.dtype == object else np.asarray(v[index], dtype=np.float32)


def take_rows(states: Any, index: np.ndarray):
    """Rows ``index`` of ``states`` (an array or ``{input: array}``; None stays None): hidden
    states as float32, metadata and texts as they are."""
    if states is None:
        return None
    if isinstance(states, Mapping):
        return {k: _rows(v, index) for k, v in states.items()}
    return _rows(states, index)


def _input_of(states: Any, name: str):
    """What estimator ``name`` reads from ``states``: the array of its input."""
    spec = estimator_input(name)
    if not isinstance(states, Mapping):
        if spec not in (None, DEFAULT_POOLING):
            what = "input" if spec in (META_INPUT, TEXT_INPUT) else "states"
            raise InputError(f"{name} reads the {spec!r} {what}: pass states as {{input: array}}")
        return states
    if spec is None:
        return None
    if spec not in states:
        raise InputError(f"no {spec!r} input was given for {name} (given: {', '.join(states)})")
    return states[spec]


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
    random_state=seed + repeat)``), or by ``groups`` when given (one value per record, e.g. a
    metadata field: leave-category-out folds keep each value on one side of every split).
    Every record is in exactly one test fold per repeat.
    """
    from sklearn.model_selection import StratifiedGroupKFold

    check_folds(correct, n_splits)
    if isinstance(n_repeats, bool) or not isinstance(n_repeats, (int, np.integer)) or n_repeats < 1:
        raise InputError(f"the number of repeats must be an int >= 1, got {n_repeats!r}")
    keys = ids if groups is None else groups
    if len(keys) != len(ids):
        raise InputError(f"groups has {len(keys)} values but there are {len(ids)} records")
    groups = np.unique(np.asarray([str(i) for i in keys]), return_inverse=True)[1]
    if np.unique(groups).size < n_splits:
        raise InputError(f"{np.unique(groups).size} distinct {group_name} are fewer than {n_splits} folds")
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
    ``layer_means_*`` are the mean states (an array), or ``{pooling spec: array}`` when probes
    read other poolings (:func:`states_for`); None when only baselines are named.
    ``on_fit(name, estimator)`` is called after each fit (e.g. to record a chosen layer).
    """
    out: dict[str, np.ndarray] = {}
    fitted: dict[str, Any] = {}
    order = sorted(names, key=lambda n: 0 if split_pooling(n)[0] in STACKED_VARIANTS else 1)  # stacked first
    for name in order:
        base, spec = split_pooling(name)
        stacked_twin = f"{base}-stacked" + (f"@{spec}" if spec else "")
        x_train, x_test = _input_of(layer_means_train, name), _input_of(layer_means_test, name)
        if base in PROBE_ESTIMATORS and stacked_twin in fitted and not _searches_layer(name):
            est = fitted[stacked_twin]
            p = est.predict_proba(x_test, confidence=confidence_test, calibrated=False)[:, 1]
        else:
            est = make_estimator(name, random_state=random_state, n_jobs=n_jobs, probe_params=probe_params)
            est.fit(x_train, correct_train, confidence=confidence_train)
            p = est.predict_proba(x_test, confidence=confidence_test)[:, 1]
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
                          on_fit: Callable[[str, Any], None] | None = None,
                          cache_dir: str | os.PathLike | None = None,
                          cache_key: str = "") -> dict[str, np.ndarray]:
    """Out-of-fold P(correct) ``{name: [repeats, n]}`` of every estimator over ``folds``
    (from :func:`cv_folds`). ``layer_means`` (the states, as in :func:`fit_predict`) may be
    memory-mapped: each fold reads its rows once (as float32). ``progress`` wraps the iterable
    of (repeat, fold) pairs.

    ``cache_dir``: each finished fold's predictions are written there (one ``.npz`` per fold,
    atomically), keyed by ``cache_key`` (what identifies the data: e.g. the store's collection
    key and record ids), the estimator names, the fold's indices, the labels, the confidences,
    ``random_state`` and ``probe_params``; a rerun reads a fold whose key matches instead of
    refitting it, so an evaluation that is killed resumes fold by fold (its predictions equal a
    run without a cache: the fits are deterministic). ``on_fit`` is not called for read folds.
    The key does not cover acute's own code: after changing an estimator's code, delete the
    folder."""
    y = np.asarray(correct).astype(np.int64)
    conf = np.asarray(confidence, dtype=np.float64)
    n = y.size
    needs_states = any(estimator_input(nm) is not None for nm in names)
    out = {nm: np.full((len(folds), n), np.nan) for nm in names}
    pairs = [(r, k, tr, te) for r, rep in enumerate(folds) for k, (tr, te) in enumerate(rep)]
    it: Iterable = pairs if progress is None else progress(pairs)
    base = _fold_key_base(names, y, conf, random_state, probe_params, cache_key) if cache_dir else None
    for r, k, tr, te in it:
        tr, te = np.sort(tr), np.sort(te)
        path = None
        if cache_dir is not None:
            path = Path(cache_dir) / f"r{r}-f{k}-{_fold_key(base, tr, te)}.npz"
            cached = _read_fold(path, names, te.size)
            if cached is not None:
                for nm in names:
                    out[nm][r, te] = cached[nm]
                continue
        lm_tr = take_rows(layer_means, tr) if needs_states else None
        lm_te = take_rows(layer_means, te) if needs_states else None
        preds = fit_predict(names, lm_tr, y[tr], conf[tr], lm_te, conf[te], random_state=random_state,
                            n_jobs=n_jobs, probe_params=probe_params, on_fit=on_fit)
        for nm, p in preds.items():
            out[nm][r, te] = p
        if path is not None:
            _write_fold(path, preds)
    for nm, p in out.items():
        if np.isnan(p).any():
            raise InputError(f"folds do not cover every record in every repeat ({nm})")
    return out


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
    from ._util import atomic_path

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
