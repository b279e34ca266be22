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

``evaluate_predictions`` computes the metric rows from confidences alone (no fitting, no files).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ..errors import InputError
from ..metrics.resampling import DEFAULT_N_BOOTSTRAP
from ..estimators.agreement import AGREEMENT_CONTROLS, sampling_cost
from ..estimators.controls import CONTROLS
from ..estimators.inputs import GROUPS
from ..estimators.stacks import STACK_MEMBERS, STACKS
from ..estimators.features import NAMED_LAYERS
from ..estimators.registry import (ESTIMATORS, TABLE_ESTIMATORS, estimator_pooling, is_estimator,
                                   make_estimator)
from ..validation import check_confidence, check_correct, check_count
from .crossval import DEFAULT_TEST_FRACTION, ids_digest, split_ids
from .markdown import results_markdown, selective_markdown
from .table import best_estimators, evaluate_predictions

__all__ = ["DEFAULT_FOLDS", "DEFAULT_REPEATS", "RECORD_IDS", "EvaluationResult", "estimator_names", "evaluate_store",
           "resolve_group_by", "store_arrays", "store_groups", "usable_controls"]

logger = logging.getLogger(__name__)


# The default cross-validation of ``evaluate_store``: 5-fold stratified, repeated twice.
DEFAULT_FOLDS = 5


DEFAULT_REPEATS = 2

#: ``group_by`` value for folds and resamples of single records, whatever the task declares
RECORD_IDS = "id"


@dataclass
class EvaluationResult:
    """What ``evaluate_store`` computed (:func:`acute.evaluation.writer.write_evaluation` writes it).

    ``rows``: one metrics dict per estimator (see :func:`evaluate_predictions`, plus ``layer``
    for searched layers and ``chosen`` for ``auto``); ``predictions``: confidence per estimator on
    ``test_ids`` (in cross-validation: every record, out of fold, repeat 0); ``cv_predictions``:
    ``[repeats, n]`` per estimator in cross-validation, else None; ``test_correct``; ``split``:
    mode, seed, folds or test fraction, sizes and id hashes; ``skipped``: control -> why it was
    left out; ``train_ids``, ``fold_of`` (each record's test fold per repeat), ``params``, the
    stores' manifests and ``plot_names`` (the reliability diagrams to draw), for the writer;
    ``out_dir`` and ``files`` (name -> path) once written.
    """

    rows: list[dict]
    predictions: dict[str, np.ndarray]
    test_ids: list
    test_correct: np.ndarray
    split: dict
    out_dir: Path | None = None
    files: dict[str, Path] = field(default_factory=dict)
    cv_predictions: dict[str, np.ndarray] | None = None
    skipped: dict[str, str] = field(default_factory=dict)
    train_ids: list = field(default_factory=list)
    fold_of: list | None = None
    params: dict = field(default_factory=dict)
    store_manifest: dict | None = None
    test_store_manifest: dict | None = None
    plot_names: list = field(default_factory=list)

    def row(self, estimator: str) -> dict:
        """The metrics row of one estimator (``KeyError`` if it was not evaluated)."""
        for r in self.rows:
            if r["estimator"] == estimator:
                return r
        raise KeyError(estimator)

    def selection(self, chosen: str) -> dict[str, Any]:
        """How ``chosen`` (an evaluated probe, e.g. the one exported) compares with the other
        activation-based estimators and the baselines of this evaluation, in the layout of
        :meth:`acute.estimators.registry.AutoEstimator.selection` (what ``probe.json`` records as
        ``selection``): ``chosen``, ``best_by_cv`` (the best of them by the evaluation's
        auc-euro (all), ties by smECE), ``refit`` (``chosen``), ``criterion``, ``cv`` (the
        evaluation's folds), ``candidates``, ``scores`` (best first), ``best_baseline`` and
        ``warning`` (when a baseline scored above ``chosen``). A probe exported on all of the
        evaluated records gets the evaluation's out-of-fold comparison instead of refitting one."""
        from ..estimators.registry import estimator_group
        from ..metrics.specs import ranked

        by_name = {r["estimator"]: r for r in self.rows}
        if chosen not in by_name:
            raise InputError(f"{chosen!r} was not evaluated (evaluated: {', '.join(by_name)})")
        groups = {n: estimator_group(n) for n in by_name if is_estimator(n)}
        cands = [n for n, g in groups.items() if g in ("acute", "stacked", "auto")]
        if chosen not in cands:
            raise InputError(f"{chosen!r} is not a probe: only a probe is exported")
        names = [n for n in by_name if groups.get(n) in ("baseline", "acute", "stacked", "auto")
                 and np.isfinite(by_name[n].get("auc_euro_all", np.nan))]
        keys = ("auc_euro_all", "smece", "auroc")
        scores = {n: {k: float(by_name[n].get(k, np.nan)) for k in keys} for n in names}
        ranking = ranked(names, scores.__getitem__, digits=9)
        best = next((n for n in ranking if n in cands), chosen)
        best_baseline = next((n for n in ranking if groups[n] == "baseline"), None)
        warning = None
        if best_baseline is not None and chosen in ranking and ranking.index(best_baseline) < ranking.index(chosen):
            b, c = scores[best_baseline], scores[chosen]
            warning = (f"the baseline {best_baseline} scored above {chosen} in this evaluation (auc-euro "
                       f"{b['auc_euro_all']:.4f} vs {c['auc_euro_all']:.4f}); on this data the hidden states "
                       "add nothing measurable over the raw confidence")
        split = self.split
        return {"chosen": chosen, "best_by_cv": best, "refit": chosen,
                "criterion": "the evaluation's out-of-fold auc-euro (all), ties by smECE",
                "cv": {"source": "evaluation", "mode": split.get("mode"), "n_splits": split.get("n_splits"),
                       "n_repeats": split.get("n_repeats"), "random_state": split.get("seed")},
                "candidates": cands, "scores": [{"estimator": n, **scores[n]} for n in ranking],
                "best_baseline": best_baseline, "warning": warning}

    def to_markdown(self) -> str:
        """The results table (:func:`acute.evaluation.markdown.results_markdown`)."""
        return results_markdown(self.rows)

    def markdown(self) -> str:
        """What ``results.md`` holds: the paragraph on how the records were scored, the results
        table, then the selective-prediction table (:func:`acute.evaluation.markdown.selective_markdown`)."""
        from .writer import intro_markdown

        selective = selective_markdown(self.rows)
        text = intro_markdown(self) + self.to_markdown()
        if selective:
            text += ("\n## Selective prediction\n\nTrust the answers whose confidence is at least a "
                     "threshold: AURC is the mean error rate among trusted answers over all coverage "
                     "levels (lower is better), E-AURC the part above a perfect ranking's, coverage "
                     "at 5% / 10% error the largest fraction that can be trusted with at most that "
                     "error rate among them (a threshold chosen on these records, in hindsight: no "
                     "guarantee for new answers). Its certified counterpart (cross-validation only) "
                     "trusts each fold's answers by a certificate fitted on the other folds' "
                     "out-of-fold predictions (at most 10% error, delta 0.1, as `acute export "
                     "--max-error 0.1` certifies): the share trusted (mean over repeats), the error "
                     "among them and the share of folds that certified anything. Same intervals as "
                     "above.\n\n" + selective)
        return text


