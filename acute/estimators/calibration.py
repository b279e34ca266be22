"""Calibrators: maps from a score in [0, 1] to P(correct), fitted on labelled records.

Every calibrator is a scikit-learn classifier over one column of scores (a 1-D array, or
``[n, 1]``; the stacked one reads two columns): ``fit(scores, y, sample_weight=None)`` checks
its input and sets attributes ending in ``_``; ``predict_proba(scores)`` is ``[n, 2]`` with
P(correct) in column 1. They compose: the baselines are a calibrator over the raw confidence
(:class:`acute.estimators.baselines.ConfidenceEstimator`), a probe's calibration is one over its
forest's held-out P(correct) (:func:`probe_calibrator`), and the probe file stores a fitted
calibrator's parameters and rebuilds it (:func:`calibrator_arrays`, :func:`calibrator_from_arrays`).
One class per method (:data:`CALIBRATORS`, :func:`make_calibrator`):

* ``raw`` (:class:`RawConfidence`): the identity.
* ``hre`` (:class:`HistogramRegression`): equal-mass bins (default 15, or ``"sqrt"``).
* ``nwkr`` (:class:`KernelRegression`): Nadaraya-Watson regression with a Gaussian kernel
  reflected about 0 and 1, at the smECE bandwidth sigma* of the training data.
* ``platt`` (:class:`PlattScaling`): ``P = sigmoid(a f(s) + b)``. Two choices are parameters,
  not two implementations: the input map ``f`` (``on="logit"``: logit of the score clipped to
  [eps, 1 - eps], how the ``platt`` baseline reads a raw confidence; ``on="probability"``: the
  score itself, how a probe's ``platt`` calibration reads its forest's P(correct), which can be
  exactly 0 or 1) and the targets (``smoothed_targets=False``: the 0/1 labels; ``True``: Platt's
  smoothed targets ``(N+ + 1) / (N+ + 2)`` and ``1 / (N- + 2)``, which keep ``a, b`` finite on
  separable data, fitted as sample weights of duplicated rows).
* ``isotonic`` (:class:`IsotonicCalibration`): scikit-learn's fit, its thresholds interpolated
  linearly and clipped outside their range.
* ``beta`` (:class:`BetaCalibration`): three-parameter beta calibration (Kull, Silva Filho &
  Flach, 2017).
* ``stacked`` (:class:`StackedCalibration`): a logistic regression on ``[logit(forest
  P(correct)), logit(raw confidence)]`` (:func:`stack_features`), over the two columns
  ``[forest P(correct), raw confidence]``.

Every linear map (Platt, beta, stacked) is :func:`fit_logistic`, scikit-learn's unpenalised
``LogisticRegression(C=inf)``. ``sample_weight`` weighs the records in every fit (an integer
weight is the record repeated); None is the unweighted fit.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np
from scipy.special import expit, logit
from sklearn.base import BaseEstimator, ClassifierMixin

from ..errors import InputError
from ..metrics.smooth import smece_bandwidth
from ..validation import check_confidence, check_correct

__all__ = [
    "CALIBRATIONS", "CALIBRATION_ARRAYS", "CALIBRATORS", "PLATT_EPS", "STACK_EPS_CONFIDENCE", "STACK_EPS_FOREST",
    "BetaCalibration", "Calibrator", "HistogramRegression", "IsotonicCalibration", "KernelRegression",
    "PlattScaling", "RawConfidence", "StackedCalibration", "beta_map", "calibrator_arrays",
    "calibration_scores", "calibrator_from_arrays", "equal_mass_edges", "fit_logistic", "make_calibrator", "platt_targets",
    "probe_calibrator", "reflected_kernel_regression", "stack_features",
]

#: The calibrations a probe takes (None: its forest's P(correct) as it is).
CALIBRATIONS = (None, "platt", "isotonic", "stacked")
#: Scores are clipped to [PLATT_EPS, 1 - PLATT_EPS] before a logit or a log (Platt on logits, beta).
PLATT_EPS = 1e-6
# logit inputs of the stacked calibration are clipped: forest probabilities to
# [STACK_EPS_FOREST, 1 - STACK_EPS_FOREST] (about half a tree's vote of 500 trees), the raw
# confidence to [STACK_EPS_CONFIDENCE, 1 - STACK_EPS_CONFIDENCE] (as Platt scaling does)
STACK_EPS_FOREST = 1e-3
STACK_EPS_CONFIDENCE = 1e-6
#: The arrays of ``probe.safetensors`` that hold each probe calibration's parameters, with the
#: parameter names they store in order.
CALIBRATION_ARRAYS: dict[str, dict[str, tuple[str, ...]]] = {
    "platt": {"calibration.platt": ("a", "b")},
    "isotonic": {"calibration.isotonic_x": ("x",), "calibration.isotonic_y": ("y",)},
    "stacked": {"calibration.stacked": ("w", "v", "b")},
}


def fit_logistic(features: np.ndarray, y: np.ndarray, sample_weight: np.ndarray | None = None):
    """A fitted unpenalised logistic regression of ``y`` on ``features`` ``[n, k]`` (scikit-learn's
    ``C`` is the inverse strength; ``C=inf`` switches the penalty off), to tight tolerance."""
    from sklearn.linear_model import LogisticRegression  # start-up cost

    return LogisticRegression(C=np.inf, solver="lbfgs", max_iter=10_000, tol=1e-10).fit(
        features, y, sample_weight=sample_weight)


def _weights(sample_weight: Any, n: int) -> np.ndarray | None:
    if sample_weight is None:
        return None
    w = np.asarray(sample_weight, dtype=np.float64)
    if w.shape != (n,):
        raise InputError(f"sample_weight: expected {n} weights, got shape {w.shape}")
    if not (np.isfinite(w).all() and (w >= 0).all()) or w.sum() <= 0:
        raise InputError("sample_weight: weights must be finite, >= 0 and not all 0")
    return w


class Calibrator(ClassifierMixin, BaseEstimator):
    """Shared plumbing of the calibrators over one score column: input checks, ``predict_proba``
    -> ``[n, 2]`` (clipped to [0, 1]), ``predict`` thresholded at 0.5. Fitted: ``classes_``,
    ``n_train_``."""

    #: whether the fit needs both classes among the labels
    _needs_both_classes = False
    #: the score columns read (1; the stacked calibration reads 2)
    _columns = 1

    def _scores(self, scores: Any, n: int | None = None, *, fitting: bool = False) -> np.ndarray:
        if self._columns == 1:
            s = check_confidence(scores, n, allow_empty=True)
            if fitting and s.size == 0:
                raise InputError("cannot fit a calibrator on 0 records")
            return s
        arr = np.asarray(scores)
        if arr.ndim != 2 or arr.shape[1] != self._columns:
            raise InputError(f"{type(self).__name__} reads [n, {self._columns}] scores, got shape {arr.shape}")
        if fitting and arr.shape[0] == 0:
            raise InputError("cannot fit a calibrator on 0 records")
        cols = [check_confidence(arr[:, j], n, name=f"scores[:, {j}]", allow_empty=True) for j in range(arr.shape[1])]
        return np.column_stack(cols) if cols[0].size else np.zeros((0, self._columns))

    def fit(self, scores: Any, y: Any, sample_weight: Any = None) -> Calibrator:
        """Fit the map on ``scores`` and 0/1 labels ``y`` (weighted by ``sample_weight``)."""
        s = self._scores(scores, fitting=True)
        labels = check_correct(y, s.shape[0])
        if self._needs_both_classes and labels.min() == labels.max():
            raise InputError(f"correct contains a single class ({int(labels[0])} for all {labels.size} records); "
                             "this calibrator needs both correct and incorrect examples")
        self._fit(s, labels, _weights(sample_weight, s.shape[0]))
        self.classes_ = np.array([0, 1])
        self.n_train_ = int(s.shape[0])
        return self

    def _fit(self, s: np.ndarray, y: np.ndarray, w: np.ndarray | None) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _predict(self, s: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def predict_proba(self, scores: Any) -> np.ndarray:
        """``[n, 2]``: column 1 is the calibrated P(correct), column 0 its complement."""
        if not hasattr(self, "classes_"):
            raise InputError(f"{type(self).__name__} is not fitted; call fit(scores, y) first")
        s = self._scores(scores)
        p = np.clip(self._predict(s), 0.0, 1.0) if s.shape[0] else np.zeros(0)
        return np.column_stack([1.0 - p, p])

    def predict(self, scores: Any) -> np.ndarray:
        """1 where the calibrated P(correct) >= 0.5, else 0."""
        return (self.predict_proba(scores)[:, 1] >= 0.5).astype(int)


# ----------------------------------------------------------------------------- raw
class RawConfidence(Calibrator):
    """The identity: calibrated confidence = the score. ``fit`` only checks its input."""

    def _fit(self, s, y, w):
        pass

    def _predict(self, s):
        return s.copy()


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


class HistogramRegression(Calibrator):
    """Histogram regression (HRE) with equal-mass bins.

    Parameters
    ----------
    n_bins : int or "sqrt", default 15
        Number of bins; ``"sqrt"`` uses ``round(sqrt(n_train))``. Capped at the number of training
        records; ties can merge bins (see :func:`equal_mass_edges`), so no bin is empty.

    A bin holds the values ``edges_[k-1] <= x < edges_[k]``; the prediction for any score is the
    training accuracy of its bin (weighted by ``sample_weight``; values below/above the training
    range fall in the first/last bin). The bins are of equal count, whatever the weights.
    Fitted: ``edges_`` (inner thresholds), ``bin_accuracy_``, ``bin_count_``.
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

    def _fit(self, s, y, w):
        self.edges_ = equal_mass_edges(s, self._resolve_bins(s.size))
        b = np.searchsorted(self.edges_, s, side="right")
        nb = self.edges_.size + 1
        self.bin_count_ = np.bincount(b, minlength=nb)
        if w is None:
            self.bin_accuracy_ = np.bincount(b, weights=y, minlength=nb) / self.bin_count_
        else:
            mass = np.bincount(b, weights=w, minlength=nb)
            with np.errstate(invalid="ignore", divide="ignore"):  # a bin of weight 0: its count's accuracy
                acc = np.bincount(b, weights=y * w, minlength=nb) / mass
            plain = np.bincount(b, weights=y, minlength=nb) / self.bin_count_
            self.bin_accuracy_ = np.where(mass > 0, acc, plain)

    def _predict(self, s):
        return self.bin_accuracy_[np.searchsorted(self.edges_, s, side="right")]


