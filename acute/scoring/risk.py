"""The one trust rule and the risk levels it takes.

An answer is trusted iff its confidence exceeds the risk level ``u = c_wrong / (c_wrong +
c_abstain)`` (the cost of trusting a wrong answer relative to that of abstaining on a right
one), as in euro. A risk level is a number in [0, 1] (at 1 nothing is trusted, at 0 everything
with positive confidence); a request to the HTTP gate must lie strictly inside (0, 1), the range
euro is defined on (``strict=True``, and the bounds of its request schema).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..errors import InputError

__all__ = ["RISK_MAX", "RISK_MIN", "check_risk", "check_risks", "decide"]

RISK_MIN, RISK_MAX = 0.0, 1.0


def check_risk(risk: Any, *, strict: bool = False, name: str = "risk") -> float:
    """``risk`` as a float in [0, 1] (``strict``: in (0, 1)); :class:`InputError` otherwise
    (NaN and non-numbers included)."""
    try:
        value = float(risk)
    except (TypeError, ValueError):
        raise InputError(f"{name} must be a number in [0, 1], got {risk!r}") from None
    if strict:
        if not RISK_MIN < value < RISK_MAX:  # also rejects NaN
            raise InputError(f"{name} must be in (0, 1), got {risk!r}")
    elif not RISK_MIN <= value <= RISK_MAX:
        raise InputError(f"{name} must be in [0, 1], got {risk!r}")
    return value


def check_risks(risk: float | Sequence[float], n: int) -> list[float]:
    """One checked risk level per item: ``risk`` repeated ``n`` times, or a sequence of ``n``."""
    if isinstance(risk, (list, tuple, np.ndarray)):
        if len(risk) != n:
            raise InputError(f"risk has {len(risk)} levels for {n} prompts")
        return [check_risk(r) for r in risk]
    return [check_risk(risk)] * n


def decide(confidence: Any, risk: float | Sequence[float]) -> np.ndarray:
    """Trust iff confidence > risk (the euro decision rule). Returns a bool array. ``risk`` is one
    level or one per confidence.

    At ``risk=1`` nothing is trusted; at ``risk=0`` everything with positive confidence is.
    Raises ``ValueError`` for a risk outside [0, 1] (or NaN).
    """
    conf = np.asarray(confidence, dtype=float)
    if isinstance(risk, (list, tuple, np.ndarray)):
        return conf > np.asarray(check_risks(risk, conf.shape[0]), dtype=float)
    return conf > check_risk(risk)
