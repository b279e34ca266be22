"""Training a probe for export (``acute train``, ``acute export``, the demo): choose the estimator,
fit it on a store's training records, compare it on the held-out records with the raw
confidence and Platt scaling, and describe it for ``probe.json`` (its selection, its training
summary, the model identity the store recorded).

:func:`train_probe` returns a :class:`TrainedProbe`; ``TrainedProbe.save(dir)`` writes the probe
folder. The command line and the demo only parse, call this and print.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from sklearn.base import clone

from ..collect import collection_settings
from ..errors import InputError
from ..estimators.calibration import make_calibrator
from ..estimators.inputs import Inputs
from ..estimators.probes import ActivationProbe
from ..estimators.auto import AutoEstimator
from ..estimators.folds import stratified_folds
from ..estimators.probe_names import PROBE_ESTIMATORS, QUESTION_ONLY_ESTIMATORS, split_pooling
from ..estimators.registry import AUTO, DEFAULT_ESTIMATOR, make_estimator
from ..estimators.scoring_setting import DEFAULT_SCORING_SETTING, setting_record
from ..estimators.stacks import STACKS
from ..estimators.stop_early import StopEarlyModel
from ..metrics import METRICS
from ..metrics.certify import DEFAULT_BACKEND, DEFAULT_DELTA, DEFAULT_FWER
from ..metrics.drift import confidence_reference
from ..scoring.risk import DEFAULT_RISK
from ..store.format import REMEDY
from ..store.identity import ModelIdentity, domain_record
from ..store.pooling import store_states
from .certification import CV_FOLDS, calibration_confidence, certify_checked, check_certification
from .checkpoint_model import fit_checkpoint_model
from .choice import AUTO_FOLDS, AUTO_REPEATS, Choice, TrainedStack, store_parser, train_gate
from .crossval import split_ids
from .grouping import store_groups
from .trained import PRECHECK_ESTIMATOR, TrainedGate

__all__ = ["TrainedProbe", "check_precheck_estimator", "check_precheck_store",
           "held_out_metrics", "probe_estimator", "train_probe"]

@dataclass(kw_only=True)
class TrainedProbe(TrainedGate):
    """A fitted probe and what its ``probe.json`` records: ``probe``, the fitted
    :class:`~acute.estimators.probes.ActivationProbe`, and what every trained gate carries
    (:class:`~acute.evaluation.trained.TrainedGate`: ``label`` such as ``"acute-pca10-stacked"``,
    ``"auto -> acute-cosine"`` or ``"view mean late"``, ``selection``, ``auto`` (the fitted
    :class:`~acute.estimators.auto.AutoEstimator` behind it, or None), ``training_summary``,
    ``held_out`` (:func:`held_out_metrics` on the records left out), certificates, the
    question-only probe, the checkpoint model). ``save(dir)`` writes the probe folder."""

    probe: ActivationProbe

    def inputs(self, store, idx: np.ndarray | None = None) -> Inputs:
        """The inputs the probe reads of ``store``'s records ``idx`` (default: all of them)."""
        rows = np.arange(len(store)) if idx is None else np.asarray(idx)
        return _inputs(store, getattr(self.probe, "pooling", "mean"), rows)

    def unfitted(self) -> ActivationProbe:
        """An unfitted copy of the probe (what cross-fitting refits on each fold)."""
        return clone(self.probe)

    def export(self):
        """The :class:`~acute.estimators.probe_file.ExportedProbe` of the probe, with the
        question-only probe as its ``precheck`` and the checkpoint model as its ``stop_early``
        when they were fitted."""
        exported = self.probe.export(self.identity, training_summary=self.training_summary, metrics=self.held_out,
                                     selection=self.selection, certificates=self.certificates,
                                     confidence_reference=self.confidence_reference)
        return self.with_companions(exported)


def _parse_layer(layer: Any) -> int | str | None:
    if isinstance(layer, str) and layer.lstrip("-").isdigit():
        return int(layer)
    return layer


