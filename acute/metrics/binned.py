"""Binned ECE, KS calibration error, Brier score, negative log-likelihood and AUROC.

Each metric is a public function of one dataset and a ``*_rows`` helper over the last axis of
``[..., n]`` arrays, which :func:`acute.metrics.metric_over_resamples` applies to a block of
resamples at once.
"""

from __future__ import annotations

import warnings

import numpy as np
from numpy.typing import ArrayLike

from ..errors import InputError
from .common import row_bincount, validate_inputs

__all__ = ["NLL_EPS", "auroc", "auroc_rows", "brier", "brier_rows", "ece", "ece_rows", "ks_cal",
           "ks_cal_rows", "nll", "nll_rows"]

#: Probabilities are clipped to ``[NLL_EPS, 1 - NLL_EPS]`` before taking logs in :func:`nll`.
NLL_EPS = 1e-12

_ECE_BINS = 10


def ece_rows(conf: np.ndarray, y: np.ndarray, n_bins: int = _ECE_BINS) -> np.ndarray:
    """Binned ECE (see :func:`ece`) over the last axis."""
    bins = np.minimum((conf * n_bins).astype(np.int64), n_bins - 1)
    gap = row_bincount(bins, conf - y, n_bins)
    return np.abs(gap).sum(axis=-1) / conf.shape[-1]


def ece(confidence: ArrayLike, correct: ArrayLike, n_bins: int = _ECE_BINS) -> float:
    """Binned expected calibration error with ``n_bins`` equal-width bins.

    Bins are ``[0, 1/n_bins), [1/n_bins, 2/n_bins), ..., [(n_bins-1)/n_bins, 1]``: a record goes
    to bin ``floor(confidence * n_bins)`` (computed in float64), and 1.0 falls in the last bin.

    Returns ``sum_b (|b| / n) * |accuracy_b - mean confidence_b|`` over the non-empty bins, a
    float in [0, 1]. Single-class input is fine (accuracy is then 0 or 1 in every bin).
    """
    conf, y = validate_inputs(confidence, correct)
    if isinstance(n_bins, bool) or not isinstance(n_bins, (int, np.integer)) or n_bins < 1:
        raise InputError(f"n_bins: expected a positive integer, got {n_bins!r}")
    return float(ece_rows(conf, y, int(n_bins)))


def ks_cal_rows(conf: np.ndarray, y: np.ndarray) -> np.ndarray:
    """KS calibration error (see :func:`ks_cal`) over the last axis."""
    order = np.argsort(conf, axis=-1, kind="stable")
    walk = np.cumsum(np.take_along_axis(conf - y, order, axis=-1), axis=-1)
    return np.max(np.abs(walk), axis=-1) / conf.shape[-1]


def ks_cal(confidence: ArrayLike, correct: ArrayLike) -> float:
    """Kolmogorov-Smirnov calibration error of Gupta et al. (2021, "Calibration of neural
    networks using splines").

    Records are sorted by confidence with a *stable* sort (ties keep their input order), and the
    result is ``max_k |sum_{i<=k} (confidence_i - correct_i)| / n`` over that order, a float in
    [0, 1]. A perfectly calibrated-in-order sequence scores 0; single-class input is fine.
    """
    conf, y = validate_inputs(confidence, correct)
    return float(ks_cal_rows(conf, y))


def brier_rows(conf: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Brier score over the last axis."""
    return np.mean((conf - y) ** 2, axis=-1)


def brier(confidence: ArrayLike, correct: ArrayLike) -> float:
    """Brier score ``mean((confidence - correct)^2)``, a float in [0, 1] (lower is better)."""
    conf, y = validate_inputs(confidence, correct)
    return float(brier_rows(conf, y))


def nll_rows(conf: np.ndarray, y: np.ndarray, eps: float = NLL_EPS) -> np.ndarray:
    """Mean negative log-likelihood (see :func:`nll`) over the last axis."""
    p = np.clip(conf, eps, 1.0 - eps)
    return -np.mean(np.where(y, np.log(p), np.log1p(-p)), axis=-1)


def nll(confidence: ArrayLike, correct: ArrayLike, eps: float = NLL_EPS) -> float:
    """Mean negative log-likelihood (log loss, natural log) of ``correct`` under ``confidence``.

    Confidences are clipped to ``[eps, 1 - eps]`` first (default ``NLL_EPS = 1e-12``), so a
    confident mistake costs at most ``-log(eps)`` (about 27.6 nats) instead of infinity.
    """
    conf, y = validate_inputs(confidence, correct)
    if not (isinstance(eps, (int, float)) and 0.0 < eps < 0.5):
        raise InputError(f"eps: expected a float in (0, 0.5), got {eps!r}")
    return float(nll_rows(conf, y, eps))


def auroc_rows(conf: np.ndarray, y: np.ndarray) -> np.ndarray:
    """AUROC (see :func:`auroc`) over the last axis; nan where all records are of one class.

    The Mann-Whitney rank sum uses midranks: a correct record whose value is shared by the
    sorted positions ``first..last`` (0-based) contributes ``first + (last - first + 2) / 2``,
    i.e. (# strictly smaller) + (# equal + 1) / 2. All terms are half-integers, so the sum is
    exact in any order.
    """
    n = conf.shape[-1]
    order = np.argsort(conf, axis=-1, kind="stable")
    ranked = np.take_along_axis(conf, order, axis=-1)
    pos = np.take_along_axis(y, order, axis=-1)
    k = np.arange(n)
    starts = np.ones(ranked.shape, dtype=bool)  # a new value begins at this sorted position
    starts[..., 1:] = ranked[..., 1:] != ranked[..., :-1]
    ends = np.ones(ranked.shape, dtype=bool)  # the last position of its value
    ends[..., :-1] = starts[..., 1:]
    less = np.maximum.accumulate(np.where(starts, k, 0), axis=-1)
    less_eq = np.flip(np.minimum.accumulate(np.flip(np.where(ends, k + 1, n), -1), axis=-1), -1)
    rank_sum = np.sum(np.where(pos, less + (less_eq - less + 1) / 2.0, 0.0), axis=-1)
    n_pos = pos.sum(axis=-1)
    n_neg = n - n_pos
    u_stat = rank_sum - n_pos * (n_pos + 1) / 2.0
    defined = (n_pos > 0) & (n_neg > 0)
    return np.where(defined, u_stat / np.where(defined, n_pos * n_neg, 1), np.nan)


def auroc(confidence: ArrayLike, correct: ArrayLike) -> float:
    """Area under the ROC curve for ranking correct answers above wrong ones.

    Equals the probability that a random correct record has higher confidence than a random
    wrong one, ties counted half (Mann-Whitney U / (n_correct * n_wrong)).

    Single-class input (all correct or all wrong) has no defined AUROC: returns ``nan`` and
    emits a ``RuntimeWarning``.
    """
    conf, y = validate_inputs(confidence, correct)
    n_pos = int(y.sum())
    if n_pos == 0 or n_pos == y.shape[0]:
        warnings.warn(
            "auroc: undefined when every record is "
            + ("wrong" if n_pos == 0 else "correct")
            + "; returning nan",
            RuntimeWarning,
            stacklevel=2,
        )
        return float("nan")
    return float(auroc_rows(conf, y))

