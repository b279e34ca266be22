"""Calibration maps: how a score becomes P(correct), fitted on labelled records.

One implementation each, used by the baselines (on the raw confidence), the probe (on its
out-of-fold forest probabilities) and the probe file (which stores the fitted parameters and
applies them in numpy):

* :func:`fit_logistic`: the unpenalised logistic regression behind every linear map (Platt,
  beta, stacked), scikit-learn's ``LogisticRegression(C=inf)``.
* Platt scaling, ``P = sigmoid(a f(s) + b)`` (:func:`fit_platt`, :func:`apply_platt`). Two
  choices are named, not hidden in two implementations: the input map ``f``
  (``on="logit"``: logit of the score clipped to [eps, 1 - eps], how the ``platt`` baseline
  reads a raw confidence; ``on="probability"``: the score itself, how a probe's ``platt``
  calibration reads its forest's P(correct), which can be exactly 0 or 1) and the targets
  (``smoothed_targets=False``: the 0/1 labels; ``True``: Platt's smoothed targets
  ``(N+ + 1) / (N+ + 2)`` and ``1 / (N- + 2)``, which keep ``a, b`` finite on separable data,
  fitted as sample weights of duplicated rows).
* Isotonic regression (:func:`fit_isotonic`, :func:`apply_isotonic`): scikit-learn's fit, its
  thresholds interpolated linearly and clipped outside their range.
* The stacked map (:func:`fit_stacker`, :func:`apply_stacker`): a logistic regression on
  ``[logit(forest P(correct)), logit(raw confidence)]`` (:func:`stack_features`).

The probe's switch between them is here once: :func:`fit_calibration`,
:func:`apply_calibration`, and for the probe file :data:`CALIBRATION_ARRAYS`,
:func:`calibration_arrays`, :func:`calibration_params`.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np
from scipy.special import expit, logit

from ..errors import InputError

__all__ = ["CALIBRATIONS", "CALIBRATION_ARRAYS", "PLATT_EPS", "STACK_EPS_CONFIDENCE", "STACK_EPS_FOREST",
           "apply_calibration", "apply_isotonic", "apply_platt", "apply_stacker", "calibration_arrays",
           "calibration_params", "fit_calibration", "fit_isotonic", "fit_logistic", "fit_platt", "fit_stacker",
           "platt_targets", "stack_features"]

#: The calibrations a probe takes (None: its forest's P(correct) as it is).
CALIBRATIONS = (None, "platt", "isotonic", "stacked")
#: Scores are clipped to [PLATT_EPS, 1 - PLATT_EPS] before a logit (Platt on logits, beta).
PLATT_EPS = 1e-6
# logit inputs of the stacked calibration are clipped: forest probabilities to
# [STACK_EPS_FOREST, 1 - STACK_EPS_FOREST] (about half a tree's vote of 500 trees), the raw
# confidence to [STACK_EPS_CONFIDENCE, 1 - STACK_EPS_CONFIDENCE] (as Platt scaling does)
STACK_EPS_FOREST = 1e-3
STACK_EPS_CONFIDENCE = 1e-6
#: The arrays of ``probe.safetensors`` that hold each calibration's parameters, with the
#: parameter names they store in order.
CALIBRATION_ARRAYS: dict[str, dict[str, tuple[str, ...]]] = {
    "platt": {"calibration.platt": ("a", "b")},
    "isotonic": {"calibration.isotonic_x": ("x",), "calibration.isotonic_y": ("y",)},
    "stacked": {"calibration.stacked": ("w", "v", "b")},
}


def fit_logistic(features: np.ndarray, y: np.ndarray, sample_weight: np.ndarray | None = None):
    """An unpenalised logistic regression of ``y`` on ``features`` ``[n, k]`` (scikit-learn's
    ``C`` is the inverse strength; ``C=inf`` switches the penalty off), fitted to tight tolerance."""
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(C=np.inf, solver="lbfgs", max_iter=10_000, tol=1e-10).fit(
        features, y, sample_weight=sample_weight)


# ------------------------------------------------------------------------------- platt
def _platt_input(scores: np.ndarray, on: str, eps: float) -> np.ndarray:
    if on == "logit":
        return logit(np.clip(scores, eps, 1.0 - eps))
    if on == "probability":
        return scores
    raise InputError(f"on must be 'logit' or 'probability', got {on!r}")


def platt_targets(y: np.ndarray) -> np.ndarray:
    """Platt's smoothed targets: ``(N+ + 1) / (N+ + 2)`` for a correct record, ``1 / (N- + 2)``
    for a wrong one."""
    y = np.asarray(y, dtype=np.float64)
    n_pos = float(y.sum())
    n_neg = float(len(y) - n_pos)
    return np.where(y > 0.5, (n_pos + 1.0) / (n_pos + 2.0), 1.0 / (n_neg + 2.0))


def fit_platt(scores: Any, y: Any, *, on: str = "logit", smoothed_targets: bool = False,
              eps: float = PLATT_EPS) -> tuple[float, float]:
    """Platt scaling of ``scores`` against 0/1 labels ``y``: ``(a, b)`` of
    ``P = sigmoid(a f(s) + b)`` by maximum likelihood (see the module doc for ``on`` and
    ``smoothed_targets``); ``a > 0`` means increasing."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    f = _platt_input(s, on, eps)[:, None]
    if smoothed_targets:
        t = platt_targets(y)
        lr = fit_logistic(np.concatenate([f, f]), np.r_[np.ones(len(y)), np.zeros(len(y))],
                          sample_weight=np.r_[t, 1.0 - t])
    else:
        lr = fit_logistic(f, y.astype(np.int64))
    a, b = float(lr.coef_[0, 0]), float(lr.intercept_[0])
    if not (math.isfinite(a) and math.isfinite(b)):
        raise InputError("Platt calibration did not converge to finite parameters")
    return a, b


