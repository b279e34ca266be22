"""Re-certifying an exported probe for another setting (``acute recertify``).

A probe's calibration and certificates hold in its validity domain (``probe.json``'s
``domain``: engine and version, model dtype and quantisation, pooling, prompt format,
:mod:`acute.store.identity`). Scored under another setting (bfloat16 instead of float32, vLLM
instead of transformers, a new engine version) its states move and its certificates are refused
(:class:`acute.scoring.Scorer`). :func:`recertify` brings it to the new setting from labelled
records collected under it (a store, ``acute collect`` with that setting):

* the forest stays as it was fitted; the certified thresholds are calibrated again
  (:func:`acute.metrics.certify.certify_threshold`) on the probe's confidences for every
  record of the store, which the probe was not fitted on;
* with ``restack=True`` its calibration map (stacked, Platt or isotonic) is also refitted on
  those records' forest probabilities. The certificates are then calibrated on out-of-fold
  predictions: each record's confidence comes from a map fitted on the other folds (5
  stratified folds, grouped as the store's task groups records), the usual cross-fitting
  assumption; the exported map is fitted on all of them;
* the new probe's domain is the store's (``recertified_from``: the old one), and so is its
  recorded model identity (the weights digest as the new setting loads them); its
  ``recertification`` entry says what was measured on the store before and after, and its
  ``confidence_reference`` (what ``acute serve``'s drift signal compares live confidences with)
  is the certificate's calibration confidences on the store.

The store must come from the probe's model: fingerprint, and weights (by their bfloat16 digest
when the dtypes differ: :func:`acute.store.identity.diff` ``across_dtypes``), else
:class:`~acute.errors.ModelMismatchError` naming both; it must hold the states the probe reads,
and no record the probe was fitted on (its training store, when it can still be read).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..errors import InputError, ModelMismatchError
from ..estimators.calibration import calibration_scores, calibrator_arrays, probe_calibrator
from ..estimators.certificates import certificate_entry
from ..estimators.inputs import Inputs
from ..estimators.exported_probe import ExportedProbe, forest_proba
from ..metrics import METRICS
from ..metrics.certify import DEFAULT_BACKEND, DEFAULT_DELTA, certify_threshold, check_delta, check_max_errors
from ..metrics.drift import confidence_reference
from ..store.format import REMEDY
from ..store.identity import FINGERPRINT_FIELDS, ModelIdentity, domain_record
from ..store.pooling import store_states
from .certification import CV_FOLDS
from ..store import open_store
from .crossval import split_ids
from ..estimators.folds import out_of_fold, stratified_folds
from .grouping import store_groups

__all__ = ["Recertified", "check_recertification_store", "recertify"]

logger = logging.getLogger(__name__)


@dataclass
class Recertified:
    """What :func:`recertify` made: ``probe`` (the new :class:`ExportedProbe`, not yet saved),
    ``certificates`` (its ``probe.json`` entries) and ``summary`` (its ``recertification``
    entry: the store, its records and accuracy, smECE and auc-euro of the probe as it was and,
    restacked, after)."""

    probe: ExportedProbe
    certificates: list
    summary: dict

    def save(self, path: str | os.PathLike) -> Path:
        """Write the new probe folder atomically (:meth:`ExportedProbe.save`)."""
        return self.probe.save(path)


def check_recertification_store(probe: ExportedProbe, store: Any, name: str = "the store") -> None:
    """Refuse a store that cannot re-certify ``probe``: another model (fingerprint, weights by
    their bfloat16 digest across dtypes: :class:`ModelMismatchError` naming both), another
    shape, no states of the probe's pooling, or records the probe was fitted on (its training
    store, or the records of it the probe was trained on when that store can be read)."""
    fitted, given = ModelIdentity.from_probe(probe), ModelIdentity.from_manifest(store.manifest)
    unrecorded = [f"model_fingerprint.{k}" for k in FINGERPRINT_FIELDS
                  if fitted.model_fingerprint is None or fitted.model_fingerprint.get(k) is None]
    found = fitted.diff(given, ("the probe", name), fields=("model_fingerprint", "model_weights"),
                        optional=unrecorded + ["model_weights"], across_dtypes=True)
    found = found or fitted.diff(given, ("the probe", name), fields=("num_layers", "hidden_size"),
                                 optional=("num_layers", "hidden_size"))
    if found:
        raise ModelMismatchError(f"{name} cannot re-certify this probe: its records come from another model "
                                 f"than the probe was fitted on: {found}; collect the store with the probe's "
                                 f"model ({probe.model_name!r})")
    if probe.pooling not in getattr(store, "poolings", (probe.pooling,)):
        raise InputError(f"{name} holds the {', '.join(store.poolings)} states, and this probe reads "
                         f"{probe.pooling!r}; {REMEDY}")
    _check_not_training(probe, store, name)


def _check_not_training(probe: ExportedProbe, store: Any, name: str) -> None:
    """InputError when ``store`` is the probe's training store or shares ids with the records
    of it the probe was fitted on (same task); when that store is gone, nothing to compare."""
    summary = probe.training_summary or {}
    trained_on, here = summary.get("store"), getattr(store, "path", None)
    if not trained_on or here is None:
        return
    if Path(trained_on).resolve() == Path(here).resolve():
        raise InputError(f"{name} is the probe's training store ({trained_on}); the probe was fitted on its "
                         f"records: re-certify on records collected under the new setting")
    if not (Path(trained_on) / "manifest.json").is_file():
        logger.info("the probe's training store %s is gone; its records cannot be told apart from %s",
                    trained_on, name)
        return
    train = open_store(trained_on)
    if train.manifest.get("task") != store.manifest.get("task"):
        return
    split = summary.get("split") or {}
    keep, _ = split_ids(train.ids, test_fraction=float(split.get("test_fraction", 0.0)),
                        seed=int(split.get("seed", 0)))
    shared = {str(i) for i, k in zip(train.ids, keep) if k} & {str(i) for i in store.ids}
    if shared:
        raise InputError(f"{name}: {len(shared)} of its {len(store)} record ids are records the probe was "
                         f"fitted on (task {store.manifest.get('task')!r} of {trained_on}, e.g. "
                         f"{sorted(shared)[0]!r}); re-certify on records it was not fitted on")


def _levels(probe: ExportedProbe, max_error: Any, delta: Any) -> tuple[list[float], float]:
    """The error rates and delta to certify: as given, else those of the probe's certificates."""
    carried = probe.certificates
    if max_error is None:
        if not carried:
            raise InputError("max_error: this probe carries no certificate to re-certify; give the error "
                             "rates to certify (--max-error ALPHA)")
        max_error = [e["alpha"] for e in carried]
    alphas = check_max_errors(max_error)
    if delta is None:
        deltas = {float(e["delta"]) for e in carried}
        delta = deltas.pop() if len(deltas) == 1 else DEFAULT_DELTA
    return alphas, check_delta(delta)


