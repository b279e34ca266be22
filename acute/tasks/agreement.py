"""Agreement of sampled answers, by the task's own equivalence (:meth:`acute.tasks.Task.answer_key`):
how often the samples give the greedy answer (``consistency``) and how spread they are over
distinct answers (``semantic entropy``: the entropy of the clusters of equivalent answers,
Farquhar et al. 2024), the signals a deployment gets by sampling ``K`` times.

An answer without a key (unparseable, empty) is the same as no other answer, itself included:
it forms a cluster of its own and never agrees with the greedy answer.
"""

from __future__ import annotations

import math
from typing import Any, Hashable, Sequence

import numpy as np

from ..errors import InputError

__all__ = ["AGREEMENT_SIGNALS", "clusters", "consistency", "record_agreement", "semantic_entropy"]

#: the agreement signals of a record with samples (:func:`record_agreement`), higher = more spread
#: for the entropies, more agreement for consistency
AGREEMENT_SIGNALS = ("consistency", "semantic_entropy", "semantic_entropy_weighted")


def clusters(keys: Sequence[Hashable | None]) -> np.ndarray:
    """int [K]: the cluster of each answer, numbered in order of first appearance; a None key is
    a cluster of its own."""
    seen: dict = {}
    out = np.empty(len(keys), dtype=np.int64)
    fresh = 0
    for i, key in enumerate(keys):
        if key is None:
            out[i], fresh = fresh, fresh + 1
            continue
        if key not in seen:
            seen[key], fresh = fresh, fresh + 1
        out[i] = seen[key]
    return out


def consistency(greedy_key: Hashable | None, sample_keys: Sequence[Hashable | None]) -> float:
    """The share of samples equivalent to the greedy answer (0 when it has no key)."""
    if not len(sample_keys):
        raise InputError("consistency needs at least one sample")
    if greedy_key is None:
        return 0.0
    return sum(key is not None and key == greedy_key for key in sample_keys) / len(sample_keys)


def semantic_entropy(sample_keys: Sequence[Hashable | None],
                     sequence_logprobs: Sequence[float] | None = None) -> float:
    """Entropy (nats) of the clusters of equivalent samples: each cluster's share of the samples
    (discrete), or with ``sequence_logprobs`` (each sample's summed token log-probs) each
    cluster's share of the samples' total probability."""
    ids = clusters(sample_keys)
    if ids.size == 0:
        raise InputError("semantic entropy needs at least one sample")
    if sequence_logprobs is None:
        mass = np.bincount(ids).astype(np.float64)
    else:
        lp = np.asarray(sequence_logprobs, dtype=np.float64)
        if lp.shape != ids.shape or not np.all(np.isfinite(lp)):
            raise InputError(f"sequence_logprobs must be {ids.size} finite numbers, got {lp.tolist()}")
        mass = np.bincount(ids, weights=np.exp(lp - lp.max()))
    p = mass[mass > 0] / mass.sum()
    return float(-(p * np.log(p)).sum())


def record_agreement(task: Any, record: dict, fallback: bool = False) -> dict[str, float]:
    """:data:`AGREEMENT_SIGNALS` of a store record with ``samples``, by ``task``'s equivalence
    (``fallback``: :attr:`~acute.tasks.Task.FALLBACK_EQUIVALENCE` where it has none).
    InputError naming the record when it has no samples."""
    samples = record.get("samples")
    if not samples:
        raise InputError(f"record {record.get('id')!r} has no samples; collect with `acute collect --samples K`")
    keys = [task.answer_key(s.get("answer"), fallback=fallback) for s in samples]
    logprobs = [math.fsum(s["token_logprobs"]) for s in samples]
    return {"consistency": consistency(task.answer_key(record.get("answer"), fallback=fallback), keys),
            "semantic_entropy": semantic_entropy(keys),
            "semantic_entropy_weighted": semantic_entropy(keys, logprobs)}