def apply_platt(scores: Any, a: float, b: float, *, on: str = "logit", eps: float = PLATT_EPS) -> np.ndarray:
    """``sigmoid(a f(s) + b)``. On probabilities it is evaluated as ``1 / (1 + exp(-z))``, as
    probe files have always been scored; on logits as ``scipy.special.expit``, as the baseline."""
    s = np.asarray(scores, dtype=np.float64)
    z = float(a) * _platt_input(s, on, eps) + float(b)
    return expit(z) if on == "logit" else 1.0 / (1.0 + np.exp(-z))


# ---------------------------------------------------------------------------- isotonic
def fit_isotonic(scores: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
    """Isotonic (non-decreasing) regression of ``y`` on ``scores`` in [0, 1]: its thresholds
    ``(x, y)`` as float64 arrays."""
    from sklearn.isotonic import IsotonicRegression

    iso = IsotonicRegression(y_min=0.0, y_max=1.0, increasing=True, out_of_bounds="clip").fit(scores, y)
    return np.asarray(iso.X_thresholds_, dtype=np.float64), np.asarray(iso.y_thresholds_, dtype=np.float64)


def apply_isotonic(scores: Any, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The isotonic map: linear interpolation between the thresholds, clipped to their end
    values outside their range (what ``IsotonicRegression(out_of_bounds="clip").predict`` gives)."""
    return np.interp(np.asarray(scores, dtype=np.float64), x, y)


# ----------------------------------------------------------------------------- stacked
def stack_features(p: Any, confidence: Any) -> np.ndarray:
    """``[n, 2]`` inputs of the stacked calibration: ``logit(p)`` of the forest's P(correct) and
    ``logit(confidence)`` of the raw confidence, each clipped (see ``STACK_EPS_*``)."""
    p = np.clip(np.asarray(p, dtype=np.float64), STACK_EPS_FOREST, 1.0 - STACK_EPS_FOREST)
    c = np.clip(np.asarray(confidence, dtype=np.float64), STACK_EPS_CONFIDENCE, 1.0 - STACK_EPS_CONFIDENCE)
    return np.column_stack([logit(p), logit(c)])


def fit_stacker(p: Any, confidence: Any, y: Any) -> tuple[float, float, float]:
    """The stacked calibration on out-of-fold forest probabilities ``p``, raw confidences and 0/1
    labels: an unpenalised logistic regression of ``y`` on :func:`stack_features`. Returns
    ``(w, v, b)`` with P(correct) = sigmoid(w logit(p) + v logit(confidence) + b).

    With ``w = 0`` this is Platt scaling of the raw confidence; with ``v = 0`` Platt scaling of
    the forest. The fit chooses the mix that predicts best on records the forest did not see.
    """
    lr = fit_logistic(stack_features(p, confidence), np.asarray(y, dtype=np.int64))
    w, v = (float(x) for x in lr.coef_[0])
    b = float(lr.intercept_[0])
    if not all(math.isfinite(x) for x in (w, v, b)):
        raise InputError("the stacked calibration did not converge to finite parameters")
    return w, v, b


def apply_stacker(p: Any, confidence: Any, w: float, v: float, b: float) -> np.ndarray:
    """sigmoid(w logit(p) + v logit(confidence) + b), overflow-free."""
    f = stack_features(p, confidence)
    z = float(w) * f[:, 0] + float(v) * f[:, 1] + float(b)
    return 0.5 * (1.0 + np.tanh(0.5 * z))


# ------------------------------------------------------------------- the probe's switch
def fit_calibration(method: str | None, p: np.ndarray, y: np.ndarray,
                    confidence: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """The parameters of calibration ``method`` fitted on a probe's out-of-fold forest
    probabilities ``p`` (``{}`` for None): Platt on the probabilities with smoothed targets,
    isotonic, or stacked with the raw ``confidence``."""
    if method is None:
        return {}
    if method == "platt":
        a, b = fit_platt(p, y, on="probability", smoothed_targets=True)
        return {"a": np.float64(a), "b": np.float64(b)}
    if method == "isotonic":
        x, iy = fit_isotonic(p, y)
        return {"x": x, "y": iy}
    if method == "stacked":
        if confidence is None:
            raise InputError("the stacked calibration needs the raw confidence")
        w, v, b = fit_stacker(p, confidence, y)
        return {"w": np.float64(w), "v": np.float64(v), "b": np.float64(b)}
    raise InputError(f"calibration must be one of {CALIBRATIONS}; got {method!r}")


def apply_calibration(p: np.ndarray, calibration: str | None, params: Mapping[str, Any],
                      confidence: np.ndarray | None = None) -> np.ndarray:
    """Map forest probabilities ``p`` through a fitted calibration (:func:`fit_calibration`'s
    ``params``): None returns ``p``; ``"platt"`` uses ``a, b``; ``"isotonic"`` ``x, y``;
    ``"stacked"`` combines ``p`` with the raw ``confidence`` by ``w, v, b``."""
    p = np.asarray(p, dtype=np.float64)
    if calibration is None:
        return p
    if calibration == "platt":
        return apply_platt(p, params["a"], params["b"], on="probability")
    if calibration == "isotonic":
        return apply_isotonic(p, params["x"], params["y"])
    if calibration == "stacked":
        if confidence is None:
            raise InputError("the stacked calibration needs the raw confidence")
        return apply_stacker(p, confidence, params["w"], params["v"], params["b"])
    raise InputError(f"calibration must be one of {CALIBRATIONS}; got {calibration!r}")


def calibration_arrays(method: str | None, params: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The ``probe.safetensors`` arrays that store ``params`` (:data:`CALIBRATION_ARRAYS`)."""
    out = {}
    for name, keys in CALIBRATION_ARRAYS.get(method, {}).items():
        values = [params[k] for k in keys]
        out[name] = (np.asarray(values[0], dtype=np.float64) if len(keys) == 1
                     else np.array(values, dtype=np.float64))
    return out


def calibration_params(method: str | None, arrays: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """The parameters of ``method`` read back from a probe file's arrays."""
    out: dict[str, Any] = {}
    for name, keys in CALIBRATION_ARRAYS.get(method, {}).items():
        if len(keys) == 1:
            out[keys[0]] = arrays[name]
        else:
            out.update(zip(keys, arrays[name]))
    return out