def _scores(conf: np.ndarray, y: np.ndarray) -> dict:
    return {"smece": float(METRICS["smece"].fn(conf, y)), "auc_euro": float(METRICS["auc_euro_all"].fn(conf, y))}


def _restacked(probe: ExportedProbe, p: np.ndarray, raw: np.ndarray, y: np.ndarray, store: Any,
               seed: int) -> tuple[np.ndarray, dict, dict]:
    """``(out-of-fold confidences, the map's arrays fitted on all records, folds)`` of the probe's
    calibration map refitted on the forest probabilities ``p`` of the store's records."""
    method = probe.calibration
    if method is None:
        raise InputError("restack: this probe has no calibration map to refit (its forest's P(correct) is "
                         "used as it is); re-certify its threshold only")
    field, groups = store_groups(store, None, list(store.ids))

    def fit_predict(tr, te):
        fitted = probe_calibrator(method).fit(calibration_scores(method, p[tr], raw[tr]), y[tr])
        return fitted.predict_proba(calibration_scores(method, p[te], raw[te]))[:, 1]

    oof = out_of_fold(fit_predict, stratified_folds(y, CV_FOLDS, seed, groups=groups), y.size)
    arrays = calibrator_arrays(method, probe_calibrator(method).fit(calibration_scores(method, p, raw), y))
    folds = {"n_splits": CV_FOLDS, "seed": seed, "from": f"recertify --restack: the {method} map cross-fitted "
                                                          f"on the recertification store"}
    if field is not None:
        folds["group_by"] = field
    return oof, arrays, folds


