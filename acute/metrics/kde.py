"""KDE-based expected calibration error (Zhang, Kailkhura & Han 2020, Mix-n-Match), binary case."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike
from scipy import fft as sp_fft
from scipy.signal import fftconvolve

from .common import eval_points, grid_cells, linear_binning, row_bincount, validate_inputs

__all__ = ["kde_ece", "kde_ece_bandwidth", "kde_ece_rows"]

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
    gap = eval_points(p_in.shape[-1]) * p_in
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
    masses = linear_binning(*_kde_points(conf, y), _KDE_GRID_SIZE)
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
    bins, frac = grid_cells(pos, _KDE_GRID_SIZE)
    cells = np.concatenate([bins, bins + 1], axis=-1) - start
    cells = np.where(cells < stop - start, cells, -1)  # outside the segment: left out
    split = np.concatenate([1.0 - frac, frac], axis=-1)[:, None] * np.concatenate(
        [weights, weights], axis=-1
    )
    masses = row_bincount(np.broadcast_to(cells[:, None], split.shape), split, size)
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
    counts = row_bincount(pairs, np.ones(conf.shape), 2 * values.shape[0])
    _, first, source = np.unique(counts, axis=0, return_index=True, return_inverse=True)
    return first, source.reshape(-1)


def kde_ece_rows(conf: np.ndarray, y: np.ndarray) -> np.ndarray:
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

