"""Selective-prediction metrics over ``(confidence, correct)`` arrays: risk-coverage curve,
AURC, E-AURC and coverage at a target error.

An answer is *trusted* when its confidence is at least a threshold; the **coverage** is the
fraction of answers trusted and the **selective risk** the fraction of trusted answers that
are wrong. Sliding the threshold down from the highest confidence traces the risk-coverage
curve (Geifman & El-Yaniv 2017; Geifman, Uziel & El-Yaniv 2019, "Bias-reduced uncertainty
estimation for deep neural classifiers").

Ties
----
Records with the same confidence cannot be separated by any threshold, so a run of equal
confidences is **one threshold step**: the curve has one point per distinct confidence
(``thresholds`` strictly decreasing, ``coverage`` strictly increasing), and every coverage
level inside a tied run takes the risk of the whole run. Without ties this is exactly the
usual per-record curve; with ties the result no longer depends on how a sort happened to
order the tied records.

Functions
---------
``risk_coverage_curve``  (coverage, risk, thresholds), one point per distinct confidence.
``aurc``                 area under that step curve: the mean selective risk over the n coverage
                         levels 1/n, 2/n, ..., 1 (Geifman et al. 2019), ties as one step.
``aurc_optimal``         the AURC of a perfect ranking (every correct answer above every
                         wrong one) with the same error rate.
``e_aurc``               excess AURC: ``aurc - aurc_optimal`` (0 for a perfect ranking).
``coverage_at_error``    the largest coverage whose selective risk is at most ``alpha``.
``selective_summary``    all of the above as one JSON-ready dict (for tables).
``coverage_at_5pct``, ``coverage_at_10pct``  coverage at error 0.05 and 0.10 (results-table columns).
``aurc_rows``, ``e_aurc_rows``, ``coverage_at_error_rows``  the same over the rows of [rows, n]
                         arrays at once (the bootstrap's resamples, :mod:`acute.metrics.resampling`).

Every function validates its input with :mod:`acute.validation` (the same rules and messages
as :mod:`acute.metrics`): bad input raises :class:`acute.errors.InputError` naming the
argument. These are empirical quantities of the records given; for a threshold whose
precision is *guaranteed* on new answers see :mod:`acute.metrics.certify`.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike

from ..errors import InputError
from ..validation import check_confidence, check_correct, check_level

__all__ = [
    "RiskCoverage",
    "aurc",
    "aurc_optimal",
    "aurc_rows",
    "coverage_at_10pct",
    "coverage_at_5pct",
    "coverage_at_error",
    "coverage_at_error_rows",
    "e_aurc",
    "e_aurc_rows",
    "risk_coverage_curve",
    "selective_summary",
]


class RiskCoverage(NamedTuple):
    """The risk-coverage curve: arrays of equal length, one entry per distinct confidence.

    ``thresholds[k]`` is the k-th largest distinct confidence; trusting every answer with
    confidence ``>= thresholds[k]`` trusts the fraction ``coverage[k]`` of the answers, of
    which the fraction ``risk[k]`` is wrong. The last point trusts everything (coverage 1,
    risk = the error rate).
    """

    coverage: np.ndarray
    risk: np.ndarray
    thresholds: np.ndarray


def _inputs(confidence: ArrayLike, correct: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    conf = check_confidence(confidence)
    y = check_correct(correct, n=conf.shape[0])
    return conf, y


def _steps(conf: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(distinct thresholds, decreasing; trusted count at each; wrong count at each)."""
    order = np.argsort(-conf, kind="stable")
    c = conf[order]
    cum_wrong = np.cumsum(1 - y[order])
    last = np.flatnonzero(np.append(c[1:] != c[:-1], True))  # last record of each tied run
    return c[last], last + 1, cum_wrong[last]


