"""The protocol study's settings: provenances, scored answers, readouts, contexts, estimators."""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from .. import metrics as _metrics

__all__ = ["ALPHA", "AXES", "AXIS_LEVELS", "AXIS_TITLES", "CONTEXTS", "CONTEXT_NAMES", "ESTIMATORS", "FORMAT",
           "PAPER_SHIFTS", "PROVENANCES", "PROVIDED", "PROVIDED_LABELS", "READOUTS", "ROBUSTNESS", "SCORED",
           "SCORED_PROVENANCE", "SHIFT_READOUTS", "VERBAL_MAX_NEW_TOKENS"]


logger = logging.getLogger(__name__)


FORMAT = "acute-protocol/1"

PROVENANCES = ("generated", "gold", "plausible_wrong", "wrong_type")
PROVIDED = ("gold", "plausible_wrong", "wrong_type")
#: correctness of a provided answer, known by construction
PROVIDED_LABELS = {"gold": True, "plausible_wrong": False, "wrong_type": False}
SCORED = ("generated", "gold")
READOUTS = ("T1", "T2", "product")
SHIFT_READOUTS = ("T1", "T2")
CONTEXTS = ("query", "verbal")
ESTIMATORS: dict[str, Callable[[np.ndarray, np.ndarray], float]] = {
    "ECE": _metrics.ece,
    "KDE-ECE": _metrics.kde_ece,
    "KS-Cal": _metrics.ks_cal,
    "smECE": _metrics.smece,
}
ROBUSTNESS: dict[str, Callable[[np.ndarray, np.ndarray], float]] = {
    "Brier": _metrics.brier,
    "NLL": _metrics.nll,
    "AUROC": _metrics.auroc,
}
AXES = ("context", "readout", "scored", "estimator")
#: mean absolute change of g per toggled axis reported in the paper (for reference in reports)
PAPER_SHIFTS = {"context": 0.28, "readout": 0.11, "estimator": 0.01}
VERBAL_MAX_NEW_TOKENS = 12
ALPHA = 0.05

AXIS_LEVELS = {
    "context": CONTEXTS,
    "readout": SHIFT_READOUTS,
    "scored": SCORED,
    "estimator": tuple(ESTIMATORS),
}
AXIS_TITLES = {
    "context": "conditioning context (query <-> verbal prefix)",
    "readout": "token readout (T1 <-> T2)",
    "scored": "scored answer (generated <-> gold)",
    "estimator": "estimator (pairs of ECE, KDE-ECE, KS-Cal, smECE)",
}
SCORED_PROVENANCE = {
    "generated": "generated (the model's own answer)",
    "gold": "provided: gold + plausible-wrong + wrong-type, pooled",
}
CONTEXT_NAMES = {"query": "bare query", "verbal": "verbalization prefix"}
