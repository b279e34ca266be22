"""A label-free drift signal: live confidences against the distribution a probe was calibrated on.

A probe file keeps a compact **reference** of the confidences its calibration records received
(``probe.json``'s ``confidence_reference``, written by ``acute export`` / ``acute train``):
:data:`REFERENCE_QUANTILES` percentiles (0, 1, ..., 100) of those confidences, their number and
where they came from. :func:`drift_statistic` compares a sample of live confidences (the
service's sliding window) with it: the Kolmogorov-Smirnov distance

    D = sup_x |F_live(x) - F_ref(x)|

between the sample's empirical distribution and the reference's, ``F_ref`` read from the
percentiles by linear interpolation.
Between two stored percentiles the calibration records' own empirical CDF lies in the same
1/100 band as the interpolation, so D is within 0.01 of the two-sample KS statistic of the
live sample and the calibration confidences themselves. No label is needed: D measures how far
the questions (or the model, or its engine) moved from those the probe was calibrated on, as
seen through the probe's confidence; a large D says the certificate's and the risk rule's
promises are about another population than the one being served.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from ..errors import InputError, ProbeFormatError
from ..validation import check_confidence

__all__ = ["REFERENCE_QUANTILES", "REFERENCE_SOURCES", "check_reference", "confidence_reference",
           "drift_statistic"]

#: how many percentiles a reference keeps (0, 1, ..., 100)
REFERENCE_QUANTILES = 101
#: where a reference's confidences came from: the certificate's calibration records (out-of-fold
#: predictions of the training records, or a calibration store), ``auto``'s out-of-fold
#: predictions, or the records ``acute train`` held out
REFERENCE_SOURCES = ("out-of-fold", "calibration-store", "held-out")


def confidence_reference(confidence: Any, source: str) -> dict:
    """The ``probe.json`` reference of calibration ``confidence`` (1-D, in [0, 1], at least
    one): ``{"quantiles": [101 percentiles], "n": N, "source": source}``."""
    if source not in REFERENCE_SOURCES:
        raise InputError(f"source must be one of {', '.join(REFERENCE_SOURCES)}, got {source!r}")
    conf = check_confidence(confidence)
    q = np.quantile(conf, np.linspace(0.0, 1.0, REFERENCE_QUANTILES))
    return {"quantiles": [float(v) for v in q], "n": int(conf.size), "source": source}


def check_reference(entry: Any, where: str) -> dict | None:
    """A probe manifest's ``confidence_reference`` checked (``None``: the probe keeps none, as
    every probe written before acute kept one); :class:`ProbeFormatError` naming ``where``
    otherwise."""
    if entry is None:
        return None
    if not isinstance(entry, Mapping):
        raise ProbeFormatError(f"{where}: confidence_reference must be an object, got {type(entry).__name__}")
    q = entry.get("quantiles")
    ok = (isinstance(q, list) and len(q) == REFERENCE_QUANTILES
          and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in q))
    if not ok or any(not 0.0 <= v <= 1.0 for v in q) or any(b < a for a, b in zip(q, q[1:])):
        raise ProbeFormatError(f"{where}: confidence_reference.quantiles must be {REFERENCE_QUANTILES} "
                               "non-decreasing numbers in [0, 1]")
    n = entry.get("n")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ProbeFormatError(f"{where}: confidence_reference.n must be an integer >= 1, got {n!r}")
    if entry.get("source") not in REFERENCE_SOURCES:
        raise ProbeFormatError(f"{where}: confidence_reference.source must be one of "
                               f"{', '.join(REFERENCE_SOURCES)}, got {entry.get('source')!r}")
    return {"quantiles": [float(v) for v in q], "n": n, "source": entry["source"]}


def _cdf(q: np.ndarray, x: np.ndarray, side: str) -> np.ndarray:
    """The reference CDF of percentiles ``q`` at ``x``: linear between percentiles, its value
    at ``x`` (``side="right"``) or its limit from the left (``"left"``), which differ where
    several percentiles are equal (a jump: the confidence takes that value often)."""
    levels = np.linspace(0.0, 1.0, q.size)
    k = np.searchsorted(q, x, side=side)  # percentiles <= x ("right") or < x ("left")
    lo, hi = np.clip(k - 1, 0, q.size - 1), np.clip(k, 0, q.size - 1)
    width = q[hi] - q[lo]  # > 0 where 0 < k < q.size; the other rows are replaced below
    inside = levels[lo] + (x - q[lo]) / np.where(width > 0, width, 1.0) * (levels[hi] - levels[lo])
    return np.where(k == 0, 0.0, np.where(k == q.size, 1.0, inside))


def drift_statistic(confidence: Any, reference: Mapping) -> float:
    """The KS distance (in [0, 1]) between live ``confidence`` (1-D, in [0, 1], at least one)
    and ``reference`` (:func:`confidence_reference`); see the module doc.

    Both distributions may have jumps (a forest's confidences take few values), where
    :func:`scipy.stats.ks_1samp`, which assumes a continuous CDF, would count the jump itself:
    the supremum is taken over the values and the left limits of both CDFs at every point where
    either changes slope or jumps (between two such points one is constant and the other
    linear, so nothing larger lies between)."""
    conf = np.sort(check_confidence(confidence))
    q = np.asarray(reference["quantiles"], dtype=np.float64)
    points = np.union1d(conf, q)
    d = 0.0
    for side in ("right", "left"):
        live = np.searchsorted(conf, points, side=side) / conf.size
        d = max(d, float(np.max(np.abs(live - _cdf(q, points, side)))))
    return d
