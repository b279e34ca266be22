"""Live scoring: generate an answer, read the probe's confidence, decide trust or abstain.

``Scorer(model, tokenizer, probe).generate(prompt, risk=u)`` returns the answer, the model's
raw confidence, the probe's calibrated confidence and the decision: trust iff the
confidence exceeds the risk level ``u`` (the cost of trusting a wrong answer relative to
the cost of abstaining on a right one, as in euro).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np


@dataclass
class ScoredGeneration:
    """One scored generation."""

    prompt: str
    answer: str
    raw_confidence: float
    confidence: float
    risk: float
    trust: bool
    n_tokens: int
    finish_reason: str

    @property
    def decision(self) -> str:
        return "trust" if self.trust else "abstain"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["decision"] = self.decision
        return d


def decide(confidence: np.ndarray, risk: float) -> np.ndarray:
    """Trust iff confidence > risk (the euro decision rule). Returns a bool array."""
    if not 0.0 <= risk <= 1.0:
        raise ValueError(f"risk must be in [0, 1], got {risk!r}")
    return np.asarray(confidence, dtype=float) > risk


class Scorer:
    """Generate with the hidden-state recorder attached and score with an exported probe.

    ``probe`` is an :class:`acute.probes.ExportedProbe` (``acute.load_probe(dir)``) or a fitted
    :class:`acute.probes.ActivationProbe`. The model's fingerprint is checked against the
    probe's manifest when the probe carries one, so a probe is never applied to the wrong model.
    Generation settings (pooling, max new tokens, chat formatting) default to the ones the
    probe was trained with, when its manifest records them.
    """

    def __init__(self, model, tokenizer, probe, *, max_new_tokens: int | None = None,
                 chat: bool | None = None, batch_size: int = 8,
                 stop_strings: Sequence[str] = ()):
        from .models import model_fingerprint

        self.model = model
        self.tokenizer = tokenizer
        self.probe = probe
        check = getattr(probe, "check_model", None)
        if check is not None:
            check(model_fingerprint(model))
        generation = (getattr(probe, "manifest", None) or {}).get("generation", {}) or {}
        self.max_new_tokens = max_new_tokens or generation.get("max_new_tokens") or 64
        self.pool = generation.get("pool", "decoding")
        self.chat = chat if chat is not None else generation.get("chat")
        self.stop_strings = tuple(stop_strings or generation.get("stop_strings") or ())
        self.batch_size = batch_size

    def generate(self, prompts, risk: float = 0.5):
        """Score one prompt (str or chat messages) or a list of them.

        Returns a :class:`ScoredGeneration` for a single prompt, else a list of them.
        Prompts longer than the context window raise ``ValueError``.
        """
        from .extraction import generate_and_record
        from .models import format_prompt

        single = isinstance(prompts, str) or (
            isinstance(prompts, list) and prompts and isinstance(prompts[0], dict))
        items = [prompts] if single else list(prompts)
        if not items:
            return []
        texts = [format_prompt(self.tokenizer, p, chat=self.chat) for p in items]
        gens = generate_and_record(self.model, self.tokenizer, texts,
                                   max_new_tokens=self.max_new_tokens,
                                   batch_size=self.batch_size, stop_strings=self.stop_strings,
                                   pool=self.pool, on_too_long="error")
        means = np.stack([g.layer_means for g in gens]).astype(np.float32)
        raw = np.array([g.raw_confidence for g in gens], dtype=np.float64)
        conf = self.probe.predict_proba(means, confidence=raw)[:, 1]
        trust = decide(conf, risk)
        out = [
            ScoredGeneration(prompt=t, answer=g.text.strip(), raw_confidence=float(r),
                             confidence=float(c), risk=float(risk), trust=bool(k),
                             n_tokens=int(len(g.token_ids)), finish_reason=g.finish_reason)
            for t, g, r, c, k in zip(texts, gens, raw, conf, trust)
        ]
        return out[0] if single else out
