"""Post-hoc calibration baselines over raw confidence.

Every baseline is a scikit-learn style estimator with the same interface as the ACUTE probes,
but its only input is the raw confidence (product of generated-token probabilities):

    est = make_baseline("isotonic").fit(confidence, correct)
    p = est.predict_proba(new_confidence)[:, 1]      # calibrated P(correct)

``predict_proba`` returns an ``[n, 2]`` array with columns ``[P(wrong), P(correct)]``.

Baselines (``BASELINES``):

* ``raw``      identity; ``fit`` only validates its input.
* ``hre``      histogram regression with equal-mass bins (default 15 bins, or ``"sqrt"``).
* ``nwkr``     Nadaraya-Watson kernel regression with a Gaussian kernel reflected about 0 and 1,
               at the smECE bandwidth sigma* of the training data.
* ``platt``    Platt scaling: logistic regression on logit(clip(confidence)).
* ``isotonic`` isotonic regression (sklearn), clipped to [0, 1] outside the training range.
* ``beta``     three-parameter beta calibration (Kull, Silva Filho & Flach, 2017).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import expit, logit
from sklearn.base import BaseEstimator, ClassifierMixin

from ..errors import InputError
from ..validation import check_confidence, check_correct
from .calibration import PLATT_EPS, apply_isotonic, apply_platt, fit_isotonic, fit_logistic, fit_platt

__all__ = [
    "BASELINES",
    "BetaCalibration",
    "HistogramRegression",
    "IsotonicCalibration",
    "KernelRegression",
    "PlattScaling",
    "RawConfidence",
    "make_baseline",
]

BASELINES: tuple[str, ...] = ("raw", "hre", "nwkr", "platt", "isotonic", "beta")

# Confidences are clipped to [_EPS, 1 - _EPS] before logit / log transforms.
_EPS = PLATT_EPS


# ----------------------------------------------------------------------------- validation
# check_confidence / check_correct: the rules of acute.validation


def _check_fit_input(confidence, correct, *, both_classes: bool) -> tuple[np.ndarray, np.ndarray]:
    conf = check_confidence(confidence, allow_empty=True)
    if conf.size == 0:
        raise InputError("cannot fit a calibrator on 0 records")
    y = check_correct(correct, conf.size)
    if both_classes and (y.min() == y.max()):
        raise InputError(
            f"correct contains a single class ({int(y[0])} for all {y.size} records); "
            "this calibrator needs both correct and incorrect examples")
    return conf, y


class _Baseline(ClassifierMixin, BaseEstimator):
    """Shared plumbing: input checks, ``predict_proba`` -> [n, 2], ``predict`` thresholded at 0.5."""

    def fit(self, confidence, correct):
        conf, y = _check_fit_input(confidence, correct, both_classes=self._needs_both_classes)
        self.classes_ = np.array([0, 1])
        self.n_train_ = conf.size
        self._fit(conf, y)
        return self

    _needs_both_classes = False

    def _fit(self, conf: np.ndarray, y: np.ndarray) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _predict(self, conf: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def predict_proba(self, confidence) -> np.ndarray:
        """Return ``[n, 2]``: column 1 is calibrated P(correct), column 0 its complement."""
        if not hasattr(self, "classes_"):
            raise InputError(f"{type(self).__name__} is not fitted; call fit(confidence, correct) first")
        conf = check_confidence(confidence, allow_empty=True)
        p = np.clip(self._predict(conf), 0.0, 1.0) if conf.size else np.zeros(0)
        return np.column_stack([1.0 - p, p])

    def predict(self, confidence) -> np.ndarray:
        """Return 1 where calibrated P(correct) >= 0.5, else 0."""
        return (self.predict_proba(confidence)[:, 1] >= 0.5).astype(int)


# ----------------------------------------------------------------------------- raw
class RawConfidence(_Baseline):
    """Identity: calibrated confidence = raw confidence. ``fit`` only validates its input."""

    def _fit(self, conf, y):
        pass

    def _predict(self, conf):
        return conf.copy()


# ----------------------------------------------------------------------------- hre
def equal_mass_edges(conf: np.ndarray, n_bins: int) -> np.ndarray:
    """Inner bin thresholds that split ``conf`` into at most ``n_bins`` bins of (near) equal count.

    Boundaries are placed at ranks ``round(k * n / n_bins)``; a boundary that would split a run of
    tied values is moved to the nearer end of that run (so tied values always share a bin), and
    duplicate or degenerate boundaries are dropped, so fewer bins than asked can result, but no bin
    is ever empty. Each threshold is the midpoint between the last value of one bin and the first
    value of the next. Returns a sorted float array of length (number of bins - 1).
    """
    s = np.sort(conf)
    n = s.size
    cuts = set()
    for k in range(1, n_bins):
        i = int(round(k * n / n_bins))
        if i <= 0 or i >= n:
            continue
        if s[i - 1] < s[i]:
            cuts.add(i)
            continue
        lo = int(np.searchsorted(s, s[i], side="left"))   # first index of the tie run
        hi = int(np.searchsorted(s, s[i], side="right"))  # one past its last index
        j = lo if (i - lo) <= (hi - i) else hi
        if 0 < j < n:
            cuts.add(j)
    idx = np.array(sorted(cuts), dtype=int)
    return (s[idx - 1] + s[idx]) / 2.0


class HistogramRegression(_Baseline):
    """Histogram regression estimator (HRE) with equal-mass bins.

    Parameters
    ----------
    n_bins : int or "sqrt", default 15
        Number of bins; ``"sqrt"`` uses ``round(sqrt(n_train))``. Capped at the number of training
        records; ties can merge bins (see :func:`equal_mass_edges`), so no bin is empty.

    A bin holds the values ``edges_[k-1] <= x < edges_[k]``; the prediction for any confidence is
    the training accuracy of its bin (values below/above the training range fall in the first/last
    bin). Fitted: ``edges_`` (inner thresholds), ``bin_accuracy_``, ``bin_count_``.
    """

    def __init__(self, n_bins: int | str = 15):
        self.n_bins = n_bins

    def _resolve_bins(self, n: int) -> int:
        if isinstance(self.n_bins, str):
            if self.n_bins != "sqrt":
                raise InputError(f"n_bins must be a positive int or 'sqrt', got {self.n_bins!r}")
            return max(1, int(round(math.sqrt(n))))
        if isinstance(self.n_bins, bool) or not isinstance(self.n_bins, (int, np.integer)) or self.n_bins < 1:
            raise InputError(f"n_bins must be a positive int or 'sqrt', got {self.n_bins!r}")
        return int(min(self.n_bins, n))

    def _fit(self, conf, y):
        self.edges_ = equal_mass_edges(conf, self._resolve_bins(conf.size))
        b = np.searchsorted(self.edges_, conf, side="right")
        nb = self.edges_.size + 1
        self.bin_count_ = np.bincount(b, minlength=nb)
        self.bin_accuracy_ = np.bincount(b, weights=y, minlength=nb) / self.bin_count_

    def _predict(self, conf):
        return self.bin_accuracy_[np.searchsorted(self.edges_, conf, side="right")]


# ----------------------------------------------------------------------------- nwkr
def reflected_kernel_regression(x: np.ndarray, conf: np.ndarray, y: np.ndarray, sigma: float,
                                chunk: int = 2048) -> np.ndarray:
    """Nadaraya-Watson estimate of E[y | conf = x] with a Gaussian kernel of width ``sigma``
    reflected about 0 and 1: each training point c contributes at c, -c and 2 - c.

    Weights are combined in log space, so a tiny ``sigma`` never divides 0 by 0 (far from all data
    the estimate follows the nearest training points). Returns a float array shaped like ``x``.
    """
    centres = np.concatenate([conf, -conf, 2.0 - conf]) / sigma
    targets = np.column_stack([np.concatenate([y, y, y]), np.ones(3 * conf.size)])
    out = np.empty(x.size)
    for start in range(0, x.size, chunk):
        z = x[start:start + chunk, None] / sigma - centres[None, :]
        z *= z
        z -= z.min(axis=1, keepdims=True)  # log-weights relative to the nearest centre
        z *= -0.5
        np.exp(z, out=z)
        num, den = (z @ targets).T
        out[start:start + chunk] = num / den
    return out


class KernelRegression(_Baseline):
    """Nadaraya-Watson kernel regression (NWKR) of correctness on confidence.

    Gaussian kernel reflected about 0 and 1 (the boundaries of the confidence range), bandwidth
    ``bandwidth`` or, when None (default), the smECE bandwidth sigma* of the training data
    (``acute.metrics.smece_bandwidth``). Fitted: ``bandwidth_``, ``conf_``, ``correct_``.
    """

    def __init__(self, bandwidth: float | None = None):
        self.bandwidth = bandwidth

    def _fit(self, conf, y):
        if self.bandwidth is None:
            from acute.metrics import smece_bandwidth

            sigma = float(smece_bandwidth(conf, y))
        else:
            sigma = float(self.bandwidth)
        if not (np.isfinite(sigma) and sigma > 0):
            raise InputError(f"bandwidth must be a positive finite number, got {sigma!r}")
        self.bandwidth_ = sigma
        self.conf_ = conf.copy()
        self.correct_ = y.copy()

    def _predict(self, conf):
        return reflected_kernel_regression(conf, self.conf_, self.correct_, self.bandwidth_)


# ----------------------------------------------------------------------------- platt
class PlattScaling(_Baseline):
    """Platt scaling: P(correct) = sigmoid(a * logit(p) + b), p = clip(confidence, eps, 1 - eps).

    :func:`acute.estimators.calibration.fit_platt` on logits with the 0/1 labels (no Platt
    target smoothing): maximum likelihood, unpenalised. ``eps`` defaults to 1e-6. Needs both
    classes. Fitted: ``coef_`` (a), ``intercept_`` (b).
    """

    _needs_both_classes = True

    def __init__(self, eps: float = _EPS):
        self.eps = eps

    def _fit(self, conf, y):
        self.coef_, self.intercept_ = fit_platt(conf, y, on="logit", eps=self.eps)

    def _predict(self, conf):
        return apply_platt(conf, self.coef_, self.intercept_, on="logit", eps=self.eps)


# ----------------------------------------------------------------------------- isotonic
class IsotonicCalibration(_Baseline):
    """Isotonic regression of correctness on confidence (non-decreasing, in [0, 1]; predictions
    outside the training range are clipped to its end values), by
    :func:`acute.estimators.calibration.fit_isotonic`. Fitted: ``thresholds_`` (x, y)."""

    def _fit(self, conf, y):
        self.thresholds_ = fit_isotonic(conf, y)

    def _predict(self, conf):
        return apply_isotonic(conf, *self.thresholds_)


# ----------------------------------------------------------------------------- beta
def beta_map(p: np.ndarray, a: float, b: float, c: float, eps: float = _EPS) -> np.ndarray:
    """The beta calibration map 1 / (1 + 1 / (e^c p^a / (1 - p)^b)) with p clipped to [eps, 1-eps]."""
    p = np.clip(p, eps, 1.0 - eps)
    return expit(c + a * np.log(p) - b * np.log1p(-p))


class BetaCalibration(_Baseline):
    """Three-parameter beta calibration (Kull, Silva Filho & Flach, AISTATS 2017).

    Logistic regression of correctness on ``[ln p, -ln(1 - p)]`` (p clipped to [eps, 1 - eps]),
    giving logit P(correct) = a ln p - b ln(1 - p) + c. As in the paper's reference implementation
    (``betacal``), the constraint a, b >= 0 is enforced by refitting: if the fitted a < 0 the model is
    refitted on -ln(1 - p) alone (a = 0), else if b < 0 on ln p alone (b = 0). If the remaining
    coefficient is still negative, the map falls back to the constant training accuracy
    (a = b = 0). Unpenalised (C=inf). Needs both classes.
    Fitted: ``a_``, ``b_``, ``c_``.
    """

    _needs_both_classes = True

    def __init__(self, eps: float = _EPS):
        self.eps = eps

    def _fit(self, conf, y):
        p = np.clip(conf, self.eps, 1.0 - self.eps)
        feats = np.column_stack([np.log(p), -np.log1p(-p)])
        lr = fit_logistic(feats, y)
        a, b = (float(v) for v in lr.coef_[0])
        c = float(lr.intercept_[0])
        if a < 0 or b < 0:
            keep = 1 if a < 0 else 0
            lr = fit_logistic(feats[:, [keep]], y)
            coef, c = float(lr.coef_[0, 0]), float(lr.intercept_[0])
            a, b = (0.0, coef) if keep == 1 else (coef, 0.0)
            if coef < 0:
                a, b, c = 0.0, 0.0, float(logit(np.clip(y.mean(), self.eps, 1.0 - self.eps)))
        self.a_, self.b_, self.c_ = a, b, c

    def _predict(self, conf):
        return beta_map(conf, self.a_, self.b_, self.c_, self.eps)


# ----------------------------------------------------------------------------- factory
_CLASSES = {
    "raw": RawConfidence,
    "hre": HistogramRegression,
    "nwkr": KernelRegression,
    "platt": PlattScaling,
    "isotonic": IsotonicCalibration,
    "beta": BetaCalibration,
}


def make_baseline(name: str, **kwargs) -> _Baseline:
    """Return an unfitted baseline by name (one of ``BASELINES``); ``kwargs`` go to its constructor."""
    try:
        cls = _CLASSES[name]
    except KeyError:
        raise InputError(f"unknown baseline {name!r}; choose one of {', '.join(BASELINES)}") from None
    return cls(**kwargs)