# Long because it assembles the new probe file from its parts in order (checks, confidences,
# certificates, manifest); each part is a helper above.
def recertify(probe: ExportedProbe, store: Any, *, max_error: float | Sequence[float] | None = None,
              delta: float | None = None, restack: bool = False, backend: str = DEFAULT_BACKEND, seed: int = 0,
              store_path: str | os.PathLike | None = None) -> Recertified:
    """Re-certify ``probe`` (an :class:`ExportedProbe`) on the labelled records of ``store``,
    collected under the setting it is to be scored in (see the module doc).

    ``max_error`` / ``delta``: the error rates and the failure probability to certify (default:
    those of the probe's certificates). ``restack``: also refit its calibration map.
    ``backend``: :func:`~acute.metrics.certify.certify_threshold`'s. ``store_path`` names the
    store in the new probe (default: its own path). Returns a :class:`Recertified`; the original
    probe is not changed. Raises what :func:`check_recertification_store` raises, and
    :class:`InputError` for too few records to certify anything at an error rate."""
    if not isinstance(probe, ExportedProbe):
        raise InputError(f"probe must be an exported probe (acute.load_probe), got {type(probe).__name__}")
    path = store_path if store_path is not None else getattr(store, "path", None)
    name = f"the store {path}" if path is not None else "the store"
    alphas, delta = _levels(probe, max_error, delta)
    check_recertification_store(probe, store, name)
    states = np.asarray(store_states(store, probe.pooling), dtype=np.float32)
    raw = np.asarray(store.raw_confidence, dtype=np.float64)
    y = np.asarray(store.correct).astype(np.int64)
    X = Inputs.of(states, raw, pooling=probe.pooling)
    before = probe.predict_proba(X)[:, 1]
    where = None if path is None else str(Path(path).resolve())
    summary: dict[str, Any] = {"store": where, "n": int(y.size), "accuracy": float(y.mean()),
                               "restacked": bool(restack), "before": _scores(before, y)}
    arrays, folds, conf = dict(probe.arrays), None, before
    if restack:
        p = forest_proba(probe.features(X), probe.arrays)
        conf, fitted, folds = _restacked(probe, p, raw, y, store, seed)
        arrays.update(fitted)
        summary["after_out_of_fold"] = _scores(conf, y)
    entries = [certificate_entry(certify_threshold(conf, y.astype(bool), alpha, delta, backend=backend),
                                 backend=backend, source="calibration-store", calibration_store=where,
                                 folds=folds)
               for alpha in alphas]
    old = probe.domain
    # the arrays and files listings are written again with the arrays
    manifest = {k: v for k, v in probe.manifest.items()
                if k not in ("certificates", "recertification", "arrays", "files")}
    manifest["certificates"] = entries
    manifest["recertification"] = summary
    # the served confidences' drift is measured against the new setting's calibration records
    manifest["confidence_reference"] = confidence_reference(conf, "calibration-store")
    given = ModelIdentity.from_manifest(store.manifest)
    record = given.to_probe_json()["fingerprint"]  # the weights as the new setting loads them
    if record is not None:
        manifest["model"] = {**manifest["model"], "fingerprint": record}
    new = ExportedProbe(manifest, arrays)
    new.with_domain(domain_record(given, states=probe.pooling, store=where,
                                  recertified_from=None if old is None else
                                  {k: v for k, v in old.items() if k != "recertified_from"}))
    new.precheck = probe.precheck
    return Recertified(probe=new, certificates=entries, summary=summary)
