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
``bootstrap``, ``paired_bootstrap``  percentile intervals for any of the above.
"""

from __future__ import annotations

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


def ece(confidence: ArrayLike, correct: ArrayLike, n_bins: int = 10) -> float:
    """Binned expected calibration error with ``n_bins`` equal-width bins.

    Bins are ``[0, 1/n_bins), [1/n_bins, 2/n_bins), ..., [(n_bins-1)/n_bins, 1]``: a record goes
    to bin ``floor(confidence * n_bins)`` (computed in float64), and 1.0 falls in the last bin.

    Returns ``sum_b (|b| / n) * |accuracy_b - mean confidence_b|`` over the non-empty bins, a
    float in [0, 1]. Single-class input is fine (accuracy is then 0 or 1 in every bin).
    """
    conf, y = validate_inputs(confidence, correct)
    if isinstance(n_bins, bool) or not isinstance(n_bins, (int, np.integer)) or n_bins < 1:
        raise InputError(f"n_bins: expected a positive integer, got {n_bins!r}")
    idx = np.minimum((conf * n_bins).astype(np.int64), n_bins - 1)
    gap = np.bincount(idx, weights=conf - y, minlength=n_bins)
    return float(np.abs(gap).sum() / conf.shape[0])


def ks_cal(confidence: ArrayLike, correct: ArrayLike) -> float:
    """Kolmogorov-Smirnov calibration error of Gupta et al. (2021, "Calibration of neural
    networks using splines").

    Records are sorted by confidence with a *stable* sort (ties keep their input order), and the
    result is ``max_k |sum_{i<=k} (confidence_i - correct_i)| / n`` over that order, a float in
    [0, 1]. A perfectly calibrated-in-order sequence scores 0; single-class input is fine.
    """
    conf, y = validate_inputs(confidence, correct)
    order = np.argsort(conf, kind="stable")
    walk = np.cumsum(conf[order] - y[order])
    return float(np.max(np.abs(walk)) / conf.shape[0])


def brier(confidence: ArrayLike, correct: ArrayLike) -> float:
    """Brier score ``mean((confidence - correct)^2)``, a float in [0, 1] (lower is better)."""
    conf, y = validate_inputs(confidence, correct)
    return float(np.mean((conf - y) ** 2))


def nll(confidence: ArrayLike, correct: ArrayLike, eps: float = NLL_EPS) -> float:
    """Mean negative log-likelihood (log loss, natural log) of ``correct`` under ``confidence``.

    Confidences are clipped to ``[eps, 1 - eps]`` first (default ``NLL_EPS = 1e-12``), so a
    confident mistake costs at most ``-log(eps)`` (about 27.6 nats) instead of infinity.
    """
    conf, y = validate_inputs(confidence, correct)
    if not (isinstance(eps, (int, float)) and 0.0 < eps < 0.5):
        raise InputError(f"eps: expected a float in (0, 0.5), got {eps!r}")
    p = np.clip(conf, eps, 1.0 - eps)
    return float(-np.mean(np.where(y, np.log(p), np.log1p(-p))))


def auroc(confidence: ArrayLike, correct: ArrayLike) -> float:
    """Area under the ROC curve for ranking correct answers above wrong ones.

    Equals the probability that a random correct record has higher confidence than a random
    wrong one, ties counted half (Mann-Whitney U / (n_correct * n_wrong)).

    Single-class input (all correct or all wrong) has no defined AUROC: returns ``nan`` and
    emits a ``RuntimeWarning``.
    """
    conf, y = validate_inputs(confidence, correct)
    n_pos = int(y.sum())
    n_neg = y.shape[0] - n_pos
    if n_pos == 0 or n_neg == 0:
        warnings.warn(
            "auroc: undefined when every record is "
            + ("wrong" if n_pos == 0 else "correct")
            + "; returning nan",
            RuntimeWarning,
            stacklevel=2,
        )
        return float("nan")
    # Midranks: for each record, (# strictly smaller) + (# equal + 1) / 2.
    sorted_conf = np.sort(conf)
    less = np.searchsorted(sorted_conf, conf[y], side="left")
    less_eq = np.searchsorted(sorted_conf, conf[y], side="right")
    rank_sum = float(np.sum(less + (less_eq - less + 1) / 2.0))
    u_stat = rank_sum - n_pos * (n_pos + 1) / 2.0
    return float(u_stat / (n_pos * n_neg))


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
# Fourier-transformed once per grid size (residual and density together), and memoised
# bisection steps.

_SMECE_DENS_EPS = 1e-4
_SMECE_MIN_SIGMA = 0.001
_SMECE_REFINE = 10
_SMECE_MIN_EVAL = 200


def _smece_grid_size(sigma: float) -> int:
    return max(2000, round(20 / sigma)) // 2 + 1


def _round_to_grid(conf: np.ndarray, weights: np.ndarray, m: int) -> np.ndarray:
    """Spread ``weights`` (shape [k, n]) at ``conf`` onto an m-point grid of [0, 1] -> [k, m]."""
    pos = conf * (m - 1)
    bins = pos.astype(np.int64).clip(0, m - 2)
    frac = pos - bins
    out = np.empty((weights.shape[0], m))
    for row, w in enumerate(weights):
        out[row] = np.bincount(bins, weights=(1.0 - frac) * w, minlength=m)
        out[row] += np.bincount(bins + 1, weights=frac * w, minlength=m)
    return out


class _ReflectedGrid:
    """Grid masses [k, m], extended by reflection and Fourier-transformed once per grid size.

    Smoothing with a Gaussian of any width then costs one kernel FFT and one inverse FFT:
    the result equals relplot's ``np.convolve(ext, kernel, "valid")[m//2 : m//2 + m]``.
    """

    def __init__(self, values: np.ndarray) -> None:
        m = values.shape[1]
        flipped = values[:, ::-1]
        ext = np.concatenate([flipped[:, :-1], values, flipped[:, 1:]], axis=1)  # [k, 3m-2]
        # Circular convolution of length >= 3m-2 only aliases outputs 0..m-2, which are unused.
        self.m = m
        self.size = sp_fft.next_fast_len(3 * m - 2, real=True)
        self.ext_fft = sp_fft.rfft(ext, self.size, axis=1)

    def smooth(self, sigma: float) -> np.ndarray:
        """Each row convolved with the Gaussian pdf sampled at linspace(0, 1, m) - 0.5."""
        m = self.m
        t = np.linspace(0, 1, m)
        ker = np.exp(-(t - 0.5) * (t - 0.5) / (2 * sigma**2)) / (np.sqrt(2 * np.pi) * sigma)
        full = sp_fft.irfft(self.ext_fft * sp_fft.rfft(ker, self.size), self.size, axis=1)
        start = (m - 1) + m // 2  # "valid" starts at m-1 in the full convolution
        return full[:, start : start + m]


def _interp_grid(t: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Linear interpolation of the grid function i/(m-1) -> y[..., i] at ``t`` (relplot's rule)."""
    m = y.shape[-1]
    inds = (t * (m - 1)).astype(np.int64).clip(0, m - 2)
    resid = (t - inds / (m - 1)) * (m - 1)
    return y[..., inds] * (1 - resid) + y[..., inds + 1] * resid


class _SmoothECE:
    """Memoised smECE_sigma for one dataset (grid masses cached per grid size)."""

    def __init__(self, conf: np.ndarray, y: np.ndarray) -> None:
        self.conf = conf
        self.weights = np.stack([conf - y, np.ones_like(conf)])
        self._grid: dict[int, _ReflectedGrid] = {}
        self._value: dict[float, float] = {}

    def smoothed(self, sigma: float, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(smoothed residual sum, smoothed count) at points ``t`` (un-normalised)."""
        m = _smece_grid_size(sigma)
        if m not in self._grid:
            self._grid[m] = _ReflectedGrid(_round_to_grid(self.conf, self.weights, m))
        smooth = self._grid[m].smooth(sigma)
        out = _interp_grid(t, smooth)
        return out[0], out[1]

    def __call__(self, sigma: float) -> float:
        if sigma not in self._value:
            n_eval = max(round(10 / sigma), _SMECE_MIN_EVAL)
            t = np.linspace(0, 1, n_eval)
            resid, count = self.smoothed(sigma, t)
            dens = count + _SMECE_DENS_EPS
            rs = resid / dens
            self._value[sigma] = float(np.sum(np.abs(rs) * dens) / np.sum(dens))
        return self._value[sigma]

    def bandwidth(self) -> float:
        def too_small(sigma: float) -> bool:
            return sigma < _SMECE_MIN_SIGMA or sigma < self(sigma)

        if too_small(1.0):  # cannot happen (smECE_1 <= 1); kept to mirror relplot exactly
            return 1.0
        hi, lo = 1.0, 0.0
        for _ in range(_SMECE_REFINE):
            mid = (hi + lo) / 2
            if too_small(mid):
                lo = mid
            else:
                hi = mid
        return hi


def smece_bandwidth(confidence: ArrayLike, correct: ArrayLike) -> float:
    """The smooth-ECE bandwidth sigma*, the fixed point of ``smECE_sigma = sigma``.

    Found (as in relplot) by a 10-step bisection on [0, 1] that keeps the upper end at a point
    with ``smECE_sigma <= sigma`` (sigma < 0.001 always counts as too small) and returns that
    upper end, so sigma* is a multiple of 2**-10 in [2**-9, 1]. Used as the kernel width of
    :func:`smooth_reliability` and of the NWKR baseline.
    """
    conf, y = validate_inputs(confidence, correct)
    return _SmoothECE(conf, y).bandwidth()


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
    sm = _SmoothECE(conf, y)
    return sm(sm.bandwidth())


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
    sm = _SmoothECE(conf, y)
    if sigma is None:
        sigma = sm.bandwidth()
    elif isinstance(sigma, bool) or not (
        isinstance(sigma, (int, float, np.floating)) and 0.0 < float(sigma) <= 1.0
    ):
        raise InputError(f"sigma: expected a float in (0, 1], got {sigma!r}")
    sigma = float(sigma)
    if isinstance(grid, (int, np.integer)) and not isinstance(grid, bool):
        if grid < 2:
            raise InputError(f"grid: expected at least 2 points, got {grid}")
        t = np.linspace(0.0, 1.0, int(grid))
    else:
        t = _as_confidence(grid, "grid")
    resid, count = sm.smoothed(sigma, t)
    curve = t - resid / (count + _SMECE_DENS_EPS)
    density = count / conf.shape[0]
    return SmoothReliability(
        grid=t, curve=curve, density=density, sigma=sigma, smece=sm(sigma)
    )


# --------------------------------------------------------------------------------------------
# KDE-ECE (Zhang, Kailkhura & Han 2020)
# --------------------------------------------------------------------------------------------

def _trapezoid(values: np.ndarray, step: float) -> float:
    """Trapezoid rule for samples on a uniform grid (np.trapezoid needs numpy >= 2)."""
    return float(step * (values.sum() - 0.5 * (values[0] + values[-1])))


_KDE_GRID_STEP = 2.0**-13  # 8193 points on [0, 1]; the paper's code uses 2**14 on [-0.6, 1.6]


def kde_ece_bandwidth(confidence: ArrayLike, correct: ArrayLike) -> float:
    """Bandwidth (kernel standard deviation) used by :func:`kde_ece`.

    The rule of the Mix-n-Match reference code: ``h = std(confidence of correct records) *
    (2 n)^(-1/5)`` with n the number of records. With no correct record it uses the standard
    deviation of all confidences instead. It can be 0 (e.g. one correct record, or all correct
    confidences equal); :func:`kde_ece` then degenerates to linear binning (a point kernel).
    """
    conf, y = validate_inputs(confidence, correct)
    return _kde_bandwidth(conf, y)


def _kde_bandwidth(conf: np.ndarray, y: np.ndarray) -> float:
    source = conf[y] if y.any() else conf
    return float(np.std(source) * (2.0 * conf.shape[0]) ** -0.2)


def _triweight_kernel(h: float, dx: float) -> np.ndarray:
    """Triweight kernel with standard deviation ``h`` (support +-3h) sampled every ``dx``,
    normalised to integrate to 1 on the grid; a point mass when h is below half a step."""
    half = int(np.floor(3.0 * h / dx))
    if half < 1:
        return np.array([1.0 / dx])
    x = np.arange(-half, half + 1) * dx / (3.0 * h)
    k = np.clip(1.0 - x * x, 0.0, None) ** 3
    return k / (k.sum() * dx)


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
    h = _kde_bandwidth(conf, y)
    dx = _KDE_GRID_STEP
    lo_side = conf < 0.5
    data = np.concatenate([conf, -conf[lo_side], 2.0 - conf[~lo_side]])
    is_pos = np.concatenate([y, y[lo_side], y[~lo_side]]).astype(np.float64)
    n_steps = int(round(2.0 / dx))  # grid over [-0.5, 1.5]
    pos = (data + 0.5) / dx
    bins = pos.astype(np.int64).clip(0, n_steps - 1)
    frac = pos - bins
    size = n_steps + 1
    p = np.bincount(bins, 1.0 - frac, size) + np.bincount(bins + 1, frac, size)
    q = np.bincount(bins, (1.0 - frac) * is_pos, size) + np.bincount(
        bins + 1, frac * is_pos, size
    )
    kernel = _triweight_kernel(h, dx)
    smooth = fftconvolve(np.stack([p, q]), kernel[None, :], mode="same", axes=1)
    first = int(round(0.5 / dx))
    last = first + int(round(1.0 / dx))
    p_in = np.clip(smooth[0, first : last + 1], 0.0, None)
    q_in = np.clip(smooth[1, first : last + 1], 0.0, None)
    t = np.linspace(0.0, 1.0, last - first + 1)
    total = _trapezoid(p_in, dx)
    if not total > 0:  # cannot happen for valid input; guards against underflow
        return float(abs(np.mean(conf) - np.mean(y)))
    return _trapezoid(np.abs(t * p_in - np.minimum(q_in, p_in)), dx) / total


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
    acc = float(np.mean(y))
    num = (1.0 - u) * tp + u * tn
    den = (1.0 - u) * acc + u * (1.0 - acc)
    return num / den


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
    statistic: Callable[[np.ndarray], float], size: int, n: int, seed: int
) -> np.ndarray:
    """``statistic(indices)`` for each of the ``n`` resamples of :func:`bootstrap_indices`."""
    out = np.empty(n)
    done = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for block in _index_blocks(size, n, seed):
            for row in block:
                out[done] = statistic(row)
                done += 1
    return out


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
    stats = _resample_stats(lambda idx: metric(conf[idx], y[idx]), conf.shape[0], n, seed)
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

    def diff(idx: np.ndarray) -> float:
        yi = y[idx]
        return metric(conf_a[idx], yi) - metric(conf_b[idx], yi)

    stats = _resample_stats(diff, conf_a.shape[0], n, seed)
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
