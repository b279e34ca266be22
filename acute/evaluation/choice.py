"""``auto`` by the committed rule, and stacks as exported gates: what ``acute train`` / ``acute export``
do with ``--estimator auto``, ``acute-all`` or ``visible-all``.

**The sources of a setting.** A gate fitted for a scoring setting (``--for serve|score|store``,
:mod:`acute.estimators.scoring_setting`) is fitted on the sources that setting provides only: a
probe meant for ``acute serve`` never reads a benchmark's metadata, which a chat request lacks.
:func:`setting_sources` says which sources the store's records give and the setting provides;
a stack drops the first-level estimators that read any other (the same rule as in an evaluation).

**The choice** (:func:`choose_estimator`) applies ``benchmarks/every_signal.md``'s comparison on the
user's own store: the candidates ``acute-all`` (A), ``visible-all`` (V) and today's default
``acute-pca10-stacked`` (D), against the best single control (the baselines and the controls
without hidden states that the setting provides), by grouped cross-validation (``folds`` x
``repeats``, honouring the store's groups) of the training records. A candidate is admissible when
its auc-euro minus the best single control's has a cluster-bootstrap upper bound above 0 and a
point estimate of at least -0.002; among admissible candidates A is chosen unless it falls below V
by more than 0.002, then V; D only when it alone is admissible; none admissible: A (the rule's
tie). :attr:`Choice.line` says in one line what was shipped and why, and
:attr:`Choice.selection` is what ``probe.json`` records.

**Stacks as gates** (:func:`train_stack`): the stack fitted on the training records' sources for the
setting, described by a :class:`TrainedStack` whose ``save`` writes a stack folder
(:mod:`acute.estimators.stack_file`); :func:`acute.evaluation.training.train_probe` certifies it and
fits its question-only probe and checkpoint model as a probe's (:class:`TrainedStack.inputs` and
``unfitted`` say how to cross-fit it).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
from sklearn.base import clone

from .. import metrics
from ..collect import collection_settings
from ..errors import InputError
from ..estimators.baselines import BASELINES
from ..estimators.calibration import make_calibrator
from ..estimators.inputs import GROUPS, Inputs
from ..estimators.exported_probe import model_block
from ..estimators.plan import store_inputs
from ..estimators.registry import STATES_PROBE, estimator_sources, make_estimator
from ..estimators.scoring_setting import Parser, check_setting, missing_sources, parser_for
from ..estimators.stack_file import ExportedStack, export_stack
from ..estimators.stacks import STACK_MEMBERS, STACKS
from ..estimators.visible import reply_fields
from ..metrics import METRICS
from ..metrics.drift import confidence_reference
from ..metrics.intervals import corrected_t_test, fold_differences
from ..metrics.resampling import DEFAULT_N_BOOTSTRAP, percentile_interval, resample_indices
from ..scoring.probe_checks import task_from_settings
from ..store.identity import ModelIdentity, domain_record
from .crossval import cv_folds, cross_val_predictions, cv_metric, cv_metric_draws, inputs_for
from .grouping import store_groups
from .sources import metadata_fields, usable_controls
from .trained import TrainedGate

__all__ = ["AUTO_FOLDS", "AUTO_REPEATS", "CANDIDATES", "MARGIN", "SINGLE_CONTROLS", "Choice", "TrainedStack",
           "choose_estimator", "setting_sources", "stack_inputs", "store_parser", "train_gate", "train_stack",
           "verdict"]

logger = logging.getLogger(__name__)

#: The candidates of ``auto`` (benchmarks/every_signal.md): A, V, D.
CANDIDATES: tuple[str, ...] = ("acute-all", "visible-all", STATES_PROBE)
#: The controls without hidden states a candidate must not fall below (with the baselines).
SINGLE_CONTROLS: tuple[str, ...] = ("platt+meta", "tfidf+platt", "answer-surface", "answer-text", "visible")
#: How far below (auc-euro, point estimate) a candidate may be and still be admissible / A below V.
MARGIN = 0.002
#: ``auto``'s grouped cross-validation by default: 5-fold x 5 repeats, as the rule's evidence.
AUTO_FOLDS = 5
AUTO_REPEATS = 5


def store_parser(store: Any) -> Parser:
    """The :class:`Parser` of the store's task (rebuilt from its manifest's ``task_settings``; no
    task when it cannot be) with the reply-structure fields its records have."""
    settings = (getattr(store, "manifest", None) or {}).get("task_settings")
    task = None
    if settings:
        try:
            task = task_from_settings(settings)
        except (ValueError, FileNotFoundError):
            task = None
    return parser_for(task, reply_fields(store.records))


def _metadata_fields(store: Any) -> tuple[str, ...]:
    """The metadata fields the store's task declares (none when unknown)."""
    return metadata_fields(store, None)


