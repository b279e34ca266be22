"""Certified trust thresholds for an exported probe (``acute export --max-error --delta``).

:func:`certify_probe` calibrates a Learn-then-Test threshold
(:func:`acute.metrics.certify.certify_threshold`) for a trained probe on labelled records the
probe was **not fitted on**, and records it on the :class:`~acute.evaluation.training.TrainedProbe`
(``probe.json``'s ``certificates``, :mod:`acute.estimators.certificates`). Two sources:

* ``"out-of-fold"`` (default): the cross-fitted predictions of the probe's own training records.
  For the default export (``auto`` with ``refit`` set) and ``--estimator auto`` these are the
  out-of-fold predictions its cross-validated comparison already made
  (:attr:`AutoEstimator.oof_`, 5 stratified folds seeded by ``seed``); for a named probe, a
  ``--view`` probe or a stack (:class:`~acute.evaluation.choice.TrainedStack`, refitted whole on
  each fold) the same folds are fitted here (:func:`acute.estimators.folds.out_of_fold`).
  When the store's task groups its records (``default_group_by``: APIGen and BFCL keep a tool
  set together) or ``group_by`` names a metadata field, the folds are grouped as the
  evaluation's are (:func:`acute.evaluation.grouping.store_groups`,
  ``StratifiedGroupKFold``): no group is on both sides of a split; ``auto``'s comparison ran on
  the same grouped folds (:func:`acute.evaluation.training.train_probe`), so its predictions
  are still the ones reused, and a named probe is cross-fitted on them. Each record's
  confidence comes from a probe fitted without it, so the test is sound for probes fitted on
  4/5 of the records; the exported probe, fitted on all of them, is taken to be at least as good
  (the usual cross-fitting assumption, not part of the theorem). With ``--estimator auto`` the
  probe was also chosen on these predictions, a mild optimism. For the guarantee exactly as
  stated use a calibration store.
* ``"calibration-store"``: every record of a separate store, scored by the exported probe. It
  must come from the same model (fingerprint and weights) with the same prompt format (chat
  template or not, prompts of given responses) and setting (engine and its version, model dtype,
  quantisation, pooling: the validity domain, :func:`acute.store.identity.domain_change`) as
  the training store
  (:class:`~acute.errors.IncompatibleStoreError` naming both otherwise), and share no record
  with the training records of the same task.

The guarantee is for answers like the calibration records (exchangeable with them): calibrate
on the questions the gate will see.

:func:`check_certification` refuses, before anything is fitted, a ``max_error`` or ``delta``
outside (0, 1) and fewer calibration records than
:func:`~acute.metrics.certify.min_calibration_records` (saying how many would be needed). With
enough records a certificate may still be invalid (no threshold passed): it is recorded as such,
with its reason and the projected number of records that would certify one; never a silent
fallback.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..errors import IncompatibleStoreError, InputError
from ..estimators.certificates import certificate_entry
from ..metrics.certify import (DEFAULT_BACKEND, DEFAULT_DELTA, DEFAULT_FWER, certify_threshold, check_backend,
                               check_delta, check_max_errors, min_calibration_records)
from ..metrics.drift import confidence_reference
from ..store.identity import ModelIdentity, domain_change
from .grouping import store_groups
from ..estimators.folds import folds_digest, out_of_fold, stratified_folds

__all__ = ["CV_FOLDS", "calibration_confidence", "certify_checked", "certify_probe", "check_calibration_store",
           "check_certification"]

#: folds of the out-of-fold calibration (those of ``auto``'s comparison)
CV_FOLDS = 5


def check_calibration_store(store: Any, calibration_store: Any, *, store_name: str = "the training store",
                            calibration_name: str = "the calibration store",
                            train_ids: Sequence[Any] | None = None) -> None:
    """Refuse (:class:`IncompatibleStoreError` naming both) a calibration store of another model
    (fingerprint, weights digest) or prompt format than ``store``; refuse (InputError) one that
    is the training store or shares record ids with its training records (``train_ids``, default
    all of them) of the same task: the probe was fitted on those."""
    a, b = store.manifest, calibration_store.manifest
    ia, ib = ModelIdentity.from_manifest(a), ModelIdentity.from_manifest(b)
    known_a, known_b = ia.to_probe_json()["fingerprint"], ib.to_probe_json()["fingerprint"]
    if not known_a or not known_b:
        which = store_name if not known_a else calibration_name
        raise IncompatibleStoreError(f"{which} records no model fingerprint, so {calibration_name} "
                                     f"cannot be shown to come from the model of {store_name}")
    # the model's fields are compared where both stores know them; the prompt format always
    found = ia.diff(ib, (store_name, calibration_name),
                    fields=("model_fingerprint", "model_weights", "engine", "prompt_format"),
                    optional=("model_fingerprint", "model_weights"), across_dtypes=True)
    if found:
        raise IncompatibleStoreError(
            f"{calibration_name} cannot certify a probe trained on {store_name}: its records come "
            f"from another model or prompt format: {found}; calibrate on records of the same model "
            f"collected the same way")
    found = domain_change(ia, ib, (store_name, calibration_name))
    if found:
        raise IncompatibleStoreError(
            f"{calibration_name} cannot certify a probe trained on {store_name}: its records come from "
            f"another setting of the model (engine, its version, dtype, quantisation, pooling): {found}; "
            f"calibrate on records collected the same way, or export the probe and re-certify it for that "
            f"setting (acute recertify)")
    pa_, pb_ = getattr(store, "path", None), getattr(calibration_store, "path", None)
    if pa_ is not None and pb_ is not None and Path(pa_).resolve() == Path(pb_).resolve():
        raise InputError(f"calibration_store: {calibration_name} is {store_name} itself; the probe "
                         f"was fitted on its records (leave --calibration-store out to calibrate on "
                         f"their out-of-fold predictions)")
    if a.get("task") == b.get("task"):
        shared = set(map(str, store.ids if train_ids is None else train_ids)) & set(map(str, calibration_store.ids))
        if shared:
            raise InputError(
                f"calibration_store: {len(shared)} of the {len(calibration_store)} record ids of "
                f"{calibration_name} are training records of the probe (same task "
                f"{a.get('task')!r}, e.g. {sorted(shared)[0]!r}); the probe was fitted on them, so "
                f"they cannot certify it: calibrate on records it was not fitted on")


def check_certification(store: Any, max_error: float | Sequence[float], delta: float, *,
                        train_index: Sequence[int] | None = None, calibration_store: Any = None,
                        calibration_path: str | os.PathLike | None = None,
                        fwer: str = DEFAULT_FWER, backend: str = DEFAULT_BACKEND,
                        group_by: str | None = None) -> list[float]:
    """The error rates to certify a probe trained on the rows ``train_index`` of ``store``
    (default: all) at, checked before anything is fitted: each ``max_error`` and ``delta`` in
    (0, 1), given once; ``fwer`` (the procedure, :data:`acute.metrics.certify.FWER_METHODS`) and
    the backend usable (MAPIE installed for ``"mapie"``); a
    ``calibration_store`` compatible with ``store`` (:func:`check_calibration_store`); without
    one, the training records' groups (``group_by``, see :func:`calibration_confidence`) on every
    record and at least as many as the folds; and enough calibration records to certify
    anything at all (:class:`InputError` naming the argument and saying how many would be
    needed)."""
    alphas = check_max_errors(max_error)
    delta = check_delta(delta)
    idx = np.arange(len(store)) if train_index is None else np.asarray(train_index)
    if calibration_store is not None:
        name = str(calibration_path) if calibration_path is not None else "the calibration store"
        path = getattr(store, "path", None)
        check_calibration_store(store, calibration_store, calibration_name=name,
                                store_name="the training store" + (f" {path}" if path else ""),
                                train_ids=[store.ids[i] for i in idx])
        n, source = len(calibration_store), f"all records of {name}"
    else:
        n, source = idx.size, f"out-of-fold predictions of the {idx.size} training records"
        field, groups = _groups(store, idx, group_by)
        if groups is not None and len(set(groups)) < CV_FOLDS:
            raise InputError(f"the {idx.size} training records hold {len(set(groups))} distinct values of "
                             f"{field!r}, fewer than the {CV_FOLDS} folds of the out-of-fold calibration "
                             f"(each value held out whole); pass a calibration store (--calibration-store) "
                             f"or label records of more values")
    over_grid = " over the default 100 thresholds" if fwer == "bonferroni_holm" else ""
    for alpha in alphas:
        n_min = min_calibration_records(alpha, delta, fwer=fwer)
        if n < n_min:
            raise InputError(
                f"max_error={alpha:g}, delta={delta:g}: the {n} calibration records ({source}) "
                f"cannot certify any threshold even if every one were trusted and correct: at "
                f"least {n_min} are needed ({fwer}{over_grid}); label more "
                f"records, pass a calibration store (--calibration-store) with more, or raise "
                f"max_error or delta. A useful certificate usually needs far more: "
                f"benchmarks/certify_labels.md")
    try:
        check_backend(backend)
    except InputError as e:
        raise InputError(f"{e} (the command line's --certify-procedure, --certify-backend)") from None
    return alphas


def _train_index(trained, store) -> np.ndarray:
    idx = getattr(trained, "train_index", None)
    if idx is None:
        raise InputError("certify_probe needs the TrainedProbe that train_probe returned for this store")
    idx = np.asarray(idx)
    if idx.size and idx.max() >= len(store):
        raise InputError(f"the trained probe's training records do not belong to this store "
                         f"({len(store)} records)")
    return idx


def _groups(store, idx: np.ndarray, group_by: str | None) -> tuple[str | None, list[str] | None]:
    """``(field, values)`` of the training records ``idx`` that the out-of-fold calibration keeps
    apart (:func:`acute.evaluation.grouping.store_groups`: ``group_by``, else the store's task's
    grouping; ``(None, None)``: records one by one)."""
    return store_groups(store, group_by, [store.ids[i] for i in idx])


def _cross_fitted(trained, store, idx: np.ndarray, seed: int, groups: Sequence[str] | None) -> tuple[np.ndarray, bool]:
    """``(P(correct), reused)``: the out-of-fold P(correct) of the training records ``idx`` over
    :data:`CV_FOLDS` stratified folds (grouped by ``groups``): ``auto``'s (``reused``), when its
    comparison ran on exactly these folds (:func:`acute.evaluation.training.train_probe` gives it
    the grouped ones), else a clone of the probe (or stack: ``trained.unfitted()``) fitted on
    each fold's ``trained.inputs``."""
    y = np.asarray(store.correct)[idx].astype(np.int64)
    folds = stratified_folds(y, CV_FOLDS, seed, groups=groups)
    auto = trained.auto
    if auto is not None and getattr(auto, "oof_", None) is not None \
            and folds_digest(auto.folds_) == folds_digest(folds):
        return np.asarray(auto.oof_[auto.chosen_], dtype=np.float64), True
    X = trained.inputs(store, idx)

    def fit_predict(tr, te):
        est = trained.unfitted().fit(X.take(tr), y[tr])
        return est.predict_proba(X.take(te))[:, 1]

    return out_of_fold(fit_predict, folds, y.size), False