def risk_coverage_curve(confidence: ArrayLike, correct: ArrayLike) -> RiskCoverage:
    """The risk-coverage curve ``(coverage, risk, thresholds)``, ties as one step (module doc).

    >>> risk_coverage_curve([0.9, 0.8, 0.8, 0.3], [1, 1, 0, 0])
    RiskCoverage(coverage=array([0.25, 0.75, 1.  ]), risk=array([0.        , 0.33333333, 0.5       ]), thresholds=array([0.9, 0.8, 0.3]))
    """
    conf, y = _inputs(confidence, correct)
    thresholds, trusted, wrong = _steps(conf, y)
    return RiskCoverage(trusted / conf.shape[0], wrong / trusted, thresholds)


def _aurc(trusted: np.ndarray, wrong: np.ndarray) -> float:
    """AURC from the steps of :func:`_steps` (``trusted[-1]`` is n)."""
    width = np.diff(trusted, prepend=0)  # records admitted at each step
    return float(np.sum(width * (wrong / trusted)) / trusted[-1])


def aurc(confidence: ArrayLike, correct: ArrayLike) -> float:
    """Area under the risk-coverage curve (lower is better), in [0, 1].

    ``(1/n) * sum over i = 1..n of risk(i)``, where ``risk(i)`` is the selective risk once the
    ``i`` most confident answers are trusted; within a run of tied confidences every ``i``
    takes the risk after the whole run (one threshold step, module doc). A random ranking
    scores about the error rate, a perfect one :func:`aurc_optimal`.
    """
    _, trusted, wrong = _steps(*_inputs(confidence, correct))
    return _aurc(trusted, wrong)


def _aurc_optimal(y: np.ndarray) -> float:
    n = y.shape[0]
    n_correct = int(y.sum())
    i = np.arange(n_correct + 1, n + 1, dtype=np.float64)  # coverage levels past the correct ones
    return float(np.sum((i - n_correct) / i) / n)


def aurc_optimal(correct: ArrayLike) -> float:
    """AURC of a perfect ranking with the same labels: all correct answers first (risk 0),
    then the wrong ones, so ``(1/n) * sum over i = n_c+1..n of (i - n_c) / i`` with n_c the
    number correct (about ``r + (1 - r) ln(1 - r)`` for an error rate r; exact here)."""
    return _aurc_optimal(check_correct(correct))


def e_aurc(confidence: ArrayLike, correct: ArrayLike) -> float:
    """Excess AURC (Geifman et al. 2019): ``aurc - aurc_optimal``, >= 0; 0 iff the ranking
    puts every correct answer above every wrong one (with ties only among equal labels). It
    removes the part of AURC that only reflects the error rate, so estimators of models with
    different accuracies can be compared."""
    conf, y = _inputs(confidence, correct)
    _, trusted, wrong = _steps(conf, y)
    return _aurc(trusted, wrong) - _aurc_optimal(y)


def _check_alpha(alpha: float, name: str = "alpha") -> float:
    return check_level(alpha, name, "the largest error rate allowed", closed=True)


def _coverage_at_error(trusted: np.ndarray, wrong: np.ndarray, alpha: float) -> float:
    ok = wrong <= alpha * trusted * (1.0 + 1e-12)  # risk <= alpha, without 0.1 * 30 rounding noise
    return float(trusted[ok].max() / trusted[-1]) if ok.any() else 0.0


def coverage_at_error(confidence: ArrayLike, correct: ArrayLike, alpha: float) -> float:
    """The largest fraction of answers that can be trusted (by a confidence threshold, ties as
    one step) with empirical selective risk at most ``alpha``; 0.0 when even the most confident
    step is wrong more often than that. The risk need not fall monotonically with coverage, so
    this is the largest qualifying coverage, not the first one where the risk exceeds alpha.

    This is the calibration-set value with no guarantee for new answers: a threshold chosen
    this way broke the target on new answers in 47% of simulated draws
    (``tests/metrics/test_certify.py``); ``acute.metrics.certify`` gives a threshold with a guarantee.
    """
    alpha = _check_alpha(alpha)
    _, trusted, wrong = _steps(*_inputs(confidence, correct))
    return _coverage_at_error(trusted, wrong, alpha)


