"""The numbers behind the figures of :mod:`acute.evaluation.plots`, computed apart from any drawing.

* :func:`binned_reliability`: accuracy per equal-mass confidence bin, with a Wilson interval;
* :func:`constant_euro_curve`: the euro curve of always predicting one probability (the base
  rate), the floor any useful estimator should clear;
* :func:`euro_difference`: euro of one estimator minus another's at every risk level, with a
  paired percentile bootstrap band.

Each is a plain function of ``(confidence, correct)`` arrays returning arrays (as
scikit-learn's ``calibration_curve`` is to ``CalibrationDisplay``); the euro values come from
:func:`acute.metrics.euro_curve` and the intervals from :func:`acute.metrics.resampling.percentile_interval`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike
from scipy.stats import norm

from ..metrics import DEFAULT_N_BOOTSTRAP, EURO_GRID, bootstrap_indices, euro_curve
from ..metrics.common import validate_inputs
from ..metrics.resampling import percentile_interval
from ..validation import check_correct, check_count, check_level

__all__ = ["BinnedReliability", "EuroDifference", "binned_reliability", "constant_euro_curve",
           "euro_difference"]


@dataclass(frozen=True)
class BinnedReliability:
    """Accuracy per confidence bin (see :func:`binned_reliability`); arrays over the non-empty
    bins, in increasing confidence.

    ``edges``: ``[n_bins + 1]`` bin edges (data values; the last bin is closed);
    ``mean_confidence``, ``accuracy`` (fraction correct) and ``count`` per bin; ``low`` /
    ``high``: the Wilson score interval of each bin's accuracy at level ``1 - alpha``.
    """

    edges: np.ndarray
    mean_confidence: np.ndarray
    accuracy: np.ndarray
    count: np.ndarray
    low: np.ndarray
    high: np.ndarray


def _check_alpha(alpha: float) -> float:
    return check_level(alpha, "alpha", "one minus the intervals' coverage")


def _wilson(k: np.ndarray, n: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score interval of k successes out of n (n > 0); lies in [0, 1]."""
    z = float(norm.ppf(1.0 - alpha / 2.0))
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return np.clip(centre - half, 0.0, 1.0), np.clip(centre + half, 0.0, 1.0)


def binned_reliability(confidence: ArrayLike, correct: ArrayLike, n_bins: int = 10,
                       alpha: float = 0.05) -> BinnedReliability:
    """Accuracy against confidence in (about) equal-mass bins.

    Records sorted by confidence go to bin ``floor(rank * n_bins / n)``, except that tied
    confidences all go to the bin of the first of them, so a tie never straddles two bins
    (with n distinct values every bin holds n / n_bins records, +-1; with many ties there
    are fewer, unequal bins); empty bins are dropped. ``edges`` are the smallest confidence of
    each bin and the largest overall: bin ``k`` is ``[edges[k], edges[k+1])``, the last one
    closed. Raises ``ValueError`` for bad inputs (:func:`acute.metrics.common.validate_inputs`),
    ``n_bins < 1`` or ``alpha`` outside (0, 1).
    """
    conf, y = validate_inputs(confidence, correct)
    n_bins = check_count(n_bins, "n_bins")
    alpha = _check_alpha(alpha)
    values, group = np.unique(conf, return_inverse=True)
    group = group.ravel()
    # the rank of the first record of each distinct value = the number of records below it
    below = np.concatenate([[0], np.cumsum(np.bincount(group, minlength=values.size))[:-1]])
    raw_bin = below * n_bins // conf.size
    used, value_bin = np.unique(raw_bin, return_inverse=True)
    which = value_bin[group]
    k = used.size
    count = np.bincount(which, minlength=k)
    n = count.astype(np.float64)
    mean_conf = np.bincount(which, weights=conf, minlength=k) / n
    hits = np.bincount(which, weights=y.astype(np.float64), minlength=k)
    acc = hits / n
    low, high = _wilson(hits, n, alpha)
    # the Wilson interval contains the proportion; rounding at 0 and 1 may not (|error| ~1e-17)
    low, high = np.minimum(low, acc), np.maximum(high, acc)
    starts = np.concatenate([[0], np.flatnonzero(np.diff(value_bin)) + 1])
    edges = np.append(values[starts], values[-1])
    return BinnedReliability(edges=edges, mean_confidence=mean_conf, accuracy=acc,
                             count=count.astype(np.int64), low=low, high=high)


