"""Evaluating estimators on labelled records: folds, out-of-fold predictions, the results table,
its files, learning curves, transfer between tasks, and the figures.

* :mod:`~acute.evaluation.crossval`: repeated stratified k-fold grouped by id, out-of-fold predictions;
* :mod:`~acute.evaluation.table`: metric rows from predictions (intervals, paired differences);
* :mod:`~acute.evaluation.markdown`: the paper-style results table;
* :mod:`~acute.evaluation.evaluate`: :func:`evaluate_store` (takes an :class:`EvaluationSettings`,
  returns an :class:`EvaluationResult`), which runs :mod:`~acute.evaluation.sources` (the controls
  a store can feed), :mod:`~acute.evaluation.predictions` (out-of-fold or held-out),
  :mod:`~acute.evaluation.grouping` (the groups folds and resamples keep together) and
  :mod:`~acute.evaluation.result`;
* :mod:`~acute.evaluation.writer`: :func:`write_evaluation` (results.md/.csv/.json, predictions, plots),
  :func:`read_predictions` and :func:`read_folds` (the out-of-fold predictions and their folds back);
* :mod:`~acute.evaluation.learning_curve`, :mod:`~acute.evaluation.transfer`;
* :mod:`~acute.evaluation.curves` (the numbers behind figures) and :mod:`~acute.evaluation.plots`;
* :mod:`~acute.evaluation.training`: :func:`train_probe` (choosing, fitting, certifying and
  describing a probe for export) and :mod:`~acute.evaluation.certification`
  (:func:`certify_probe`).

The names below are the package's public API (docs/api.md). ``train_probe`` and ``TrainedProbe``
load on first use: their module reads a store's collection settings through
:mod:`acute.collect`, which imports torch, and ``import acute.evaluation`` stays numpy-only.
"""

from __future__ import annotations

import importlib

from .certification import certify_probe
from .crossval import split_ids
from .evaluate import evaluate_store
from .result import EvaluationResult
from .settings import EvaluationSettings
from .table import evaluate_predictions
from .writer import read_folds, read_predictions, write_evaluation

#: public names whose module is imported on first use
_LAZY = {"TrainedProbe": "training", "train_probe": "training"}

__all__ = ["EvaluationResult", "EvaluationSettings", "TrainedProbe", "certify_probe", "evaluate_predictions", "evaluate_store",
           "read_folds", "read_predictions", "split_ids", "train_probe", "write_evaluation"]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
