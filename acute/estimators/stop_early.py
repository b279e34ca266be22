"""The checkpoint model of early stopping: one prefix probe per checkpoint and the calibration
arrays a stopping threshold is certified on when a caller asks for one.

A :class:`StopEarlyModel` holds, for the checkpoints ``k`` (generated tokens, increasing) it was
fitted at, a probe of P(final answer correct) from the layer means over the first ``k`` tokens
and their product of token probabilities (``states@mean`` and ``confidence``, as
:func:`acute.evaluation.prefix.prefix_inputs` builds them), and the arrays
:func:`acute.metrics.stopping.certify_stopping` reads: ``scores`` ``[n, J]`` (each training
record's out-of-fold prefix score at each checkpoint, NaN where its answer had ended by then),
``trusted`` (the answer probe's out-of-fold P(correct) > 0.5: the final gate would trust it) and
``correct``. :meth:`StopEarlyModel.rule` certifies a threshold at ``epsilon`` from them (once
per ``(epsilon, delta)``); :meth:`StopEarlyModel.confidence` scores rows at a checkpoint.

Only the fitted checkpoints are checked: the certificate bounds the rule "stop at the first of
these checkpoints whose score is below the threshold", so a checkpoint past the last one
(96, 128, ... of the default schedule) is never checked (:meth:`StopEarlyModel.checks`).

On disk (written and read by :mod:`acute.estimators.stop_early_folder`) it is the folder
``stop-early/`` of a probe folder: one probe folder per checkpoint (``k4/``, ``k8/``, ...) and
``calibration.safetensors`` (``checkpoints`` int64 [J], ``scores`` float64 [n, J], ``trusted``
and ``correct`` uint8 [n]); the answer probe's ``probe.json`` names them with their sha256.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ..errors import InputError
from ..metrics.certify import DEFAULT_DELTA
from ..metrics.stopping import StopRule, certify_stopping
from .inputs import CONFIDENCE, Inputs, states_source

__all__ = ["STOP_EARLY_DIR", "STOP_CALIBRATION_FILE", "StopEarlyModel", "checkpoint_dir", "require_stop_early"]

#: the folder of the checkpoint model inside a probe folder
STOP_EARLY_DIR = "stop-early"
#: its calibration arrays
STOP_CALIBRATION_FILE = "calibration.safetensors"
#: how a probe folder gets a checkpoint model (named by every error about its absence)
EXPORT_HINT = "acute export --store STORE --out PROBE --with-stop-early"


def checkpoint_dir(k: int) -> str:
    """The folder of checkpoint ``k``'s probe inside ``stop-early/``: ``k4``, ``k8``, ..."""
    return f"k{int(k)}"


def require_stop_early(model: Any, name: str = "stop_early") -> "StopEarlyModel":
    """``model`` (a probe's checkpoint model), or :class:`InputError` naming ``name`` and saying
    how to export a probe with one when it is None."""
    if model is None:
        raise InputError(f"{name}: this probe has no checkpoint model (the prefix probes early stopping "
                         f"reads); export one with it: {EXPORT_HINT} (the store must keep prefix "
                         f"checkpoints), then score with that probe folder")
    return model


