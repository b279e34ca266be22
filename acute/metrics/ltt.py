"""The Learn-then-Test procedures behind :mod:`acute.metrics.certify`, in numpy over ``[D, n]``.

A procedure takes labelled calibration records (confidence, correct) and returns the thresholds
it certifies for the rule "trust iff confidence >= t": each candidate ``t`` is the null
hypothesis "precision(t) < 1 - alpha", tested with the exact binomial tail p-value
``P(Binomial(N_t, alpha) <= K_t)`` (``N_t`` records reach ``t``, ``K_t`` of them wrong; given
``N_t`` the wrong count is binomial, so the p-value is valid for the random denominator), and a
multiple-testing procedure at level delta keeps the thresholds whose nulls it rejects.
The procedures (``PROCEDURES``; every parameter fixed in advance, nothing tuned on labels):

* ``"bonferroni_holm"``: Holm's step-down over a grid fixed in advance (default 0.00, 0.01, ...,
  0.99). Valid for any precision curve; the first rejection needs p <= delta / len(grid).
* ``"fixed_sequence"``: the fixed grid from its highest threshold down, each at level delta,
  stopping at the first non-rejection. Valid for any curve; vacuous when few records reach the
  grid's top (at alpha 0.05, delta 0.1 the top needs 45 records, all correct).
* ``"quantile_sequence"``: the same descending fixed sequence over thresholds placed by the
  calibration confidences alone (never the labels): with the records sorted by confidence, the
  candidate for a count k sits just above the confidence of the record at rank k + 1
  (``numpy.nextafter``), so the k records strictly above that boundary record are the ones
  tested and its own label is never used; k = m, m + s, m + 2s, ... below n, then threshold 0
  (all n records). ``m`` (:func:`start_count`) is the fewest records that pass when their error
  rate is alpha / 2, ``s = ceil(n / 100)``. Exactly valid when P(correct | confidence) does not
  decrease in the confidence and the confidence has no atoms (conditioning on the number of
  records above the lowest valid threshold leaves those records exchangeable with exactly the
  allowed error and every record below it erring at least as often); otherwise checked by
  simulation (``benchmarks/certify_labels.md``: a non-monotone curve and tied confidences).
* ``"quantile_holm"``: Holm over 20 such label-free thresholds, at counts spaced geometrically
  from ``start_count`` at level delta / 20 up to n. Each test is exact for any curve (given the
  boundary record, the records above it are exchangeable draws from above it), and Holm needs
  nothing more.
* ``"split_sequence"``: split fixed-sequence testing (MAPIE's ``split_fixed_sequence``; the
  idea, not its code): a fixed random 30% of the records (:func:`split_indices`, seed 0, never
  the labels) orders the thresholds, the other 70% test them. On the 30%: the candidates are
  their confidences at ranks 1, 1 + s', ... (s' = ceil(n_learn / 100)); the sequence starts at
  the candidate with the smallest binomial p-value there (the lowest such threshold on ties) and
  runs down from it. The 70% test that sequence at level delta, stopping at the first
  non-rejection. Valid for any curve (the order is fixed before the testing records are seen).

Each row of ``[D, n]`` is one calibration set: :func:`run` returns, per row, the candidates in
the order tested (descending), which are tested (``active``: a repeated threshold, one above 1
or one before the split sequence's start is not), their counts, p-values and the rejected ones.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from scipy.stats import binom

__all__ = ["GRID_PROCEDURES", "HOLM_CANDIDATES", "LEARN_FRACTION", "PROCEDURES", "SEQUENCES",
           "Tested", "binomial_p", "first_level", "lowest_rejected", "run", "schedule", "split_indices",
           "start_count"]

PROCEDURES = ("bonferroni_holm", "fixed_sequence", "quantile_sequence", "quantile_holm", "split_sequence")
#: procedures over a grid fixed in advance (the only ones that take ``grid``)
GRID_PROCEDURES = ("bonferroni_holm", "fixed_sequence")
#: procedures that stop at the first non-rejection (level delta for their first test)
SEQUENCES = ("fixed_sequence", "quantile_sequence", "split_sequence")
#: label-free thresholds of ``quantile_holm``
HOLM_CANDIDATES = 20
#: the share of the calibration records that orders the split sequence
LEARN_FRACTION = 0.3
SPLIT_SEED = 0


class Tested(NamedTuple):
    """One procedure on D calibration sets: per row the K candidates in the order tested
    (descending) ``thresholds`` [D, K], ``active`` [D, K] (tested), ``trusted`` and ``wrong``
    [D, K] (the testing records reaching each), ``p`` [D, K] (1 where inactive), ``rejected``
    [D, K], ``n_tested`` (how many records the tests used: n, or the split's testing share)."""

    thresholds: np.ndarray
    active: np.ndarray
    trusted: np.ndarray
    wrong: np.ndarray
    p: np.ndarray
    rejected: np.ndarray
    n_tested: int


def binomial_p(trusted: np.ndarray, wrong: np.ndarray, alpha: float) -> np.ndarray:
    """``P(Binomial(trusted, alpha) <= wrong)``: 1 where nothing is trusted (no evidence)."""
    return binom.cdf(np.asarray(wrong), np.asarray(trusted), alpha)


def first_level(delta: float, procedure: str, n_candidates: int) -> float:
    """The level the first rejection must meet: delta (sequences) or delta / candidates (Holm)."""
    return delta if procedure in SEQUENCES else delta / n_candidates


def start_count(alpha: float, level: float, n: int) -> int:
    """The fewest records N <= n that pass at ``level`` when floor(N alpha / 2) of them are wrong
    (an error rate of half the allowed one); n when no N <= n does."""
    N = np.arange(1, n + 1)
    ok = np.flatnonzero(binom.cdf(np.floor(N * alpha / 2), N, alpha) <= level)
    return int(N[ok[0]]) if ok.size else n


def schedule(procedure: str, n: int, alpha: float, delta: float) -> np.ndarray:
    """The label-free counts k of the quantile procedures (descending thresholds: ascending k)."""
    if procedure == "quantile_sequence":
        m = start_count(alpha, delta, n)
        return np.r_[np.arange(m, n, math.ceil(n / 100)), n].astype(np.int64)
    m = start_count(alpha, delta / HOLM_CANDIDATES, n)
    if m >= n:
        return np.array([n], dtype=np.int64)
    return np.unique(np.round(np.geomspace(m, n, HOLM_CANDIDATES)).astype(np.int64))


def split_indices(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(learning, testing) record indices of the split sequence: a fixed random permutation
    (seed 0; it depends on n only), the first floor(0.3 n) learn."""
    perm = np.random.default_rng(SPLIT_SEED).permutation(n)
    k = math.floor(LEARN_FRACTION * n)
    return np.sort(perm[:k]), np.sort(perm[k:])


# ------------------------------------------------------------------------------ counting
def _sorted(conf: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(confidences sorted ascending [D, n], wrong records at sorted positions i.. [D, n + 1])."""
    order = np.argsort(conf, axis=1)  # the order among equal confidences does not matter
    c = np.take_along_axis(conf, order, axis=1)
    wrong_sorted = 1 - np.take_along_axis(y, order, axis=1)
    wrong_from = np.zeros((conf.shape[0], conf.shape[1] + 1), dtype=np.int64)
    wrong_from[:, :-1] = np.cumsum(wrong_sorted[:, ::-1], axis=1)[:, ::-1]
    return c, wrong_from


def _counts(c: np.ndarray, wrong_from: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(trusted, wrong) [D, K]: records of each sorted row with confidence >= each of its own
    thresholds ``t`` [D, K] (or one shared [K]), exact at ties."""
    t = np.broadcast_to(t, (c.shape[0],) + np.shape(t)[-1:])
    first = np.stack([np.searchsorted(row, th, side="left") for row, th in zip(c, t)])
    return c.shape[1] - first, np.take_along_axis(wrong_from, first, axis=1)


def grid_counts(conf: np.ndarray, y: np.ndarray, grid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(trusted [D, m], wrong [D, m]): records with confidence >= each grid threshold, per row."""
    return _counts(*_sorted(conf, y), grid)


# ---------------------------------------------------------------------------- rejecting
def holm(p: np.ndarray, delta: float, active: np.ndarray | None = None) -> np.ndarray:
    """Holm's step-down over the active entries of each row of p-values [D, K]."""
    active = np.ones(p.shape, dtype=bool) if active is None else active
    p = np.where(active, p, np.inf)
    m = active.sum(axis=1, keepdims=True)
    order = np.argsort(p, axis=1, kind="stable")
    i = np.arange(p.shape[1])
    with np.errstate(divide="ignore"):
        level = np.where(i < m, delta / np.maximum(m - i, 1), -np.inf)
    passed = np.take_along_axis(p, order, axis=1) <= level
    rejected = np.zeros_like(passed)
    np.put_along_axis(rejected, order, np.cumprod(passed, axis=1).astype(bool), axis=1)
    return rejected


def sequence(p: np.ndarray, delta: float, active: np.ndarray | None = None) -> np.ndarray:
    """Fixed-sequence testing of each row's active entries in order, each at level delta,
    stopping at the first non-rejection (inactive entries are skipped, never rejected)."""
    active = np.ones(p.shape, dtype=bool) if active is None else active
    chain = np.cumprod(np.where(active, p <= delta, True), axis=1).astype(bool)
    return chain & active


def lowest_rejected(thresholds: np.ndarray, rejected: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(any rejected [D], index of the lowest rejected threshold [D], 0 where none)."""
    t = np.where(rejected, thresholds, np.inf)
    return rejected.any(axis=1), np.argmin(t, axis=1)


# ---------------------------------------------------------------------------- procedures
def _first_occurrence(t: np.ndarray) -> np.ndarray:
    """True where a row's threshold differs from the one before it (rows are sorted)."""
    out = np.ones(t.shape, dtype=bool)
    out[:, 1:] = t[:, 1:] != t[:, :-1]
    return out


def _quantile(conf, y, alpha, delta, procedure) -> Tested:
    n = conf.shape[1]
    k = schedule(procedure, n, alpha, delta)
    c, wrong_from = _sorted(conf, y)
    desc = c[:, ::-1]
    inner = k < n
    t = np.zeros((conf.shape[0], k.size))
    t[:, inner] = np.nextafter(desc[:, k[inner]], np.inf)  # just above the boundary record
    trusted, wrong = _counts(c, wrong_from, t)
    active = (t <= 1.0) & _first_occurrence(t)
    p = np.where(active, binomial_p(trusted, wrong, alpha), 1.0)
    rejected = sequence(p, delta, active) if procedure == "quantile_sequence" else holm(p, delta, active)
    return Tested(t, active, trusted, wrong, p, rejected, n)


def _split(conf, y, alpha, delta) -> Tested:
    learn, test = split_indices(conf.shape[1])
    c_l, wf_l = _sorted(conf[:, learn], y[:, learn])
    ranks = np.arange(0, learn.size, math.ceil(learn.size / 100)) if learn.size else np.array([], int)
    t = c_l[:, ::-1][:, ranks]  # the learning records' own confidences, descending
    active = _first_occurrence(t)
    p_learn = np.where(active, binomial_p(*_counts(c_l, wf_l, t), alpha), np.inf)
    # the start: the smallest learning p-value, the lowest threshold among equal ones
    start = t.shape[1] - 1 - np.argmin(p_learn[:, ::-1], axis=1)
    active &= np.arange(t.shape[1]) >= start[:, None]
    trusted, wrong = _counts(*_sorted(conf[:, test], y[:, test]), t)
    p = np.where(active, binomial_p(trusted, wrong, alpha), 1.0)
    return Tested(t, active, trusted, wrong, p, sequence(p, delta, active), test.size)


def run(conf: np.ndarray, y: np.ndarray, alpha: float, delta: float, procedure: str,
        grid: np.ndarray | None) -> Tested:
    """``procedure`` on each row of ``conf``, ``y`` ([D, n], checked by the caller; ``grid``
    descending, for the grid procedures only)."""
    if procedure in GRID_PROCEDURES:
        trusted, wrong = grid_counts(conf, y, grid)
        t = np.broadcast_to(grid, trusted.shape)
        active = np.ones(t.shape, dtype=bool)
        p = binomial_p(trusted, wrong, alpha)
        rejected = holm(p, delta) if procedure == "bonferroni_holm" else sequence(p, delta)
        return Tested(t, active, trusted, wrong, p, rejected, conf.shape[1])
    if procedure == "split_sequence":
        return _split(conf, y, alpha, delta)
    return _quantile(conf, y, alpha, delta, procedure)
