"""What every metric shares: checked ``(confidence, correct)`` inputs and the row-wise
binning helpers behind the batched implementations (one dataset or many resamples at once)."""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numpy.typing import ArrayLike

from ..errors import InputError
from ..validation import check_confidence, check_correct

__all__ = ["as_confidence", "eval_points", "grid_cells", "linear_binning", "row_bincount",
           "validate_inputs"]


def as_confidence(confidence: ArrayLike, name: str = "confidence") -> np.ndarray:
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
    conf = as_confidence(confidence, name)
    y = _as_correct(correct)
    if conf.shape[0] != y.shape[0]:
        raise InputError(
            f"{name} and correct must have the same length, got {conf.shape[0]} and {y.shape[0]}"
        )
    return conf, y



def row_bincount(bins: np.ndarray, weights: np.ndarray, size: int) -> np.ndarray:
    """``np.bincount(bins[r], weights[r], size)`` for every row r of ``bins`` / ``weights``
    (shape [..., n]), in one call -> [..., size]; bins outside [0, size) are left out."""
    lead = bins.shape[:-1]
    rows = int(np.prod(lead))
    flat = bins + (np.arange(rows) * size).reshape(lead + (1,))
    flat = np.where((bins >= 0) & (bins < size), flat, rows * size)  # the last slot: left out
    counts = np.bincount(flat.ravel(), weights=weights.ravel(), minlength=rows * size + 1)
    return counts[:-1].reshape(lead + (size,))



def grid_cells(pos: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Linear binning of grid positions ``pos`` (in grid steps, in [0, size - 1]) on a grid of
    ``size`` points: (lower grid point, fraction of the mass that goes to the next one)."""
    bins = pos.astype(np.int64).clip(0, size - 2)
    return bins, pos - bins


def linear_binning(pos: np.ndarray, weights: np.ndarray, size: int) -> np.ndarray:
    """Spread ``weights`` [..., k, n] at grid positions ``pos`` [..., n] onto a grid of
    ``size`` points by linear interpolation (see :func:`grid_cells`) -> [..., k, size]."""
    bins, frac = grid_cells(pos, size)
    frac = frac[..., None, :]
    bins = np.broadcast_to(bins[..., None, :], weights.shape)
    lower = row_bincount(bins, (1.0 - frac) * weights, size)
    return lower + row_bincount(bins + 1, frac * weights, size)



@lru_cache(maxsize=64)
def eval_points(n_eval: int) -> np.ndarray:
    """linspace(0, 1, n_eval), read-only (cached)."""
    t = np.linspace(0, 1, n_eval)
    t.flags.writeable = False
    return t
