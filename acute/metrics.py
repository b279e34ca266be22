"""Calibration and selective-trust metrics over ``(confidence, correct)`` arrays.

Every metric is a plain function of two 1-D arrays of the same length:

* ``confidence``: floats in ``[0, 1]`` (the estimated probability that the answer is correct);
* ``correct``: booleans or 0/1 numbers (whether the answer was actually correct).

Bad input (empty arrays, different lengths, NaN, confidences outside ``[0, 1]``, labels other
than 0/1, arrays that are not 1-D) raises a ``ValueError`` naming the offending argument.

Metrics
-------
``ece``            binned expected calibration error (equal-width bins).
``smece``          smooth ECE of Blasiok & Nakkiran (2023); ``smece_bandwidth`` gives its sigma*,
                   ``smooth_reliability`` the smoothed reliability curve and density behind it.
``kde_ece``        KDE-based ECE of Zhang, Kailkhura & Han (2020, Mix-n-Match), binary case.
``ks_cal``         Kolmogorov-Smirnov calibration error of Gupta et al. (2021).
``brier``, ``nll`` proper scoring rules; ``auroc`` ranking of correct above wrong answers.
``euro``           oracle-normalised expected utility at risk level ``u_ca`` (ACUTE);
                   ``euro_curve`` over a grid of risk levels, ``auc_euro`` its mean over a band.
``bootstrap``, ``paired_bootstrap``  percentile intervals for any of the above;
                   ``metric_over_resamples`` a metric on many resamples at once.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike
from scipy import fft as sp_fft
from scipy.signal import fftconvolve

from .errors import InputError
from .validation import check_confidence, check_correct

__all__ = [
    "BANDS",
    "EURO_GRID",
    "NLL_EPS",
    "Interval",
    "METRICS",
    "METRIC_SPECS",
    "MetricSpec",
    "SmoothReliability",
    "auc_euro",
    "auroc",
    "bootstrap",
    "bootstrap_indices",
    "brier",
    "ece",
    "euro",
    "euro_curve",
    "kde_ece",
    "kde_ece_bandwidth",
    "ks_cal",
    "metric_over_resamples",
    "nll",
    "paired_bootstrap",
    "percentile_interval",
    "smece",
    "smece_bandwidth",
    "smooth_reliability",
    "validate_inputs",
]

#: Probabilities are clipped to ``[NLL_EPS, 1 - NLL_EPS]`` before taking logs in :func:`nll`.
NLL_EPS = 1e-12

#: The risk levels u = 0.001, 0.002, ..., 0.999 over which ``auc_euro`` averages euro.
EURO_GRID = np.arange(1, 1000) / 1000.0

#: Risk bands: (grid slice of ``EURO_GRID``, closed-form interval [lo, hi]).
BANDS: dict[str, tuple[slice, tuple[float, float]]] = {
    "low": (slice(0, 333), (0.0, 1.0 / 3.0)),
    "med": (slice(333, 666), (1.0 / 3.0, 2.0 / 3.0)),
    "high": (slice(666, 999), (2.0 / 3.0, 1.0)),
    "all": (slice(0, 999), (0.0, 1.0)),
}


# --------------------------------------------------------------------------------------------
# Input validation
# --------------------------------------------------------------------------------------------


def _as_confidence(confidence: ArrayLike, name: str = "confidence") -> np.ndarray:
    """``confidence`` as a float64 1-D array (:func:`acute.validation.check_confidence`)."""
    return check_confidence(confidence, name=name)


def _as_correct(correct: ArrayLike, name: str = "correct") -> np.ndarray:
    """``correct`` as a bool 1-D array (:func:`acute.validation.check_correct`)."""
    return check_correct(correct, name=name) == 1


def validate_inputs(
    confidence: ArrayLike, correct: ArrayLike, name: str = "confidence"
) -> tuple[np.ndarray, np.ndarray]:
    """Validated ``(float64 confidence, bool correct)`` 1-D arrays of equal, non-zero length.

    Raises ``ValueError`` naming the argument (``name`` for the confidences, ``correct`` for
    the labels) for empty or non-1-D arrays, different lengths, NaN, confidences outside
    [0, 1] and labels other than 0/1/True/False. Every metric calls it first.
    """
    conf = _as_confidence(confidence, name)
    y = _as_correct(correct)
    if conf.shape[0] != y.shape[0]:
        raise InputError(
            f"{name} and correct must have the same length, got {conf.shape[0]} and {y.shape[0]}"
        )
    return conf, y


# --------------------------------------------------------------------------------------------
# Binned ECE, KS, Brier, NLL, AUROC
# --------------------------------------------------------------------------------------------
#
# Each metric is computed by a helper over the last axis of ``conf`` and ``y`` (shape [..., n]):
# the public function applies it to one dataset, :func:`metric_over_resamples` to a block of
# resamples ([rows, n]) at once.

_ECE_BINS = 10


def _row_bincount(bins: np.ndarray, weights: np.ndarray, size: int) -> np.ndarray:
    """``np.bincount(bins[r], weights[r], size)`` for every row r of ``bins`` / ``weights``
    (shape [..., n]), in one call -> [..., size]; bins outside [0, size) are left out."""
    lead = bins.shape[:-1]
    rows = int(np.prod(lead))
    flat = bins + (np.arange(rows) * size).reshape(lead + (1,))
    flat = np.where((bins >= 0) & (bins < size), flat, rows * size)  # the last slot: left out
    counts = np.bincount(flat.ravel(), weights=weights.ravel(), minlength=rows * size + 1)
    return counts[:-1].reshape(lead + (size,))


def _ece_rows(conf: np.ndarray, y: np.ndarray, n_bins: int = _ECE_BINS) -> np.ndarray:
    """Binned ECE (see :func:`ece`) over the last axis."""
    bins = np.minimum((conf * n_bins).astype(np.int64), n_bins - 1)
    gap = _row_bincount(bins, conf - y, n_bins)
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
    return float(_ece_rows(conf, y, int(n_bins)))


def _ks_cal_rows(conf: np.ndarray, y: np.ndarray) -> np.ndarray:
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
    return float(_ks_cal_rows(conf, y))


def _brier_rows(conf: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Brier score over the last axis."""
    return np.mean((conf - y) ** 2, axis=-1)


def brier(confidence: ArrayLike, correct: ArrayLike) -> float:
    """Brier score ``mean((confidence - correct)^2)``, a float in [0, 1] (lower is better)."""
    conf, y = validate_inputs(confidence, correct)
    return float(_brier_rows(conf, y))