class StopEarlyModel:
    """Prefix probes per checkpoint and the arrays their stopping threshold is certified on (see
    the module docstring). ``probes``: ``{k: probe}`` (anything with ``predict_proba(Inputs)``
    reading ``states@mean`` and ``confidence``); ``scores``, ``trusted``, ``correct`` as
    :func:`acute.metrics.stopping.certify_stopping` takes them, one column of ``scores`` per
    checkpoint in increasing order; ``details``: what ``probe.json`` records of how they were
    made (estimator, folds, what "trusted" means). Checked on construction (InputError)."""

    def __init__(self, probes: Mapping[int, Any], scores: Any, trusted: Any, correct: Any,
                 details: Mapping[str, Any] | None = None):
        ks = sorted(int(k) for k in probes)
        if not ks or ks[0] < 1 or len(set(ks)) != len(ks):
            raise InputError(f"a checkpoint model needs probes at distinct positive checkpoints, got {ks}")
        self.checkpoints: tuple[int, ...] = tuple(ks)
        self.probes = {int(k): p for k, p in probes.items()}
        self.scores = np.asarray(scores, dtype=np.float64)
        self.trusted = np.asarray(trusted).astype(bool)
        self.correct = np.asarray(correct).astype(bool)
        if self.scores.ndim != 2 or self.scores.shape[1] != len(ks):
            raise InputError(f"scores must be [records, {len(ks)} checkpoints], got shape {list(self.scores.shape)}")
        if not (self.trusted.shape == self.correct.shape == (self.scores.shape[0],)):
            raise InputError(f"trusted and correct must have one entry per row of scores ({self.scores.shape[0]}), "
                             f"got {self.trusted.shape} and {self.correct.shape}")
        self.details = dict(details or {})
        self._rules: dict[tuple[float, float], StopRule] = {}

    def __repr__(self) -> str:
        return f"StopEarlyModel(checkpoints={list(self.checkpoints)}, n_calibration={self.scores.shape[0]})"

    def rule(self, epsilon: float, delta: float = DEFAULT_DELTA) -> StopRule:
        """The stopping threshold certified at ``epsilon`` (the share of right answers the final
        gate trusts that the rule may stop) with probability ``1 - delta``, on the calibration
        arrays (:func:`acute.metrics.stopping.certify_stopping`; threshold 0 when none can be
        certified: never stop). Computed once per ``(epsilon, delta)``."""
        key = (float(epsilon), float(delta))
        if key not in self._rules:
            self._rules[key] = certify_stopping(self.scores, self.trusted, self.correct, epsilon, delta)
        return self._rules[key]

    def checks(self, k: int) -> bool:
        """Whether the rule is checked after ``k`` generated tokens: exactly at the fitted checkpoints."""
        return int(k) in self.probes

    def confidence(self, k: int, means: Any, confidence: Any) -> np.ndarray:
        """float64 [b]: the checkpoint-``k`` probe's P(correct) of rows with prefix layer means
        ``means`` (float32 [b, L+1, d]) and prefix confidences ``confidence`` [b]."""
        if not self.checks(k):
            raise InputError(f"no prefix probe at {k} tokens (checkpoints {list(self.checkpoints)})")
        X = Inputs({states_source("mean"): np.asarray(means, dtype=np.float32),
                    CONFIDENCE: np.asarray(confidence, dtype=np.float64)})
        return np.asarray(self.probes[int(k)].predict_proba(X)[:, 1], dtype=np.float64)

    def arrays(self) -> dict[str, np.ndarray]:
        """The calibration arrays as ``calibration.safetensors`` holds them."""
        return {"checkpoints": np.asarray(self.checkpoints, dtype=np.int64),
                "scores": np.ascontiguousarray(self.scores, dtype=np.float64),
                "trusted": self.trusted.astype(np.uint8), "correct": self.correct.astype(np.uint8)}

    @classmethod
    def from_arrays(cls, probes: Mapping[int, Any], arrays: Mapping[str, np.ndarray], where: str,
                    details: Mapping[str, Any] | None = None) -> "StopEarlyModel":
        """The model of ``probes`` and ``calibration.safetensors``'s ``arrays`` (read from
        ``where``, named by the errors); InputError when they do not fit together."""
        missing = {"checkpoints", "scores", "trusted", "correct"} - set(arrays)
        if missing or set(arrays) - {"checkpoints", "scores", "trusted", "correct"}:
            raise InputError(f"{where}: expected the arrays checkpoints, scores, trusted and correct, got {sorted(arrays)}")
        ks = [int(k) for k in arrays["checkpoints"]]
        if ks != sorted(int(k) for k in probes):
            raise InputError(f"{where}: its checkpoints {ks} are not those of the prefix probes {sorted(probes)}")
        scores = np.asarray(arrays["scores"])
        if scores.dtype != np.float64 or np.any(np.isinf(scores)) or np.any((scores < 0) | (scores > 1)):
            raise InputError(f"{where}: scores must be float64 probabilities in [0, 1] (NaN: the answer had ended)")
        for name in ("trusted", "correct"):
            if arrays[name].dtype != np.uint8 or np.any(arrays[name] > 1):
                raise InputError(f"{where}: {name} must be uint8 0/1")
        try:
            return cls(probes, scores, arrays["trusted"], arrays["correct"], details)
        except InputError as e:
            raise InputError(f"{where}: {e}") from None
