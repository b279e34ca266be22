"""The baselines: a calibrator over the raw confidence, behind the estimators' interface.

A baseline reads the raw confidence only (the product of the generated tokens' probabilities,
the ``confidence`` source of :mod:`acute.estimators.inputs`) and maps it through one calibrator of :mod:`acute.estimators.calibration`, fitted on the
training records:

* ``raw``      identity; ``fit`` only validates its input.
* ``hre``      histogram regression with equal-mass bins (15).
* ``nwkr``     Nadaraya-Watson kernel regression with a Gaussian kernel reflected about 0 and 1,
               at the smECE bandwidth sigma* of the training data.
* ``platt``    Platt scaling: logistic regression on logit(clip(confidence)).
* ``isotonic`` isotonic regression (scikit-learn), clipped outside the training range.
* ``beta``     three-parameter beta calibration (Kull, Silva Filho & Flach, 2017).

The calibrator alone, on a confidence array, is :func:`acute.estimators.calibration.make_calibrator`
of the same name.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import NotFittedError

from ..errors import InputError
from .calibration import make_calibrator
from .inputs import CONFIDENCE, check_inputs

__all__ = ["BASELINES", "ConfidenceEstimator"]

#: The baselines of every evaluation table, in table order (each a calibrator's name).
BASELINES: tuple[str, ...] = ("raw", "hre", "nwkr", "platt", "isotonic", "beta")


class ConfidenceEstimator(ClassifierMixin, BaseEstimator):
    """A baseline: the calibrator ``baseline`` (one of :data:`BASELINES`) over the ``confidence``
    source of the inputs (:class:`acute.estimators.inputs.Inputs`), the only source it reads.
    ``sample_weight`` weighs the calibrator's fit. Fitted: ``calibrator_``, ``classes_``."""

    sources = (CONFIDENCE,)

    def __init__(self, baseline: str = "platt"):
        self.baseline = baseline

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> ConfidenceEstimator:
        if self.baseline not in BASELINES:
            raise InputError(f"unknown baseline {self.baseline!r}; choose one of {', '.join(BASELINES)}")
        conf = check_inputs(X, self)[CONFIDENCE]
        self.calibrator_ = make_calibrator(self.baseline).fit(conf, y, sample_weight=sample_weight)
        self.classes_ = np.array([0, 1])
        return self

    def predict_proba(self, X: Any) -> np.ndarray:
        if not hasattr(self, "calibrator_"):
            raise NotFittedError(f"ConfidenceEstimator({self.baseline!r}) is not fitted yet; call fit first")
        return self.calibrator_.predict_proba(check_inputs(X, self)[CONFIDENCE])

    def predict(self, X: Any) -> np.ndarray:
        return (self.predict_proba(X)[:, 1] > 0.5).astype(np.int64)