def calibration_confidence(trained, store, *, calibration_store: Any = None, seed: int | None = None,
                           group_by: str | None = None) -> tuple[np.ndarray, np.ndarray, dict]:
    """``(confidence, correct, source details)`` of the calibration records: the out-of-fold
    predictions of the training records, or the exported probe on every record of
    ``calibration_store`` (see the module doc). The out-of-fold folds keep apart the values of
    ``group_by`` (a metadata field; default: the store's task's ``default_group_by``;
    ``"id"``: records one by one), recorded as the folds' ``group_by``."""
    if seed is None:
        seed = int((trained.training_summary.get("split") or {}).get("seed", 0))
    if calibration_store is None:
        idx = _train_index(trained, store)
        field, groups = _groups(store, idx, group_by)
        conf, reused = _cross_fitted(trained, store, idx, seed, groups)
        folds = {"n_splits": CV_FOLDS, "seed": seed, "estimator": trained.label,
                 "from": "auto's cross-validated comparison" if reused else "cross-fitted for the certificate"}
        if field is not None:
            folds["group_by"] = field
        return conf, np.asarray(store.correct)[idx].astype(bool), {"source": "out-of-fold", "folds": folds}
    conf = trained.probe.predict_proba(trained.inputs(calibration_store))[:, 1]
    path = getattr(calibration_store, "path", None)
    return (conf, np.asarray(calibration_store.correct).astype(bool),
            {"source": "calibration-store",
             "calibration_store": None if path is None else str(Path(path).resolve())})


