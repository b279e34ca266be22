"""Live scoring: generate (or take) an answer, read the probe's confidence, decide by a risk level or a
certified threshold.

* :mod:`~acute.scoring.risk`: the risk rule (trust iff confidence > risk) and its risk check;
* :mod:`~acute.scoring.rules`: the rule chosen by the caller: a risk level or the probe's
  certified threshold at ``max_error`` (trust iff confidence >= it);
* :mod:`~acute.scoring.precheck`: deciding from the question alone, before generating (the
  question-only probe exported with ``acute export --precheck``): :class:`PrecheckResult`,
  :func:`check_precheck`;
* :mod:`~acute.scoring.scorer`: :class:`Scorer` (``generate``, ``score_responses``,
  ``precheck``) and :class:`ScoredGeneration`.
"""

from __future__ import annotations

from .precheck import PrecheckResult, check_precheck
from .risk import check_risk, decide
from .rules import DecisionRule, decision_rule
from .scorer import ScoredGeneration, Scorer, probe_task, task_from_settings

__all__ = ["DecisionRule", "PrecheckResult", "ScoredGeneration", "Scorer", "check_precheck", "check_risk", "decide",
           "decision_rule", "probe_task", "task_from_settings"]
