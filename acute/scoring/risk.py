"""The risk rule and the risk levels it takes.

An answer is trusted iff its confidence exceeds the risk level ``u = c_wrong / (c_wrong +
c_abstain)`` (the cost of trusting a wrong answer relative to that of abstaining on a right
one), as in euro. A risk level is a number in [0, 1] (at 1 nothing is trusted, at 0 everything
with positive confidence), checked by :func:`check_risk` wherever one comes in: ``Scorer``,
``acute score --risk``, ``acute serve --risk`` and a request's ``risk``
(:func:`acute.validation.check_level`, one wording everywhere).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..errors import InputError
from ..validation import check_level

__all__ = ["DEFAULT_RISK", "RISK_MEANING", "check_risk", "decide"]

#: the risk level when a caller names no rule: equal costs of a wrong trust and a wrong abstention
DEFAULT_RISK = 0.5
#: what a risk level means, in every refusal of a bad one
RISK_MEANING = "the risk level u: trust iff confidence > u"


def check_risk(risk: Any, name: str = "risk") -> float:
    """``risk`` as a float in [0, 1]; :class:`InputError` naming ``name`` otherwise (booleans,
    strings, NaN and non-numbers included)."""
    return check_level(risk, name, RISK_MEANING, closed=True)


def decide(confidence: Any, risk: float | Sequence[float]) -> np.ndarray:
    """Trust iff confidence > risk (the euro decision rule). Returns a bool array. ``risk`` is one
    level or one per confidence, each checked by :func:`check_risk`.

    At ``risk=1`` nothing is trusted; at ``risk=0`` everything with positive confidence is.
    """
    conf = np.asarray(confidence, dtype=float)
    if isinstance(risk, (list, tuple, np.ndarray)):
        if len(risk) != conf.shape[0]:
            raise InputError(f"risk has {len(risk)} levels for {conf.shape[0]} confidences")
        return conf > np.array([check_risk(r, f"risk[{i}]") for i, r in enumerate(risk)], dtype=float)
    return conf > check_risk(risk)
