"""What a gate trained for export carries besides its estimator, whatever the estimator is (a
probe, :class:`~acute.evaluation.training.TrainedProbe`, or a stack,
:class:`~acute.evaluation.choice.TrainedStack`): how it was chosen and trained, its certified
trust thresholds, the question-only probe that decides before generating, the checkpoint model
that stops a generation early, and how those two are exported beside it.

A :class:`TrainedGate` also says how to cross-fit its estimator on a store
(:meth:`TrainedGate.inputs`, :meth:`TrainedGate.unfitted`): what certification
(:mod:`acute.evaluation.certification`) and the checkpoint model's calibration
(:mod:`acute.evaluation.checkpoint_model`) need, so a stack is certified like a probe.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..estimators.stop_early import StopEarlyModel
from ..store.identity import ModelIdentity

__all__ = ["PRECHECK_ESTIMATOR", "TrainedGate"]

#: the question-only estimator ``acute export --with-precheck`` fits when no other is named
#: (:mod:`acute.estimators.controls`)
PRECHECK_ESTIMATOR = "question-only"


@dataclass(kw_only=True)
class TrainedGate:
    """The parts every trained gate shares (module doc).

    ``label``: how it was chosen (``"acute-pca10-stacked"``, ``"auto -> acute-all"``);
    ``selection``: ``auto``'s cross-validated comparison (None for a named estimator);
    ``training_summary``; ``n_train``; ``held_out``: the held-out comparison
    (:func:`acute.evaluation.training.held_out_metrics`' keys; None when no record was left out);
    ``identity``: the model's (:class:`~acute.store.identity.ModelIdentity`); ``train_index``: the
    store rows it was fitted on; ``certificates``: its certified trust thresholds
    (:func:`acute.evaluation.certification.certify_probe`; empty: none); ``domain``: its validity
    domain (:func:`acute.store.identity.domain_record` of the training store, whose setting the
    calibration records share; None: unknown); ``confidence_reference``: percentiles of the
    confidences it gave records it was not fitted on, which ``acute serve``'s drift signal compares
    live confidences with (:mod:`acute.metrics.drift`: the certificate's calibration records, else
    ``auto``'s out-of-fold predictions, else the held-out records; None when there are none);
    ``precheck``: the question-only probe fitted on the same records' last-prompt states, or None,
    ``precheck_held_out`` its held-out metrics and ``precheck_estimator`` its name; ``stop_early``:
    the checkpoint model early stopping reads, or None; ``choice_line``: ``auto``'s one line, or
    None; ``auto``: a fitted :class:`~acute.estimators.auto.AutoEstimator` whose out-of-fold
    predictions certification may reuse, or None."""

    label: str
    selection: dict | None = None
    training_summary: dict = field(default_factory=dict)
    n_train: int = 0
    held_out: dict | None = None
    identity: ModelIdentity | None = None
    train_index: np.ndarray | None = None
    certificates: list = field(default_factory=list)
    domain: dict | None = None
    confidence_reference: dict | None = None
    precheck: Any = None
    precheck_held_out: dict | None = None
    precheck_estimator: str | None = None
    stop_early: StopEarlyModel | None = None
    choice_line: str | None = None
    auto: Any = None

    def inputs(self, store: Any, idx: np.ndarray | None = None) -> Any:
        """The :class:`~acute.estimators.inputs.Inputs` the estimator reads of ``store``'s records
        ``idx`` (default: every record)."""
        raise NotImplementedError

    def unfitted(self) -> Any:
        """An unfitted copy of the estimator (what cross-fitting refits on each fold)."""
        raise NotImplementedError

    def export(self) -> Any:
        """The exported gate (a probe or a stack) with everything it carries."""
        raise NotImplementedError

    def save(self, path: str | os.PathLike) -> Path:
        """Write the gate's folder (:meth:`export`, then its ``save``: atomically, the question-only
        probe in ``precheck/`` and the checkpoint model in ``stop-early/``)."""
        return self.export().save(path)

    def with_companions(self, exported: Any) -> Any:
        """``exported`` holding the exported question-only probe and checkpoint model, when they
        were fitted, and this gate's validity domain; returns it."""
        if self.precheck is not None:
            summary = {**self.training_summary, "estimator": self.precheck_estimator or PRECHECK_ESTIMATOR}
            exported.precheck = self.precheck.export(self.identity, training_summary=summary,
                                                     metrics=self.precheck_held_out)
            if self.domain is not None:
                states = {**(self.domain.get("pooling") or {}), "states": self.precheck.pooling}
                exported.precheck.with_domain({**self.domain, "pooling": states})
        if self.stop_early is not None:
            model, probes = self.stop_early, {}
            for k, p in model.probes.items():
                summary = {**self.training_summary, "estimator": model.details.get("estimator"), "checkpoint": k}
                probes[k] = p.export(self.identity, training_summary=summary).with_domain(self.domain)
            exported.stop_early = StopEarlyModel(probes, model.scores, model.trusted, model.correct, model.details)
        return exported.with_domain(self.domain)