def store_arrays(store, label: str) -> tuple[list, np.ndarray, np.ndarray]:
    ids = list(store.ids)
    n = len(ids)
    if n == 0:
        raise InputError(f"{label} has no records")
    try:
        correct = check_correct(np.asarray(store.correct), n, name=f"{label}.correct")
        conf = check_confidence(store.raw_confidence, name=f"{label}.raw_confidence")
    except ValueError as e:
        raise InputError(f"{label}: {e}") from None
    if conf.size != n:
        raise InputError(f"{label}.raw_confidence has {conf.size} entries but {label}.ids has {n}")
    return ids, correct, conf


def _check_layer_means(store, n: int, label: str) -> tuple[int, ...]:
    shape = tuple(store.layer_means.shape)
    if len(shape) != 3 or shape[0] != n:
        raise InputError(f"{label}.layer_means must have shape [n={n}, L+1, d], got {shape}")
    if hasattr(store, "check_finite"):  # a Store names the record and shard of a NaN
        store.check_finite()
    return shape[1:]


def _inner_folds(name: str, probe_params: Mapping[str, Any] | None) -> int:
    """How many stratified folds a probe (or ``auto``) runs inside its own fit (0: none)."""
    est = make_estimator(name, probe_params=probe_params)
    params = est.get_params()
    if name == "auto" or params.get("calibration") is not None or params.get("layer") in ("early", "mid", "late") \
            or params.get("view") in ("early", "mid", "late"):
        return int(params.get("cv", 0))
    return 0