# ----------------------------------------------------------------------------- nwkr
def reflected_kernel_regression(x: np.ndarray, conf: np.ndarray, y: np.ndarray, sigma: float,
                                chunk: int = 2048, weights: np.ndarray | None = None) -> np.ndarray:
    """Nadaraya-Watson estimate of E[y | conf = x] with a Gaussian kernel of width ``sigma``
    reflected about 0 and 1: each training point c contributes at c, -c and 2 - c (times its
    weight, when ``weights`` are given).

    Weights are combined in log space, so a tiny ``sigma`` never divides 0 by 0 (far from all data
    the estimate follows the nearest training points). Returns a float array shaped like ``x``.
    """
    centres = np.concatenate([conf, -conf, 2.0 - conf]) / sigma
    if weights is None:
        targets = np.column_stack([np.concatenate([y, y, y]), np.ones(3 * conf.size)])
    else:
        w = np.concatenate([weights, weights, weights])
        targets = np.column_stack([np.concatenate([y, y, y]) * w, w])
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


class KernelRegression(Calibrator):
    """Nadaraya-Watson kernel regression (NWKR) of correctness on the score.

    Gaussian kernel reflected about 0 and 1 (the boundaries of the score range), bandwidth
    ``bandwidth`` or, when None (default), the smECE bandwidth sigma* of the training data
    (:func:`acute.metrics.smece_bandwidth`, unweighted). Fitted: ``bandwidth_``, ``conf_``,
    ``correct_``, ``weight_`` (None for an unweighted fit).
    """

    def __init__(self, bandwidth: float | None = None):
        self.bandwidth = bandwidth

    def _fit(self, s, y, w):
        sigma = float(smece_bandwidth(s, y)) if self.bandwidth is None else float(self.bandwidth)
        if not (np.isfinite(sigma) and sigma > 0):
            raise InputError(f"bandwidth must be a positive finite number, got {sigma!r}")
        self.bandwidth_ = sigma
        self.conf_ = s.copy()
        self.correct_ = y.copy()
        self.weight_ = None if w is None else w.copy()

    def _predict(self, s):
        return reflected_kernel_regression(s, self.conf_, self.correct_, self.bandwidth_, weights=self.weight_)


