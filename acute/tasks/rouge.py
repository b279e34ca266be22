"""ROUGE-L (longest common subsequence over tokens), implemented without external packages.

Tokenisation follows ``rouge-score``'s default tokenizer without stemming: lower-case, every run of
characters other than ``a-z0-9`` becomes a separator. Scores use the F-measure with beta = 1.
"""

from __future__ import annotations

import re
from typing import NamedTuple, Sequence

__all__ = ["RougeScore", "rouge_tokenize", "lcs_length", "rouge_l", "rouge_l_f1", "best_rouge_l_f1"]

_NON_ALNUM = re.compile(r"[^a-z0-9]+")


class RougeScore(NamedTuple):
    """Precision (LCS / prediction length), recall (LCS / reference length) and F1."""

    precision: float
    recall: float
    fmeasure: float


def rouge_tokenize(text: str) -> list[str]:
    """Return the lower-cased alphanumeric tokens of ``text`` (``"Don't stop!"`` -> don, t, stop)."""
    return [t for t in _NON_ALNUM.sub(" ", str(text).lower()).split() if t]


def lcs_length(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest common subsequence of two token sequences (0 if either is empty).

    Dynamic programming in O(len(a) * len(b)) time and O(min(len)) memory.
    """
    if len(a) < len(b):
        a, b = b, a
    if not b:
        return 0
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b, start=1):
            cur.append(prev[j - 1] + 1 if x == y else max(prev[j], cur[j - 1]))
        prev = cur
    return prev[-1]


def rouge_l(prediction: str, reference: str) -> RougeScore:
    """ROUGE-L of ``prediction`` against ``reference``.

    Returns zeros when either text has no tokens (like ``rouge-score``).
    """
    p, r = rouge_tokenize(prediction), rouge_tokenize(reference)
    if not p or not r:
        return RougeScore(0.0, 0.0, 0.0)
    lcs = lcs_length(p, r)
    precision, recall = lcs / len(p), lcs / len(r)
    f = 0.0 if lcs == 0 else 2 * precision * recall / (precision + recall)
    return RougeScore(precision, recall, f)


def rouge_l_f1(prediction: str, reference: str) -> float:
    """ROUGE-L F1 of ``prediction`` against ``reference`` (see :func:`rouge_l`)."""
    return rouge_l(prediction, reference).fmeasure


def best_rouge_l_f1(prediction: str, references: Sequence[str]) -> float:
    """Highest ROUGE-L F1 of ``prediction`` against any of ``references`` (0.0 for none)."""
    return max((rouge_l_f1(prediction, ref) for ref in references), default=0.0)