def probe_estimator(estimator: str | None = None, *, view: str | None = None, layer: Any = None, seed: int = 0,
                    n_jobs: int | None = None, n_estimators: int | None = None) -> tuple[Any, str]:
    """The unfitted estimator to train and its label: ``view`` (a plain probe, as in the paper;
    ``layer`` with ``view="mean"``), ``estimator`` (a probe name, or ``auto``: chosen by
    cross-validation), else :data:`~acute.estimators.registry.DEFAULT_ESTIMATOR`, fitted by
    ``auto``'s comparison with ``refit`` set to it (so the cross-validated scores of the
    candidates and baselines are recorded beside it)."""
    common: dict[str, Any] = {"random_state": seed}
    if n_jobs is not None:
        common["n_jobs"] = n_jobs
    if view is not None:
        if estimator is not None:
            raise InputError("give --view (a plain probe) or --estimator, not both")
        params = {"view": view, "layer": _parse_layer(layer), **common}
        if n_estimators is not None:
            params["n_estimators"] = n_estimators
        return ActivationProbe(**params), f"view {view if layer is None else f'{view} {layer}'}"
    if layer is not None:
        raise InputError("--layer goes with --view mean")
    probe_params = {"n_estimators": n_estimators}
    if estimator is None:
        return AutoEstimator(refit=DEFAULT_ESTIMATOR, probe_params=probe_params, **common), DEFAULT_ESTIMATOR
    if split_pooling(estimator)[0] not in PROBE_ESTIMATORS + (AUTO,):
        raise InputError(f"--estimator must be a probe or {AUTO!r} (a baseline cannot be exported as a "
                         f"probe); choose from {', '.join(PROBE_ESTIMATORS + (AUTO,))} (a probe may end "
                         "in @POOLING, e.g. acute-cosine-stacked@last-answer)")
    return make_estimator(estimator, probe_params=probe_params, **common), estimator


def _inputs(store, pooling: str, idx: np.ndarray) -> Inputs:
    """The inputs of the store's records ``idx``: their ``pooling`` states (float32,
    :mod:`acute.store.pooling`) and raw confidences."""
    return Inputs.of(np.asarray(store_states(store, pooling)[idx], dtype=np.float32),
                     np.asarray(store.raw_confidence, dtype=np.float64)[idx], pooling=pooling)


def held_out_metrics(probe, store, train_idx: np.ndarray, test_idx: np.ndarray) -> dict:
    """Held-out smECE, auc-euro (all) and Brier of the probe, of the raw confidence and of Platt
    scaling of the raw confidence fitted on the same training records: ``n``, ``accuracy``,
    ``smece``, ``auc_euro``, ``brier`` and the same with ``raw_`` and ``platt_`` prefixes."""
    raw = store.raw_confidence[test_idx]
    y = np.asarray(store.correct[test_idx])
    conf = probe.predict_proba(_inputs(store, probe.pooling, test_idx))[:, 1]
    platt = make_calibrator("platt").fit(store.raw_confidence[train_idx], store.correct[train_idx]) \
        .predict_proba(raw)[:, 1]
    out: dict[str, Any] = {"n": int(test_idx.size), "accuracy": float(np.mean(y))}
    for prefix, c in (("", conf), ("raw_", raw), ("platt_", platt)):
        c = np.asarray(c, dtype=np.float64)
        for key, name in (("smece", "smece"), ("auc_euro_all", "auc_euro"), ("brier", "brier")):
            out[prefix + name] = float(METRICS[key].fn(c, y))
    return out


def check_precheck_estimator(name: Any, option: str = "precheck_estimator") -> str | None:
    """``name`` if it is a question-only estimator
    (:data:`acute.estimators.registry.QUESTION_ONLY_ESTIMATORS`), None for None; anything else
    (booleans, other estimators) is an :class:`InputError` naming ``option`` and the choices."""
    if name is None:
        return None
    if not isinstance(name, str) or name not in QUESTION_ONLY_ESTIMATORS:
        raise InputError(f"{option} must be None or the name of a question-only estimator "
                         f"({', '.join(QUESTION_ONLY_ESTIMATORS)}; {PRECHECK_ESTIMATOR} is the PCA-10 one), "
                         f"got {name!r}")
    return name


