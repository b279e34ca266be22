"""Live scoring: generate (or take) an answer, read the probe's confidence, decide by a risk level or a
certified threshold.

* :mod:`~acute.scoring.risk`: the risk rule (trust iff confidence > risk), its risk check and
  :data:`~acute.scoring.risk.DEFAULT_RISK`;
* :mod:`~acute.scoring.gate`: what decides an answer, parsed once: a :class:`Gate` holds the
  rule chosen by the caller (a risk level, or the probe's certified threshold at ``max_error``:
  trust iff confidence >= it) and an optional precheck threshold;
* :mod:`~acute.scoring.precheck`: deciding from the question alone, before generating (the
  question-only probe exported with ``acute export --with-precheck``): :class:`PrecheckResult`,
  :func:`check_precheck`;
* :mod:`~acute.scoring.scorer`: :class:`Scorer` (``generate``, ``score_responses``,
  ``precheck``) and :class:`ScoredGeneration`.
"""

from __future__ import annotations

from .gate import DecisionRule, Gate, parse_gate
from .precheck import PrecheckResult, check_precheck
from .risk import DEFAULT_RISK, check_risk, decide
from .scorer import ScoredGeneration, Scorer, probe_task, task_from_settings

__all__ = ["DEFAULT_RISK", "DecisionRule", "Gate", "PrecheckResult", "ScoredGeneration", "Scorer", "check_precheck",
           "check_risk", "decide", "parse_gate", "probe_task", "task_from_settings"]
