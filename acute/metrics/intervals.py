"""Intervals and tests for comparing estimators: what varies between runs, not only records.

Three tools beside the percentile bootstrap of :func:`acute.metrics.resampling.percentile_interval`:

* :func:`bias_shifted_interval`: the percentile interval of bootstrap draws shifted by the
  bootstrap's bias estimate (``mean(draws) - estimate``), clipped to the metric's range. For a
  metric bounded below such as smECE the draws sit above the estimate (resampling adds noise
  that reads as miscalibration), so the plain percentile interval can exclude its own estimate
  ("0.018 [0.021, 0.027]"); the shifted one is centred on it.
* :func:`corrected_t_test`: the corrected resampled t-test of Nadeau and Bengio (2003) over
  the ``J = repeats x folds`` per-fold differences of two estimators: variance
  ``(1/J + n_test/n_train) * s^2`` instead of ``s^2 / J``, because the training sets overlap.
  It carries the training variance (different folds, different fits) that a bootstrap over one
  set of out-of-fold predictions treats as fixed.
* :func:`holm`: Holm's step-down correction of a family of p-values.

:func:`bootstrap_p_value` turns paired bootstrap draws of a difference into a two-sided p-value,
so "both intervals exclude 0 after correction" is Holm over ``max(p_t, p_bootstrap)``.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple, Sequence

import numpy as np

from ..errors import InputError
from .resampling import percentile_interval

__all__ = ["TTest", "bias_shifted_interval", "bootstrap_p_value", "corrected_t_test", "fold_differences",
           "holm"]


def bias_shifted_interval(estimate: float, draws: np.ndarray, alpha: float = 0.05,
                          bounds: tuple[float, float] = (0.0, 1.0)) -> tuple[float, float]:
    """``(low, high)``: the percentile interval of ``draws - (mean(draws) - estimate)``, clipped
    to ``bounds``; NaN when no draw is finite."""
    d = np.asarray(draws, dtype=np.float64)
    d = d[np.isfinite(d)]
    if d.size == 0 or not math.isfinite(estimate):
        return math.nan, math.nan
    low, high, _ = percentile_interval(d - (d.mean() - estimate), alpha)
    return float(np.clip(low, *bounds)), float(np.clip(high, *bounds))


def bootstrap_p_value(diff_draws: np.ndarray) -> float:
    """Two-sided p-value of "the difference is 0" from paired bootstrap draws of it:
    ``min(1, 2 * min(P(d <= 0), P(d >= 0)))``, with the draw counts smoothed by one
    (``(k + 1) / (B + 1)``) so it is never exactly 0. NaN when no draw is finite."""
    d = np.asarray(diff_draws, dtype=np.float64)
    d = d[np.isfinite(d)]
    if d.size == 0:
        return math.nan
    tail = min(int((d <= 0).sum()), int((d >= 0).sum()))
    return float(min(1.0, 2.0 * (tail + 1) / (d.size + 1)))


def fold_differences(metric: Callable[[np.ndarray, np.ndarray], float], pred_a: np.ndarray,
                     pred_b: np.ndarray, correct: np.ndarray,
                     folds: Sequence[Sequence[tuple[np.ndarray, np.ndarray]]]) -> np.ndarray:
    """``metric(a) - metric(b)`` on each test fold of each repeat: float64 ``[repeats * folds]``.
    ``pred_a``/``pred_b`` are ``[repeats, n]`` out-of-fold predictions, ``folds`` as
    :func:`acute.evaluation.crossval.cv_folds` returns them (NaN where the metric is undefined on a fold)."""
    a = np.atleast_2d(np.asarray(pred_a, dtype=np.float64))
    b = np.atleast_2d(np.asarray(pred_b, dtype=np.float64))
    y = np.asarray(correct)
    if a.shape != b.shape or a.shape[0] != len(folds):
        raise InputError(f"predictions {a.shape} / {b.shape} do not match {len(folds)} repeats of folds")
    out = []
    for r, rep in enumerate(folds):
        for _, te in rep:
            if y[te].min() == y[te].max() and metric.__name__ == "auroc":
                out.append(math.nan)
                continue
            out.append(float(metric(a[r, te], y[te])) - float(metric(b[r, te], y[te])))
    return np.asarray(out, dtype=np.float64)


class TTest(NamedTuple):
    """What :func:`corrected_t_test` returns."""

    mean: float
    low: float
    high: float
    p_value: float


def corrected_t_test(diffs: np.ndarray, test_train_ratio: float, alpha: float = 0.05) -> TTest:
    """The corrected resampled t-test (Nadeau and Bengio 2003) of ``J`` per-fold differences:
    mean, ``1 - alpha`` interval ``mean +/- t_{J-1} * sqrt((1/J + ratio) * s^2)`` and the
    two-sided p-value of "mean = 0". ``test_train_ratio`` is ``n_test / n_train`` of one fold
    (``1 / (k - 1)`` for k-fold). NaN everywhere with fewer than 2 finite differences; a zero
    variance gives a point interval and p = 1 when the mean is 0, else p = 0."""
    from scipy import stats  # heavy: scipy

    if not (isinstance(test_train_ratio, (int, float)) and test_train_ratio > 0):
        raise InputError(f"test_train_ratio must be > 0, got {test_train_ratio!r}")
    d = np.asarray(diffs, dtype=np.float64)
    d = d[np.isfinite(d)]
    j = d.size
    if j < 2:
        return TTest(math.nan, math.nan, math.nan, math.nan)
    mean = float(d.mean())
    se = math.sqrt((1.0 / j + float(test_train_ratio)) * float(d.var(ddof=1)))
    if se == 0.0:
        return TTest(mean, mean, mean, 1.0 if mean == 0.0 else 0.0)
    q = float(stats.t.ppf(1 - alpha / 2, j - 1))
    p = float(2 * stats.t.sf(abs(mean) / se, j - 1))
    return TTest(mean, mean - q * se, mean + q * se, p)


def holm(p_values: Sequence[float], alpha: float = 0.05) -> list[bool]:
    """Holm's step-down procedure: which of the hypotheses are rejected at family-wise level
    ``alpha``. NaN p-values are never rejected and do not count in the family."""
    p = [float(v) for v in p_values]
    finite = sorted((v, i) for i, v in enumerate(p) if math.isfinite(v))
    m = len(finite)
    out = [False] * len(p)
    for rank, (v, i) in enumerate(finite):
        if v > alpha / (m - rank):
            break
        out[i] = True
    return out
