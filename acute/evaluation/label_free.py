"""Probes trained without gold labels: the forest learns whether the model's own sampled answers
agree (Semantic Entropy Probes, Kossen et al. 2024), and only its calibration reads gold labels,
``calibration_labels`` of them (none: a ranking only).

The target of a record (:func:`agreement_target`) comes from its stored samples
(:func:`acute.estimators.agreement.agreement_matrix`, by its task's equivalence): ``consistency``
is 1 when at least half of the samples give the greedy answer; ``semantic-entropy`` is 1 when the
samples' semantic entropy is at most the median over the training records (as Kossen et al.
binarise it, at a threshold the labels never see). The first level is the PCA-10 forest of the
answer's mean states (no raw confidence: one forward pass at scoring time, nothing sampled);
its out-of-bag probabilities of agreement are Platt-scaled on the gold labels of
``calibration_labels`` training records drawn with the seed (nested: the first N of one seeded
order). The probe exports, scores and serves like any other; its ``probe.json`` says it was
trained without gold labels and how many calibrated it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..collect import collection_settings
from ..errors import InputError
from ..estimators.agreement import agreement_matrix, store_task
from ..estimators.calibration import calibration_scores, probe_calibrator
from ..estimators.inputs import Inputs, states_source
from ..estimators.probes import ActivationProbe
from ..store.identity import ModelIdentity, domain_record
from ..tasks.agreement import AGREEMENT_SIGNALS
from ..validation import check_count
from .crossval import split_ids
from .training import TrainedProbe

__all__ = ["TARGETS", "agreement_target", "calibration_rows", "train_label_free"]

#: the label-free targets ``acute train --target`` takes
TARGETS = ("consistency", "semantic-entropy")


def agreement_target(agreement: np.ndarray, target: str) -> np.ndarray:
    """int64 [n]: the binary target ``target`` of the agreement signals ``agreement`` [n, 3]
    (module docstring)."""
    if target not in TARGETS:
        raise InputError(f"target must be one of {', '.join(TARGETS)} (or gold labels), got {target!r}")
    a = np.asarray(agreement, dtype=np.float64)
    if target == "consistency":
        return (a[:, AGREEMENT_SIGNALS.index("consistency")] >= 0.5).astype(np.int64)
    entropy = a[:, AGREEMENT_SIGNALS.index("semantic_entropy")]
    return (entropy <= np.median(entropy)).astype(np.int64)


def calibration_rows(rows: np.ndarray, n: int, seed: int) -> np.ndarray:
    """The first ``n`` of ``rows`` in one order drawn with ``seed`` (so a larger ``n`` keeps a
    smaller one's records); InputError with both counts when ``rows`` has fewer."""
    if n > len(rows):
        raise InputError(f"--calibration-labels {n} is more than the {len(rows)} labelled training records")
    order = np.random.default_rng(seed).permutation(len(rows))
    return np.sort(np.asarray(rows)[order[:n]])


def train_label_free(store: Any, target: str, calibration_labels: int, *, test_fraction: float = 0.0,
                     seed: int = 0, n_jobs: int | None = None, n_estimators: int | None = None,
                     store_path: Any = None) -> TrainedProbe:
    """Fit the label-free probe of the module docstring on ``store``'s training records (all of
    them with ``test_fraction=0``, else a split by id) and describe it as a :class:`TrainedProbe`.
    InputError naming the store when its records have no samples, when the target has one
    class only, or when ``calibration_labels`` exceeds the labelled training records."""
    calibration_labels = check_count(calibration_labels, "calibration_labels", minimum=0)
    where = str(getattr(store, "path", "the store"))
    agreement = agreement_matrix(store.records, store_task(store.manifest), where=where)
    train, _ = split_ids(store.ids, test_fraction=test_fraction, seed=seed)
    idx = np.flatnonzero(train)
    y_target = agreement_target(agreement[idx], target)
    if np.unique(y_target).size < 2:
        raise InputError(f"{where}: every training record's samples give the same {target} target; "
                         "there is nothing to learn without labels")
    params = {"n_estimators": n_estimators} if n_estimators is not None else {}
    probe = ActivationProbe(view="pca10", append_confidence=False, calibration="platt", oof="oob",
                            random_state=seed, **({"n_jobs": n_jobs} if n_jobs is not None else {}), **params)
    states = np.asarray(store.layer_means, dtype=np.float32)[idx]
    probe.fit(Inputs({states_source("mean"): states}), y_target)
    labelled = np.flatnonzero(np.asarray(store.labelled)[idx])
    cal = calibration_rows(labelled, calibration_labels, seed)
    y = np.asarray(store.correct)[idx].astype(np.int64)
    if cal.size and np.unique(y[cal]).size < 2:
        raise InputError(f"the {cal.size} calibration labels drawn are all of one class; give more "
                         "--calibration-labels")
    if cal.size:  # the forest's out-of-bag P(agree), Platt-scaled on gold labels
        probe.calibrator_ = probe_calibrator("platt").fit(
            calibration_scores("platt", probe.oof_proba_[cal], None), y[cal])
    else:  # ranking only: the forest's P(agree) is the score
        probe.calibration, probe.calibrator_ = None, None
    m = store.manifest
    path = store_path if store_path is not None else getattr(store, "path", None)
    summary = {"store": None if path is None else str(Path(path).resolve()), "n_train": int(idx.size),
               "estimator": f"label-free-{target}", "target": target, "trained_without_gold_labels": True,
               "gold_labels_used": int(cal.size), "target_positive_rate": float(y_target.mean()),
               "samples": (m.get("generation") or {}).get("samples"),
               "split": {"test_fraction": test_fraction, "seed": seed}, **collection_settings(m)}
    return TrainedProbe(probe=probe, label=f"label-free ({target}, {cal.size} calibration labels)",
                        selection=None, training_summary=summary, n_train=int(idx.size),
                        identity=ModelIdentity.from_manifest(m), train_index=idx,
                        domain=domain_record(ModelIdentity.from_manifest(m), states=probe.pooling,
                                             store=summary["store"]))
