"""Out-of-fold and held-out predictions of an evaluation: every estimator fitted on training
records and scored on the others, by repeated stratified k-fold (:func:`cross_validated`) or a
single split or test store (:func:`held_out`), with the checks that fail before any fitting and
the log of what the fits chose."""

from __future__ import annotations

import json
import logging
import sys
import time
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
from tqdm.auto import tqdm

from ..errors import InputError
from ..estimators.features import NAMED_LAYERS
from ..estimators.inputs import GROUPS
from ..estimators.registry import estimator_pooling, make_estimator
from ..validation import check_confidence, check_correct
from .crossval import check_folds, cross_val_predictions, cv_folds, fit_predict, ids_digest, inputs_for, split_ids
from .grouping import store_groups

__all__ = ["FitLog", "Predictions", "cross_validated", "held_out", "store_arrays"]

logger = logging.getLogger(__name__)


def store_arrays(store, label: str) -> tuple[list, np.ndarray, np.ndarray]:
    """``(ids, correct, raw confidence)`` of a store, checked: at least one record, labels and
    confidences of the ids' length; errors name ``label``."""
    ids = list(store.ids)
    n = len(ids)
    if n == 0:
        raise InputError(f"{label} has no records")
    try:
        correct = check_correct(np.asarray(store.correct), n, name=f"{label}.correct")
        conf = check_confidence(store.raw_confidence, name=f"{label}.raw_confidence")
    except ValueError as e:
        raise InputError(f"{label}: {e}") from None
    if conf.size != n:
        raise InputError(f"{label}.raw_confidence has {conf.size} entries but {label}.ids has {n}")
    return ids, correct, conf


def _check_layer_means(store, n: int, label: str) -> tuple[int, ...]:
    """``(L+1, d)`` of a store's ``[n, L+1, d]`` layer means, which must be finite."""
    shape = tuple(store.layer_means.shape)
    if len(shape) != 3 or shape[0] != n:
        raise InputError(f"{label}.layer_means must have shape [n={n}, L+1, d], got {shape}")
    if hasattr(store, "check_finite"):  # a Store names the record and shard of a NaN
        store.check_finite()
    return shape[1:]


def _inner_folds(name: str, probe_params: Mapping[str, Any] | None) -> int:
    """How many stratified folds a probe (or ``auto``) runs inside its own fit (0: none)."""
    est = make_estimator(name, probe_params=probe_params)
    params = est.get_params()
    if name == "auto" or params.get("calibration") is not None or params.get("layer") in ("early", "mid", "late") \
            or params.get("view") in ("early", "mid", "late"):
        return int(params.get("cv", 0))
    return 0


def _check_probe_inputs(names: Sequence[str], shape: tuple[int, ...], n_train: int, n_minority: int,
                        probe_params: Mapping[str, Any] | None, where: str) -> None:
    """Fail before any fitting when a probe cannot run on training sets of ``n_train`` records
    whose smaller class has ``n_minority``: too few records for the folds the probes run inside
    their own fit, or more PCA components than the hidden size or the records allow."""
    probes = [n for n in names if estimator_pooling(n) is not None]
    if not probes:
        return
    inner = {n: _inner_folds(n, probe_params) for n in probes}
    need = max(inner.values())
    if need and n_minority < need:
        which = ", ".join(n for n, k in inner.items() if k == need)
        raise InputError(f"{which} run stratified {need}-fold cross-validation inside their fit, which "
                         f"needs at least {need} correct and {need} wrong training records; {where} "
                         f"has only {n_minority} of one class: collect more records or leave them out")
    folds = max(int(make_estimator(n, probe_params=probe_params).get_params().get("cv", 0)) for n in probes)
    if n_train < folds:
        raise InputError(f"{where} has {n_train} records, fewer than the probes' {folds} "
                         "cross-validation folds; collect more records")
    hidden = shape[1]
    for n in probes:
        view = make_estimator(n, probe_params=probe_params).get_params().get("view", "")
        if str(view).startswith("pca") and int(view[3:]) > min(hidden, n_train):
            raise InputError(f"{n} needs {view[3:]} principal components but the hidden size is {hidden} "
                             f"and {where} has {n_train} records; leave {n} out of estimators")


