"""A test helper (imported by the stopping-early tests): a SmolLM2 probe with a checkpoint model, and a
stop rule whose threshold lies between the prefix scores of given answers, away from all."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

#: prefix checkpoints the helper's checkpoint model is fitted at
CHECKPOINTS = (2, 4, 8)


def stop_probe(model, tok, out, *, name: str | None = None, generation: dict | None = None):
    """Save to ``out`` an answer probe (cosine, 5 trees) and prefix probes at :data:`CHECKPOINTS`
    fitted on SmolLM2's transformers records of 24 questions (hash labels); returns the folder."""
    import hashlib

    import acute
    from acute.estimators import ActivationProbe
    from acute.estimators.inputs import Inputs
    from acute.estimators.stop_early import StopEarlyModel
    from acute.extraction import generate_and_record
    from acute.models import format_prompt
    from acute.store.checkpoints import parse_schedule

    generation = generation or {"max_new_tokens": 12, "stop_strings": [], "pool": "decoding", "chat": True}
    questions = [f"What is {i} plus {i + 3}?" + " Answer briefly." * (i % 2) for i in range(24)]
    gens = generate_and_record(model, tok, [format_prompt(tok, q) for q in questions], max_new_tokens=12,
                               checkpoints=parse_schedule({"first": list(CHECKPOINTS), "every": 100}))
    y = np.array([hashlib.sha256(q.encode()).digest()[0] % 2 for q in questions])
    raw = np.array([g.raw_confidence for g in gens])
    answer = ActivationProbe(view="cosine", n_estimators=5).fit(Inputs.of(np.stack([g.layer_means for g in gens]), raw), y)
    identity = acute.ModelIdentity.from_model(model)
    meta = {"identity": identity if name is None else replace(identity, model=name)}
    prefixes = {}
    for k in CHECKPOINTS:
        means = np.stack([g.checkpoint_means[min(np.searchsorted(g.checkpoint_tokens, k), len(g.checkpoint_tokens) - 1)]
                          for g in gens])
        conf = np.array([np.exp(np.sum(g.token_logprobs[:k], dtype=np.float64)) for g in gens])
        fitted = ActivationProbe(view="cosine", n_estimators=5, calibration="platt").fit(Inputs.of(means, conf), y)
        prefixes[k] = fitted.export(training_summary={"generation": generation, "checkpoint": k}, **meta)
    exported = answer.export(training_summary={"generation": generation, "task": None}, **meta)
    n = 50
    exported.stop_early = StopEarlyModel(prefixes, np.ones((n, len(CHECKPOINTS))), np.ones(n, bool), np.ones(n, bool),
                                         {"estimator": "acute-cosine"})
    return exported.save(out)


def prefix_scores(stop_model, gens) -> np.ndarray:
    """[n, J]: the checkpoint model's P(correct) of each answer's prefix at each of its checkpoints
    (from generations that kept those checkpoints and were not stopped); NaN where it had ended."""
    out = np.full((len(gens), len(stop_model.checkpoints)), np.nan)
    for i, g in enumerate(gens):
        for j, k in enumerate(stop_model.checkpoints):
            if len(g.token_ids) > k:
                at = list(g.checkpoint_tokens).index(k)
                conf = np.exp(np.sum(np.asarray(g.token_logprobs[:k], dtype=np.float64)))
                out[i, j] = stop_model.confidence(k, g.checkpoint_means[at][None], np.array([conf]))[0]
    return out


def gate_between(model, tok, probe, prompts, max_new_tokens: int):
    """The :func:`stop_gate` of the unstopped answers to ``prompts`` (formatted), their prefixes
    scored by ``probe``'s checkpoint model at its checkpoints."""
    from acute.extraction import generate_and_record
    from acute.store.checkpoints import parse_schedule

    plain = generate_and_record(model, tok, prompts, max_new_tokens=max_new_tokens,
                                checkpoints=parse_schedule({"first": list(probe.stop_early.checkpoints), "every": 100}))
    return stop_gate(prefix_scores(probe.stop_early, plain))


def stop_gate(scores: np.ndarray, tol: float = 1e-4):
    """A :class:`~acute.scoring.Gate` whose stop threshold lies in the widest gap between the
    answers' lowest prefix scores (so that some answers stop and some do not), more than ``tol``
    from every score."""
    from acute.metrics.certify import DEFAULT_DELTA
    from acute.metrics.stopping import StopRule
    from acute.scoring import Gate

    every = np.unique(np.round(scores[~np.isnan(scores)], 6))
    lowest = np.unique(np.round(np.nanmin(scores, axis=1), 6))
    gaps = [(b - a, (a + b) / 2) for a, b in zip(lowest[:-1], lowest[1:])
            if np.abs(every - (a + b) / 2).min() > tol]
    assert gaps, scores
    return Gate(stop=StopRule(max(gaps)[1], 0.1, DEFAULT_DELTA, 0, 0, 1.0))
