"""ACUTE's selective-trust utility: euro at a risk level, its curve, and auc-euro over a band."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from ..errors import InputError
from .common import row_bincount, validate_inputs

__all__ = ["AUC_EURO_BANDS", "BANDS", "EURO_GRID", "auc_euro", "auc_euro_rows", "euro", "euro_curve"]

#: The risk levels u = 0.001, 0.002, ..., 0.999 over which ``auc_euro`` averages euro.
EURO_GRID = np.arange(1, 1000) / 1000.0

#: Risk bands: (grid slice of ``EURO_GRID``, closed-form interval [lo, hi]).
BANDS: dict[str, tuple[slice, tuple[float, float]]] = {
    "low": (slice(0, 333), (0.0, 1.0 / 3.0)),
    "med": (slice(333, 666), (1.0 / 3.0, 2.0 / 3.0)),
    "high": (slice(666, 999), (2.0 / 3.0, 1.0)),
    "all": (slice(0, 999), (0.0, 1.0)),
}


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


def auc_euro_rows(conf: np.ndarray, y: np.ndarray, band: str) -> np.ndarray:
    """Grid :func:`auc_euro` of ``band`` for every row of ``conf`` / ``y`` [rows, n]: the same
    counts as :func:`euro_curve`, from one histogram of each row over the band's risk levels."""
    u = EURO_GRID[BANDS[band][0]]
    n, size = conf.shape[-1], u.shape[0] + 1
    above = np.searchsorted(u, conf, side="left")  # levels below each confidence: trusted there
    pos = row_bincount(above, y.astype(np.float64), size)
    neg = row_bincount(above, (~y).astype(np.float64), size)
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



def _band(band: str):
    def f(confidence, correct):
        return auc_euro(confidence, correct, band=band)

    f.__name__ = f"auc_euro_{band}"
    return f


#: ``auc_euro(confidence, correct, band=band)`` of each band as a function of two arrays (the
#: auc-euro columns of the results tables; batched over resamples by ``auc_euro_rows``).
AUC_EURO_BANDS = {band: _band(band) for band in BANDS}
