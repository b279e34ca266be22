"""The decision rule an answer is decided by, chosen by the user: a risk level or a certificate.

* ``"risk"`` (the default): trust iff confidence > u, the risk level (:mod:`acute.scoring.risk`,
  the rule euro scores; the right decision when the confidence is calibrated, with no promise
  about the answers let through);
* ``"certificate"``: trust iff confidence >= the threshold the probe certified at ``max_error``
  (alpha) when it was exported (``acute export --max-error ALPHA --delta DELTA``,
  :mod:`acute.evaluation.certification`): with probability at least 1 - delta over its
  calibration records, at most a fraction alpha of the answers trusted this way are wrong
  (:mod:`acute.metrics.certify`).

:func:`decision_rule` turns what a caller asked for (``risk=`` or ``max_error=``, never both)
into a :class:`DecisionRule`; a probe carrying no certificate at that ``max_error``, or an
invalid one, is an :class:`~acute.errors.InputError` naming ``max_error`` (no fallback to the
risk rule). Every scored answer names its rule and threshold (:meth:`DecisionRule.fields`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import InputError
from ..estimators.certificates import certificate_of, certificate_summary, find_certificate
from ..metrics.certify import check_max_error, decide as certified_decide
from .risk import check_risk, decide as risk_decide

__all__ = ["DEFAULT_RISK", "RULES", "DecisionRule", "decision_rule", "decision_rules"]

#: the risk level when a caller names no rule
DEFAULT_RISK = 0.5
RULES = ("risk", "certificate")


@dataclass(frozen=True)
class DecisionRule:
    """How an answer is decided: ``rule`` ``"risk"`` (trust iff confidence > ``threshold`` = the
    risk level) or ``"certificate"`` (trust iff confidence >= ``threshold``, certified at
    ``max_error`` with the probe's ``certificate`` entry)."""

    rule: str
    threshold: float
    risk: float | None = None
    max_error: float | None = None
    certificate: dict | None = None

    def decide(self, confidence: Any) -> np.ndarray:
        """Trust decisions (bool array) for ``confidence`` under this rule."""
        if self.rule == "risk":
            return risk_decide(confidence, self.risk)
        return certified_decide(confidence, certificate_of(self.certificate))

    def fields(self) -> dict[str, Any]:
        """What an answer says of its rule: ``risk`` (the level, ``None`` for a certificate),
        ``rule``, ``threshold`` and, for a certificate, ``max_error`` and ``certificate``
        (alpha, delta, calibration n and coverage, backend, source:
        :func:`acute.estimators.certificates.certificate_summary`)."""
        out: dict[str, Any] = {"risk": self.risk, "rule": self.rule, "threshold": self.threshold}
        if self.rule == "certificate":
            out["max_error"] = self.max_error
            out["certificate"] = certificate_summary(self.certificate)
        return out

    def describe(self) -> str:
        """One line for people: the rule, its threshold and, for a certificate, what it promises."""
        if self.rule == "risk":
            return f"risk level {self.risk}"
        c = self.certificate
        return (f"certified threshold {self.threshold:g}: trust iff confidence >= {self.threshold:g}; "
                f"at most {c['alpha']:g} of trusted answers wrong with probability "
                f"{1 - c['delta']:g}, from {c['n_calibration']} calibration records ({c['source']})")


def decision_rule(probe: Any, risk: Any = None, max_error: Any = None, *, risk_name: str = "risk",
                  max_error_name: str = "max_error") -> DecisionRule:
    """The rule for one answer: ``risk`` (a level in [0, 1]) or ``max_error`` (a certificate
    ``probe`` carries), not both; neither: the risk level :data:`DEFAULT_RISK`. Errors name the
    argument (``risk_name``, ``max_error_name``)."""
    if risk is not None and max_error is not None:
        raise InputError(f"give {risk_name} (a risk level) or {max_error_name} (a certified "
                         f"threshold), not both")
    if max_error is None:
        u = check_risk(DEFAULT_RISK if risk is None else risk, name=risk_name)
        return DecisionRule(rule="risk", threshold=u, risk=u)
    alpha = check_max_error(max_error, max_error_name)
    entry = find_certificate(getattr(probe, "certificates", None) or [], alpha, name=max_error_name)
    return DecisionRule(rule="certificate", threshold=float(entry["threshold"]), max_error=alpha,
                        certificate=entry)


def _sequence(value: Any) -> bool:
    return isinstance(value, (list, tuple, np.ndarray))


def _per_item(value: Any, n: int, name: str) -> list:
    if _sequence(value):
        if len(value) != n:
            raise InputError(f"{name} has {len(value)} levels for {n} prompts")
        return list(value)
    return [value] * n


def decision_rules(probe: Any, risk: Any = None, max_error: Any = None, n: int = 1) -> list[DecisionRule]:
    """One rule per prompt: ``risk`` and ``max_error`` are each one value (or ``None``) or a
    sequence of ``n`` (``None`` where the other applies), as in :func:`decision_rule`; errors
    name the item (``risk[2]``)."""
    risks, alphas = _per_item(risk, n, "risk"), _per_item(max_error, n, "max_error")
    seen: dict[tuple, DecisionRule] = {}
    out = []
    for i, key in enumerate(zip(risks, alphas)):
        if key not in seen:
            seen[key] = decision_rule(probe, *key,
                                      risk_name=f"risk[{i}]" if _sequence(risk) else "risk",
                                      max_error_name=f"max_error[{i}]" if _sequence(max_error) else "max_error")
        out.append(seen[key])
    return out