def check_precheck_store(store, name: str = "precheck_estimator") -> None:
    """:class:`InputError` naming ``name`` and the ``acute rerecord`` remedy unless ``store``
    keeps the last-prompt states a question-only probe is fitted on."""
    if "last-prompt" not in getattr(store, "poolings", ()):
        where = getattr(store, "path", "the store")
        raise InputError(f"{name}: the question-only probe is fitted on the store's last-prompt states, "
                         f"and {where} holds only {', '.join(store.poolings)} (collected before acute "
                         f"kept them); {REMEDY}")


def _reference(trained: TrainedProbe, store, test: np.ndarray) -> dict | None:
    """The drift reference of a probe before any certificate: ``auto``'s out-of-fold predictions
    of the training records, else the probe's on the held-out records, else None."""
    auto = trained.auto
    if auto is not None and getattr(auto, "oof_", None) is not None:
        return confidence_reference(auto.oof_[auto.chosen_], "out-of-fold")
    if not test.any():
        return None
    rows = np.flatnonzero(test)
    conf = trained.probe.predict_proba(_inputs(store, getattr(trained.probe, "pooling", "mean"), rows))[:, 1]
    return confidence_reference(conf, "held-out")


def train_probe(store, estimator: str | None = None, *, view: str | None = None, layer: Any = None,
                test_fraction: float = 0.0, seed: int = 0, n_jobs: int | None = None,
                n_estimators: int | None = None, store_path: str | os.PathLike | None = None,
                max_error: float | Sequence[float] | None = None, delta: float = DEFAULT_DELTA,
                calibration_store: Any = None, calibration_path: str | os.PathLike | None = None,
                certify_backend: str = DEFAULT_BACKEND, precheck_estimator: str | None = None,
                group_by: str | None = None, certify_fwer: str = DEFAULT_FWER,
                stop_early: bool = False, scoring_setting: str = DEFAULT_SCORING_SETTING,
                auto_folds: int = AUTO_FOLDS, auto_repeats: int = AUTO_REPEATS) -> TrainedProbe | TrainedStack:
    """Choose a probe (:func:`probe_estimator`), fit it on the store's training records (all of
    them with ``test_fraction=0``, else a split by id, :func:`acute.evaluation.crossval.split_ids`)
    and describe it: returns a :class:`TrainedProbe` with the held-out comparison when records
    were left out. ``store_path`` (default: the store's own path) is recorded in the summary.

    ``group_by`` (a metadata field; default: the store's task's grouping, e.g. APIGen's and
    BFCL's tool sets; ``"id"``: records one by one) keeps each of its values on one side of the
    held-out split, of ``auto``'s cross-validated comparison (its folds, and out-of-fold instead
    of out-of-bag held-out probabilities) and of a certificate's out-of-fold folds.

    ``max_error`` (one alpha or several): also certify the trust threshold at each, with
    probability ``1 - delta``, on the out-of-fold predictions of the training records or on
    ``calibration_store`` (named ``calibration_path``), by the procedure ``certify_fwer`` with
    ``certify_backend``
    (:func:`acute.evaluation.certification.certify_probe`); bad values and too few calibration
    records are refused before anything is fitted. The out-of-fold folds keep the values of
    ``group_by`` (a metadata field; default: the store's task's grouping, e.g. APIGen's tool
    sets; ``"id"``: records one by one) on one side of every split, as the evaluation's do.

    ``precheck_estimator``: also fit this question-only probe (the one that decides before
    generating): :data:`PRECHECK_ESTIMATOR` (``"question-only"``, the PCA-10 forest over the same
    records' last-prompt states, no raw confidence, Platt-calibrated) or another view's
    (``question-only-cosine``, ``question-only-mid``, ...:
    :data:`acute.estimators.registry.QUESTION_ONLY_ESTIMATORS`); :meth:`TrainedProbe.save` writes
    it beside the probe in ``precheck/``; a store without last-prompt states is refused first
    (:func:`check_precheck_store`). None (the default): no precheck.

    ``stop_early``: also fit the checkpoint model early stopping reads
    (:func:`acute.evaluation.checkpoint_model.fit_checkpoint_model`: a prefix probe per
    checkpoint and the out-of-fold calibration arrays, on the certificate's folds); a store
    without prefix checkpoints is refused first.

    ``scoring_setting`` (``serve``, ``score``, ``store``): where the gate will score, so that it is
    fitted on the sources that setting provides (recorded in ``probe.json``). A stack
    (``acute-all``, ``visible-all``) or ``auto`` (the committed rule's choice among them and the
    default, by ``auto_folds`` x ``auto_repeats`` grouped cross-validation) is fitted by
    :func:`acute.evaluation.choice.train_gate` and returned as a
    :class:`~acute.evaluation.choice.TrainedStack`, unless ``auto`` chose the default probe."""
    precheck_name = check_precheck_estimator(precheck_estimator)
    if precheck_name:
        check_precheck_store(store)
    if stop_early:
        store.checkpoint_tokens  # a store without checkpoints: one line naming it and `acute collect`
    field, groups = store_groups(store, group_by)
    train, test = split_ids(store.ids, test_fraction=test_fraction, seed=seed, groups=groups)
    idx = np.flatnonzero(train)
    if max_error is not None:  # refuse what cannot be certified before fitting anything
        alphas = check_certification(store, max_error, delta, train_index=idx, calibration_store=calibration_store,
                                     calibration_path=calibration_path, fwer=certify_fwer, backend=certify_backend,
                                     group_by=group_by)
    summary = _training_summary(store, store_path, train, test_fraction, seed, field)
    choice = trained = None
    if estimator in STACKS or estimator == AUTO:  # every signal in, for the scoring setting: acute.evaluation.choice
        gate = train_gate(store, estimator, idx, test, setting=scoring_setting, summary=summary, seed=seed,
                          n_jobs=n_jobs, n_estimators=n_estimators, groups=groups, group_field=field,
                          auto_folds=auto_folds, auto_repeats=auto_repeats)
        if isinstance(gate, Choice):  # the default probe, fitted below with the comparison recorded
            choice, estimator = gate, gate.chosen
        else:
            trained = gate
    if trained is None:
        trained = _train_named(store, estimator, view, layer, idx, test, seed, n_jobs, n_estimators, groups, field,
                               summary, scoring_setting, choice)
    if max_error is not None:  # its calibration records' confidences become the reference
        certify_checked(trained, store, alphas, delta, calibration_store=calibration_store,
                        calibration_path=calibration_path, backend=certify_backend, fwer=certify_fwer,
                        group_by=group_by)
    if precheck_name:
        _fit_precheck(trained, precheck_name, store, idx, test, seed, n_jobs, n_estimators)
    if stop_early:
        trained.stop_early = _checkpoint_model(trained, store, idx, seed, n_jobs, n_estimators, group_by)
    return trained


