"""A metric over many resamples at once, the bootstrap, and percentile intervals.

Every interval acute reports is :func:`percentile_interval` of draws from
:func:`bootstrap_indices`; :func:`metric_over_resamples` evaluates the metrics with a batched
implementation on blocks of resamples at once.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Iterator
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike

from ..errors import InputError
from .binned import auroc, auroc_rows, brier, brier_rows, ece, ece_rows, ks_cal, ks_cal_rows, nll, nll_rows
from .common import validate_inputs
from .utility import AUC_EURO_BANDS, auc_euro_rows
from .kde import kde_ece, kde_ece_rows
from .selective import (aurc, aurc_rows, coverage_at_10pct, coverage_at_5pct, coverage_at_error_rows, e_aurc,
                        e_aurc_rows)
from .smooth import smece, smece_rows

__all__ = ["DEFAULT_N_BOOTSTRAP", "Interval", "bootstrap", "bootstrap_indices", "cluster_bootstrap_indices", "metric_over_resamples",
           "paired_bootstrap", "percentile_interval", "resample_indices"]

#: Resamples of every bootstrap interval acute reports unless a caller asks for another number.
DEFAULT_N_BOOTSTRAP = 1000

#: Metrics with a batched implementation ``f(conf, y)`` over the rows of [rows, n] arrays.
_BATCHED: dict[Callable, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    ece: ece_rows,
    kde_ece: kde_ece_rows,
    ks_cal: ks_cal_rows,
    smece: smece_rows,
    brier: brier_rows,
    nll: nll_rows,
    auroc: auroc_rows,
    aurc: aurc_rows,
    e_aurc: e_aurc_rows,
    coverage_at_5pct: functools.partial(coverage_at_error_rows, alpha=0.05),
    coverage_at_10pct: functools.partial(coverage_at_error_rows, alpha=0.10),
}
# the auc-euro columns of the results tables
_BATCHED.update({fn: functools.partial(auc_euro_rows, band=band) for band, fn in AUC_EURO_BANDS.items()})

def _block_rows(size: int) -> int:
    """Resamples evaluated together: as many as keep a [rows, size] float array near 4 MB, at
    most 1024 (smECE's bisection gains from many resamples in lockstep, see
    :class:`_ResampledSmoothECE`; KDE-ECE's grids are processed a few rows at a time)."""
    return max(16, min(1024, (1 << 19) // size))


def _check_indices(indices: ArrayLike, size: int) -> np.ndarray:
    """``indices`` as a 2-D integer array of row numbers in [0, size)."""
    idx = np.asarray(indices)
    if idx.ndim != 2 or idx.shape[1] == 0 or not np.issubdtype(idx.dtype, np.integer):
        raise InputError(
            "indices: expected a 2-D integer array [n_resamples, resample size >= 1], got shape "
            f"{idx.shape} and dtype {idx.dtype}"
        )
    if idx.size and (idx.min() < 0 or idx.max() >= size):
        raise InputError(
            f"indices: row numbers must lie in [0, {size}), got {idx.min()}..{idx.max()}"
        )
    return idx


def metric_over_resamples(
    metric: Callable[[np.ndarray, np.ndarray], float],
    confidence: ArrayLike,
    correct: ArrayLike,
    indices: ArrayLike,
) -> np.ndarray:
    """``metric`` on every resample: ``np.array([metric(confidence[i], correct[i]) for i in
    indices])`` as float64 [n_resamples].

    ``indices`` is an integer array [n_resamples, resample size] of row numbers (e.g.
    :func:`bootstrap_indices`). The inputs are validated once, as every metric does. For
    :func:`ece`, :func:`kde_ece`, :func:`ks_cal`, :func:`smece`, :func:`brier`, :func:`nll`,
    :func:`auroc`, the selective columns (:func:`aurc`, :func:`e_aurc`, coverage at 5% and 10%
    error) and the auc-euro columns of :data:`acute.metrics.METRICS` (grid :func:`auc_euro` of a
    band) the resamples are evaluated in blocks with vectorised code: the results equal the
    loop's up to floating-point rounding (~1e-15 for smece and kde_ece, which smooth by FFTs
    of other lengths, and for auc-euro's band means; identical for the others), and AUROC is ``nan`` on
    single-class resamples, with one ``RuntimeWarning`` for all of them. Any other callable
    (also ``functools.partial(ece, n_bins=15)``) is called once per resample.
    """
    conf, y = validate_inputs(confidence, correct)
    idx = _check_indices(indices, conf.shape[0])
    if metric not in _BATCHED:
        return np.array([metric(conf[i], y[i]) for i in idx], dtype=np.float64).reshape(-1)
    batched, block_rows = _BATCHED[metric], _block_rows(idx.shape[1])
    out = np.empty(idx.shape[0])
    for start in range(0, idx.shape[0], block_rows):
        block = idx[start : start + block_rows]
        out[start : start + block.shape[0]] = batched(conf[block], y[block])
    undefined = int(np.isnan(out).sum())
    if undefined:
        warnings.warn(
            f"{metric.__name__}: undefined (nan) on {undefined} of {out.shape[0]} resamples "
            "where every record is correct or every record is wrong",
            RuntimeWarning,
            stacklevel=2,
        )
    return out


# --------------------------------------------------------------------------------------------
# Bootstrap
# --------------------------------------------------------------------------------------------


class Interval(NamedTuple):
    """A point estimate with a percentile bootstrap interval ``[low, high]``."""

    estimate: float
    low: float
    high: float


_INDEX_BLOCK = 1 << 22  # resample indices drawn per block (32 MiB of int64)


def _check_bootstrap_args(n: int, alpha: float) -> None:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise InputError(f"n: expected a positive number of resamples, got {n!r}")
    if not (isinstance(alpha, (int, float)) and 0.0 < alpha < 1.0):
        raise InputError(f"alpha: expected a float in (0, 1), got {alpha!r}")


def _index_blocks(size: int, n: int, seed: int) -> Iterator[np.ndarray]:
    """Blocks of bootstrap rows ([rows, size] int64), at most 2**22 indices per block."""
    rng = np.random.default_rng(seed)
    rows_per_block = max(1, _INDEX_BLOCK // size)
    done = 0
    while done < n:
        rows = min(rows_per_block, n - done)
        yield rng.integers(0, size, size=(rows, size))
        done += rows


def bootstrap_indices(size: int, n: int = DEFAULT_N_BOOTSTRAP, seed: int = 0) -> np.ndarray:
    """The ``[n, size]`` resample indices that :func:`bootstrap` and :func:`paired_bootstrap`
    use for ``size`` records, ``n`` resamples and ``seed`` (row i is resample i).

    Drawn from ``numpy.random.default_rng(seed)`` in blocks of at most 2**22 indices, so the
    result is reproducible. Use it to compute several statistics on identical resamples;
    mind the memory (``8 * n * size`` bytes).
    """
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
        raise InputError(f"size: expected a positive number of records, got {size!r}")
    _check_bootstrap_args(n, 0.05)
    return np.concatenate(list(_index_blocks(int(size), int(n), seed)), axis=0)


def cluster_bootstrap_indices(groups: ArrayLike, n: int = DEFAULT_N_BOOTSTRAP, seed: int = 0) -> np.ndarray:
    """``[n, size]`` resample indices of a cluster bootstrap: records that share a group value
    (a tool set, a template, a subject) are drawn together.

    Each resample draws groups uniformly with replacement (``numpy.random.default_rng(seed)``)
    and takes all of their records, until it holds ``size`` records; the last group drawn is cut
    to fit. The fixed size keeps every metric batched (:func:`metric_over_resamples`); the cut
    touches one group per resample, negligible when groups are small against the records (on
    APIGen at most 10 of 1,000). With every group a single record it is the ordinary bootstrap
    (other draws than :func:`bootstrap_indices`).
    """
    codes = np.unique(np.asarray([str(g) for g in np.asarray(groups, dtype=object).reshape(-1)]),
                      return_inverse=True)[1]
    size = codes.size
    if size < 1:
        raise InputError("groups: expected one value per record, got none")
    _check_bootstrap_args(n, 0.05)
    order = np.argsort(codes, kind="stable")
    sizes = np.bincount(codes)
    members = np.split(order, np.cumsum(sizes)[:-1])
    rng = np.random.default_rng(seed)
    out = np.empty((int(n), size), dtype=np.int64)
    for row in range(int(n)):
        picked: list[np.ndarray] = []
        held = 0
        while held < size:  # enough draws for the row at once, rarely more than one round
            draws = rng.integers(0, sizes.size, size=max(1, int(np.ceil((size - held) / sizes.mean()) * 1.2) + 1))
            cum = held + np.cumsum(sizes[draws])
            k = int(np.searchsorted(cum, size)) + 1
            picked.extend(members[g] for g in draws[:k])
            held = int(cum[min(k, draws.size) - 1])
        out[row] = np.concatenate(picked)[:size]
    return out


def resample_indices(size: int, n: int = DEFAULT_N_BOOTSTRAP, seed: int = 0, groups: ArrayLike | None = None) -> np.ndarray:
    """The resamples every interval of an evaluation uses: :func:`cluster_bootstrap_indices` of
    ``groups`` when some records share a group, else :func:`bootstrap_indices` of ``size``
    records (so an evaluation grouped by record id keeps its draws)."""
    if groups is not None:
        values = [str(g) for g in np.asarray(groups, dtype=object).reshape(-1)]
        if len(values) != size:
            raise InputError(f"groups has {len(values)} values but there are {size} records")
        if len(set(values)) < size:
            return cluster_bootstrap_indices(values, n, seed)
    return bootstrap_indices(size, n, seed)


def _resample_stats(
    metric: Callable[[np.ndarray, np.ndarray], float], conf: np.ndarray, y: np.ndarray, n: int, seed: int
) -> np.ndarray:
    """``metric`` on each of the ``n`` resamples of :func:`bootstrap_indices` (drawn block by
    block, evaluated by :func:`metric_over_resamples`); NaN where it is undefined."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.concatenate([metric_over_resamples(metric, conf, y, block)
                               for block in _index_blocks(conf.shape[0], n, seed)])


def percentile_interval(stats: ArrayLike, alpha: float = 0.05) -> tuple[float, float, int]:
    """``(low, high, n_left_out)``: the ``alpha/2`` and ``1 - alpha/2`` percentiles of the
    finite values of ``stats`` (bootstrap draws of a statistic) and how many non-finite draws
    were left out; ``low`` and ``high`` are NaN when no draw is finite. Every interval acute
    reports (metrics, evaluation, protocol study, reproduction report) is computed here."""
    stats = np.asarray(stats, dtype=np.float64)
    ok = np.isfinite(stats)
    if not ok.any():
        return float("nan"), float("nan"), int(stats.size)
    low, high = np.percentile(stats[ok], [100 * alpha / 2, 100 * (1 - alpha / 2)])
    return float(low), float(high), int((~ok).sum())


def _interval(estimate: float, stats: np.ndarray, alpha: float, what: str) -> Interval:
    low, high, n_bad = percentile_interval(stats, alpha)
    if n_bad:
        warnings.warn(
            f"{what}: {n_bad} of {stats.shape[0]} resamples gave a non-finite metric "
            "(e.g. auroc on a single-class resample); they are left out of the interval",
            RuntimeWarning,
            stacklevel=3,
        )
    return Interval(float(estimate), low, high)


def bootstrap(
    metric: Callable[[np.ndarray, np.ndarray], float],
    confidence: ArrayLike,
    correct: ArrayLike,
    n: int = DEFAULT_N_BOOTSTRAP,
    seed: int = 0,
    alpha: float = 0.05,
) -> Interval:
    """Percentile bootstrap interval for ``metric(confidence, correct)``.

    ``metric`` is any function of ``(confidence, correct)`` (e.g. :func:`smece`, or
    ``functools.partial(euro, u_ca=0.9)``). Draws ``n`` resamples of the records with
    replacement from ``numpy.random.default_rng(seed)`` (deterministic given ``seed``) and
    returns ``Interval(estimate=metric on the full data, low, high)`` with the ``alpha/2`` and
    ``1 - alpha/2`` percentiles. Resamples where the metric is not finite (auroc on a
    single-class resample) are dropped with one ``RuntimeWarning``; if all are, low and high
    are nan.
    """
    conf, y = validate_inputs(confidence, correct)
    _check_bootstrap_args(n, alpha)
    estimate = metric(conf, y)
    stats = _resample_stats(metric, conf, y, n, seed)
    return _interval(estimate, stats, alpha, "bootstrap")


def paired_bootstrap(
    metric: Callable[[np.ndarray, np.ndarray], float],
    confidence_a: ArrayLike,
    confidence_b: ArrayLike,
    correct: ArrayLike,
    n: int = DEFAULT_N_BOOTSTRAP,
    seed: int = 0,
    alpha: float = 0.05,
) -> Interval:
    """Percentile bootstrap interval for ``metric(a) - metric(b)`` on the same records.

    Two estimators' confidences on the same records are resampled together (the same indices
    for both), which is what makes the comparison paired. Returns
    ``Interval(estimate=metric(a) - metric(b) on the full data, low, high)``; the interval
    excluding 0 indicates a difference at level ``alpha``. Deterministic given ``seed``; see
    :func:`bootstrap` for non-finite resamples.
    """
    conf_a, y = validate_inputs(confidence_a, correct, "confidence_a")
    conf_b, _ = validate_inputs(confidence_b, correct, "confidence_b")
    _check_bootstrap_args(n, alpha)
    estimate = metric(conf_a, y) - metric(conf_b, y)
    stats = _resample_stats(metric, conf_a, y, n, seed) - _resample_stats(metric, conf_b, y, n, seed)
    return _interval(estimate, stats, alpha, "paired_bootstrap")