def _nll_rows(conf: np.ndarray, y: np.ndarray, eps: float = NLL_EPS) -> np.ndarray:
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
    return float(_nll_rows(conf, y, eps))


def _auroc_rows(conf: np.ndarray, y: np.ndarray) -> np.ndarray:
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
    return float(_auroc_rows(conf, y))


# --------------------------------------------------------------------------------------------
# Smooth ECE (Blasiok & Nakkiran 2023)
# --------------------------------------------------------------------------------------------
#
# The discretisation follows relplot 1.0.3 (the reference implementation) step for step so
# that the two agree to floating-point precision:
#   * masses are spread onto an m-point grid over [0, 1] by linear interpolation, with
#     m = max(2000, round(20 / sigma)) // 2 + 1;
#   * the grid is extended by reflection about both end points (the end points themselves not
#     repeated) and convolved with the Gaussian pdf sampled at linspace(0, 1, m) - 0.5;
#   * the smoothed residual r(t) and density d(t) (+1e-4) are linearly interpolated onto
#     max(round(10 / sigma), 200) evaluation points t, and
#     smECE_sigma = sum_t |r(t)| / sum_t (d(t) + 1e-4);
#   * sigma* is found by the same 10-step bisection on [0, 1] for the fixed point
#     smECE_sigma = sigma (sigma < 0.001 counts as "too small"), and smECE = smECE_{sigma*}.
# The speed-ups are ours: np.bincount instead of np.add.at, grid masses built and
# Fourier-transformed once per grid size (residual and density together), and kernel
# transforms cached. For many bootstrap resamples of one dataset (metric_over_resamples) the
# bisection runs on all of them in lockstep, with cheaper but equivalent smoothing (see
# _ResampledSmoothECE); near-ties with sigma are recomputed exactly, so every resample gets
# the sigma* that smece gives it alone.

_SMECE_DENS_EPS = 1e-4
_SMECE_MIN_SIGMA = 0.001
_SMECE_REFINE = 10
_SMECE_MIN_EVAL = 200


def _smece_grid_size(sigma: float | np.ndarray) -> np.ndarray:
    """Grid size ``max(2000, round(20 / sigma)) // 2 + 1`` (of a float or of each of an array)."""
    return np.maximum(2000, np.round(20 / sigma).astype(np.int64)) // 2 + 1


def _smece_n_eval(sigma: float | np.ndarray) -> np.ndarray:
    """Number of evaluation points ``max(round(10 / sigma), 200)``."""
    return np.maximum(np.round(10 / sigma).astype(np.int64), _SMECE_MIN_EVAL)


def _smece_fft_size(m: int) -> int:
    """FFT length of smece's linear convolution of the 3m-2 reflected grid points with the
    kernel: circular convolution of length >= 3m-2 only aliases outputs 0..m-2, unused."""
    return sp_fft.next_fast_len(3 * m - 2, real=True)