# ----------------------------------------------------------------------------- platt
def platt_targets(y: np.ndarray) -> np.ndarray:
    """Platt's smoothed targets: ``(N+ + 1) / (N+ + 2)`` for a correct record, ``1 / (N- + 2)``
    for a wrong one."""
    y = np.asarray(y, dtype=np.float64)
    n_pos = float(y.sum())
    n_neg = float(len(y) - n_pos)
    return np.where(y > 0.5, (n_pos + 1.0) / (n_pos + 2.0), 1.0 / (n_neg + 2.0))


class PlattScaling(Calibrator):
    """Platt scaling: P(correct) = sigmoid(a f(s) + b), by maximum likelihood, unpenalised.

    Parameters
    ----------
    on : {"logit", "probability"}, default "logit"
        ``f``: the logit of the score clipped to [eps, 1 - eps], or the score itself (module doc).
    smoothed_targets : bool, default False
        Fit Platt's smoothed targets (:func:`platt_targets`) instead of the 0/1 labels.
    eps : float, default 1e-6
        The clip of ``on="logit"``.

    Needs both classes. ``predict_proba`` evaluates the sigmoid as ``scipy.special.expit`` on
    logits and as ``1 / (1 + exp(-z))`` on probabilities (how probe files have always been
    scored). Fitted: ``coef_`` (a, > 0 when increasing), ``intercept_`` (b).
    """

    _needs_both_classes = True

    def __init__(self, on: str = "logit", smoothed_targets: bool = False, eps: float = PLATT_EPS):
        self.on = on
        self.smoothed_targets = smoothed_targets
        self.eps = eps

    def _input(self, s: np.ndarray) -> np.ndarray:
        if self.on == "logit":
            return logit(np.clip(s, self.eps, 1.0 - self.eps))
        if self.on == "probability":
            return s
        raise InputError(f"on must be 'logit' or 'probability', got {self.on!r}")

    def _fit(self, s, y, w):
        f = self._input(s)[:, None]
        if self.smoothed_targets:
            t = platt_targets(y)
            tw = np.r_[t, 1.0 - t] if w is None else np.r_[t * w, (1.0 - t) * w]
            lr = fit_logistic(np.concatenate([f, f]), np.r_[np.ones(len(y)), np.zeros(len(y))], sample_weight=tw)
        else:
            lr = fit_logistic(f, y.astype(np.int64), sample_weight=w)
        a, b = float(lr.coef_[0, 0]), float(lr.intercept_[0])
        if not (math.isfinite(a) and math.isfinite(b)):
            raise InputError("Platt calibration did not converge to finite parameters")
        self.coef_, self.intercept_ = a, b

    def _predict(self, s):
        z = float(self.coef_) * self._input(s) + float(self.intercept_)
        return expit(z) if self.on == "logit" else 1.0 / (1.0 + np.exp(-z))