def selective_summary(confidence: ArrayLike, correct: ArrayLike,
                      alphas: tuple[float, ...] = (0.05, 0.10)) -> dict[str, float]:
    """``{"aurc", "e_aurc", "coverage@0.05", "coverage@0.1", ...}`` as plain floats (JSON-ready),
    sorting the records once."""
    levels = [_check_alpha(a, "alphas") for a in alphas]
    conf, y = _inputs(confidence, correct)
    _, trusted, wrong = _steps(conf, y)
    out = {"aurc": _aurc(trusted, wrong)}
    out["e_aurc"] = out["aurc"] - _aurc_optimal(y)
    for a in levels:
        out[f"coverage@{a:g}"] = _coverage_at_error(trusted, wrong, a)
    return out


def coverage_at_5pct(confidence: ArrayLike, correct: ArrayLike) -> float:
    """:func:`coverage_at_error` at ``alpha = 0.05`` (a results-table column)."""
    return coverage_at_error(confidence, correct, 0.05)


def coverage_at_10pct(confidence: ArrayLike, correct: ArrayLike) -> float:
    """:func:`coverage_at_error` at ``alpha = 0.10`` (a results-table column)."""
    return coverage_at_error(confidence, correct, 0.10)


# ------------------------------------------------------------------- many resamples at once


def _row_steps(conf: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row of ``[rows, n]`` arrays: (position is the last of its tied run; trusted count
    ``1..n``; wrong count among the first ``k`` most confident), each ``[rows, n]``, sorted by
    decreasing confidence as :func:`_steps` sorts one row."""
    order = np.argsort(-conf, axis=1, kind="stable")
    c = np.take_along_axis(conf, order, axis=1)
    cum_wrong = np.cumsum(1 - np.take_along_axis(y, order, axis=1).astype(np.int64), axis=1)
    last = np.concatenate([c[:, 1:] != c[:, :-1], np.ones((c.shape[0], 1), dtype=bool)], axis=1)
    trusted = np.broadcast_to(np.arange(1, c.shape[1] + 1), c.shape)
    return last, trusted, cum_wrong


def _rows_inputs(conf: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    c = np.asarray(conf, dtype=np.float64)
    labels = np.asarray(y)
    if c.ndim != 2 or c.shape != labels.shape or c.shape[1] == 0:
        raise InputError(f"expected two [rows, n >= 1] arrays of one shape, got {c.shape} and {labels.shape}")
    return c, labels


def aurc_rows(conf: np.ndarray, y: np.ndarray) -> np.ndarray:
    """:func:`aurc` of every row of ``[rows, n]`` arrays (float64 ``[rows]``), ties as one step:
    each position takes the risk at the end of its tied run."""
    conf, y = _rows_inputs(conf, y)
    last, trusted, wrong = _row_steps(conf, y)
    n = conf.shape[1]
    # the end of each position's tied run: the first "last" position at or after it
    end = np.where(last, np.arange(n), n)
    end = np.minimum.accumulate(end[:, ::-1], axis=1)[:, ::-1]
    risk_end = np.take_along_axis(wrong, end, axis=1) / (end + 1)
    return risk_end.mean(axis=1)


def e_aurc_rows(conf: np.ndarray, y: np.ndarray) -> np.ndarray:
    """:func:`e_aurc` of every row of ``[rows, n]`` arrays (float64 ``[rows]``)."""
    conf, y = _rows_inputs(conf, y)
    n = conf.shape[1]
    n_correct = np.asarray(y, dtype=np.int64).sum(axis=1)
    i = np.arange(1, n + 1, dtype=np.float64)
    optimal = (np.clip(i[None, :] - n_correct[:, None], 0, None) / i[None, :]).sum(axis=1) / n
    return aurc_rows(conf, y) - optimal


def coverage_at_error_rows(conf: np.ndarray, y: np.ndarray, alpha: float) -> np.ndarray:
    """:func:`coverage_at_error` of every row of ``[rows, n]`` arrays (float64 ``[rows]``)."""
    alpha = _check_alpha(alpha)
    conf, y = _rows_inputs(conf, y)
    last, trusted, wrong = _row_steps(conf, y)
    ok = last & (wrong <= alpha * trusted * (1.0 + 1e-12))
    return np.where(ok, trusted, 0).max(axis=1) / conf.shape[1]