def _check_probe_inputs(names: Sequence[str], shape: tuple[int, ...], n_train: int, n_minority: int,
                        probe_params: Mapping[str, Any] | None, where: str) -> None:
    """Fail before any fitting when a probe cannot run on training sets of ``n_train`` records
    whose smaller class has ``n_minority``: too few records for the folds the probes run inside
    their own fit, or more PCA components than the hidden size or the records allow."""
    probes = [n for n in names if estimator_pooling(n) is not None]
    if not probes:
        return
    inner = {n: _inner_folds(n, probe_params) for n in probes}
    need = max(inner.values())
    if need and n_minority < need:
        which = ", ".join(n for n, k in inner.items() if k == need)
        raise InputError(f"{which} run stratified {need}-fold cross-validation inside their fit, which "
                         f"needs at least {need} correct and {need} wrong training records; {where} "
                         f"has only {n_minority} of one class: collect more records or leave them out")
    folds = max(int(make_estimator(n, probe_params=probe_params).get_params().get("cv", 0)) for n in probes)
    if n_train < folds:
        raise InputError(f"{where} has {n_train} records, fewer than the probes' {folds} "
                         "cross-validation folds; collect more records")
    hidden = shape[1]
    for n in probes:
        view = make_estimator(n, probe_params=probe_params).get_params().get("view", "")
        if str(view).startswith("pca") and int(view[3:]) > min(hidden, n_train):
            raise InputError(f"{n} needs {view[3:]} principal components but the hidden size is {hidden} "
                             f"and {where} has {n_train} records; leave {n} out of estimators")


def estimator_names(estimators: Sequence[str] | str | None) -> list[str]:
    """The estimator names of an evaluation: :data:`TABLE_ESTIMATORS` for None, every one of
    :data:`ESTIMATORS` for ``"all"`` (or ``["all"]``), else the names given, checked."""
    if estimators is None:
        return list(TABLE_ESTIMATORS)
    if estimators == "all" or list(estimators) == ["all"]:
        return list(ESTIMATORS)
    names = list(estimators)
    if not names:
        raise InputError("estimators is empty: nothing to evaluate")
    unknown = [n for n in names if not is_estimator(n)]
    if unknown:
        raise InputError(f"unknown estimator(s) {unknown}; choose from {', '.join(ESTIMATORS)} "
                         "(a probe name may end in @POOLING, e.g. acute-cosine-stacked@last-answer)")
    if len(set(names)) != len(names):
        raise InputError(f"estimators contains duplicates: {names}")
    return names


class _FitLog:
    """What the fits chose (a searched layer, auto's pick) and how long they took, per estimator."""

    def __init__(self):
        self.layers: dict[str, list[int]] = {}
        self.chosen: dict[str, list[str]] = {}
        self.used: dict[str, list[str]] = {}

    def __call__(self, name: str, est: Any) -> None:
        layer = getattr(est, "layer_", None)
        params = est.get_params()
        searched = params.get("layer") in NAMED_LAYERS or params.get("view") in NAMED_LAYERS
        if isinstance(layer, (int, np.integer)) and searched:
            self.layers.setdefault(name, []).append(int(layer))
        best = getattr(est, "best_", None)
        if isinstance(best, str):
            self.chosen.setdefault(name, []).append(best)
        used = getattr(est, "estimators_used_", None)
        if used is not None and name not in self.used:
            self.used[name] = list(used)

    def row_extra(self, name: str) -> dict:
        layers, chosen = self.layers.get(name), self.chosen.get(name)
        out: dict[str, Any] = {"layer": None}
        if layers:
            out["layer"] = max(set(layers), key=lambda v: (layers.count(v), -v))
            out["layers"] = layers
        if chosen:
            out["chosen"] = max(set(chosen), key=lambda v: (chosen.count(v), v))
            out["chosen_per_fit"] = chosen
        if name in self.used:
            out["estimators_used"] = self.used[name]
        return out


