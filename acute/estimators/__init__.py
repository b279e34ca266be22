"""Confidence estimators: everything that turns a record into P(correct).

* :mod:`~acute.estimators.features`: featurizers over pooled hidden states (``MeanPool``,
  ``CosineToLast``, ``LayerPCA``);
* :mod:`~acute.estimators.calibration`: the calibration maps (Platt, isotonic, stacked) shared by
  the baselines, the probes and the probe file;
* :mod:`~acute.estimators.baselines`: raw, HRE, NWKR, Platt, isotonic, beta over the raw confidence;
* :mod:`~acute.estimators.controls`: constant, platt+meta, tfidf+platt, answer-text (every control's name
  and what it uses);
* :mod:`~acute.estimators.visible`: what a deployment sees of a reply without states, and the
  visible and answer-surface controls over it;
* :mod:`~acute.estimators.folds`: stratified (optionally grouped) folds and :func:`out_of_fold`, the one
  out-of-fold routine;
* :mod:`~acute.estimators.plan`: fits shared by a planner (each estimator declares the pieces it needs;
  :class:`FitPlan` fits each piece once for every estimator of a fold);
* :mod:`~acute.estimators.probes`: :class:`ActivationProbe`, the random-forest probe;
* :mod:`~acute.estimators.probe_file`: the probe folder (safetensors + JSON) and its numpy scorer;
* :mod:`~acute.estimators.registry`: every estimator by name, the default and ``auto``;
* :mod:`~acute.estimators.training`: :func:`train_probe`, choosing, fitting and describing a probe
  for export.
"""

from __future__ import annotations

from ..errors import ModelMismatchError, ProbeFormatError, UnknownEstimatorError
from .baselines import BASELINES, make_baseline
from .controls import CONTROLS
from .probe_file import (ARRAYS_FILE, MANIFEST_FILE, ExportedProbe, apply_calibration, forest_arrays, forest_proba,
                         load_probe, stack_features)
from .calibration import fit_platt, fit_stacker
from .probes import ActivationProbe
from .registry import (ACUTE_VARIANTS, AUTO, AUTO_CANDIDATES, DEFAULT_ESTIMATOR, ESTIMATORS, PROBE_ESTIMATORS,
                       STACKED_VARIANTS, TABLE_ESTIMATORS, AutoEstimator, ConfidenceEstimator, estimator_group, estimator_input,
                       estimator_pooling, is_estimator, make_estimator, probe_kwargs, split_pooling)

__all__ = [
    "ACUTE_VARIANTS", "ARRAYS_FILE", "AUTO", "AUTO_CANDIDATES", "ActivationProbe", "AutoEstimator", "BASELINES",
    "CONTROLS", "ConfidenceEstimator", "DEFAULT_ESTIMATOR", "ESTIMATORS", "ExportedProbe", "MANIFEST_FILE",
    "ModelMismatchError", "PROBE_ESTIMATORS", "ProbeFormatError", "STACKED_VARIANTS", "TABLE_ESTIMATORS",
    "UnknownEstimatorError", "apply_calibration", "estimator_group", "estimator_input", "estimator_pooling", "fit_platt", "fit_stacker",
    "forest_arrays", "forest_proba", "is_estimator", "load_probe", "make_baseline", "make_estimator",
    "probe_kwargs", "split_pooling", "stack_features",
]
