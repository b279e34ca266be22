"""The precheck: deciding from the question alone, before anything is generated.

A probe folder exported with ``acute export --with-precheck`` holds, beside the answer probe, a
question-only probe (``precheck/``: the PCA-10 forest over the states at the prompt's last
token, no raw confidence, Platt-calibrated; :mod:`acute.estimators.probe_file`). It gives
P(correct) of the answer the model is about to give from one forward pass over the prompt
(:func:`acute.extraction.record_prompt_states`), so a question the gate would refuse anyway
costs a prompt pass instead of a generation; one it lets through generates from that same pass
(:func:`acute.extraction.generate_after_prompt_pass`), so it costs no second prompt pass.

* :meth:`acute.scoring.Scorer.precheck` returns that P(correct) and the decision at a
  threshold u0 (trust iff P > u0) as a :class:`PrecheckResult`;
* :meth:`acute.scoring.Scorer.generate` with ``precheck=u0`` is the two-stage gate: a prompt is
  answered only when its precheck passes (P > u0), and the answer is then decided by the
  answer probe and the caller's rule as usual; a prompt refused before generating is answered
  with decision ``"abstain"``, ``generated`` False and no tokens.

A precheck threshold lies strictly inside (0, 1) (:func:`check_precheck`,
:func:`acute.validation.check_level`): at 0 it would pass everything, at 1 nothing.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ..errors import InputError
from ..validation import check_level

__all__ = ["PRECHECK_MEANING", "PRECHECK_REMEDY", "PrecheckResult", "check_precheck", "require_precheck"]

#: how to get a question-only probe, for every refusal that lacks one
PRECHECK_REMEDY = ("export one with `acute export --store STORE --out PROBE --with-precheck` (the question-only "
                   "probe is fitted on the same store's last-prompt states and written to PROBE/precheck)")
#: what a precheck threshold means, in every refusal of a bad one
PRECHECK_MEANING = "answer only when the question-only probe's P(correct) exceeds it"


def check_precheck(value: Any, name: str = "precheck") -> float:
    """A precheck threshold as a float in (0, 1); :class:`InputError` naming ``name`` otherwise
    (booleans, strings, NaN and non-numbers included)."""
    return check_level(value, name, PRECHECK_MEANING)


def require_precheck(precheck_probe: Any, name: str, folder: Any = None) -> None:
    """:class:`InputError` naming ``name`` (and the probe ``folder`` when known) when there is no
    question-only probe to precheck with."""
    if precheck_probe is None:
        where = "this probe" if folder is None else f"the probe folder {folder}"
        remedy = (PRECHECK_REMEDY if folder is None else
                  f"export one with `acute export --store STORE --out {folder} --with-precheck` (fitted on the "
                  f"same store's last-prompt states, written to {folder}/precheck)")
        raise InputError(f"{name}: {where} has no question-only probe to precheck with (no precheck/ "
                         f"folder); {remedy}")


@dataclass
class PrecheckResult:
    """The precheck of one prompt, before anything is generated.

    ``question`` is the text asked (the string given, or the last user message), ``prompt`` the
    fully formatted prompt (as generation would build it), ``confidence`` the question-only
    probe's P(correct) of the answer the model would give, ``threshold`` the precheck threshold
    it is compared with and ``trust`` the decision: ``confidence > threshold`` (answer it;
    otherwise abstain without generating). ``prompt_tokens`` is the prompt's length in tokens.
    """

    question: str
    prompt: str
    confidence: float
    threshold: float
    trust: bool
    prompt_tokens: int

    @property
    def decision(self) -> str:
        """``"trust"`` (answer it) or ``"abstain"`` (do not generate)."""
        return "trust" if self.trust else "abstain"

    def fields(self) -> dict[str, Any]:
        """What an answer decided in two stages says of its precheck: ``confidence``,
        ``threshold`` and ``decision``."""
        return {"confidence": self.confidence, "threshold": self.threshold, "decision": self.decision}

    def to_dict(self, include_prompt: bool = False) -> dict[str, Any]:
        """JSON-ready dict of the fields plus ``decision`` (the formatted prompt on request)."""
        d = asdict(self)
        if not include_prompt:
            d.pop("prompt")
        d["decision"] = self.decision
        return d