def setting_sources(store: Any, names: Sequence[str], setting: str, parser: Parser,
                    fields: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """``(sources left out, {estimator: why})`` for the estimators ``names`` (stacks' first levels
    included) fitted for ``setting`` on ``store``: a control the store cannot feed
    (:func:`acute.evaluation.sources.usable_controls`) or one reading a source the setting cannot
    provide is dropped, and its sources no kept estimator reads are left out."""
    members = list(dict.fromkeys(m for n in names for m in (STACK_MEMBERS.get(n) or (n,))))
    controls = [m for m in members if m not in BASELINES and m not in CANDIDATES]
    _, why = usable_controls(store, controls, fields)
    for m in members:
        if m in why:
            continue
        gone = missing_sources(estimator_sources(m), setting, parser)
        if gone:
            why[m] = "; ".join(f"{s!r}: {w}" for s, w in gone.items())
    kept = {s for m in members if m not in why for s in estimator_sources(m)}
    dropped = {s for m in why for s in estimator_sources(m)}
    return sorted(dropped - kept), why


@dataclass
class Choice:
    """What ``auto`` chose (:func:`choose_estimator`): ``chosen``, ``line`` (the one line printed),
    ``selection`` (``probe.json``'s record: every score, difference and interval) and ``oof``
    (name -> out-of-fold P(correct) ``[repeats, n]`` of the training records)."""

    chosen: str
    line: str
    selection: dict
    oof: dict = field(default_factory=dict, repr=False)


def _diff(a: np.ndarray, b: np.ndarray, y: np.ndarray, draws: np.ndarray, splits: Sequence) -> dict:
    """auc-euro of ``a`` minus ``b`` (out-of-fold ``[repeats, n]``): the point estimate, the
    cluster-bootstrap interval over ``draws`` and the corrected resampled t-interval over the fold
    x repeat differences of ``splits`` (:func:`acute.metrics.intervals.corrected_t_test`)."""
    point = cv_metric(metrics.auc_euro, a, y) - cv_metric(metrics.auc_euro, b, y)
    d = cv_metric_draws(metrics.auc_euro, a, y, draws) - cv_metric_draws(metrics.auc_euro, b, y, draws)
    low, high, _ = percentile_interval(d)
    n_te = np.mean([len(te) for rep in splits for _, te in rep])
    t = corrected_t_test(fold_differences(metrics.auc_euro, a, b, y, splits), float(n_te / (y.size - n_te)))
    return {"diff": float(point), "ci_low": low, "ci_high": high, "t_low": float(t.low), "t_high": float(t.high)}


def verdict(admissible: dict[str, bool], a_vs_v: float, *, fallback: str | None = None) -> tuple[str, str]:
    """The rule's choice among A, V, D (:data:`CANDIDATES`) and why, given which are
    ``admissible`` and A minus V (``a_vs_v``, the lowest over the evidence's pairs where there are
    several). ``fallback``: the rule's step 3 when no candidate is admissible (the evidence picks
    the stack admissible on more pairs); None: acute-all (one store, ties go to acute-all)."""
    a, v, d = CANDIDATES
    if admissible[a] and (not admissible[v] or a_vs_v >= -MARGIN):
        return a, "acute-all is not below the best single control" + (
            f" nor below visible-all by more than {MARGIN}" if admissible[v] else "")
    if admissible[v]:
        return v, ("acute-all fell below visible-all by more than " f"{MARGIN}" if admissible[a]
                   else "acute-all falls below the best single control; visible-all does not")
    if admissible[d]:
        return d, "only the default probe is not below the best single control"
    if fallback is None:
        return a, "no candidate is above the best single control's interval; ties go to acute-all"
    return fallback, "neither stack is admissible everywhere; " f"{fallback} is on more pairs (ties go to acute-all)"


def choose_estimator(store: Any, idx: np.ndarray, *, setting: str, groups: Sequence[Any] | None = None,
                     group_field: str | None = None, folds: int = AUTO_FOLDS, repeats: int = AUTO_REPEATS,
                     seed: int = 0, n_jobs: int | None = None, n_estimators: int | None = None,
                     n_bootstrap: int = DEFAULT_N_BOOTSTRAP) -> Choice:
    """Apply the rule (module doc) on the training records ``idx`` of ``store`` with the sources
    ``setting`` provides: ``folds`` x ``repeats`` stratified folds keeping each value of ``groups``
    (one per store record, None: records one by one) on one side, the intervals resampling them
    together (``n_bootstrap`` draws)."""
    setting = check_setting(setting, "--for")
    idx = np.asarray(idx)
    y = np.asarray(store.correct)[idx].astype(np.int64)
    parser, fields = store_parser(store), _metadata_fields(store)
    singles = [n for n in BASELINES + SINGLE_CONTROLS]
    leave_out, why = setting_sources(store, list(CANDIDATES) + singles, setting, parser, fields)
    singles = [n for n in singles if n not in why]
    names = list(CANDIDATES) + singles
    X = _store_inputs(store, names, fields, leave_out).take(idx)
    g = None if groups is None else [groups[i] for i in idx]
    if g is not None:
        X = X.with_source(GROUPS, g)
    ids = [store.ids[i] for i in idx]
    splits = cv_folds(ids, y, int(folds), int(repeats), seed, groups=g,
                      group_name=f"values of {group_field!r}" if group_field else "record ids")
    oof = cross_val_predictions(names, X, y, splits, random_state=seed, n_jobs=n_jobs,
                                probe_params={"n_estimators": n_estimators})
    scores = {n: cv_metric(metrics.auc_euro, oof[n], y) for n in names}
    best = max(singles, key=lambda n: scores[n])
    draws = resample_indices(y.size, n_bootstrap, seed, g)
    vs_best = {c: _diff(oof[c], oof[best], y, draws, splits) for c in CANDIDATES}
    adm = {c: vs_best[c]["ci_high"] > 0 and vs_best[c]["diff"] >= -MARGIN for c in CANDIDATES}
    states = _diff(oof["acute-all"], oof["visible-all"], y, draws, splits)
    chosen, reason = verdict(adm, states["diff"])
    line = (f"on this store the hidden states added {states['diff']:+.3f} auc-euro (bootstrap "
            f"[{states['ci_low']:+.3f}, {states['ci_high']:+.3f}], corrected t [{states['t_low']:+.3f}, "
            f"{states['t_high']:+.3f}]; acute-all minus visible-all, {folds}-fold x {repeats} "
            f"cross-validation, for {setting}); {reason}: exported {chosen}")
    selection = {
        "rule": "benchmarks/every_signal.md", "chosen": chosen, "reason": reason, "scoring": setting,
        "criterion": f"auc-euro minus the best single control: upper bound > 0 and point >= -{MARGIN}; "
                     f"acute-all unless below visible-all by more than {MARGIN}",
        "cv": {"n_splits": int(folds), "repeats": int(repeats), "random_state": seed,
               **({"group_by": group_field} if group_field else {})},
        "scores": {n: float(scores[n]) for n in names}, "best_single": best,
        "vs_best_single": vs_best, "admissible": adm, "states_add": states,
        "left_out": why, "n_bootstrap": int(n_bootstrap), "line": line,
    }
    return Choice(chosen, line, selection, oof)


@dataclass(kw_only=True)
class TrainedStack(TrainedGate):
    """A stack fitted for export: ``exported`` (the
    :class:`~acute.estimators.stack_file.ExportedStack`), ``setting`` (the scoring setting it was
    fitted for), ``group_by`` (what its inner folds, and the certificate's out-of-fold folds, keep
    apart: a metadata field, or ``"id"``), ``metadata_fields`` (the task metadata its members
    read), and what every trained gate carries (:class:`~acute.evaluation.trained.TrainedGate`:
    ``label``, ``selection`` (``auto``'s :class:`Choice` record, or None), held-out metrics,
    certificates, the question-only probe, the checkpoint model). ``save(dir)`` writes the stack
    folder with them."""

    exported: ExportedStack
    setting: str
    group_by: str = "id"
    metadata_fields: tuple[str, ...] = ()

    @property
    def probe(self) -> ExportedStack:
        return self.exported

    def inputs(self, store: Any, idx: np.ndarray | None = None) -> Inputs:
        """The sources the fitted stack reads of ``store``'s records ``idx`` (default: all), with
        their groups (:func:`acute.evaluation.grouping.store_groups` of :attr:`group_by`) for the
        inner folds of a refit."""
        X = store_inputs(store, list(self.exported.sources), self.metadata_fields)
        _, groups = store_groups(store, self.group_by)
        if groups is not None:
            X = X.with_source(GROUPS, list(groups))
        return X if idx is None else X.take(np.asarray(idx))

    def unfitted(self) -> Any:
        """An unfitted copy of the stack (what cross-fitting refits on each fold)."""
        return clone(self.exported.estimator)

    def export(self) -> ExportedStack:
        """The :class:`~acute.estimators.stack_file.ExportedStack` with the certificates, the drift
        reference, the question-only probe and the checkpoint model this gate carries."""
        self.exported.with_certificates(self.certificates, self.confidence_reference)
        return self.with_companions(self.exported)


def _held_out(est: Any, X: Inputs, store: Any, tr: np.ndarray, te: np.ndarray) -> dict:
    """The held-out comparison of :func:`acute.evaluation.training.held_out_metrics` for a stack."""
    raw, y = np.asarray(store.raw_confidence)[te], np.asarray(store.correct)[te]
    conf = est.predict_proba(X.take(te))[:, 1]
    platt = make_calibrator("platt").fit(np.asarray(store.raw_confidence)[tr], np.asarray(store.correct)[tr]) \
        .predict_proba(raw)[:, 1]
    out: dict[str, Any] = {"n": int(te.size), "accuracy": float(np.mean(y))}
    for prefix, c in (("", conf), ("raw_", raw), ("platt_", platt)):
        for key, name in (("smece", "smece"), ("auc_euro_all", "auc_euro"), ("brier", "brier")):
            out[prefix + name] = float(METRICS[key].fn(np.asarray(c, dtype=np.float64), y))
    return out


def _shape(store: Any) -> tuple[int, int]:
    m = store.manifest
    if m.get("num_layers") is not None and m.get("hidden_size") is not None:
        return int(m["num_layers"]) + 1, int(m["hidden_size"])
    shape = np.shape(store.layer_means)
    return int(shape[1]), int(shape[2])


def stack_inputs(store: Any, name: str, setting: str) -> tuple[Inputs, Parser, dict[str, str]]:
    """``(inputs, parser, {first level: why left out})``: the :class:`Inputs` of every record of
    ``store`` that the stack ``name`` fitted for ``setting`` reads (:func:`setting_sources`)."""
    parser, fields = store_parser(store), _metadata_fields(store)
    leave_out, why = setting_sources(store, [name], setting, parser, fields)
    return _store_inputs(store, [name], fields, leave_out), parser, why


def _store_inputs(store: Any, names: Sequence[str], fields: Sequence[str], leave_out: Sequence[str]) -> Inputs:
    """:func:`acute.evaluation.crossval.inputs_for`, a non-finite value named by its record's id."""
    try:
        return inputs_for(store, names, fields, leave_out)
    except InputError as e:
        row = re.search(r"\brow (\d+)", str(e))
        if row is None or int(row.group(1)) >= len(store.ids):
            raise
        raise InputError(f"{getattr(store, 'path', 'the store')}: record {store.ids[int(row.group(1))]!r}: {e}") from None


def train_stack(store: Any, name: str, idx: np.ndarray, test: np.ndarray, *, setting: str, seed: int = 0,
                n_jobs: int | None = None, n_estimators: int | None = None, groups: Sequence[Any] | None = None,
                group_field: str | None = None, summary: dict | None = None,
                choice: Choice | None = None) -> TrainedStack:
    """Fit the stack ``name`` (``acute-all``, ``visible-all``) on the records ``idx`` of ``store``
    with the sources ``setting`` provides (inner folds grouped by ``groups``, one per store record,
    the values of the metadata field ``group_field``) and describe it: held-out metrics on the
    records of the boolean mask ``test`` when any, ``summary`` (the training summary) and
    ``choice`` (``auto``'s, when it chose this stack) recorded."""
    if name not in STACKS:
        raise InputError(f"{name!r} is not a stack; the stacks are {', '.join(STACKS)}")
    setting = check_setting(setting, "--for")
    X, parser, why = stack_inputs(store, name, setting)
    fields = _metadata_fields(store)
    for member, reason in why.items():
        logger.info("%s: %s left out (%s)", name, member, reason)
    if groups is not None:
        X = X.with_source(GROUPS, list(groups))
    idx = np.asarray(idx)
    est = make_estimator(name, random_state=seed, n_jobs=n_jobs, probe_params={"n_estimators": n_estimators})
    est.fit(X.take(idx), np.asarray(store.correct)[idx])
    te = np.flatnonzero(test)
    held = _held_out(est, X, store, idx, te) if te.size else None
    identity = ModelIdentity.from_manifest(store.manifest)
    n_out, hidden = _shape(store)
    summary = {**(summary or collection_settings(store.manifest)), "estimator": name,
               "metadata_fields": list(fields), "left_out": why}
    reference = None
    if choice is not None and name in choice.oof:
        reference = confidence_reference(np.asarray(choice.oof[name])[0], "out-of-fold")
    elif held is not None:
        reference = confidence_reference(est.predict_proba(X.take(te))[:, 1], "held-out")
    selection = None if choice is None else choice.selection
    exported = export_stack(name, est, model=model_block(identity, n_out, hidden), n_layer_outputs=n_out,
                            hidden_size=hidden, setting=setting, parser=parser, training_summary=summary,
                            metrics=held, selection=selection)
    return TrainedStack(exported=exported, setting=setting, label=name if choice is None else f"auto -> {name}",
                        selection=selection, training_summary=summary, n_train=int(idx.size), held_out=held,
                        identity=identity, train_index=idx, confidence_reference=reference,
                        domain=domain_record(identity, states="mean", store=summary.get("store")),
                        choice_line=None if choice is None else choice.line,
                        group_by=group_field or "id", metadata_fields=tuple(fields))


def train_gate(store: Any, estimator: str, idx: np.ndarray, test: np.ndarray, *, setting: str, summary: dict,
               seed: int = 0, n_jobs: int | None = None, n_estimators: int | None = None,
               groups: Sequence[Any] | None = None, group_field: str | None = None, auto_folds: int = AUTO_FOLDS,
               auto_repeats: int = AUTO_REPEATS) -> TrainedStack | Choice:
    """``acute train`` / ``acute export`` of a stack or ``auto`` (module doc): the stack
    ``estimator`` fitted (:func:`train_stack`), or ``auto``'s :class:`Choice` on the training records
    ``idx`` and then the stack it chose fitted; when it chose the default probe, the :class:`Choice`
    itself (the probe is fitted as any probe, recording it). Certificates, the question-only probe
    and the checkpoint model are added by :func:`acute.evaluation.training.train_probe`, for a
    stack as for a probe."""
    choice = None
    if estimator not in STACKS:
        choice = choose_estimator(store, idx, setting=setting, groups=groups, group_field=group_field,
                                  folds=auto_folds, repeats=auto_repeats, seed=seed, n_jobs=n_jobs,
                                  n_estimators=n_estimators)
        if choice.chosen not in STACKS:
            return choice
    name = estimator if choice is None else choice.chosen
    return train_stack(store, name, idx, test, setting=setting, seed=seed, n_jobs=n_jobs, n_estimators=n_estimators,
                       groups=groups, group_field=group_field, summary=summary, choice=choice)