def constant_euro_curve(correct: ArrayLike, base_rate: float | None = None,
                        grid: ArrayLike | None = None) -> np.ndarray:
    """euro at every risk level of ``grid`` (default :data:`acute.metrics.EURO_GRID`) of the
    constant predictor that gives every record the confidence ``base_rate`` (default: the
    fraction of ``correct`` that is correct; pass the training set's rate when ``correct`` is a
    test set). It trusts every answer where ``u < base_rate`` and none elsewhere, so with
    accuracy ``a`` its euro is ``(1-u) a / ((1-u) a + u (1-a))`` below the base rate and
    ``u (1-a) / ((1-u) a + u (1-a))`` from it on."""
    y = check_correct(correct) == 1
    rate = float(y.mean()) if base_rate is None else check_level(base_rate, "base_rate", "a probability",
                                                                 closed=True)
    return euro_curve(np.full(y.size, rate), y, grid)


class EuroDifference(NamedTuple):
    """euro of estimator a minus estimator b at each risk level (see :func:`euro_difference`);
    the first four fields are the arguments of :func:`acute.evaluation.plots.euro_difference_curve`."""

    risk_levels: np.ndarray
    diff: np.ndarray
    low: np.ndarray
    high: np.ndarray
    n_bootstrap: int
    alpha: float


def euro_difference(confidence_a: ArrayLike, confidence_b: ArrayLike, correct: ArrayLike,
                    grid: ArrayLike | None = None, n_bootstrap: int = DEFAULT_N_BOOTSTRAP, seed: int = 0,
                    alpha: float = 0.05) -> EuroDifference:
    """``euro(a, u) - euro(b, u)`` at every risk level ``u`` of ``grid`` (default
    :data:`acute.metrics.EURO_GRID`), with a paired percentile bootstrap band.

    The records are resampled ``n_bootstrap`` times with replacement, the same resample for
    both estimators (the resamples of :func:`acute.metrics.bootstrap_indices` for ``seed``, so
    also those of :func:`acute.metrics.paired_bootstrap` with the same ``n`` and ``seed``); at
    each ``u`` the band is the ``alpha/2`` and ``1 - alpha/2`` percentiles of the resampled
    differences (:func:`acute.metrics.resampling.percentile_interval`). The mean of ``diff`` over
    :data:`~acute.metrics.EURO_GRID` is the auc-euro (all) difference. Memory: the resample
    indices take ``8 * n_bootstrap * n`` bytes. Raises ``ValueError`` for bad inputs (named
    ``confidence_a`` / ``confidence_b``), a bad grid, ``n_bootstrap < 1`` or a bad ``alpha``.
    """
    conf_a, y = validate_inputs(confidence_a, correct, "confidence_a")
    conf_b, _ = validate_inputs(confidence_b, correct, "confidence_b")
    n_bootstrap = check_count(n_bootstrap, "n_bootstrap")
    alpha = _check_alpha(alpha)
    u = EURO_GRID if grid is None else np.atleast_1d(np.asarray(grid, dtype=np.float64))
    diff = euro_curve(conf_a, y, u) - euro_curve(conf_b, y, u)  # also validates the grid
    stats = np.empty((n_bootstrap, u.size))
    for b, idx in enumerate(bootstrap_indices(y.size, n_bootstrap, seed)):
        stats[b] = euro_curve(conf_a[idx], y[idx], u) - euro_curve(conf_b[idx], y[idx], u)
    bounds = np.array([percentile_interval(col, alpha)[:2] for col in stats.T]).reshape(-1, 2)
    return EuroDifference(risk_levels=u.copy(), diff=diff, low=bounds[:, 0], high=bounds[:, 1],
                          n_bootstrap=n_bootstrap, alpha=alpha)
