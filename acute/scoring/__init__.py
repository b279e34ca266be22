"""Live scoring: generate (or take) an answer, read the probe's confidence, decide by a risk level or a
certified threshold.

* :mod:`~acute.scoring.risk`: the risk rule (trust iff confidence > risk), its risk check and
  :data:`~acute.scoring.risk.DEFAULT_RISK`;
* :mod:`~acute.scoring.gate`: what decides an answer, parsed once: a :class:`Gate` holds the
  rule chosen by the caller (a risk level, or the probe's certified threshold at ``max_error``:
  trust iff confidence >= it) and an optional precheck threshold;
* :mod:`~acute.scoring.precheck`: deciding from the question alone, before generating (the
  question-only probe exported with ``acute export --with-precheck``): :class:`PrecheckResult`,
  :func:`~acute.scoring.precheck.check_precheck`;
* :mod:`~acute.scoring.stop_early`: stopping a generation the gate will not trust, at a checkpoint;
* :mod:`~acute.scoring.probe_checks`: what a scorer reads from and checks about its probe (the
  training task and generation settings, the model, the validity domain);
* :mod:`~acute.scoring.results`: :class:`ScoredGeneration`, one scored answer;
* :mod:`~acute.scoring.scorer`: :class:`Scorer` (``generate``, ``score_responses``,
  ``precheck``).

The names below are the package's public API (docs/api.md); the level checkers are imported
from their modules.
"""

from __future__ import annotations

from .gate import DecisionRule, Gate, parse_gate
from .precheck import PrecheckResult
from .risk import DEFAULT_RISK
from .results import ScoredGeneration
from .scorer import Scorer

__all__ = ["DEFAULT_RISK", "DecisionRule", "Gate", "PrecheckResult", "ScoredGeneration", "Scorer", "parse_gate"]