def _train_named(store, estimator, view, layer, idx: np.ndarray, test: np.ndarray, seed: int, n_jobs, n_estimators,
                 groups, field: str | None, summary: dict, setting: str, choice: Choice | None) -> TrainedProbe:
    """The probe ``estimator`` (or ``view``/``layer``) fitted on the records ``idx`` for the
    scoring ``setting``, with its held-out metrics on ``test`` and its drift reference; ``choice``:
    ``auto``'s comparison when it chose this probe (recorded, its out-of-fold predictions the
    reference)."""
    est, label = probe_estimator(estimator, view=view, layer=layer, seed=seed, n_jobs=n_jobs,
                                 n_estimators=n_estimators)
    probe, auto, selection, label = _fit_probe(est, label, store, idx, seed, groups, field)
    identity = ModelIdentity.from_manifest(store.manifest)
    summary["scoring"] = setting_record(setting, store_parser(store), probe.sources)
    if choice is not None:
        selection, label = {**(selection or {}), "auto": choice.selection}, f"auto -> {choice.chosen}"
    held = held_out_metrics(probe, store, idx, np.flatnonzero(test)) if test.any() else None
    trained = TrainedProbe(probe=probe, label=label, selection=selection, training_summary=summary,
                           n_train=int(idx.size), held_out=held, auto=auto, identity=identity, train_index=idx,
                           domain=domain_record(identity, states=probe.pooling, store=summary["store"]),
                           choice_line=None if choice is None else choice.line)
    trained.confidence_reference = _reference(trained, store, test)
    if choice is not None:  # auto's out-of-fold predictions of the default it chose
        trained.confidence_reference = confidence_reference(choice.oof[choice.chosen][0], "out-of-fold")
    return trained


