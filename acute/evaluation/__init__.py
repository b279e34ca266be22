"""Evaluating estimators on labelled records: folds, out-of-fold predictions, the results table,
its files, learning curves, transfer between tasks, and the figures.

* :mod:`~acute.evaluation.crossval`: repeated stratified k-fold grouped by id, out-of-fold predictions;
* :mod:`~acute.evaluation.table`: metric rows from predictions (intervals, paired differences);
* :mod:`~acute.evaluation.markdown`: the paper-style results table;
* :mod:`~acute.evaluation.evaluate`: :func:`evaluate_store` (returns an :class:`EvaluationResult`);
* :mod:`~acute.evaluation.writer`: :func:`write_evaluation` (results.md/.csv/.json, predictions, plots),
  :func:`read_predictions` and :func:`read_folds` (the out-of-fold predictions and their folds back);
* :mod:`~acute.evaluation.learning_curve`, :mod:`~acute.evaluation.transfer`;
* :mod:`~acute.evaluation.curves` (the numbers behind figures) and :mod:`~acute.evaluation.plots`.
"""

from __future__ import annotations

from .crossval import split_ids
from .evaluate import EvaluationResult, evaluate_store
from .markdown import results_markdown
from .table import TABLE_COLUMNS, best_estimators, evaluate_predictions
from .writer import read_folds, read_predictions, write_evaluation

__all__ = ["TABLE_COLUMNS", "EvaluationResult", "best_estimators", "evaluate_predictions", "evaluate_store",
           "read_folds", "read_predictions", "results_markdown", "split_ids", "write_evaluation"]
