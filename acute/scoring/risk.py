"""The risk rule and the risk levels it takes.

An answer is trusted iff its confidence exceeds the risk level ``u = c_wrong / (c_wrong +
c_abstain)`` (the cost of trusting a wrong answer relative to that of abstaining on a right
one), as in euro. A risk level is a number in [0, 1] (at 1 nothing is trusted, at 0 everything
with positive confidence), checked by :func:`check_risk` wherever one comes in: ``Scorer``,
``acute score --risk``, ``acute serve --risk`` and a request's ``risk``
(:func:`acute.validation.check_level`, one wording everywhere). The rule decides as
:func:`acute.scoring.gate.risk_rule` (a :class:`~acute.scoring.gate.DecisionRule`).
"""

from __future__ import annotations

from typing import Any

from ..validation import check_level

__all__ = ["DEFAULT_RISK", "RISK_MEANING", "check_risk"]

#: the risk level when a caller names no rule: equal costs of a wrong trust and a wrong abstention
DEFAULT_RISK = 0.5
#: what a risk level means, in every refusal of a bad one
RISK_MEANING = "the risk level u: trust iff confidence > u"


def check_risk(risk: Any, name: str = "risk") -> float:
    """``risk`` as a float in [0, 1]; :class:`InputError` naming ``name`` otherwise (booleans,
    strings, NaN and non-numbers included)."""
    return check_level(risk, name, RISK_MEANING, closed=True)