def evaluate_store(store, test_store=None, out_dir: str | os.PathLike | None = None, *,
                   out: str | os.PathLike | None = None,
                   estimators: Sequence[str] | None = None, cv: int | None = DEFAULT_FOLDS,
                   repeats: int = DEFAULT_REPEATS, test_fraction: float | None = None, seed: int = 0,
                   n_bootstrap: int = DEFAULT_N_BOOTSTRAP, n_jobs: int | None = None,
                   probe_params: Mapping[str, Any] | None = None, progress: bool = True,
                   reliability: str | Sequence[str] = "all", allow_overlap: bool = False,
                   controls: bool | Sequence[str] = True, group_by: str | None = None,
                   metadata_fields: Sequence[str] | None = None,
                   fold_cache: str | os.PathLike | None = None) -> EvaluationResult:
    """Fit every estimator on training records, predict held-out records, report and write.

    ``store`` (and ``test_store``) need ``.ids``, ``.correct``, ``.raw_confidence``,
    ``.layer_means`` [n, L+1, d] and optionally ``.manifest`` (as :class:`acute.store.Store`).
    Three modes:

    * cross-validation (default): ``repeats`` x stratified ``cv``-fold, grouped by record id or
      ``group_by`` (:func:`acute.evaluation.crossval.cv_folds`, seed ``seed + repeat``); every record is predicted out
      of fold in every repeat and a metric is the mean over repeats;
    * single split (``test_fraction`` given, or ``cv=None``/``0``): records split by
      :func:`split_ids` (``test_fraction``, default :data:`DEFAULT_TEST_FRACTION`, and ``seed``);
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
    ``diff_smece``, with paired bootstrap intervals; see :func:`evaluate_predictions`).
    ``controls`` (default: all of :data:`acute.estimators.controls.CONTROLS`, or a list, or False) are
    added as rows; a control the store cannot feed (no metadata, no prompt texts, no
    last-prompt states) is left out and the reason recorded in ``results.json``'s
    ``skipped``, never filled in. The stacks ``acute-all`` and ``visible-all``
    (:mod:`acute.estimators.stacks`) are among the controls: their inner folds keep apart what
    the cross-validation's folds keep apart (the groups reach them as the ``groups`` source of
    the inputs), a first-level control the store cannot feed is dropped from both
    (``params["stack_left_out"]``, each row's ``estimators_used``), and the ``acute-all`` row
    carries what the states add (``states_add_*``: :func:`evaluate_predictions`). ``metadata_fields`` (default: the store's task's
    ``metadata_fields``) are the record ``meta`` keys the ``platt+meta`` control one-hots and
    whose first field groups the within-group AUROC. ``group_by`` (a metadata field) makes the
    cross-validation folds keep each value of that field on one side of every split
    (leave-category-out, records sharing a tool set) and every interval resample the values
    together (a cluster bootstrap; the t-interval's folds are the grouped ones); every record
    must have it. Default: the store's task's ``default_group_by`` (APIGen, BFCL: ``toolset``),
    record ids for tasks that declare none; :data:`RECORD_IDS` (``"id"``) forces record ids. ``fold_cache`` (a folder) keeps each
    cross-validation fold's predictions as it finishes, so a killed evaluation resumes fold by
    fold (:func:`acute.evaluation.crossval.cross_val_predictions`).
    ``out_dir`` (alias ``out``), when given, receives the files listed in the module docstring
    (:func:`acute.evaluation.writer.write_evaluation`, which can also be called on the result later);
    ``reliability`` says which estimators get a ``reliability_<name>.png``: ``"all"`` (default),
    ``"best"`` (raw, the best baseline and the best activation-based estimator) or a list.

    Raises ``ValueError`` when a class has fewer records than the folds need (the message says
    how many), the training split has a single class, the test split is empty, or inputs are
    malformed. Returns an :class:`EvaluationResult`.
    """
    if out_dir is None:
        out_dir = out
    elif out is not None and Path(out) != Path(out_dir):
        raise InputError(f"give out_dir or out, not two different paths ({out_dir!s}, {out!s})")
    n_bootstrap = check_count(n_bootstrap, "n_bootstrap", minimum=0)
    names = estimator_names(estimators)
    reliability = _check_reliability(reliability, names)
    fields = _metadata_fields(store, metadata_fields)
    wanted = _check_controls(controls, names)
    usable, skipped = usable_controls(store, wanted, fields)
    if test_store is not None and usable:  # the stacks fit on the training store only
        fed, more = usable_controls(test_store, [u for u in usable if u not in STACKS], fields, "the test store")
        usable = [u for u in usable if u in fed or u in STACKS]
        skipped.update(more)
    for name, why in skipped.items():
        logger.warning("control %s left out: %s", name, why)
    names = names + usable
    leave_out, left = _stack_sources_left_out(store, test_store, names, fields)
    cv_mode = test_store is None and test_fraction is None and cv
    if group_by is not None and group_by != RECORD_IDS and not cv_mode:
        raise InputError("group_by needs cross-validation (no test_fraction, no test store)")
    group_by = group_by if cv_mode else None
    log = _FitLog()
    fit_seconds: dict[str, float] = {}
    fit_kw = dict(random_state=seed, n_jobs=n_jobs, probe_params=probe_params, on_fit=log,
                  metadata_fields=fields, leave_out=leave_out, timings=fit_seconds)
    if cv_mode:
        pred = _cross_validated(store, names, cv, repeats, seed, progress, fit_kw, group_by, fold_cache)
    else:
        pred = _held_out(store, test_store, names, DEFAULT_TEST_FRACTION if test_fraction is None else test_fraction,
                         seed, fit_kw, allow_overlap)
    group_by = pred.split.get("group_by")  # resolved: the task's field, or None for record ids
    group_field = group_by or (fields[0] if fields else None)
    groups, group_note = _groups_of(test_store if test_store is not None else store, group_field, pred.ids)
    rows = evaluate_predictions(pred.cv_predictions if pred.cv_predictions is not None else pred.predictions,
                                pred.correct, n_bootstrap=n_bootstrap, seed=seed, folds=pred.folds,
                                groups=groups, clusters=pred.clusters)
    for r in rows:
        r.update(log.row_extra(r["estimator"]))
    params = {"estimators": names, "n_bootstrap": int(n_bootstrap), "n_jobs": n_jobs,
              "probe_params": dict(probe_params or {}), "total_seconds": pred.seconds,
              "fit_seconds": {n: round(fit_seconds[n], 3) for n in names if n in fit_seconds},
              "controls": usable, "skipped": skipped, "metadata_fields": list(fields),
              **({"stack_left_out": left} if any(n in STACKS for n in names) else {}),
              **_sampling_params(store, usable),
              "group_by": group_by, "within_group": group_note,
              "interval": (f"95% percentile cluster bootstrap over the values of {group_by!r} (records sharing "
                           "one are drawn together)" if group_by else "95% percentile bootstrap over records")
                          + " (paired: the same resamples for every estimator and repeat); smECE's interval is "
                            "shifted by the bootstrap bias (draws - (mean(draws) - estimate)) so it is centred "
                            "on its estimate",
              "t_interval": "corrected resampled t (Nadeau and Bengio 2003) over the fold x repeat "
                            "differences, variance (1/J + n_test/n_train) s^2, t with J - 1 df, centred on "
                            "the mean of the per-fold differences (diff_*_t_mean)"}
    if reliability == "all":
        plot_names = names
    elif reliability == "best":
        plot_names = [n for n in names if n in best_estimators(rows).values() or n == "raw"]
    else:
        plot_names = reliability
    result = EvaluationResult(rows=rows, predictions=pred.predictions, test_ids=list(pred.ids),
                              test_correct=pred.correct.astype(bool), split=pred.split,
                              cv_predictions=pred.cv_predictions, skipped=skipped, train_ids=list(pred.train_ids),
                              fold_of=pred.fold_of, params=params, store_manifest=getattr(store, "manifest", None),
                              test_store_manifest=getattr(test_store, "manifest", None) if test_store is not None
                              else None, plot_names=list(plot_names))
    if out_dir is not None:
        from .writer import write_evaluation

        write_evaluation(result, out_dir)
    return result