# ---------------------------------------------------------------------------- isotonic
class IsotonicCalibration(Calibrator):
    """Isotonic (non-decreasing) regression of correctness on the score in [0, 1]: scikit-learn's
    fit, its thresholds interpolated linearly and clipped to their end values outside their range
    (what ``IsotonicRegression(out_of_bounds="clip").predict`` gives). Fitted: ``thresholds_``
    (x, y as float64 arrays)."""

    def _fit(self, s, y, w):
        from sklearn.isotonic import IsotonicRegression  # start-up cost

        iso = IsotonicRegression(y_min=0.0, y_max=1.0, increasing=True, out_of_bounds="clip").fit(s, y, sample_weight=w)
        self.thresholds_ = (np.asarray(iso.X_thresholds_, dtype=np.float64),
                            np.asarray(iso.y_thresholds_, dtype=np.float64))

    def _predict(self, s):
        return np.interp(s, *self.thresholds_)


# ----------------------------------------------------------------------------- beta
def beta_map(p: np.ndarray, a: float, b: float, c: float, eps: float = PLATT_EPS) -> np.ndarray:
    """The beta calibration map 1 / (1 + 1 / (e^c p^a / (1 - p)^b)) with p clipped to [eps, 1-eps]."""
    p = np.clip(p, eps, 1.0 - eps)
    return expit(c + a * np.log(p) - b * np.log1p(-p))