def certify_probe(trained, store, max_error: float | Sequence[float], delta: float = DEFAULT_DELTA, *,
                  calibration_store: Any = None, calibration_path: str | os.PathLike | None = None,
                  backend: str = DEFAULT_BACKEND, fwer: str = DEFAULT_FWER, group_by: str | None = None) -> list[dict]:
    """Certify the trust threshold of ``trained`` (a :class:`~acute.evaluation.training.TrainedProbe`
    of ``store``) at each ``max_error`` (one alpha or several) with probability ``1 - delta``,
    on records the probe was not fitted on (module doc), and record the certificates on it
    (``trained.certificates``, written to ``probe.json`` by ``trained.save``). Returns the
    ``probe.json`` entries, valid or saying why not (:mod:`acute.estimators.certificates`).
    ``calibration_path``: how the calibration store is named in errors and in the entry
    (default: its own path). ``group_by``: what the out-of-fold folds keep apart
    (:func:`calibration_confidence`). Refuses what :func:`check_certification` refuses."""
    alphas = check_certification(store, max_error, delta, train_index=_train_index(trained, store),
                                 calibration_store=calibration_store, calibration_path=calibration_path,
                                 fwer=fwer, backend=backend, group_by=group_by)
    return certify_checked(trained, store, alphas, delta, calibration_store=calibration_store,
                           calibration_path=calibration_path, backend=backend, fwer=fwer, group_by=group_by)


def certify_checked(trained, store, alphas: Sequence[float], delta: float, *, calibration_store: Any = None,
                    calibration_path: str | os.PathLike | None = None, backend: str = DEFAULT_BACKEND,
                    fwer: str = DEFAULT_FWER, group_by: str | None = None) -> list[dict]:
    """:func:`certify_probe` at the error rates :func:`check_certification` returned for the same
    arguments (not checked again: e.g. ``train_probe`` checks them before fitting anything)."""
    _train_index(trained, store)
    conf, correct, details = calibration_confidence(trained, store, calibration_store=calibration_store,
                                                    group_by=group_by)
    if calibration_path is not None and "calibration_store" in details:
        details["calibration_store"] = str(Path(calibration_path).resolve())
    entries = [certificate_entry(certify_threshold(conf, correct, alpha, delta, fwer=fwer, backend=backend),
                                 backend=backend, **details)
               for alpha in alphas]
    trained.certificates = entries
    trained.confidence_reference = confidence_reference(conf, details["source"])  # the drift signal's
    return entries