class FitLog:
    """The fits' ``on_fit`` callback: what they chose per estimator (a searched layer, ``auto``'s
    pick, a stack's first-level estimators)."""

    def __init__(self):
        self.layers: dict[str, list[int]] = {}
        self.chosen: dict[str, list[str]] = {}
        self.used: dict[str, list[str]] = {}

    def __call__(self, name: str, est: Any) -> None:
        layer = getattr(est, "layer_", None)
        params = est.get_params()
        searched = params.get("layer") in NAMED_LAYERS or params.get("view") in NAMED_LAYERS
        if isinstance(layer, (int, np.integer)) and searched:
            self.layers.setdefault(name, []).append(int(layer))
        best = getattr(est, "best_", None)
        if isinstance(best, str):
            self.chosen.setdefault(name, []).append(best)
        used = getattr(est, "estimators_used_", None)
        if used is not None and name not in self.used:
            self.used[name] = list(used)

    def row_extra(self, name: str) -> dict:
        """What a metrics row of ``name`` records of its fits: ``layer`` (the most chosen searched
        layer, None when none was searched) and ``layers``, ``chosen`` and ``chosen_per_fit``
        (``auto``'s picks), ``estimators_used`` (a stack's first-level estimators)."""
        layers, chosen = self.layers.get(name), self.chosen.get(name)
        out: dict[str, Any] = {"layer": None}
        if layers:
            out["layer"] = max(set(layers), key=lambda v: (layers.count(v), -v))
            out["layers"] = layers
        if chosen:
            out["chosen"] = max(set(chosen), key=lambda v: (chosen.count(v), v))
            out["chosen_per_fit"] = chosen
        if name in self.used:
            out["estimators_used"] = self.used[name]
        return out


@dataclass
class Predictions:
    """What a mode of :func:`acute.evaluation.evaluate.evaluate_store` predicted: confidences on ``ids`` (``correct``),
    per repeat in cross-validation, plus the split's description."""

    ids: list
    correct: np.ndarray
    predictions: dict[str, np.ndarray]
    split: dict
    train_ids: list
    seconds: float
    cv_predictions: dict[str, np.ndarray] | None = None
    fold_of: list | None = None
    folds: list | None = None
    clusters: list | None = None  #: the group of each record the folds kept apart (None: record ids)


def cross_validated(store, names: Sequence[str], fit_kw: Mapping[str, Any], *, cv: int, repeats: int, seed: int,
                    group_by: str | None = None, progress: bool = True, fold_cache=None) -> Predictions:
    """Every record scored out of fold by repeated stratified k-fold grouped by id (or by the
    metadata field ``group_by``). ``fit_kw``: the keywords of
    :func:`acute.evaluation.crossval.cross_val_predictions`, plus ``metadata_fields`` and
    ``leave_out`` (what the inputs read: :func:`acute.evaluation.crossval.inputs_for`)."""
    fit_kw = dict(fit_kw)
    fields = fit_kw.pop("metadata_fields", ())
    leave_out = fit_kw.pop("leave_out", ())
    ids, correct, conf = store_arrays(store, "store")
    check_folds(correct, cv, "the store")
    group_by, groups = store_groups(store, group_by, ids)
    folds = cv_folds(ids, correct, n_splits=cv, n_repeats=repeats, seed=seed, groups=groups,
                     group_name="record ids" if group_by is None else f"values of {group_by!r}")
    if any(estimator_pooling(n) is not None for n in names):
        shape = _check_layer_means(store, len(ids), "store")
        n_min = min(int(min(correct[tr].sum(), tr.size - correct[tr].sum())) for rep in folds for tr, _ in rep)
        n_tr = min(tr.size for rep in folds for tr, _ in rep)
        _check_probe_inputs(names, shape, n_tr, n_min, fit_kw["probe_params"], "a training fold")
    X = inputs_for(store, names, fields, leave_out)
    if groups is not None:  # what a stack's inner folds keep apart, as the outer folds do
        X = X.with_source(GROUPS, groups)

    def bar(it):
        return tqdm(it, desc=f"{cv}-fold x {repeats}", disable=not progress, file=sys.stderr)

    t0 = time.perf_counter()
    manifest = getattr(store, "manifest", None) or {}
    key = json.dumps({"ids": ids_digest(ids), "fields": list(fields),
                      **{k: manifest.get(k) for k in ("model", "model_weights", "task", "task_settings",
                                                       "generation", "dtype", "poolings")}},
                     sort_keys=True, default=str)
    cv_preds = cross_val_predictions(names, X, correct, folds, progress=bar, cache_dir=fold_cache,
                                     cache_key=key, **fit_kw)
    split = {"mode": "cv", "seed": int(seed), "n_splits": int(cv), "n_repeats": int(repeats),
             "n_records": len(ids), "accuracy": float(correct.mean()), "group_by": group_by,
             "ids_sha256": ids_digest(ids), "folds_file": "folds.json"}
    return Predictions(ids, correct, {n: p[0] for n, p in cv_preds.items()}, split, ids,
                       time.perf_counter() - t0, cv_preds, [_fold_index(rep, len(ids)) for rep in folds], folds,
                       groups)