def _training_summary(store, store_path, train: np.ndarray, test_fraction: float, seed: int,
                      field: str | None) -> dict[str, Any]:
    """``probe.json``'s ``training``: the store, the split and the collection's settings."""
    path = store_path if store_path is not None else getattr(store, "path", None)
    return {"store": None if path is None else str(Path(path).resolve()), "n_train": int(train.sum()),
            "accuracy_train": float(np.mean(store.correct[train])),
            "split": {"test_fraction": test_fraction, "seed": seed, **({"group_by": field} if field else {})},
            **collection_settings(store.manifest)}


def _fit_probe(est, label: str, store, idx: np.ndarray, seed: int, groups, field: str | None):
    """Fit ``est`` on the records ``idx``; ``(probe, auto, selection, label)``, where ``auto`` is
    ``est`` when it is an :class:`AutoEstimator` (compared on folds that keep each group whole,
    its choice the probe), else None."""
    if isinstance(est, AutoEstimator) and groups is not None:
        est.set_params(cv=stratified_folds(store.correct[idx], CV_FOLDS, seed, groups=[groups[i] for i in idx],
                                           group_name=f"values of {field!r} among the training records"))
    est.fit(_inputs(store, getattr(est, "pooling", "mean"), idx), store.correct[idx])
    if not isinstance(est, AutoEstimator):
        return est, None, None, label
    selection = est.selection()
    if field is not None:
        selection["cv"]["group_by"] = field
    return est.estimator_, est, selection, est.chosen_ if est.refit != "best" else f"auto -> {est.chosen_}"


def _fit_precheck(trained: TrainedProbe, name: str, store, idx: np.ndarray, test: np.ndarray, seed: int,
                  n_jobs, n_estimators) -> None:
    """Fit the question-only probe ``name`` on the records ``idx`` into ``trained.precheck``
    (with its held-out metrics when records were left out)."""
    q = make_estimator(name, random_state=seed, n_jobs=n_jobs, probe_params={"n_estimators": n_estimators})
    trained.precheck = q.fit(_inputs(store, q.pooling, idx), store.correct[idx])
    trained.precheck_estimator = name
    if test.any():
        trained.precheck_held_out = held_out_metrics(q, store, idx, np.flatnonzero(test))


def _checkpoint_model(trained: TrainedProbe, store, idx: np.ndarray, seed: int, n_jobs, n_estimators,
                      group_by: str | None) -> StopEarlyModel:
    """The checkpoint model of the training records ``idx``, on the out-of-fold folds of the
    answer probe's certificate (grouped the same way) and its out-of-fold P(correct)."""
    conf, _, details = calibration_confidence(trained, store, group_by=group_by)
    field, groups = store_groups(store, group_by, [store.ids[i] for i in idx])
    folds = stratified_folds(np.asarray(store.correct)[idx].astype(np.int64), CV_FOLDS, seed, groups=groups)
    return fit_checkpoint_model(store, idx, conf > DEFAULT_RISK, folds, seed=seed, n_jobs=n_jobs,
                                n_estimators=n_estimators, details={"source": "out-of-fold", "folds": details["folds"]})