def resolve_group_by(store, group_by: str | None) -> str | None:
    """The metadata field whose values the cross-validation keeps apart: ``group_by`` when given,
    :data:`RECORD_IDS` for none (records one by one), else the store's task's
    ``default_group_by`` (APIGen and BFCL: ``toolset``), None when it declares none."""
    if group_by == RECORD_IDS:
        return None
    if group_by is not None:
        return group_by
    from ..tasks import TASKS

    task = (getattr(store, "manifest", None) or {}).get("task")
    cls = TASKS.get(task) if isinstance(task, str) else None
    return getattr(cls, "default_group_by", None) if cls is not None else None


def store_groups(store, group_by: str | None, ids: Sequence[Any] | None = None) -> tuple[str | None, list[str] | None]:
    """``(field, values)``: :func:`resolve_group_by`'s field and its value on each record of
    ``ids`` (default: the store's, in order), or ``(None, None)`` for records one by one. An error
    names the first record without the field, and for the task's own field how to group by
    record id instead."""
    field = resolve_group_by(store, group_by)
    if field is None:
        return None, None
    try:
        return field, _record_field(store, field, list(store.ids) if ids is None else ids)
    except InputError as e:
        hint = "" if group_by is not None else (f" (the task groups by {field!r}; group_by={RECORD_IDS!r} / "
                                                f"--group-by {RECORD_IDS} treats records one by one)")
        raise InputError(f"{e}{hint}") from None


def _check_reliability(reliability, names: Sequence[str]):
    if isinstance(reliability, str):
        if reliability not in ("all", "best"):
            raise InputError(f"reliability must be 'all', 'best' or a list of estimator names, got {reliability!r}")
        return reliability
    reliability = list(reliability)
    missing = [n for n in reliability if n not in names]
    if missing:
        raise InputError(f"reliability names {missing} are not among the evaluated estimators {names}")
    return reliability


def _metadata_fields(store, given: Sequence[str] | None) -> tuple[str, ...]:
    """``given``, else the metadata fields the store's task declares (none when unknown)."""
    if given is not None:
        if isinstance(given, str):
            raise InputError(f"metadata_fields must be a list of field names, got the string {given!r}")
        return tuple(given)
    from ..tasks import TASKS

    task = (getattr(store, "manifest", None) or {}).get("task")
    cls = TASKS.get(task) if isinstance(task, str) else None
    return tuple(getattr(cls, "metadata_fields", ())) if cls is not None else ()