def held_out(store, test_store, names: Sequence[str], fit_kw: Mapping[str, Any], *, test_fraction: float,
             seed: int, allow_overlap: bool = False) -> Predictions:
    """Fit on the training records (a split by id, or all of ``store``), score the test ones
    (``fit_kw``: as :func:`cross_validated`'s, for :func:`acute.evaluation.crossval.fit_predict`)."""
    fit_kw = dict(fit_kw)
    fields = fit_kw.pop("metadata_fields", ())
    leave_out = fit_kw.pop("leave_out", ())
    ids, correct, _ = store_arrays(store, "store")  # checks the labels and confidences
    if test_store is not None:
        mode = "test_store"
        t_ids, t_correct, _ = store_arrays(test_store, "test_store")
        i_tr, i_te, te_store = np.arange(len(ids)), np.arange(len(t_ids)), test_store
        train_ids, y_tr = ids, correct
        eval_ids, y_te = t_ids, t_correct
    else:
        mode = "split"
        train_mask, test_mask = split_ids(ids, test_fraction=test_fraction, seed=seed)
        i_tr, i_te, te_store = np.flatnonzero(train_mask), np.flatnonzero(test_mask), store
        train_ids, y_tr = [ids[i] for i in i_tr], correct[i_tr]
        eval_ids, y_te = [ids[i] for i in i_te], correct[i_te]
    if not eval_ids:
        raise InputError(f"the test split is empty (n={len(ids)}, test_fraction={test_fraction}, "
                         f"seed={seed}); use more records or a larger test_fraction")
    if not train_ids:
        raise InputError("the training split is empty")
    if y_tr.min() == y_tr.max():
        raise InputError(f"the training split has a single class (all {len(train_ids)} records "
                         f"{'correct' if y_tr[0] else 'incorrect'}); calibrators need both")
    if any(estimator_pooling(n) is not None for n in names):
        shape = _check_layer_means(store, len(ids), "store")
        if test_store is not None:
            t_shape = _check_layer_means(test_store, len(eval_ids), "test_store")
            if t_shape != shape:
                raise InputError(f"store.layer_means is [n, {shape[0]}, {shape[1]}] but test_store's is "
                                 f"[n, {t_shape[0]}, {t_shape[1]}]: different models or layers")
        _check_probe_inputs(names, shape, len(train_ids), int(min(y_tr.sum(), y_tr.size - y_tr.sum())),
                            fit_kw["probe_params"], "the training split")
    X_tr = inputs_for(store, names, fields, leave_out).take(i_tr)
    X_te = inputs_for(te_store, names, fields, leave_out).take(i_te)
    overlap = len(set(map(str, train_ids)) & set(map(str, eval_ids)))
    if overlap and test_store is not None and not allow_overlap:
        raise InputError(f"{overlap} of the test store's {len(eval_ids)} record ids also occur in the training "
                         "store: the test would score records the estimators were fitted on; use a disjoint "
                         "test store, or allow_overlap=True (--allow-overlap) if the same ids are other records")
    if overlap:
        logger.warning("%d id(s) occur in both the training and the test records", overlap)
    t0 = time.perf_counter()
    predictions = fit_predict(names, X_tr, y_tr, X_te, **fit_kw)
    split = {"mode": mode, "seed": int(seed), "test_fraction": float(test_fraction) if mode == "split" else None,
             "n_train": len(train_ids), "n_test": len(eval_ids), "n_overlap_ids": overlap,
             "accuracy_train": float(y_tr.mean()), "accuracy_test": float(y_te.mean()),
             "train_ids_sha256": ids_digest(train_ids), "test_ids_sha256": ids_digest(eval_ids),
             "ids_file": "split.json"}
    return Predictions(list(eval_ids), y_te, predictions, split, list(train_ids), time.perf_counter() - t0)


def _fold_index(folds: list[tuple[np.ndarray, np.ndarray]], n: int) -> list[int]:
    """Each of ``n`` records' test fold in one repeat's ``folds``."""
    out = np.empty(n, dtype=np.int64)
    for k, (_, te) in enumerate(folds):
        out[te] = k
    return out.tolist()
