"""Stopping a generation the gate will not trust, at a checkpoint, by a certified threshold.

``stop_early=EPS`` (``Scorer.generate``, ``acute score --stop-early``, ``acute serve
--stop-early``) asks for the threshold the probe's checkpoint model certifies at ``EPS``
(:meth:`acute.estimators.stop_early.StopEarlyModel.rule`: with probability at least ``1 -
delta``, :data:`~acute.metrics.certify.DEFAULT_DELTA`, at most a share ``EPS`` of the right
answers the final gate would trust are stopped; :mod:`acute.metrics.stopping`). While the answer
is generated, at each checkpoint the model has a prefix probe for (4, 8, 16, 32, 64 tokens: the
certificate covers those, so later ones are not checked), the probe's P(correct) of the prefix
is compared with the threshold and a row below it is stopped there: its answer is the prefix,
decided ``abstain`` (:class:`StopDecisions` keeps what each stopped row was told).

The guarantee is for the final gate of the calibration arrays (the risk rule at 0.5, the export's
own out-of-fold P(correct)) and for answers like the training records (same model, setting and
kind of question); with another rule the right answers it would trust are another set.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..errors import InputError
from ..estimators.stop_early import require_stop_early
from ..metrics.certify import DEFAULT_DELTA
from ..metrics.stopping import StopRule
from ..store.checkpoints import Schedule
from ..validation import check_level

__all__ = ["StopDecisions", "check_stop_early", "mark_stop", "recorder_stop_settings", "stop_decisions", "stop_fields",
           "stop_rule"]


def check_stop_early(value: Any, name: str = "stop_early") -> float:
    """``value`` as a float in (0, 1): the share of right answers the final gate would trust that
    stopping early may cost (:func:`acute.validation.check_level`; InputError naming ``name``)."""
    return check_level(value, name, "the share of right answers the gate would trust that stopping early may cost")


def stop_rule(probe: Any, epsilon: float, name: str = "stop_early") -> StopRule:
    """The stopping threshold ``probe``'s checkpoint model certifies at ``epsilon`` (already
    checked, :func:`check_stop_early`) with delta :data:`~acute.metrics.certify.DEFAULT_DELTA`;
    InputError naming ``name`` when the probe has no checkpoint model (saying how to export
    one) or is scored outside its validity domain (its certificates refused)."""
    model = require_stop_early(getattr(probe, "stop_early", None), name)
    refused = getattr(probe, "certificates_refused", None)
    if refused:
        raise InputError(f"{name}={epsilon:g}: no certified stop here: {refused}")
    return model.rule(epsilon, DEFAULT_DELTA)


def stop_fields(rule: StopRule) -> dict:
    """What an answer generated under a stop rule says of it: ``epsilon``, ``delta``,
    ``threshold`` (0: nothing could be certified, never stopped) and ``n_calibration`` (the
    calibration answers that were trusted and right)."""
    return {"epsilon": rule.epsilon, "delta": rule.delta, "threshold": rule.threshold,
            "n_calibration": rule.n_protected}


class StopDecisions:
    """The ``on_checkpoint`` callback of one generation call (:func:`acute.extraction.generate_and_record`)
    for prompts with stop rules ``rules`` (one per prompt, None: never stopped), reading the
    probe's checkpoint ``model``. After generating, ``stopped[i]`` is ``(k, P(correct))`` for
    each prompt ``i`` it stopped at ``k`` tokens."""

    def __init__(self, model: Any, rules: Sequence[StopRule | None]):
        self.model = model
        self.thresholds = np.array([0.0 if r is None else r.threshold for r in rules], dtype=np.float64)
        self.stopped: dict[int, tuple[int, float]] = {}

    def __call__(self, k: int, rows: np.ndarray, means: np.ndarray, confidence: np.ndarray) -> np.ndarray:
        stop = np.zeros(len(rows), dtype=bool)
        t = self.thresholds[np.asarray(rows, dtype=np.int64)]
        ask = t > 0
        if not self.model.checks(k) or not ask.any():
            return stop
        p = self.model.confidence(k, means[ask], confidence[ask])
        hit = p < t[ask]
        stop[np.flatnonzero(ask)[hit]] = True
        for i, q in zip(np.asarray(rows)[ask][hit], p[hit]):
            self.stopped[int(i)] = (int(k), float(q))
        return stop

    def reason(self, i: int) -> str:
        """Why prompt ``i`` was stopped, for people."""
        k, p = self.stopped[i]
        return (f"stopped after {k} tokens: the prefix probe's P(correct) {p:.4f} < the stopping threshold "
                f"{self.thresholds[i]:g}")


def stop_decisions(probe: Any, rules: Sequence[StopRule | None]) -> StopDecisions | None:
    """The checkpoint callback of a generation of prompts with stop rules ``rules`` (one per
    prompt, None: never stopped), reading ``probe``'s checkpoint model; None when none stops."""
    if all(r is None for r in rules):
        return None
    return StopDecisions(probe.stop_early, list(rules))


def recorder_stop_settings(stops: StopDecisions | None, max_new_tokens: int) -> dict:
    """The recorder's ``checkpoints`` and ``on_checkpoint`` for ``stops`` (nothing without one):
    the checkpoint model's own counts, then none (the rule is checked there only)."""
    if stops is None:
        return {}
    return {"checkpoints": Schedule(stops.model.checkpoints, max_new_tokens + 1), "on_checkpoint": stops}


def mark_stop(scored: Any, rule: StopRule | None, stops: StopDecisions, i: int) -> None:
    """Give the scored answer ``scored`` (prompt ``i`` of ``stops``, a
    :class:`~acute.scoring.results.ScoredGeneration`) the fields of its stop ``rule``; a stopped
    answer abstains, unscored."""
    if rule is None:
        return
    scored.stop = stop_fields(rule)
    if i in stops.stopped:
        k, p = stops.stopped[i]
        scored.stop.update(checkpoint=k, confidence=p, reason=stops.reason(i))
        scored.stopped_at, scored.trust, scored.confidence = scored.n_tokens, False, None