def _check_controls(controls, names: Sequence[str]) -> list[str]:
    if controls is True:
        wanted = list(CONTROLS)
    elif controls is False or controls is None:
        wanted = []
    else:
        wanted = list(controls)
        unknown = [c for c in wanted if c not in CONTROLS]
        if unknown:
            raise InputError(f"unknown control(s) {unknown}; choose from {', '.join(CONTROLS)}")
    return [c for c in wanted if c not in names]


def _sampling_params(store, usable: Sequence[str]) -> dict:
    """What the sampling controls cost, when they are rows: the samples per record and the tokens
    generated per record relative to the greedy answer alone."""
    if not any(c in AGREEMENT_CONTROLS for c in usable):
        return {}
    settings = (store.manifest.get("generation") or {}).get("samples") or {}
    return {"samples": settings, "sampling_cost_tokens": round(sampling_cost(store.records), 3)}


#: the fewest records of each class a store needs for the stack rows (5 outer x 5 inner folds)
_STACK_MIN_CLASS = 25


def _stack_sources_left_out(store, test_store, names: Sequence[str],
                            fields: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """The sources a stack among ``names`` would read but the store (or the test store) cannot
    feed, and ``{first-level estimator: why}`` for the stacks' first-level controls so dropped (a
    stack fits without them: :class:`acute.estimators.stacks.StackEstimator`). A source another
    row reads is never left out."""
    from ..estimators.registry import estimator_sources

    members = list(dict.fromkeys(m for n in names if n in STACKS for m in STACK_MEMBERS[n] if m in CONTROLS))
    if not members:
        return [], {}
    _, left = usable_controls(store, members, fields)
    if test_store is not None:
        _, more = usable_controls(test_store, [m for m in members if m not in left], fields, "the test store")
        left.update(more)
    kept = {s for n in names if n not in STACKS for s in estimator_sources(n)}
    kept |= {s for n in names if n in STACKS for m in STACK_MEMBERS[n] if m not in left
             for s in estimator_sources(m)}
    out = sorted({s for m in left for s in estimator_sources(m)} - kept)
    return out, left


def usable_controls(store, wanted: Sequence[str], fields: Sequence[str],
                    label: str = "the store") -> tuple[list[str], dict[str, str]]:
    """The controls of ``wanted`` that ``store`` can feed, and ``{control: reason}`` for the
    others: ``platt+meta`` needs the metadata ``fields`` on every record, ``tfidf+platt`` the
    records' prompts, ``answer-text`` their prompts and replies, ``visible`` and
    ``answer-surface`` those and the per-token log-probs
    (:func:`acute.estimators.visible.visible_inputs`), ``question-only`` and
    ``question+confidence`` the last-prompt states, ``consistency`` and ``semantic-entropy``
    sampled answers on every record, the stacks ``acute-all`` and ``visible-all`` 25 records of
    each class (their first-level controls the store cannot feed are dropped from them instead:
    :func:`_stack_sources_left_out`)."""
    from ..estimators.controls import metadata_matrix
    from ..estimators.visible import reply_texts, visible_inputs

    usable, skipped = [], {}
    records = getattr(store, "records", None)
    for name in wanted:
        why = None
        if name == "platt+meta":
            if not fields:
                why = (f"{label}'s task declares no metadata fields (name them with metadata_fields / "
                       "--meta-fields)")
            elif records is None:
                why = f"{label} has no records to read metadata from"
            else:
                try:
                    metadata_matrix(records, fields, where=label)
                except InputError as e:
                    why = str(e)
        elif name == "tfidf+platt":
            if records is None:
                why = f"{label} has no records to read prompts from"
            else:
                bad = next((r.get("id") for r in records if not isinstance(r.get("prompt"), str)), None)
                if bad is not None or not records:
                    why = f"{label}: record {bad!r} has no prompt text"
        elif name in ("answer-text", "visible", "answer-surface"):
            try:
                if records is None:
                    raise InputError(f"{label} has no records to read replies from")
                if name == "answer-text":
                    reply_texts(records, where=label)
                else:
                    visible_inputs(records, getattr(store, "token_logprobs", None), where=label)
            except InputError as e:
                why = str(e)
        elif name in AGREEMENT_CONTROLS:
            bad = None if records is None else next((r.get("id") for r in records if not r.get("samples")), None)
            if records is None or bad is not None or not records:
                why = (f"{label} has no sampled answers (record {bad!r}); collect with "
                       "`acute collect --samples K` to have them")
        elif name in STACKS:
            correct = np.asarray(getattr(store, "correct", ()), dtype=np.int64)
            fewest = int(min(correct.sum(), correct.size - correct.sum())) if correct.size else 0
            if fewest < _STACK_MIN_CLASS:
                why = (f"{label} has {fewest} records of its smaller class; a stack's {_STACK_MIN_CLASS // 5} inner "
                       f"folds inside each training fold need at least {_STACK_MIN_CLASS}")
        elif name in ("question-only", "question+confidence"):
            if "last-prompt" not in tuple(getattr(store, "poolings", ("mean",))):
                why = (f"{label} has no last-prompt states (collected before acute kept them): "
                       "`acute rerecord STORE --out NEW_STORE` adds them")
        if why is None:
            usable.append(name)
        else:
            skipped[name] = why
    return usable, skipped


def _record_field(store, field: str, ids: Sequence[Any]) -> list[str]:
    """``meta[field]`` of the records ``ids`` (in that order); an error names the store (its
    folder, when it has one) and the first record without it."""
    path = getattr(store, "path", None)
    label = "the store" if path is None else str(path)
    records = getattr(store, "records", None)
    if records is None:
        raise InputError(f"{label} has no records: cannot read the metadata field {field!r}")
    by_id = {str(r.get("id")): r for r in records}
    out = []
    for rid in ids:
        meta = (by_id.get(str(rid)) or {}).get("meta") or {}
        if meta.get(field) is None:
            raise InputError(f"{label}: record {rid!r} has no metadata field {field!r}")
        out.append(str(meta[field]))
    return out


def _groups_of(store, field: str | None, ids: Sequence[Any]) -> tuple[list[str] | None, dict | None]:
    """The groups of the within-group AUROC (``field`` of every evaluated record) and a note of
    them (field, number of groups, the groups with one class, which have no AUROC); ``(None,
    note)`` with the reason when some record lacks the field."""
    if field is None:
        return None, None
    try:
        groups = _record_field(store, field, ids)
    except InputError as e:
        return None, {"field": field, "left_out": str(e)}
    return groups, {"field": field, "n_groups": len(set(groups))}


@dataclass
class _Predictions:
    """What a mode of :func:`evaluate_store` predicted: confidences on ``ids`` (``correct``),
    per repeat in cross-validation, plus the split's description."""

    ids: list
    correct: np.ndarray
    predictions: dict[str, np.ndarray]
    split: dict
    train_ids: list
    seconds: float
    cv_predictions: dict[str, np.ndarray] | None = None
    fold_of: list | None = None
    folds: list | None = None
    clusters: list | None = None  #: the group of each record the folds kept apart (None: record ids)


def _cross_validated(store, names, cv, repeats, seed, progress, fit_kw, group_by=None,
                     fold_cache=None) -> _Predictions:
    """Every record scored out of fold by repeated stratified k-fold grouped by id (or by the
    metadata field ``group_by``)."""
    from tqdm.auto import tqdm

    from .crossval import check_folds, cross_val_predictions, cv_folds, inputs_for

    fit_kw = dict(fit_kw)
    fields = fit_kw.pop("metadata_fields", ())
    leave_out = fit_kw.pop("leave_out", ())
    ids, correct, conf = store_arrays(store, "store")
    check_folds(correct, cv, "the store")
    group_by, groups = store_groups(store, group_by, ids)
    folds = cv_folds(ids, correct, n_splits=cv, n_repeats=repeats, seed=seed, groups=groups,
                     group_name="record ids" if group_by is None else f"values of {group_by!r}")
    if any(estimator_pooling(n) is not None for n in names):
        shape = _check_layer_means(store, len(ids), "store")
        n_min = min(int(min(correct[tr].sum(), tr.size - correct[tr].sum())) for rep in folds for tr, _ in rep)
        n_tr = min(tr.size for rep in folds for tr, _ in rep)
        _check_probe_inputs(names, shape, n_tr, n_min, fit_kw["probe_params"], "a training fold")
    X = inputs_for(store, names, fields, leave_out)
    if groups is not None:  # what a stack's inner folds keep apart, as the outer folds do
        X = X.with_source(GROUPS, groups)

    def bar(it):
        return tqdm(it, desc=f"{cv}-fold x {repeats}", disable=not progress, file=sys.stderr)

    t0 = time.perf_counter()
    manifest = getattr(store, "manifest", None) or {}
    key = json.dumps({"ids": ids_digest(ids), "fields": list(fields),
                      **{k: manifest.get(k) for k in ("model", "model_weights", "task", "task_settings",
                                                       "generation", "dtype", "poolings")}},
                     sort_keys=True, default=str)
    cv_preds = cross_val_predictions(names, X, correct, folds, progress=bar, cache_dir=fold_cache,
                                     cache_key=key, **fit_kw)
    split = {"mode": "cv", "seed": int(seed), "n_splits": int(cv), "n_repeats": int(repeats),
             "n_records": len(ids), "accuracy": float(correct.mean()), "group_by": group_by,
             "ids_sha256": ids_digest(ids), "folds_file": "folds.json"}
    return _Predictions(ids, correct, {n: p[0] for n, p in cv_preds.items()}, split, ids,
                        time.perf_counter() - t0, cv_preds, [_fold_index(rep, len(ids)) for rep in folds], folds,
                        groups)


def _held_out(store, test_store, names, test_fraction, seed, fit_kw, allow_overlap=False) -> _Predictions:
    """Fit on the training records (a split by id, or all of ``store``), score the test ones."""
    from .crossval import fit_predict, inputs_for

    fit_kw = dict(fit_kw)
    fields = fit_kw.pop("metadata_fields", ())
    leave_out = fit_kw.pop("leave_out", ())
    ids, correct, _ = store_arrays(store, "store")  # checks the labels and confidences
    if test_store is not None:
        mode = "test_store"
        t_ids, t_correct, _ = store_arrays(test_store, "test_store")
        i_tr, i_te, te_store = np.arange(len(ids)), np.arange(len(t_ids)), test_store
        train_ids, y_tr = ids, correct
        eval_ids, y_te = t_ids, t_correct
    else:
        mode = "split"
        train_mask, test_mask = split_ids(ids, test_fraction=test_fraction, seed=seed)
        i_tr, i_te, te_store = np.flatnonzero(train_mask), np.flatnonzero(test_mask), store
        train_ids, y_tr = [ids[i] for i in i_tr], correct[i_tr]
        eval_ids, y_te = [ids[i] for i in i_te], correct[i_te]
    if not eval_ids:
        raise InputError(f"the test split is empty (n={len(ids)}, test_fraction={test_fraction}, "
                         f"seed={seed}); use more records or a larger test_fraction")
    if not train_ids:
        raise InputError("the training split is empty")
    if y_tr.min() == y_tr.max():
        raise InputError(f"the training split has a single class (all {len(train_ids)} records "
                         f"{'correct' if y_tr[0] else 'incorrect'}); calibrators need both")
    if any(estimator_pooling(n) is not None for n in names):
        shape = _check_layer_means(store, len(ids), "store")
        if test_store is not None:
            t_shape = _check_layer_means(test_store, len(eval_ids), "test_store")
            if t_shape != shape:
                raise InputError(f"store.layer_means is [n, {shape[0]}, {shape[1]}] but test_store's is "
                                 f"[n, {t_shape[0]}, {t_shape[1]}]: different models or layers")
        _check_probe_inputs(names, shape, len(train_ids), int(min(y_tr.sum(), y_tr.size - y_tr.sum())),
                            fit_kw["probe_params"], "the training split")
    X_tr = inputs_for(store, names, fields, leave_out).take(i_tr)
    X_te = inputs_for(te_store, names, fields, leave_out).take(i_te)
    overlap = len(set(map(str, train_ids)) & set(map(str, eval_ids)))
    if overlap and test_store is not None and not allow_overlap:
        raise InputError(f"{overlap} of the test store's {len(eval_ids)} record ids also occur in the training "
                         "store: the test would score records the estimators were fitted on; use a disjoint "
                         "test store, or allow_overlap=True (--allow-overlap) if the same ids are other records")
    if overlap:
        logger.warning("%d id(s) occur in both the training and the test records", overlap)
    t0 = time.perf_counter()
    predictions = fit_predict(names, X_tr, y_tr, X_te, **fit_kw)
    split = {"mode": mode, "seed": int(seed), "test_fraction": float(test_fraction) if mode == "split" else None,
             "n_train": len(train_ids), "n_test": len(eval_ids), "n_overlap_ids": overlap,
             "accuracy_train": float(y_tr.mean()), "accuracy_test": float(y_te.mean()),
             "train_ids_sha256": ids_digest(train_ids), "test_ids_sha256": ids_digest(eval_ids),
             "ids_file": "split.json"}
    return _Predictions(list(eval_ids), y_te, predictions, split, list(train_ids), time.perf_counter() - t0)


def _fold_index(folds: list[tuple[np.ndarray, np.ndarray]], n: int) -> list[int]:
    out = np.empty(n, dtype=np.int64)
    for k, (_, te) in enumerate(folds):
        out[te] = k
    return out.tolist()
