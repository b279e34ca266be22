"""Confidence estimators: everything that turns a record into P(correct).

* :mod:`~acute.estimators.inputs`: :class:`Inputs`, the one ``X`` of every estimator (named
  per-record sources: the raw confidence, pooled states, metadata, texts, the visible array);
* :mod:`~acute.estimators.features`: featurizers over pooled hidden states (``MeanPool``,
  ``CosineToLast``, ``LayerPCA``);
* :mod:`~acute.estimators.calibration`: the calibrators (raw, HRE, NWKR, Platt, isotonic, beta,
  stacked), one class per method, shared by the baselines, the probes and the probe file;
* :mod:`~acute.estimators.baselines`: the baselines, a calibrator over the raw confidence;
* :mod:`~acute.estimators.controls`: constant, platt+meta, tfidf+platt, answer-text (every control's name
  and what it uses);
* :mod:`~acute.estimators.visible`: what a deployment sees of a reply without states, and the
  visible and answer-surface controls over it;
* :mod:`~acute.estimators.folds`: stratified (optionally grouped) folds and :func:`out_of_fold`, the one
  out-of-fold routine;
* :mod:`~acute.estimators.plan`: the planner (each source of a store computed once; each estimator
  declares the pieces it needs and :class:`FitPlan` fits each piece once for every estimator of a fold);
* :mod:`~acute.estimators.probes`: :class:`ActivationProbe`, the random-forest probe;
* :mod:`~acute.estimators.probe_format`: the probe folder on disk (safetensors + JSON) and its rules;
* :mod:`~acute.estimators.exported_probe`: :class:`ExportedProbe`, a probe scored in numpy;
* :mod:`~acute.estimators.probe_file`: :func:`load_probe`, a probe folder read and validated;
* :mod:`~acute.estimators.probe_names`: the probe names and the probe each makes;
* :mod:`~acute.estimators.auto`: :class:`AutoEstimator`, ``auto``;
* :mod:`~acute.estimators.registry`: every estimator by name and the default.

Training a probe for export (:func:`acute.evaluation.train_probe`) belongs to
:mod:`acute.evaluation`, which compares and certifies it. The names below are the package's
public API (docs/api.md); everything else is imported from the module that defines it.
"""

from __future__ import annotations

from .baselines import ConfidenceEstimator
from .inputs import Inputs
from .exported_probe import ExportedProbe
from .probe_file import load_probe
from .probes import ActivationProbe
from .auto import AutoEstimator
from .probe_names import AUTO_CANDIDATES
from .registry import AUTO, DEFAULT_ESTIMATOR, ESTIMATORS, STATES_PROBE, TABLE_ESTIMATORS, make_estimator

__all__ = [
    "AUTO", "AUTO_CANDIDATES", "ActivationProbe", "AutoEstimator", "ConfidenceEstimator", "DEFAULT_ESTIMATOR",
    "ESTIMATORS", "ExportedProbe", "Inputs", "STATES_PROBE", "TABLE_ESTIMATORS", "load_probe", "make_estimator",
]
