"""Fitting the checkpoint model an exported probe stops generations with
(``acute export --with-stop-early``, ``train_probe(stop_early=True)``).

At each checkpoint ``k`` of :data:`acute.evaluation.prefix.PREFIX_CHECKPOINTS` the default
estimator's design is fitted on :func:`acute.evaluation.prefix.prefix_inputs` (the layer means
and the product of token probabilities over the first ``k`` generated tokens) of the training
records whose answers were still being written at ``k`` (more than ``k`` tokens: a row that
ends at its ``k``-th token is never asked to stop there), against the final labels. The
calibration arrays :func:`acute.metrics.stopping.certify_stopping` reads at scoring time are
made on the same records: each record's prefix score at each checkpoint out of fold (a clone
fitted on the other folds' generating records; the folds those of the answer probe's
certificate, grouped the same way), NaN where its answer had ended; whether the final gate would
trust it (the answer probe's out-of-fold P(correct) > 0.5,
:func:`acute.evaluation.certification.calibration_confidence`); and whether it is correct.

A checkpoint where fewer than :data:`MIN_RECORDS` training answers are still generating, or
where fewer of them are right (or wrong) than the prefix probe's own stratified folds need, gets
no probe (logged); when no checkpoint has one the store is refused (its answers are too short or
too uniform to stop early).
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

import numpy as np
from sklearn.base import clone

from ..errors import InputError
from ..estimators.folds import out_of_fold
from ..estimators.registry import STATES_PROBE, make_estimator
from ..estimators.stop_early import StopEarlyModel
from ..scoring.risk import DEFAULT_RISK
from .prefix import PREFIX_CHECKPOINTS, prefix_inputs

__all__ = ["MIN_RECORDS", "TRUSTED_BY", "fit_checkpoint_model", "fits_prefix_probe"]

logger = logging.getLogger(__name__)

#: the fewest generating training answers (both labels among them) a checkpoint's probe is fitted on
MIN_RECORDS = 10
#: what ``trusted`` means in the calibration arrays (recorded in ``probe.json``)
TRUSTED_BY = f"the answer probe's out-of-fold P(correct) > {DEFAULT_RISK}"


def fits_prefix_probe(y: np.ndarray, per_class: int) -> bool:
    """Enough answers to fit a prefix probe on: :data:`MIN_RECORDS`, and ``per_class`` of each
    label (the probe's own stratified folds, e.g. the stacking's inner cv)."""
    return y.size >= MIN_RECORDS and min(int(y.sum()), int(y.size - y.sum())) >= per_class


def fit_checkpoint_model(store: Any, idx: np.ndarray, trusted: np.ndarray, folds: Sequence[tuple], *,
                         checkpoints: Sequence[int] = PREFIX_CHECKPOINTS, seed: int = 0, n_jobs: int | None = None,
                         n_estimators: int | None = None, details: dict | None = None) -> StopEarlyModel:
    """The checkpoint model (module docstring) of the store's training records ``idx``: fitted
    prefix probes (:data:`~acute.estimators.registry.STATES_PROBE`'s design, ``seed``,
    ``n_jobs``, ``n_estimators`` trees) and the calibration arrays, ``trusted`` (bool per
    record of ``idx``) the final gate's decisions, ``folds`` the out-of-fold folds over ``idx``
    (positions into it). ``details`` is added to what ``probe.json`` records. The store must
    keep prefix checkpoints (an :class:`InputError` naming it and the remedy otherwise)."""
    store.checkpoint_tokens  # a store without checkpoints: one line naming it and the remedy
    idx = np.asarray(idx)
    y = np.asarray(store.correct)[idx].astype(np.int64)
    n_tokens = np.asarray(store.n_tokens)[idx]
    make = lambda: make_estimator(STATES_PROBE, random_state=seed, n_jobs=n_jobs,  # noqa: E731
                                  probe_params={"n_estimators": n_estimators})
    per_class = max(1, int(getattr(make(), "cv", 1) or 1))
    probes, columns, skipped = {}, [], []
    for k in checkpoints:
        generating = n_tokens > k
        if not fits_prefix_probe(y[generating], per_class):
            skipped.append(k)
            continue
        X = prefix_inputs(store, k).take(idx)
        logger.info("stop-early: fitting the prefix probe at %d tokens on %d generating answers", k, generating.sum())

        def fit_predict(train, test, *_):
            train = train[generating[train]]
            p = np.full(len(test), np.nan)
            live = generating[test]
            if live.any():
                if fits_prefix_probe(y[train], per_class):
                    est = clone(make()).fit(X.take(train), y[train])
                    p[live] = est.predict_proba(X.take(test[live]))[:, 1]
                else:  # too few answers in this fold's training part: its base rate
                    p[live] = float(np.mean(y[train])) if train.size else 0.5
            return p

        columns.append(out_of_fold(fit_predict, folds, idx.size))
        rows = np.flatnonzero(generating)
        probes[int(k)] = make().fit(X.take(rows), y[rows])
    if skipped:
        logger.warning("stop-early: no prefix probe at %s tokens: fewer than %d training answers were still "
                       "generating there, or fewer than %d of them right or wrong", skipped, MIN_RECORDS, per_class)
    if not probes:
        where = getattr(store, "path", "the store")
        raise InputError(f"--with-stop-early: no checkpoint of {list(checkpoints)} tokens has {MIN_RECORDS} "
                         f"training answers of {where} still generating, with both labels: its answers are "
                         f"too short (or too uniform) to stop early")
    info = {"estimator": STATES_PROBE, "trusted": TRUSTED_BY, "min_records": MIN_RECORDS, **(details or {})}
    return StopEarlyModel(probes, np.column_stack(columns), trusted, y.astype(bool), info)