def _grid_cells(pos: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Linear binning of grid positions ``pos`` (in grid steps, in [0, size - 1]) on a grid of
    ``size`` points: (lower grid point, fraction of the mass that goes to the next one)."""
    bins = pos.astype(np.int64).clip(0, size - 2)
    return bins, pos - bins


def _linear_binning(pos: np.ndarray, weights: np.ndarray, size: int) -> np.ndarray:
    """Spread ``weights`` [..., k, n] at grid positions ``pos`` [..., n] onto a grid of
    ``size`` points by linear interpolation (see :func:`_grid_cells`) -> [..., k, size]."""
    bins, frac = _grid_cells(pos, size)
    frac = frac[..., None, :]
    bins = np.broadcast_to(bins[..., None, :], weights.shape)
    lower = _row_bincount(bins, (1.0 - frac) * weights, size)
    return lower + _row_bincount(bins + 1, frac * weights, size)


def _gaussian_samples(sigma: float, m: int) -> np.ndarray:
    """The Gaussian pdf with std ``sigma`` at linspace(0, 1, m) - 0.5 (relplot's kernel)."""
    t = np.linspace(0, 1, m)
    return np.exp(-(t - 0.5) * (t - 0.5) / (2 * sigma**2)) / (np.sqrt(2 * np.pi) * sigma)


@functools.lru_cache(maxsize=512)
def _kernel_spectrum(sigma: float, m: int, periodic: bool) -> np.ndarray:
    """rfft of the kernel of :func:`_gaussian_samples` as :class:`_ReflectedGrids` uses it
    (read-only; cached, as the bisection visits the same sigmas for every resample)."""
    ker = _gaussian_samples(sigma, m)
    if periodic:  # sample k at offset k - m//2, wrapped around
        n = _periodic_length(m)
        spectrum = sp_fft.rfft(np.roll(np.concatenate([ker, np.zeros(n - m)]), -(m // 2)))
    else:
        spectrum = sp_fft.rfft(ker, _smece_fft_size(m))
    spectrum.flags.writeable = False
    return spectrum


def _periodic_length(m: int) -> int:
    """The period 2(m-1) of a grid of m points extended by reflection about both ends."""
    return 2 * (m - 1)


@functools.lru_cache(maxsize=None)
def _has_fast_period(m: int) -> bool:
    """Whether the period of grid size m is a fast (5-smooth) FFT length."""
    return sp_fft.next_fast_len(_periodic_length(m), real=True) == _periodic_length(m)


@functools.lru_cache(maxsize=64)
def _eval_points(n_eval: int) -> np.ndarray:
    """linspace(0, 1, n_eval), read-only (cached)."""
    t = np.linspace(0, 1, n_eval)
    t.flags.writeable = False
    return t


class _ReflectedGrids:
    """Gaussian smoothing, reflected at 0 and 1, of the weighted confidences of a batch of
    datasets: confidences ``conf`` [rows, n], weights ``weights`` [rows, k, n].

    Per grid size m, the grid masses of each row are extended by reflection and
    Fourier-transformed once, on first use. Smoothing with a Gaussian then costs one kernel
    FFT per width (cached) and one inverse FFT per row and weight. The result equals relplot's
    ``np.convolve(ext, kernel, "valid")[m//2 : m//2 + m]``: computed as that linear
    convolution (``periodic=False``, what :func:`smece` does), or, equal up to rounding, as a
    circular convolution of the period 2(m-1) of the reflected grid (``periodic=True``: no
    padding, shorter FFTs; the kernel's m points fit in one period).
    """

    def __init__(self, conf: np.ndarray, weights: np.ndarray, periodic: bool = False) -> None:
        self.conf = conf
        self.weights = weights
        self.periodic = periodic
        # per grid size m: each row's place in the stored transforms (-1: none yet), the
        # store (grown by doubling) and how much of it is used
        self._slots: dict[int, np.ndarray] = {}
        self._spectra: dict[int, np.ndarray] = {}
        self._used: dict[int, int] = {}

    def _length(self, m: int) -> int:
        return _periodic_length(m) if self.periodic else _smece_fft_size(m)

    def _transforms(self, m: int, rows: np.ndarray) -> np.ndarray:
        """Transforms of the reflected grid masses of ``rows`` -> [len(rows), k, F] (a copy)."""
        size = self._length(m)
        if m not in self._slots:
            self._slots[m] = np.full(self.conf.shape[0], -1)
            self._spectra[m] = np.empty((0,) + self.weights.shape[1:-1] + (size // 2 + 1,), complex)
            self._used[m] = 0
        slots, used = self._slots[m], self._used[m]
        todo = rows[slots[rows] < 0]
        if todo.size:
            values = _linear_binning(self.conf[todo] * (m - 1), self.weights[todo], m)
            if self.periodic:  # one period: v_0 .. v_{m-1}, v_{m-2} .. v_1
                ext = np.concatenate([values, values[..., m - 2 : 0 : -1]], axis=-1)
            else:  # 3m - 2 points: v_{m-1} .. v_1, v_0 .. v_{m-1}, v_{m-2} .. v_0
                flipped = values[..., ::-1]
                ext = np.concatenate([flipped[..., :-1], values, flipped[..., 1:]], axis=-1)
            stored = self._spectra[m]
            if used + todo.shape[0] > stored.shape[0]:
                capacity = max(2 * used, used + todo.shape[0])
                self._spectra[m] = np.empty((capacity,) + stored.shape[1:], complex)
                self._spectra[m][:used] = stored[:used]
            self._spectra[m][used : used + todo.shape[0]] = sp_fft.rfft(ext, size, axis=-1)
            slots[todo] = used + np.arange(todo.shape[0])
            self._used[m] = used + todo.shape[0]
        return self._spectra[m][slots[rows]]

    def smooth(self, sigma: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Grid masses of ``rows[i]`` convolved with the Gaussian pdf of width ``sigma[i]``
        sampled at linspace(0, 1, m) - 0.5 -> [len(rows), k, m]; every sigma[i] must have the
        same grid size m."""
        m = int(_smece_grid_size(float(sigma[0])))
        widths, which = np.unique(sigma, return_inverse=True)
        kernels = np.stack([_kernel_spectrum(w, m, self.periodic) for w in widths.tolist()])
        spectra = self._transforms(m, rows)
        spectra *= kernels[which.reshape(-1), None]
        full = sp_fft.irfft(spectra, self._length(m), axis=-1)
        start = 0 if self.periodic else (m - 1) + m // 2  # "valid" starts at m-1 in the full one
        return full[..., start : start + m]

    def smoothed(self, sigma: float, t: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """The smoothed weights of ``rows`` at points ``t`` (un-normalised, interpolated
        linearly from the grid) -> [len(rows), k, len(t)]."""
        return _interp_grid(t, self.smooth(np.full(rows.shape[0], sigma), rows))


def _interp_cells(t: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
    """relplot's linear interpolation at ``t`` from the grid i/(m-1): (lower grid point,
    weight of the next one)."""
    inds = (t * (m - 1)).astype(np.int64).clip(0, m - 2)
    return inds, (t - inds / (m - 1)) * (m - 1)


def _interp_grid(t: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Linear interpolation of the grid function i/(m-1) -> y[..., i] at ``t``."""
    inds, resid = _interp_cells(t, y.shape[-1])
    return y[..., inds] * (1 - resid) + y[..., inds + 1] * resid


def _smece_value(smooth: np.ndarray) -> np.ndarray:
    """smECE_sigma from the smoothed (residual, count) [rows, 2, n_eval] of each dataset."""
    # C order, so that each row's sums are the same pairwise sums as for one dataset
    smooth = np.ascontiguousarray(smooth)
    resid, dens = smooth[:, 0], smooth[:, 1] + _SMECE_DENS_EPS
    rs = resid / dens
    return np.sum(np.abs(rs) * dens, axis=-1) / np.sum(dens, axis=-1)


_SMECE_CHUNK = 128  # datasets smoothed together (a few MB)


class _SmoothECE:
    """smECE_sigma of a batch of datasets (the rows of ``conf``, ``y``: [rows, n]), each with
    exactly the floating-point operations of :func:`smece` on that dataset alone."""

    def __init__(self, conf: np.ndarray, y: np.ndarray) -> None:
        self.data = _ReflectedGrids(conf, np.stack([conf - y, np.ones_like(conf)], axis=-2))

    def values(self, sigma: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """smECE_{sigma[i]} of dataset ``rows[i]`` for every i."""
        out = np.empty(rows.shape[0])
        widths, which = np.unique(sigma, return_inverse=True)
        which = which.reshape(-1)
        grid, n_eval = _smece_grid_size(widths)[which], _smece_n_eval(widths)[which]
        for m in np.unique(grid):
            same_grid = np.flatnonzero(grid == m)
            for at in np.array_split(same_grid, -(-same_grid.shape[0] // _SMECE_CHUNK)):
                smooth = self.data.smooth(sigma[at], rows[at])
                for k in np.unique(n_eval[at]):
                    sel = n_eval[at] == k
                    out[at[sel]] = _smece_value(_interp_grid(_eval_points(int(k)), smooth[sel]))
        return out


def _smece_fixed_point(
    values: Callable[[np.ndarray, np.ndarray], np.ndarray], count: int
) -> tuple[np.ndarray, np.ndarray]:
    """(sigma*, smECE_{sigma*}) of ``count`` datasets, ``values(sigma, rows)`` giving
    smECE_{sigma[i]} of dataset rows[i]: relplot's 10-step bisection on [0, 1], run for all
    datasets in lockstep (see :func:`smece_bandwidth`)."""
    rows = np.arange(count)
    value_hi = values(np.ones(count), rows)
    # sigma = 1 too small cannot happen (smECE_1 <= 1); relplot then returns 1.0, and so
    # do we: such a dataset never evaluates again and keeps hi = 1.0.
    live = ~(1.0 < value_hi)
    hi, lo = np.ones(count), np.zeros(count)
    for _ in range(_SMECE_REFINE):
        mid = (hi + lo) / 2
        value = np.full(count, np.inf)  # sigma < 0.001 is too small unevaluated
        ask = live & (mid >= _SMECE_MIN_SIGMA)
        value[ask] = values(mid[ask], rows[ask])
        too_small = mid < value
        lo = np.where(too_small, mid, lo)
        hi = np.where(too_small, hi, mid)
        value_hi = np.where(too_small, value_hi, value)
    return hi, value_hi


@functools.lru_cache(maxsize=512)
def _count_weights(sigma: float) -> np.ndarray:
    """The vector A on the grid of ``sigma`` with sum_t (smoothed masses v)(t) = A . v for any
    grid masses v (periodic smoothing, interpolated at the evaluation points t): the adjoint
    of those steps applied to ones (read-only, cached)."""
    m = int(_smece_grid_size(sigma))
    inds, resid = _interp_cells(_eval_points(int(_smece_n_eval(sigma))), m)
    at_t = np.bincount(inds, 1 - resid, m) + np.bincount(inds + 1, resid, m)
    n = _periodic_length(m)
    spectrum = _kernel_spectrum(sigma, m, True)
    back = sp_fft.irfft(sp_fft.rfft(at_t, n) * np.conj(spectrum), n)  # correlation
    weights = back[:m].copy()
    weights[1 : m - 1] += back[n - 1 : n - m + 1 : -1]  # fold the reflected half back
    weights.flags.writeable = False
    return weights


_SMECE_TIE = 1e-9  # a fast smECE_sigma this close to sigma (relative) is recomputed exactly


class _ResampledSmoothECE:
    """smECE_sigma of many resamples of one dataset (rows of ``conf``, ``y``: [rows, n]),
    equal to :class:`_SmoothECE`'s up to rounding (~1e-15), with far fewer FFTs:

    * smoothing is periodic (see :class:`_ReflectedGrids`) where 2(m-1) is a fast FFT length;
    * the numerator sum_t |r(t) / d(t)| d(t) is sum_t |r(t)|, and the denominator
      sum_t d(t) a dot product with :func:`_count_weights`, so only the residuals are smoothed;
    * a sigma shared by many resamples is handled by smoothing a unit mass at each distinct
      confidence once and combining these responses with each resample's weights (the
      smoothing is linear), when that costs less than smoothing each resample;
    * values within a relative 1e-9 of sigma are recomputed with :class:`_SmoothECE`, so the
      bisection takes exactly the decisions it takes for each resample alone.
    """

    def __init__(self, conf: np.ndarray, y: np.ndarray) -> None:
        self.exact = _SmoothECE(conf, y)
        self.resid = _ReflectedGrids(conf, (conf - y)[:, None, :], periodic=True)
        self.points, where = np.unique(conf, return_inverse=True)
        where = where.reshape(conf.shape)
        units = self.points.shape[0]
        self.point_resid = _row_bincount(where, conf - y, units)  # [rows, U]
        self.point_count = _row_bincount(where, np.ones_like(conf), units)
        self.units = _ReflectedGrids(self.points[:, None], np.ones((units, 1, 1)), periodic=True)

    @staticmethod
    def _fast(m: np.ndarray) -> np.ndarray:
        """Whether each grid size m has a fast periodic FFT length."""
        return np.array([_has_fast_period(size) for size in m.tolist()], dtype=bool)

    def _pool(self, m: np.ndarray, n_eval: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Whether pooling is cheaper for ``rows[j]`` resamples at a sigma with grid size
        ``m[j]`` and ``n_eval[j]`` points: one inverse FFT per distinct confidence plus a
        multiply-add per (resample, confidence, point), against one inverse FFT per resample
        (a multiply-add costs about a fifth of an FFT's size * log2(size) unit)."""
        units = self.points.shape[0]
        fft = 2 * (m - 1) * np.log2(2 * (m - 1))
        return units * fft + rows * units * n_eval / 5 < rows * fft

    def _at_points(self, widths: np.ndarray, grid: np.ndarray) -> np.ndarray:
        """:func:`_count_weights` of each of ``widths`` (with grid sizes ``grid``), interpolated
        at the distinct confidences -> [len(widths), U]: sum_t d(t) of a resample is its counts
        per distinct confidence dotted with that row, plus n_eval * 1e-4."""
        out = np.empty((widths.shape[0], self.points.shape[0]))
        for m in np.unique(grid).tolist():
            same = np.flatnonzero(grid == m)
            weights = np.stack([_count_weights(w) for w in widths[same].tolist()])
            bins, frac = _grid_cells(self.points * (m - 1), m)
            out[same] = weights[:, bins] * (1.0 - frac) + weights[:, bins + 1] * frac
        return out

    def values(self, sigma: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """smECE_{sigma[i]} of resample ``rows[i]`` for every i."""
        widths, which, counts = np.unique(sigma, return_inverse=True, return_counts=True)
        which = which.reshape(-1)
        grid, n_eval = _smece_grid_size(widths), _smece_n_eval(widths)
        fast = self._fast(grid)
        pooled = fast & self._pool(grid, n_eval, counts)
        numerator = np.zeros(rows.shape[0])  # sum_t |r(t)|
        units = np.arange(self.points.shape[0])
        for j in np.flatnonzero(pooled):
            same = np.flatnonzero(which == j)
            t = _eval_points(int(n_eval[j]))
            responses = self.units.smoothed(float(widths[j]), t, units)[:, 0]  # [U, n_eval]
            numerator[same] = np.abs(self.point_resid[rows[same]] @ responses).sum(axis=-1)
        direct = np.flatnonzero(fast[which] & ~pooled[which])
        for m in np.unique(grid[which[direct]]):
            same_grid = direct[grid[which[direct]] == m]
            for at in np.array_split(same_grid, -(-same_grid.shape[0] // _SMECE_CHUNK)):
                smooth = self.resid.smooth(sigma[at], rows[at])[:, 0]  # [len(at), m]
                for k in np.unique(n_eval[which[at]]):
                    sel = n_eval[which[at]] == k
                    resid = _interp_grid(_eval_points(int(k)), smooth[sel])
                    numerator[at[sel]] = np.abs(resid).sum(axis=-1)
        at_points = np.zeros((widths.shape[0], self.points.shape[0]))
        at_points[fast] = self._at_points(widths[fast], grid[fast])
        dens = np.einsum("ij,ij->i", self.point_count[rows], at_points[which])
        out = numerator / (dens + n_eval[which] * _SMECE_DENS_EPS)
        exact = ~fast[which] | (np.abs(out - sigma) <= _SMECE_TIE * sigma)
        if exact.any():
            out[exact] = self.exact.values(sigma[exact], rows[exact])
        return out


def smece_bandwidth(confidence: ArrayLike, correct: ArrayLike) -> float:
    """The smooth-ECE bandwidth sigma*, the fixed point of ``smECE_sigma = sigma``.

    Found (as in relplot) by a 10-step bisection on [0, 1] that keeps the upper end at a point
    with ``smECE_sigma <= sigma`` (sigma < 0.001 always counts as too small) and returns that
    upper end, so sigma* is a multiple of 2**-10 in [2**-9, 1]. Used as the kernel width of
    :func:`smooth_reliability` and of the NWKR baseline.
    """
    conf, y = validate_inputs(confidence, correct)
    return float(_smece_fixed_point(_SmoothECE(conf[None], y[None]).values, 1)[0][0])


def _smece_rows(conf: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Smooth ECE (see :func:`smece`) of every row of ``conf``, ``y`` [rows, n], resamples of
    one dataset (see :class:`_ResampledSmoothECE`)."""
    return _smece_fixed_point(_ResampledSmoothECE(conf, y).values, conf.shape[0])[1]


def smece(confidence: ArrayLike, correct: ArrayLike) -> float:
    """Smooth ECE of Blasiok & Nakkiran (2023, "Smooth ECE: principled reliability diagrams via
    kernel smoothing").

    The residuals ``confidence - correct`` are smoothed with a Gaussian kernel reflected at 0
    and 1; ``smECE_sigma`` is the density-weighted mean absolute smoothed residual, and the
    result is ``smECE_{sigma*}`` at the fixed point ``smECE_sigma* = sigma*`` (see
    :func:`smece_bandwidth`). Discretised exactly like ``relplot.smECE`` 1.0.3 (agreement to
    ~1e-12 in our tests) and several times faster.

    Returns a float in [0, 1]. Defined for any valid input, including n = 1 and single-class
    labels (e.g. all wrong at confidence c gives about c).
    """
    conf, y = validate_inputs(confidence, correct)
    return float(_smece_fixed_point(_SmoothECE(conf[None], y[None]).values, 1)[1][0])


@dataclass(frozen=True)
class SmoothReliability:
    """A smoothed reliability diagram (see :func:`smooth_reliability`).

    ``grid``: evaluation points in [0, 1]; ``curve``: the smoothed E[correct | confidence = t]
    (``t`` + kernel-smoothed ``correct - confidence``, not clipped); ``density``: reflected
    Gaussian KDE of the confidences at ``grid`` (integrates to about 1 over [0, 1]);
    ``sigma``: kernel width used; ``smece``: smooth ECE at that width.
    """

    grid: np.ndarray
    curve: np.ndarray
    density: np.ndarray
    sigma: float
    smece: float


def smooth_reliability(
    confidence: ArrayLike,
    correct: ArrayLike,
    sigma: float | None = None,
    grid: int | ArrayLike = 200,
) -> SmoothReliability:
    """Smoothed calibration curve and confidence density, as drawn by relplot's diagrams.

    ``sigma`` defaults to :func:`smece_bandwidth`; ``grid`` is either a number of equally
    spaced points on [0, 1] (at least 2) or an array of points in [0, 1]. The curve at ``t`` is
    ``t + sum_i K(t, c_i)(y_i - c_i) / (sum_i K(t, c_i) + 1e-4)`` with the reflected Gaussian
    kernel of :func:`smece` (relplot's ``KernelSmoother`` on centred targets); the density is the
    same kernel applied to weights 1/n. Returns a :class:`SmoothReliability`.
    """
    conf, y = validate_inputs(confidence, correct)
    if sigma is not None and (
        isinstance(sigma, bool)
        or not (isinstance(sigma, (int, float, np.floating)) and 0.0 < float(sigma) <= 1.0)
    ):
        raise InputError(f"sigma: expected a float in (0, 1], got {sigma!r}")
    if isinstance(grid, (int, np.integer)) and not isinstance(grid, bool):
        if grid < 2:
            raise InputError(f"grid: expected at least 2 points, got {grid}")
        t = np.linspace(0.0, 1.0, int(grid))
    else:
        t = _as_confidence(grid, "grid")
    sm = _SmoothECE(conf[None], y[None])
    row = np.zeros(1, dtype=np.int64)
    if sigma is None:
        sigmas, values = _smece_fixed_point(sm.values, 1)
    else:
        sigmas = np.array([float(sigma)])
        values = sm.values(sigmas, row)
    sigma = float(sigmas[0])
    resid, count = sm.data.smoothed(sigma, t, row)[0]
    curve = t - resid / (count + _SMECE_DENS_EPS)
    density = count / conf.shape[0]
    return SmoothReliability(
        grid=t, curve=curve, density=density, sigma=sigma, smece=float(values[0])
    )


# --------------------------------------------------------------------------------------------
# KDE-ECE (Zhang, Kailkhura & Han 2020)
# --------------------------------------------------------------------------------------------

_KDE_GRID_STEP = 2.0**-13  # 8193 points on [0, 1]; the paper's code uses 2**14 on [-0.6, 1.6]
_KDE_GRID_SIZE = int(round(2.0 / _KDE_GRID_STEP)) + 1  # the grid over [-0.5, 1.5]
_KDE_FIRST = int(round(0.5 / _KDE_GRID_STEP))  # grid index of 0
_KDE_INTERIOR = int(round(1.0 / _KDE_GRID_STEP)) + 1  # grid points on [0, 1]


def _trapezoid(values: np.ndarray, step: float) -> np.ndarray:
    """Trapezoid rule over the last axis for samples on a uniform grid (np.trapezoid needs
    numpy >= 2)."""
    return step * (values.sum(axis=-1) - 0.5 * (values[..., 0] + values[..., -1]))


def kde_ece_bandwidth(confidence: ArrayLike, correct: ArrayLike) -> float:
    """Bandwidth (kernel standard deviation) used by :func:`kde_ece`.

    The rule of the Mix-n-Match reference code: ``h = std(confidence of correct records) *
    (2 n)^(-1/5)`` with n the number of records. With no correct record it uses the standard
    deviation of all confidences instead. It can be 0 (e.g. one correct record, or all correct
    confidences equal); :func:`kde_ece` then degenerates to linear binning (a point kernel).
    """
    conf, y = validate_inputs(confidence, correct)
    return float(_kde_bandwidths(conf[None], y[None])[0])


def _kde_bandwidths(conf: np.ndarray, y: np.ndarray) -> np.ndarray:
    """:func:`kde_ece_bandwidth` of every row of ``conf``, ``y`` [rows, n]."""
    n_pos = y.sum(axis=-1)
    # each row's correct records first, in input order, so row[:n_pos] is conf[y]
    correct_first = np.take_along_axis(conf, np.argsort(~y, axis=-1, kind="stable"), axis=-1)
    std = np.empty(conf.shape[0])
    for k in np.unique(n_pos):
        same = n_pos == k
        std[same] = np.std(correct_first[same, :k] if k else conf[same], axis=-1)
    return std * (2.0 * conf.shape[-1]) ** -0.2


def _kde_half_width(h: np.ndarray) -> np.ndarray:
    """The triweight kernel's support ``floor(3 h / dx)`` in grid steps."""
    return np.floor(3.0 * h / _KDE_GRID_STEP).astype(np.int64)


def _triweight_kernels(h: np.ndarray, half: int) -> np.ndarray:
    """Triweight kernels with standard deviations ``h`` [rows] (support +-3h) sampled every
    grid step dx at offsets -half..half -> [rows, 2 half + 1], each normalised to integrate to
    1 on the grid; a point mass 1/dx where 3h is below one step."""
    dx = _KDE_GRID_STEP
    point = _kde_half_width(h) < 1
    x = np.arange(half + 1) * dx / np.where(point, 1.0, 3.0 * h)[:, None]
    right = np.clip(1.0 - x * x, 0.0, None) ** 3  # offsets 0..half; the kernel is even
    k = np.concatenate([right[:, :0:-1], right], axis=1)
    k /= k.sum(axis=-1, keepdims=True) * dx
    if point.any():
        k[point] = np.where(np.arange(-half, half + 1) == 0, 1.0 / dx, 0.0)
    return k


def _kde_points(conf: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Grid positions [..., 2n] of the confidences and their reflections (about 0 below 0.5,
    about 1 otherwise) on the grid over [-0.5, 1.5], and their weights [..., 2, 2n] for the
    density of all records and of the correct ones."""
    data = np.concatenate([conf, np.where(conf < 0.5, -conf, 2.0 - conf)], axis=-1)
    is_pos = np.concatenate([y, y], axis=-1).astype(np.float64)
    weights = np.stack([np.ones_like(data), is_pos], axis=-2)
    return (data + 0.5) / _KDE_GRID_STEP, weights


def _kde_ece_value(smooth: np.ndarray, conf: np.ndarray, y: np.ndarray) -> np.ndarray:
    """KDE-ECE over the last axis from the smoothed masses [..., 2, interior] on [0, 1]."""
    dx = _KDE_GRID_STEP
    p_in = np.maximum(smooth[..., 0, :], 0.0)  # clipped at 0
    q_in = np.maximum(smooth[..., 1, :], 0.0)
    np.minimum(q_in, p_in, out=q_in)
    gap = _eval_points(p_in.shape[-1]) * p_in
    gap -= q_in
    gap = _trapezoid(np.abs(gap, out=gap), dx)
    total = _trapezoid(p_in, dx)
    # total > 0 for valid input; the fallback guards against underflow
    fallback = np.abs(np.mean(conf, axis=-1) - np.mean(y, axis=-1))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(total > 0, gap / total, fallback)


def kde_ece(confidence: ArrayLike, correct: ArrayLike) -> float:
    """KDE-based expected calibration error of Zhang, Kailkhura & Han (2020, "Mix-n-Match:
    ensemble and compositional methods for uncertainty calibration"), binary case, L1.

    ``ECE_KDE = integral_0^1 |t - a(t)| p(t) dt / integral_0^1 p(t) dt`` where ``p`` is a kernel
    density estimate of the confidences and ``a(t) = q(t) / p(t)`` the estimated accuracy at
    confidence t, ``q`` being the KDE of the correct records' confidences weighted by the
    accuracy (so ``q <= p`` and ``|t - a| p = |t p - q|``).

    * Kernel: triweight ``(35/32)(1 - u^2)^3`` scaled to standard deviation ``h`` (support
      +-3h), the same kernel for ``p`` and ``q``.
    * Bandwidth: :func:`kde_ece_bandwidth`, ``h = std(confidence | correct) * (2n)^(-1/5)``.
    * Boundary correction by reflection, as in the reference code: confidences below 0.5 are
      mirrored about 0 and those at or above 0.5 about 1 before smoothing; densities are then
      evaluated on [0, 1] only.
    * Discretisation: linear binning on a grid of step 2**-13 over [-0.5, 1.5], convolution by
      FFT, trapezoid rule on [0, 1].

    Returns a float in [0, 1]. Single-class input is defined: all wrong gives about the mean
    confidence (accuracy 0 everywhere), all correct about 1 - mean confidence.
    """
    conf, y = validate_inputs(confidence, correct)
    h = _kde_bandwidths(conf[None], y[None])
    kernel = _triweight_kernels(h, int(_kde_half_width(h)[0]))
    masses = _linear_binning(*_kde_points(conf, y), _KDE_GRID_SIZE)
    smooth = fftconvolve(masses, kernel, mode="same", axes=1)
    return float(_kde_ece_value(smooth[:, _KDE_FIRST : _KDE_FIRST + _KDE_INTERIOR], conf, y))


def _kde_segment(half: int) -> tuple[int, int, int]:
    """For a kernel of half-width ``half``: the grid segment [start, stop) of the masses that
    reach [0, 1], and the shortest circular convolution length whose wrap-around misses the
    outputs on [0, 1]."""
    last = _KDE_FIRST + _KDE_INTERIOR - 1
    start, stop = max(0, _KDE_FIRST - half), min(_KDE_GRID_SIZE, last + half + 1)
    return start, stop, max(stop - 1 + half - _KDE_FIRST, last + half - start) + 1


_KDE_CHUNK = 8  # rows transformed together (about 1.5 MB each)


def _kde_smooth_interior(
    pos: np.ndarray, weights: np.ndarray, h: np.ndarray, half: int
) -> np.ndarray:
    """The masses at ``pos`` with ``weights`` (see :func:`_kde_points`; [rows, 2n] and
    [rows, 2, 2n]) convolved with the triweight kernels of ``h`` [rows], zero-padded to
    ``half`` >= each one's half-width (the alignment of ``fftconvolve(..., mode="same")``), at
    the grid points of [0, 1] only -> [rows, 2, interior].

    Only the masses within ``half`` steps of [0, 1] are binned (straight into the FFT buffer,
    lower and upper grid point in one pass) and transformed.
    """
    start, stop, length = _kde_segment(half)
    size = sp_fft.next_fast_len(length, real=True)
    bins, frac = _grid_cells(pos, _KDE_GRID_SIZE)
    cells = np.concatenate([bins, bins + 1], axis=-1) - start
    cells = np.where(cells < stop - start, cells, -1)  # outside the segment: left out
    split = np.concatenate([1.0 - frac, frac], axis=-1)[:, None] * np.concatenate(
        [weights, weights], axis=-1
    )
    masses = _row_bincount(np.broadcast_to(cells[:, None], split.shape), split, size)
    kernels = sp_fft.rfft(_triweight_kernels(h, half), size, axis=-1)
    spectra = sp_fft.rfft(masses, axis=-1)
    spectra *= kernels[:, None]
    full = sp_fft.irfft(spectra, size, axis=-1)
    first = _KDE_FIRST - start + half
    return full[..., first : first + _KDE_INTERIOR]


_FEW_VALUES = 32  # resamples with at most this many distinct confidences are deduplicated


def _distinct_multisets(conf: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rows to evaluate, where each row's value comes from): one row per distinct multiset of
    (confidence, correct) pairs among the rows of ``conf``, ``y`` [rows, n], resamples of one
    dataset, if the first has few distinct confidences (only then do resamples repeat often);
    otherwise every row."""
    every = np.arange(conf.shape[0])
    if np.unique(conf[0]).shape[0] > _FEW_VALUES:
        return every, every
    values, where = np.unique(conf, return_inverse=True)
    pairs = 2 * where.reshape(conf.shape) + y  # (confidence, correct) pair of each record
    counts = _row_bincount(pairs, np.ones(conf.shape), 2 * values.shape[0])
    _, first, source = np.unique(counts, axis=0, return_index=True, return_inverse=True)
    return first, source.reshape(-1)


def _kde_ece_rows(conf: np.ndarray, y: np.ndarray) -> np.ndarray:
    """KDE-ECE (see :func:`kde_ece`) of every row of ``conf``, ``y`` [rows, n].

    Equal to :func:`kde_ece` up to floating-point rounding: it depends on the rows only as
    multisets of (confidence, correct) pairs, so each distinct multiset is evaluated once
    (bootstrap resamples of few distinct confidences repeat often), and rows whose kernels fit
    the same FFT length are smoothed together, their kernels zero-padded to the widest one.
    """
    first, source = _distinct_multisets(conf, y)
    conf, y = conf[first], y[first]
    h = _kde_bandwidths(conf, y)
    half = _kde_half_width(h)
    fft_size = {w: sp_fft.next_fast_len(_kde_segment(w)[2], real=True) for w in set(half.tolist())}
    size = np.array([fft_size[w] for w in half.tolist()])
    pos, weights = _kde_points(conf, y)
    out = np.empty(conf.shape[0])
    for length in np.unique(size):
        same = np.flatnonzero(size == length)
        for rows in np.array_split(same, -(-same.shape[0] // _KDE_CHUNK)):
            smooth = _kde_smooth_interior(pos[rows], weights[rows], h[rows], int(half[rows].max()))
            out[rows] = _kde_ece_value(smooth, conf[rows], y[rows])
    return out[source]


# --------------------------------------------------------------------------------------------
# euro / auc-euro (ACUTE)
# --------------------------------------------------------------------------------------------


def _check_grid(grid: ArrayLike, name: str = "grid") -> np.ndarray:
    try:
        u = np.asarray(grid, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError(f"{name}: expected numbers in (0, 1)") from None
    if u.ndim == 0:
        u = u.reshape(1)
    if u.ndim != 1 or u.size == 0:
        raise InputError(f"{name}: expected a non-empty 1-D array of risk levels in (0, 1)")
    if not np.all((u > 0.0) & (u < 1.0)):  # also rejects NaN
        raise InputError(f"{name}: risk levels must lie strictly between 0 and 1")
    return u


def _euro_counts(conf: np.ndarray, y: np.ndarray, u: np.ndarray) -> tuple[np.ndarray, ...]:
    """(fraction true positives, fraction true negatives) when trusting iff confidence > u."""
    n = conf.shape[0]
    conf_pos = np.sort(conf[y])
    conf_neg = np.sort(conf[~y])
    tp = (conf_pos.shape[0] - np.searchsorted(conf_pos, u, side="right")) / n
    tn = np.searchsorted(conf_neg, u, side="right") / n
    return tp, tn


def euro_curve(
    confidence: ArrayLike, correct: ArrayLike, grid: ArrayLike | None = None
) -> np.ndarray:
    """:func:`euro` at every risk level of ``grid`` (default :data:`EURO_GRID`, 0.001..0.999).

    Sorts once and counts with binary search: O(n log n + len(grid) log n). Returns a float
    array shaped like ``grid``. Risk levels must lie strictly inside (0, 1).
    """
    conf, y = validate_inputs(confidence, correct)
    u = EURO_GRID if grid is None else _check_grid(grid)
    tp, tn = _euro_counts(conf, y, u)
    return _euro_from_counts(tp, tn, float(np.mean(y)), u)


def _euro_from_counts(tp: np.ndarray, tn: np.ndarray, acc, u: np.ndarray) -> np.ndarray:
    """euro at risk levels ``u`` from the fractions of true positives and true negatives and the
    accuracy ``acc``: ((1-u) tp + u tn) / ((1-u) acc + u (1-acc))."""
    return ((1.0 - u) * tp + u * tn) / ((1.0 - u) * acc + u * (1.0 - acc))


def euro(confidence: ArrayLike, correct: ArrayLike, u_ca: float) -> float:
    """Oracle-normalised expected utility at risk level ``u_ca`` (ACUTE).

    An answer is trusted iff ``confidence > u_ca``. Trusting a correct answer earns
    ``1 - u_ca``, rejecting a wrong one earns ``u_ca``, anything else earns 0; the total is
    divided by what the oracle (trust exactly the correct answers) earns:

        euro = ((1 - u) N_tp + u N_tn) / ((1 - u) N_correct + u N_wrong)

    The oracle scores 1, the anti-oracle 0; the result lies in [0, 1]. ``u_ca`` must lie strictly
    in (0, 1) (``ValueError`` otherwise); then the denominator is positive for any non-empty
    input (both weights are positive and ``N_correct + N_wrong = n > 0``), so no special case
    exists. Single-class input: all correct gives the fraction trusted, all wrong the fraction
    rejected.
    """
    u = _check_grid(u_ca, "u_ca")
    if u.shape[0] != 1:
        raise InputError(f"u_ca: expected one risk level, got {u.shape[0]}; use euro_curve")
    return float(euro_curve(confidence, correct, u)[0])


def _euro_integral(conf: np.ndarray, y: np.ndarray, lo: float, hi: float) -> float:
    """Exact integral of the euro curve over [lo, hi] (piecewise rational in u)."""
    inner = np.unique(conf[(conf > lo) & (conf < hi)])
    edges = np.concatenate([[lo], inner, [hi]])
    a, b = edges[:-1], edges[1:]
    tp, tn = _euro_counts(conf, y, (a + b) / 2.0)
    n_pos = int(y.sum())
    n_neg = y.shape[0] - n_pos
    acc, err = n_pos / y.shape[0], n_neg / y.shape[0]
    width = b - a
    # euro(u) = (A + p u) / (C + q u) on each piece:
    # A = tp, p = tn - tp, C = acc, q = err - acc
    p = tn - tp
    if n_pos == n_neg:  # the denominator is the constant 1/2
        pieces = (tp * width + p * (b * b - a * a) / 2.0) / acc
        return float(pieces.sum())
    q = err - acc
    den_a = acc + q * a
    k = (tp * q - p * acc) / (q * q)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_ratio = np.log1p(q * width / den_a)
        log_term = np.where(k == 0.0, 0.0, k * log_ratio)
    return float(np.sum(p / q * width + log_term))


def _auc_euro_rows(conf: np.ndarray, y: np.ndarray, band: str) -> np.ndarray:
    """Grid :func:`auc_euro` of ``band`` for every row of ``conf`` / ``y`` [rows, n]: the same
    counts as :func:`euro_curve`, from one histogram of each row over the band's risk levels."""
    u = EURO_GRID[BANDS[band][0]]
    n, size = conf.shape[-1], u.shape[0] + 1
    above = np.searchsorted(u, conf, side="left")  # levels below each confidence: trusted there
    pos = _row_bincount(above, y.astype(np.float64), size)
    neg = _row_bincount(above, (~y).astype(np.float64), size)
    tp = np.cumsum(pos[..., ::-1], axis=-1)[..., ::-1][..., 1:] / n  # confidence > u
    tn = np.cumsum(neg, axis=-1)[..., :-1] / n  # confidence <= u
    return _euro_from_counts(tp, tn, y.mean(axis=-1, keepdims=True), u).mean(axis=-1)


def auc_euro(
    confidence: ArrayLike, correct: ArrayLike, band: str = "all", exact: bool = False
) -> float:
    """Mean euro over a band of risk levels (ACUTE's auc-euro).

    ``band``: ``"low"`` (u < 1/3), ``"med"`` (1/3 <= u < 2/3), ``"high"`` (u >= 2/3) or
    ``"all"``. With ``exact=False`` it is the mean of :func:`euro_curve` over the grid points
    of the band (:data:`EURO_GRID`: 0.001..0.333, 0.334..0.666, 0.667..0.999, or all 999). With
    ``exact=True`` the piecewise rational euro curve is integrated in closed form over
    [0, 1/3), [1/3, 2/3), [2/3, 1] or [0, 1] and divided by the interval's length, in
    O(n log n). The two agree to within 2e-3 once the curve has more than a few jumps (in our
    tests: n >= 10); with a handful of records one jump can move a one-third band's grid
    mean by up to 1/333 (3e-3).

    The oracle scores 1, the anti-oracle 0, a constant 0.5 on a 50%-accurate task 0.75 (exact)
    or 0.7497 (grid). Returns a float in [0, 1].
    """
    if band not in BANDS:
        raise InputError(f"band: expected one of {sorted(BANDS)}, got {band!r}")
    sl, (lo, hi) = BANDS[band]
    if exact:
        conf, y = validate_inputs(confidence, correct)
        return _euro_integral(conf, y, lo, hi) / (hi - lo)
    return float(np.mean(euro_curve(confidence, correct, EURO_GRID[sl])))


# --------------------------------------------------------------------------------------------
# A metric over many resamples
# --------------------------------------------------------------------------------------------

#: Metrics with a batched implementation ``f(conf, y)`` over the rows of [rows, n] arrays.
_BATCHED: dict[Callable, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    ece: _ece_rows,
    kde_ece: _kde_ece_rows,
    ks_cal: _ks_cal_rows,
    smece: _smece_rows,
    brier: _brier_rows,
    nll: _nll_rows,
    auroc: _auroc_rows,
}


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
    :func:`auroc` and the auc-euro columns of :data:`METRICS` (grid :func:`auc_euro` of a
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


def bootstrap_indices(size: int, n: int = 1000, seed: int = 0) -> np.ndarray:
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
    n: int = 1000,
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
    n: int = 1000,
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


# --------------------------------------------------------------------------------------------
# Metric specs: what every results table reports
# --------------------------------------------------------------------------------------------


class MetricSpec(NamedTuple):
    """One column of acute's results tables: ``name`` (the key in metric rows), ``header``
    (table heading, with its arrow), ``direction`` (+1 higher is better, -1 lower is better,
    0 neither), ``fn`` (``fn(confidence, correct) -> float``; None for ``accuracy``, which is
    the mean of ``correct``) and ``digits`` for :meth:`format`."""

    name: str
    header: str
    direction: int
    fn: Callable[[np.ndarray, np.ndarray], float] | None
    digits: int = 3

    def format(self, value: float | None) -> str:
        """``value`` with ``digits`` decimals, or ``n/a`` when missing or not finite."""
        if value is None or not np.isfinite(value):
            return "n/a"
        return f"{value:.{self.digits}f}"


def _band(band: str) -> Callable[[np.ndarray, np.ndarray], float]:
    def f(confidence, correct):
        return auc_euro(confidence, correct, band=band)

    f.__name__ = f"auc_euro_{band}"
    return f


#: The columns of every results table (evaluation, reproduction report, ``acute train``), in order.
METRIC_SPECS: tuple[MetricSpec, ...] = (
    MetricSpec("accuracy", "Accuracy", 0, None),
    MetricSpec("smece", "smECE ↓", -1, smece),
    MetricSpec("auc_euro_low", "auc-euro low ↑", +1, _band("low")),
    MetricSpec("auc_euro_med", "auc-euro med ↑", +1, _band("med")),
    MetricSpec("auc_euro_high", "auc-euro high ↑", +1, _band("high")),
    MetricSpec("auc_euro_all", "auc-euro all ↑", +1, _band("all")),
    MetricSpec("brier", "Brier ↓", -1, brier),
    MetricSpec("auroc", "AUROC ↑", +1, auroc),
)
METRICS: dict[str, MetricSpec] = {m.name: m for m in METRIC_SPECS}
for _name in BANDS:  # the table's auc-euro columns are batched too
    _BATCHED[METRICS[f"auc_euro_{_name}"].fn] = functools.partial(_auc_euro_rows, band=_name)
