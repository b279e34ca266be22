"""The gate every answer passes: a decision rule and an optional precheck, parsed once.

* The rule (:class:`DecisionRule`), chosen by the caller:

  - ``"risk"`` (the default, at :data:`~acute.scoring.risk.DEFAULT_RISK`): trust iff
    confidence > u, the risk level (:mod:`acute.scoring.risk`, the rule euro scores; the right
    decision when the confidence is calibrated, with no promise about the answers let through);
  - ``"certificate"``: trust iff confidence >= the threshold the probe certified at
    ``max_error`` (alpha) when it was exported (``acute export --max-error ALPHA --delta
    DELTA``, :mod:`acute.evaluation.certification`): with probability at least 1 - delta over
    its calibration records, at most a fraction alpha of the answers trusted this way are
    wrong (:mod:`acute.metrics.certify`).

* The precheck (optional): a threshold u0 on the question-only probe's P(correct); a prompt is
  generated only when it exceeds u0 (:mod:`acute.scoring.precheck`).

* Stopping early (optional): ``stop_early`` (epsilon) picks the stopping threshold the probe's
  checkpoint model certifies at it, looked up once; a generation whose prefix scores below it
  at a checkpoint is stopped there and abstained on (:mod:`acute.scoring.stop_early`).

What a caller asks for is turned into a :class:`Gate` once, where it comes in
(``Scorer.generate(risk=, max_error=, precheck=)``, ``acute score --risk / --max-error /
--precheck``, a request's fields, ``acute serve``'s defaults): each level checked by its one
checker (:data:`LEVEL_CHECKS`, all :func:`acute.validation.check_level`), the rule chosen
(``risk`` or ``max_error``, never both) and the probe's certificate at ``max_error`` looked up
(:func:`~acute.estimators.certificates.find_certificate`: none, or an invalid one, is an
:class:`~acute.errors.InputError` naming ``max_error``; no fallback to the risk rule). The gate
then travels as it is (a serving job carries it, ``Scorer`` takes it) and decides each answer
by one comparison, without checking anything again. Every scored answer names its rule and
threshold (:meth:`DecisionRule.fields`).

:func:`parse_gate` and :func:`parse_gates` take values as a caller gave them;
:func:`resolve_gate` takes levels already checked (the command line checks them while parsing
its arguments, the service while reading a request).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from ..errors import InputError
from ..estimators.certificates import certificate_summary, find_certificate
from ..metrics.certify import check_max_error
from ..metrics.stopping import StopRule
from .precheck import check_precheck
from .risk import DEFAULT_RISK, check_risk
from .stop_early import check_stop_early, stop_rule

__all__ = ["LEVEL_CHECKS", "RULES", "DecisionRule", "Gate", "certificate_rule", "check_certified", "check_gates",
           "parse_gate", "parse_gates", "per_prompt", "resolve_gate", "risk_rule"]

RULES = ("risk", "certificate")
#: the checker of each level a gate is made of (each names the field it is given)
LEVEL_CHECKS: dict[str, Callable[[Any, str], float]] = {
    "risk": check_risk, "max_error": check_max_error, "precheck": check_precheck, "stop_early": check_stop_early}


def _as_is(field: str) -> str:
    return field


@dataclass(frozen=True)
class DecisionRule:
    """How an answer is decided: ``rule`` ``"risk"`` (trust iff confidence > ``threshold``, the
    risk level) or ``"certificate"`` (trust iff confidence >= ``threshold``, certified at
    ``max_error``; ``certificate`` is the probe's ``probe.json`` entry, looked up once).
    Built by :func:`risk_rule` and :func:`certificate_rule`."""

    rule: str
    threshold: float
    max_error: float | None = None
    certificate: dict | None = dataclasses.field(default=None, compare=False)

    @property
    def risk(self) -> float | None:
        """The risk level (``None`` under a certificate)."""
        return self.threshold if self.rule == "risk" else None

    def decide(self, confidence: Any) -> np.ndarray:
        """Trust decisions (bool array) for ``confidence``: one comparison with the threshold."""
        conf = np.asarray(confidence, dtype=float)
        return conf > self.threshold if self.rule == "risk" else conf >= self.threshold

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
            return f"risk level {self.threshold}"
        c = self.certificate
        return (f"certified threshold {self.threshold:g}: trust iff confidence >= {self.threshold:g}; "
                f"at most {c['alpha']:g} of trusted answers wrong with probability "
                f"{1 - c['delta']:g}, from {c['n_calibration']} calibration records ({c['source']})")


def risk_rule(risk: float = DEFAULT_RISK) -> DecisionRule:
    """The risk rule at ``risk`` (a level already checked, :func:`~acute.scoring.risk.check_risk`)."""
    return DecisionRule(rule="risk", threshold=float(risk))


def certificate_rule(probe: Any, max_error: float, name: str = "max_error") -> DecisionRule:
    """The rule of the certificate ``probe`` carries at ``max_error`` (already checked,
    :func:`~acute.metrics.certify.check_max_error`); :class:`InputError` naming ``name`` when it
    carries none there or an invalid one, or when it is scored outside the validity domain its
    certificates hold in (``probe.certificates_refused``: the reason, naming both settings,
    :meth:`acute.estimators.probe_file.ExportedProbe.outside_domain`)."""
    _check_not_refused(probe, max_error, name)
    entry = find_certificate(getattr(probe, "certificates", None) or [], max_error, name=name)
    return DecisionRule(rule="certificate", threshold=float(entry["threshold"]), max_error=float(max_error),
                        certificate=entry)


def _check_not_refused(probe: Any, max_error: float, name: str) -> None:
    """:class:`InputError` naming ``name`` when ``probe`` refuses its certificates (scored outside
    its validity domain, :meth:`acute.estimators.probe_file.ExportedProbe.outside_domain`)."""
    refused = getattr(probe, "certificates_refused", None)
    if refused:
        raise InputError(f"{name}={max_error:g}: no certified decision here: {refused}")


def check_certified(gates: Sequence["Gate"], probe: Any, name: str = "max_error") -> list["Gate"]:
    """``gates`` (made before ``probe`` was known to be scored outside its validity domain, e.g.
    resolved before the model loaded) as they are, unless one decides by a certificate that
    ``probe`` now refuses: the :class:`InputError` :func:`certificate_rule` would give."""
    for g in gates:
        if g.rule.rule == "certificate":
            _check_not_refused(probe, g.rule.max_error, name)
    return list(gates)


@dataclass(frozen=True)
class Gate:
    """What decides one answer: its ``rule``, an optional ``precheck`` threshold (generate only
    when the question-only probe's P(correct) exceeds it; ``None``: no precheck) and an optional
    ``stop`` rule (the certified stopping threshold of ``stop_early``,
    :func:`acute.scoring.stop_early.stop_rule`; ``None``: never stopped). ``Gate()`` is the risk
    rule at :data:`~acute.scoring.risk.DEFAULT_RISK` without either."""

    rule: DecisionRule = dataclasses.field(default_factory=risk_rule)
    precheck: float | None = None
    stop: StopRule | None = None

    def decide(self, confidence: Any) -> np.ndarray:
        """Trust decisions (bool array) of the rule for ``confidence``."""
        return self.rule.decide(confidence)


def resolve_gate(probe: Any, risk: float | None = None, max_error: float | None = None,
                 precheck: float | None = None, stop_early: float | None = None, *,
                 name: Callable[[str], str] = _as_is) -> Gate:
    """The gate of levels already checked (:data:`LEVEL_CHECKS`): ``risk`` or ``max_error`` (the
    certificate ``probe`` carries there), not both; neither: the risk level
    :data:`~acute.scoring.risk.DEFAULT_RISK`; ``precheck`` as given; ``stop_early``: the
    stopping threshold ``probe``'s checkpoint model certifies there. Errors name the fields as
    ``name(field)`` shows them (``--max-error``, ``[1].max_error``)."""
    if risk is not None and max_error is not None:
        raise InputError(f"give {name('risk')} (a risk level) or {name('max_error')} (a certified "
                         f"threshold), not both")
    rule = (certificate_rule(probe, max_error, name("max_error")) if max_error is not None
            else risk_rule(DEFAULT_RISK if risk is None else risk))
    stop = None if stop_early is None else stop_rule(probe, stop_early, name("stop_early"))
    return Gate(rule=rule, precheck=precheck, stop=stop)


def parse_gate(probe: Any, risk: Any = None, max_error: Any = None, precheck: Any = None,
               stop_early: Any = None, *, name: Callable[[str], str] = _as_is) -> Gate:
    """The gate of values as a caller gave them: each checked by its checker
    (:data:`LEVEL_CHECKS`), then :func:`resolve_gate`."""
    given = {"risk": risk, "max_error": max_error, "precheck": precheck, "stop_early": stop_early}
    levels = {f: None if v is None else LEVEL_CHECKS[f](v, name(f)) for f, v in given.items()}
    return resolve_gate(probe, **levels, name=name)


def _sequence(value: Any) -> bool:
    return isinstance(value, (list, tuple, np.ndarray))


def per_prompt(value: Any, n: int, check: Callable[[Any, str], Any], name: str) -> list:
    """One checked value per prompt, the one reading of "one value or one per prompt": ``value``
    for all ``n`` prompts, or a sequence (list, tuple, array) of ``n``; each checked by
    ``check(value, name)``, an item of a sequence named ``name[i]``. :class:`InputError` for a
    sequence of another length."""
    if not _sequence(value):
        return [check(value, name)] * n
    if len(value) != n:
        raise InputError(f"{name} has {len(value)} values for {n} prompts")
    return [check(v, f"{name}[{i}]") for i, v in enumerate(value)]


def _optional(check: Callable[[Any, str], float]) -> Callable[[Any, str], float | None]:
    """``check`` that lets ``None`` (not given) through."""
    return lambda value, name: None if value is None else check(value, name)


def parse_gates(probe: Any, n: int, risk: Any = None, max_error: Any = None,
                precheck: Any = None, stop_early: Any = None) -> list[Gate]:
    """One gate per prompt: ``risk``, ``max_error``, ``precheck`` and ``stop_early`` are each one value (or
    ``None``) for all ``n`` prompts or a sequence of ``n`` (``None`` where it does not apply), as
    in :func:`parse_gate`; errors name the item (``risk[2]``). Equal requests share one gate."""
    given = {"risk": risk, "max_error": max_error, "precheck": precheck, "stop_early": stop_early}
    columns = [per_prompt(v, n, _optional(LEVEL_CHECKS[f]), f) for f, v in given.items()]
    seen: dict[tuple, Gate] = {}
    out = []
    for i, key in enumerate(zip(*columns)):
        if key not in seen:
            seen[key] = resolve_gate(probe, *key,
                                     name=lambda f, i=i: f"{f}[{i}]" if _sequence(given[f]) else f)
        out.append(seen[key])
    return out


def check_gates(gate: Gate | Sequence[Gate], n: int) -> list[Gate]:
    """``gate`` for each of ``n`` prompts: one :class:`Gate` for all, or a sequence of ``n``."""
    return per_prompt(gate, n, _check_gate, "gate")


def _check_gate(gate: Any, name: str) -> Gate:
    if not isinstance(gate, Gate):
        raise InputError(f"{name} must be an acute.scoring.gate.Gate (parse_gate makes one), got "
                         f"{type(gate).__name__}")
    return gate
