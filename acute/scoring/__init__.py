"""Live scoring: generate (or take) an answer, read the probe's confidence, decide at a risk level.

* :mod:`~acute.scoring.risk`: the one trust rule (trust iff confidence > risk) and its risk check;
* :mod:`~acute.scoring.scorer`: :class:`Scorer` and :class:`ScoredGeneration`.
"""

from __future__ import annotations

from .risk import check_risk, decide
from .scorer import ScoredGeneration, Scorer, probe_task, task_from_settings

__all__ = ["ScoredGeneration", "Scorer", "check_risk", "decide", "probe_task", "task_from_settings"]
