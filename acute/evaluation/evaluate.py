"""Evaluation of every confidence estimator: the paper-style results table, cross-validated.

``evaluate_store`` fits the six baselines (on raw confidence), the six ACUTE probes, their
stacked variants and ``auto`` (see :mod:`acute.estimators.registry`) and scores held-out records. By
default every record is scored out of fold by repeated stratified k-fold cross-validation
(5 folds x 2 repeats, grouped by record id); a single split by id and a separate test store
are options. It writes:

* ``results.md``   Markdown table: rows = estimators; accuracy, smECE, auc-euro low/med/high/all,
                   Brier, AUROC; bootstrap 95% intervals shown as ``0.812 [0.790, 0.830]``; a last
                   column with each estimator's auc-euro (all) minus the best baseline's and its
                   paired bootstrap interval.
* ``results.csv``  the same numbers (and intervals, and paired differences) one row per estimator.
* ``results.json`` everything, with the folds or split (seed, sizes, id hashes) and
                   ``"complete": true``; it is moved into place last, so it never describes a run
                   that crashed.
* ``folds.json``   (cross-validation) each record's test fold in each repeat; ``split.json``
                   (single split / test store) the train and test ids.
* ``predictions.csv`` id, correct (0/1) and every estimator's confidence on the test records
  (cross-validation: every record, out of fold, repeat 0; ``predictions-repeat<r>.csv`` for the
  other repeats).
* ``euro_curves.png`` (every estimator) and ``reliability_<estimator>.png`` (every estimator, or
  only raw, the best baseline and the best activation-based estimator with ``reliability="best"``).

``evaluate_store`` runs the steps of the other modules: what the store can feed
(:mod:`~acute.evaluation.sources`), the predictions (:mod:`~acute.evaluation.predictions`), the
groups (:mod:`~acute.evaluation.grouping`), the metric rows (:mod:`~acute.evaluation.table`:
``evaluate_predictions`` computes them from confidences alone, no fitting, no files) and the
result (:mod:`~acute.evaluation.result`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from ..errors import InputError
from ..estimators.stacks import STACKS
from ..validation import check_count
from .crossval import DEFAULT_TEST_FRACTION
from .grouping import RECORD_IDS, groups_of, resolve_group_by, store_groups
from .predictions import FitLog, Predictions, cross_validated, held_out, store_arrays
from .result import EvaluationResult
from .settings import DEFAULT_FOLDS, DEFAULT_REPEATS, EvaluationSettings, check_reliability, estimator_names
from .sources import metadata_fields, sampling_params, stack_sources_left_out, usable_controls, wanted_controls
from .table import best_estimators, evaluate_predictions
from .writer import write_evaluation

# Scripts and tests import DEFAULT_FOLDS, DEFAULT_REPEATS, RECORD_IDS, EvaluationResult,
# estimator_names, resolve_group_by, store_arrays, store_groups and usable_controls from this
# module: they stay importable here; each is defined (and public) in its own module.
__all__ = ["evaluate_store"]

logger = logging.getLogger(__name__)


def evaluate_store(store, test_store=None, out_dir: str | os.PathLike | None = None, *,
                   settings: EvaluationSettings | None = None, out: str | os.PathLike | None = None,
                   progress: bool = True, fold_cache: str | os.PathLike | None = None,
                   **fields: Any) -> EvaluationResult:
    """Fit every estimator on training records, predict held-out records, report and write.

    ``store`` (and ``test_store``) need ``.ids``, ``.correct``, ``.raw_confidence``,
    ``.layer_means`` [n, L+1, d] and optionally ``.manifest`` (as :class:`acute.store.Store`).
    ``settings`` (:class:`~acute.evaluation.settings.EvaluationSettings`, default: the defaults)
    say what is fitted and how it is scored; keyword arguments named as its fields (``cv=3``,
    ``estimators=[...]``) replace those fields. Three modes:

    * cross-validation (default): ``repeats`` x stratified ``cv``-fold, grouped by record id or
      ``group_by`` (:func:`acute.evaluation.crossval.cv_folds`, seed ``seed + repeat``); every record is predicted out
      of fold in every repeat and a metric is the mean over repeats;
    * single split (``test_fraction`` given, or ``cv=None``/``0``): records split by
      :func:`acute.evaluation.crossval.split_ids` (``test_fraction``, default :data:`acute.evaluation.crossval.DEFAULT_TEST_FRACTION`, and ``seed``);
    * separate test store (``test_store`` given): all of ``store`` trains, ``test_store`` tests;
      record ids in both are an error unless ``allow_overlap``.

    ``estimators``: names from ``ESTIMATORS``, ``"all"`` for every one, default
    ``TABLE_ESTIMATORS`` (the baselines, the PCA-10 and cosine probes plain and stacked, ``auto``:
    the searched early / mid / late views and pca20 only when named). ``probe_params`` go to every
    ``ActivationProbe`` (e.g. ``{"n_estimators": 20}``), ``n_jobs`` too (threads of each forest
    fit; None: the probes' default, all cores; the numbers do not depend on it); ``random_state=seed``.
    ``results.json``'s ``params`` record ``total_seconds`` (the fits and predictions) and
    ``fit_seconds`` (per estimator, summed over folds; a fit shared between estimators counts for
    the one fitted first, :func:`acute.evaluation.crossval.fit_predict`; folds read from
    ``fold_cache`` count nothing).
    Every row carries its paired difference to the best baseline (``diff_auc_euro_all``,
    ``diff_smece``, with paired bootstrap intervals; see :func:`acute.evaluation.table.evaluate_predictions`).
    ``controls`` (default: all of :data:`acute.estimators.controls.CONTROLS`, or a list, or False) are
    added as rows; a control the store cannot feed (no metadata, no prompt texts, no
    last-prompt states) is left out and the reason recorded in ``results.json``'s
    ``skipped``, never filled in. The stacks ``acute-all`` and ``visible-all``
    (:mod:`acute.estimators.stacks`) are among the controls: their inner folds keep apart what
    the cross-validation's folds keep apart (the groups reach them as the ``groups`` source of
    the inputs), a first-level control the store cannot feed is dropped from both
    (``params["stack_left_out"]``, each row's ``estimators_used``), and the ``acute-all`` row
    carries what the states add (``states_add_*``: :func:`acute.evaluation.table.evaluate_predictions`). ``metadata_fields`` (default: the store's task's
    ``metadata_fields``) are the record ``meta`` keys the ``platt+meta`` control one-hots and
    whose first field groups the within-group AUROC. ``group_by`` (a metadata field) makes the
    cross-validation folds keep each value of that field on one side of every split
    (leave-category-out, records sharing a tool set) and every interval resample the values
    together (a cluster bootstrap; the t-interval's folds are the grouped ones); every record
    must have it. Default: the store's task's ``default_group_by`` (APIGen, BFCL: ``toolset``),
    record ids for tasks that declare none; :data:`acute.evaluation.grouping.RECORD_IDS` (``"id"``) forces record ids. ``fold_cache`` (a folder) keeps each
    cross-validation fold's predictions as it finishes, so a killed evaluation resumes fold by
    fold (:func:`acute.evaluation.crossval.cross_val_predictions`).
    ``out_dir`` (alias ``out``), when given, receives the files listed in the module docstring
    (:func:`acute.evaluation.writer.write_evaluation`, which can also be called on the result later);
    ``reliability`` says which estimators get a ``reliability_<name>.png``: ``"all"`` (default),
    ``"best"`` (raw, the best baseline and the best activation-based estimator) or a list.

    Raises ``ValueError`` when a class has fewer records than the folds need (the message says
    how many), the training split has a single class, the test split is empty, or inputs are
    malformed. Returns an :class:`~acute.evaluation.result.EvaluationResult`.
    """
    out_dir = _output_folder(out_dir, out)
    settings = dataclasses.replace(settings or EvaluationSettings(), **fields)
    n_bootstrap = check_count(settings.n_bootstrap, "n_bootstrap", minimum=0)
    rows = _rows_to_fit(store, test_store, settings)
    log, fit_seconds = FitLog(), {}
    pred = _predict(store, test_store, settings, rows, progress, fold_cache,
                    dict(random_state=settings.seed, n_jobs=settings.n_jobs, probe_params=settings.probe_params,
                         on_fit=log, metadata_fields=rows.fields, leave_out=rows.leave_out, timings=fit_seconds))
    group_by = pred.split.get("group_by")  # resolved: the task's field, or None for record ids
    groups, group_note = groups_of(test_store if test_store is not None else store,
                                   group_by or (rows.fields[0] if rows.fields else None), pred.ids)
    metrics = evaluate_predictions(pred.cv_predictions if pred.cv_predictions is not None else pred.predictions,
                                   pred.correct, n_bootstrap=n_bootstrap, seed=settings.seed, folds=pred.folds,
                                   groups=groups, clusters=pred.clusters)
    for r in metrics:
        r.update(log.row_extra(r["estimator"]))
    params = _params(store, settings, rows, pred, n_bootstrap, fit_seconds, group_note)
    result = EvaluationResult(rows=metrics, predictions=pred.predictions, test_ids=list(pred.ids),
                              test_correct=pred.correct.astype(bool), split=pred.split,
                              cv_predictions=pred.cv_predictions, skipped=rows.skipped,
                              train_ids=list(pred.train_ids), fold_of=pred.fold_of, params=params,
                              store_manifest=getattr(store, "manifest", None),
                              test_store_manifest=getattr(test_store, "manifest", None) if test_store is not None
                              else None, plot_names=_plot_names(rows.reliability, rows.names, metrics))
    if out_dir is not None:
        write_evaluation(result, out_dir)
    return result


def _output_folder(out_dir, out):
    """``out_dir``, else its alias ``out``; two different paths are an error."""
    if out_dir is None:
        return out
    if out is not None and Path(out) != Path(out_dir):
        raise InputError(f"give out_dir or out, not two different paths ({out_dir!s}, {out!s})")
    return out_dir


@dataclass(frozen=True)
class _Rows:
    """The rows an evaluation fits, checked before any fitting: ``names`` (the estimators and the
    usable controls), the reliability diagrams, the metadata ``fields``, the ``usable`` controls
    and the ``skipped`` ones with why, the stacks' sources left out (``leave_out``; ``left``:
    first-level control -> why), and whether it cross-validates (``cv_mode``, ``group_by``)."""

    names: list[str]
    reliability: str | list[str]
    fields: tuple[str, ...]
    usable: list[str]
    skipped: dict[str, str]
    leave_out: list[str]
    left: dict[str, str]
    cv_mode: bool
    group_by: str | None


def _rows_to_fit(store, test_store, settings: EvaluationSettings) -> _Rows:
    """The estimators and the controls the store (and the test store) can feed, checked."""
    names = estimator_names(settings.estimators)
    reliability = check_reliability(settings.reliability, names)
    fields = metadata_fields(store, settings.metadata_fields)
    wanted = wanted_controls(settings.controls, names)
    usable, skipped = usable_controls(store, wanted, fields)
    if test_store is not None and usable:  # the stacks fit on the training store only
        fed, more = usable_controls(test_store, [u for u in usable if u not in STACKS], fields, "the test store")
        usable = [u for u in usable if u in fed or u in STACKS]
        skipped.update(more)
    for name, why in skipped.items():
        logger.warning("control %s left out: %s", name, why)
    names = names + usable
    leave_out, left = stack_sources_left_out(store, test_store, names, fields)
    cv_mode = bool(test_store is None and settings.test_fraction is None and settings.cv)
    group_by = settings.group_by
    if group_by is not None and group_by != RECORD_IDS and not cv_mode:
        raise InputError("group_by needs cross-validation (no test_fraction, no test store)")
    return _Rows(names, reliability, fields, usable, skipped, leave_out, left, cv_mode,
                 group_by if cv_mode else None)


def _predict(store, test_store, settings: EvaluationSettings, rows: _Rows, progress: bool, fold_cache,
             fit_kw: Mapping[str, Any]) -> Predictions:
    """Every row's predictions: out of fold (cross-validation) or on the held-out records."""
    if rows.cv_mode:
        return cross_validated(store, rows.names, fit_kw, cv=settings.cv, repeats=settings.repeats,
                               seed=settings.seed, group_by=rows.group_by, progress=progress, fold_cache=fold_cache)
    test_fraction = DEFAULT_TEST_FRACTION if settings.test_fraction is None else settings.test_fraction
    return held_out(store, test_store, rows.names, fit_kw, test_fraction=test_fraction, seed=settings.seed,
                    allow_overlap=settings.allow_overlap)


def _params(store, settings: EvaluationSettings, rows: _Rows, pred: Predictions, n_bootstrap: int,
            fit_seconds: Mapping[str, float], group_note: dict | None) -> dict:
    """``results.json``'s ``params``: the rows, settings, timings, controls and intervals."""
    names, group_by = rows.names, pred.split.get("group_by")
    return {"estimators": names, "n_bootstrap": int(n_bootstrap), "n_jobs": settings.n_jobs,
            "probe_params": dict(settings.probe_params or {}), "total_seconds": pred.seconds,
            "fit_seconds": {n: round(fit_seconds[n], 3) for n in names if n in fit_seconds},
            "controls": rows.usable, "skipped": rows.skipped, "metadata_fields": list(rows.fields),
            **({"stack_left_out": rows.left} if any(n in STACKS for n in names) else {}),
            **sampling_params(store, rows.usable),
            "group_by": group_by, "within_group": group_note,
            "interval": (f"95% percentile cluster bootstrap over the values of {group_by!r} (records sharing "
                         "one are drawn together)" if group_by else "95% percentile bootstrap over records")
                        + " (paired: the same resamples for every estimator and repeat); smECE's interval is "
                          "shifted by the bootstrap bias (draws - (mean(draws) - estimate)) so it is centred "
                          "on its estimate",
            "t_interval": "corrected resampled t (Nadeau and Bengio 2003) over the fold x repeat "
                          "differences, variance (1/J + n_test/n_train) s^2, t with J - 1 df, centred on "
                          "the mean of the per-fold differences (diff_*_t_mean)"}


def _plot_names(reliability: str | list[str], names: list[str], rows: list[dict]) -> list[str]:
    """The estimators that get a reliability diagram."""
    if reliability == "all":
        return list(names)
    if reliability == "best":
        return [n for n in names if n in best_estimators(rows).values() or n == "raw"]
    return list(reliability)
