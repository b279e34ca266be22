"""What scoring an answer returns: :class:`ScoredGeneration`, one scored (or prechecked-away, or
stopped) answer with its decision and how it was decided."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

__all__ = ["ScoredGeneration", "question_of"]


@dataclass
class ScoredGeneration:
    """One scored generation.

    ``question`` is the text asked (the string given, or the last user message), ``prompt`` the
    fully formatted prompt the model saw, ``answer`` the generated text (stripped),
    ``raw_confidence`` the product of its token probabilities, ``confidence`` the probe's
    P(correct), ``trust`` the decision of its rule: ``confidence > risk`` (``rule`` ``"risk"``)
    or ``confidence >= threshold`` (``rule`` ``"certificate"``: ``risk`` is None, ``max_error``
    the alpha asked for and ``certificate`` what the probe's certificate says,
    :meth:`acute.scoring.gate.DecisionRule.fields`). ``threshold`` is the value compared with
    (the risk level itself under the risk rule).

    Decided in two stages (``generate(..., precheck=u0)``), ``precheck`` holds the precheck's
    ``confidence``, ``threshold`` (u0) and ``decision`` (:meth:`PrecheckResult.fields`) and
    ``generated`` says whether the answer was generated: when the precheck abstained it was
    not (``answer`` ``""``, ``raw_confidence`` and ``confidence`` None, ``n_tokens`` 0,
    ``finish_reason`` ``"precheck"``, decision ``"abstain"``). Without a precheck both are left
    out of :meth:`to_dict`.

    Generated under a stop rule (``generate(..., stop_early=EPS)``), ``stop`` holds the rule
    (:func:`acute.scoring.stop_early.stop_fields`: ``epsilon``, ``delta``, ``threshold``,
    ``n_calibration``) and ``stopped_at`` is None, or, for an answer stopped at a checkpoint,
    the tokens generated before the stop; then ``stop`` also has ``checkpoint``,
    ``confidence`` (the prefix probe's P(correct)) and ``reason``, ``answer`` is the prefix,
    ``finish_reason`` ``"stopped"``, ``confidence`` None (the answer probe did not score it)
    and the decision ``"abstain"``. Without a stop rule both are left out of :meth:`to_dict`.

    ``recorded`` is the :class:`acute.extraction.Generation` the answer was scored from (its
    pooled states, token ids and log-probs: what ``acute serve --record-to`` stores), ``seconds``
    the wall time of its batch's ``"generation"`` (recording, for a given response) and
    ``"scoring"`` (the probe); both None for an answer not generated, both left out of
    :meth:`to_dict`.
    """

    question: str
    prompt: str
    answer: str
    raw_confidence: float | None
    confidence: float | None
    risk: float | None
    trust: bool
    n_tokens: int
    finish_reason: str
    rule: str = "risk"
    threshold: float | None = None
    max_error: float | None = None
    certificate: dict | None = None
    generated: bool = True
    precheck: dict | None = None
    stop: dict | None = None
    stopped_at: int | None = None
    recorded: Any = field(default=None, repr=False, compare=False)
    seconds: dict | None = field(default=None, repr=False, compare=False)

    def __post_init__(self):
        if self.rule == "risk" and self.threshold is None:
            self.threshold = self.risk

    @property
    def decision(self) -> str:
        """``"trust"`` or ``"abstain"``."""
        return "trust" if self.trust else "abstain"

    def decision_fields(self) -> dict[str, Any]:
        """``risk``, ``rule``, ``threshold`` and, for a certificate, ``max_error`` and
        ``certificate``: what every answer says of how it was decided."""
        out = {"risk": self.risk, "rule": self.rule, "threshold": self.threshold}
        if self.rule != "risk":
            out.update(max_error=self.max_error, certificate=self.certificate)
        return out

    def to_dict(self, include_prompt: bool = False) -> dict[str, Any]:
        """JSON-ready dict of the fields plus ``decision`` (the formatted prompt only on
        request; ``max_error`` and ``certificate`` only for the certificate rule; ``generated``
        and ``precheck`` only when decided in two stages)."""
        d = asdict(replace(self, recorded=None, seconds=None))
        del d["recorded"], d["seconds"]
        if not include_prompt:
            d.pop("prompt")
        if self.rule == "risk":
            d.pop("max_error")
            d.pop("certificate")
        if self.precheck is None:
            d.pop("generated")
            d.pop("precheck")
        if self.stop is None:
            d.pop("stop")
            d.pop("stopped_at")
        d["decision"] = self.decision
        return d


def question_of(item: Any) -> str:
    """The text asked by one prompt: the string itself, or a chat's last user message ("" if none;
    a :class:`acute.models.ToolChat`'s messages)."""
    if isinstance(item, str):
        return item
    messages = getattr(item, "messages", item)
    users = [m.get("content", "") for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    return users[-1] if users else ""