class BetaCalibration(Calibrator):
    """Three-parameter beta calibration (Kull, Silva Filho & Flach, AISTATS 2017).

    Logistic regression of correctness on ``[ln p, -ln(1 - p)]`` (p clipped to [eps, 1 - eps]),
    giving logit P(correct) = a ln p - b ln(1 - p) + c. As in the paper's reference implementation
    (``betacal``), the constraint a, b >= 0 is enforced by refitting: if the fitted a < 0 the model is
    refitted on -ln(1 - p) alone (a = 0), else if b < 0 on ln p alone (b = 0). If the remaining
    coefficient is still negative, the map falls back to the constant (weighted) training accuracy
    (a = b = 0). Unpenalised (C=inf). Needs both classes. Fitted: ``a_``, ``b_``, ``c_``.
    """

    _needs_both_classes = True

    def __init__(self, eps: float = PLATT_EPS):
        self.eps = eps

    def _fit(self, s, y, w):
        p = np.clip(s, self.eps, 1.0 - self.eps)
        feats = np.column_stack([np.log(p), -np.log1p(-p)])
        lr = fit_logistic(feats, y, sample_weight=w)
        a, b = (float(v) for v in lr.coef_[0])
        c = float(lr.intercept_[0])
        if a < 0 or b < 0:
            keep = 1 if a < 0 else 0
            lr = fit_logistic(feats[:, [keep]], y, sample_weight=w)
            coef, c = float(lr.coef_[0, 0]), float(lr.intercept_[0])
            a, b = (0.0, coef) if keep == 1 else (coef, 0.0)
            if coef < 0:
                rate = y.mean() if w is None else np.average(y, weights=w)
                a, b, c = 0.0, 0.0, float(logit(np.clip(rate, self.eps, 1.0 - self.eps)))
        self.a_, self.b_, self.c_ = a, b, c

    def _predict(self, s):
        return beta_map(s, self.a_, self.b_, self.c_, self.eps)


# ----------------------------------------------------------------------------- stacked
def stack_features(p: Any, confidence: Any) -> np.ndarray:
    """``[n, 2]`` inputs of the stacked calibration: ``logit(p)`` of the forest's P(correct) and
    ``logit(confidence)`` of the raw confidence, each clipped (see ``STACK_EPS_*``)."""
    p = np.clip(np.asarray(p, dtype=np.float64), STACK_EPS_FOREST, 1.0 - STACK_EPS_FOREST)
    c = np.clip(np.asarray(confidence, dtype=np.float64), STACK_EPS_CONFIDENCE, 1.0 - STACK_EPS_CONFIDENCE)
    return np.column_stack([logit(p), logit(c)])


class StackedCalibration(Calibrator):
    """The stacked calibration over two score columns ``[forest P(correct), raw confidence]``
    (held-out forest probabilities when fitted): an unpenalised logistic regression of the labels
    on :func:`stack_features`, P(correct) = sigmoid(w logit(p) + v logit(confidence) + b),
    evaluated overflow-free as ``0.5 (1 + tanh(z / 2))``.

    With ``w = 0`` this is Platt scaling of the raw confidence; with ``v = 0`` Platt scaling of
    the forest. The fit chooses the mix that predicts best on records the forest did not see.
    Fitted: ``coef_`` (``[w, v]``), ``intercept_`` (b).
    """

    _columns = 2

    def _fit(self, s, y, w):
        lr = fit_logistic(stack_features(s[:, 0], s[:, 1]), y.astype(np.int64), sample_weight=w)
        coef = tuple(float(x) for x in lr.coef_[0])
        b = float(lr.intercept_[0])
        if not all(math.isfinite(x) for x in (*coef, b)):
            raise InputError("the stacked calibration did not converge to finite parameters")
        self.coef_, self.intercept_ = coef, b

    def _predict(self, s):
        f = stack_features(s[:, 0], s[:, 1])
        w, v = self.coef_
        z = float(w) * f[:, 0] + float(v) * f[:, 1] + float(self.intercept_)
        return 0.5 * (1.0 + np.tanh(0.5 * z))


# ----------------------------------------------------------------------------- by name
#: Every calibrator by name (the baselines' names and ``stacked``).
CALIBRATORS: dict[str, type[Calibrator]] = {
    "raw": RawConfidence,
    "hre": HistogramRegression,
    "nwkr": KernelRegression,
    "platt": PlattScaling,
    "isotonic": IsotonicCalibration,
    "beta": BetaCalibration,
    "stacked": StackedCalibration,
}


def make_calibrator(name: str, **kwargs: Any) -> Calibrator:
    """An unfitted calibrator by name (:data:`CALIBRATORS`); ``kwargs`` go to its constructor."""
    try:
        cls = CALIBRATORS[name]
    except (KeyError, TypeError):
        raise InputError(f"unknown calibrator {name!r}; choose one of {', '.join(CALIBRATORS)}") from None
    return cls(**kwargs)


def probe_calibrator(method: str | None) -> Calibrator | None:
    """The unfitted calibrator of a probe's ``calibration`` (:data:`CALIBRATIONS`): None; Platt on
    the forest's probabilities with smoothed targets; isotonic; stacked with the raw confidence."""
    if method is None:
        return None
    if method == "platt":
        return PlattScaling(on="probability", smoothed_targets=True)
    if method == "isotonic":
        return IsotonicCalibration()
    if method == "stacked":
        return StackedCalibration()
    raise InputError(f"calibration must be one of {CALIBRATIONS}; got {method!r}")


def calibration_scores(method: str | None, p: Any, confidence: Any = None) -> np.ndarray:
    """The score columns a probe's calibrator of ``method`` reads: the forest's P(correct) ``p``,
    and for ``stacked`` ``[p, raw confidence]`` (an :class:`InputError` without ``confidence``)."""
    p = np.asarray(p, dtype=np.float64)
    if method != "stacked":
        return p
    if confidence is None:
        raise InputError("the stacked calibration needs the raw confidence")
    return np.column_stack([p, np.asarray(confidence, dtype=np.float64)])


def _params(method: str, calibrator: Calibrator) -> dict[str, Any]:
    if method == "platt":
        return {"a": calibrator.coef_, "b": calibrator.intercept_}
    if method == "isotonic":
        return dict(zip(("x", "y"), calibrator.thresholds_))
    w, v = calibrator.coef_
    return {"w": w, "v": v, "b": calibrator.intercept_}


def calibrator_arrays(method: str | None, calibrator: Calibrator | None) -> dict[str, np.ndarray]:
    """The ``probe.safetensors`` arrays that store a probe's fitted ``calibrator`` of ``method``
    (:data:`CALIBRATION_ARRAYS`; none for None)."""
    if method is None:
        return {}
    params = _params(method, calibrator)
    out = {}
    for name, keys in CALIBRATION_ARRAYS[method].items():
        values = [params[k] for k in keys]
        out[name] = (np.asarray(values[0], dtype=np.float64) if len(keys) == 1
                     else np.array(values, dtype=np.float64))
    return out


def calibrator_from_arrays(method: str | None, arrays: Mapping[str, np.ndarray]) -> Calibrator | None:
    """The fitted calibrator of ``method`` rebuilt from a probe file's arrays (None for None): it
    predicts what the calibrator that wrote them predicted, bit for bit."""
    if method is None:
        return None
    params: dict[str, Any] = {}
    for name, keys in CALIBRATION_ARRAYS[method].items():
        if len(keys) == 1:
            params[keys[0]] = np.asarray(arrays[name], dtype=np.float64)
        else:
            params.update(zip(keys, (float(v) for v in arrays[name])))
    out = probe_calibrator(method)
    if method == "platt":
        out.coef_, out.intercept_ = params["a"], params["b"]
    elif method == "isotonic":
        out.thresholds_ = (params["x"], params["y"])
    else:
        out.coef_, out.intercept_ = (params["w"], params["v"]), params["b"]
    out.classes_ = np.array([0, 1])
    return out
