"""Certified early stopping: stop a generation at the first checkpoint where a prefix score falls
below a threshold, the threshold chosen by Learn-then-Test so that, with probability at least
``1 - delta``, at most ``epsilon`` of the right answers the final gate would have trusted are
stopped.

The rule reads ``scores`` ``[n, J]``: per answer, at each of ``J`` checkpoints (token counts,
increasing), a prefix score (an estimate of P(final answer correct) from what was generated so
far), NaN where the answer had already ended (the final gate decides it). With one threshold
``t`` for every checkpoint, an answer is stopped at its first checkpoint with score ``< t``.

The cost it certifies is coverage: among answers the final gate would trust *and* that are right,
the share stopped, ``R(t) = P(stopped by t | trusted and right)``. Stopping a wrong answer, or
one the final gate refuses anyway, costs nothing: what is stopped is never trusted, what is let
through is decided as before. ``R`` does not decrease in ``t``, so fixed-sequence testing over
a grid fixed in advance (0.00, 0.01, ..., ascending) is valid (Angelopoulos et al. 2021): each
``t`` is the null ``R(t) > epsilon``, tested on the calibration answers that were trusted and
right (``N`` of them, ``K_t`` stopped) with the exact p-value ``P(Binomial(N, epsilon) <= K_t)``,
each at level ``delta``, stopping at the first non-rejection; the largest rejected ``t`` is
certified (0: never stop, when none is). Given which calibration answers are trusted and right,
those answers are exchangeable draws of such answers, so the binomial test holds for the
random ``N``. The scores and the final gate must not have been fitted on the calibration answers.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ..errors import InputError
from ..validation import check_correct, check_level
from .ltt import binomial_p

__all__ = ["DEFAULT_STOP_GRID", "StopRule", "certify_stopping", "first_stop", "stopped_share"]

#: the thresholds tested, in the order tested
DEFAULT_STOP_GRID = np.round(np.arange(0, 100) / 100.0, 2)
DEFAULT_STOP_GRID.flags.writeable = False


class StopRule(NamedTuple):
    """A certified stopping threshold: stop at the first checkpoint whose score is below
    ``threshold`` (0: never stop). ``epsilon`` and ``delta`` as certified; ``n_protected`` the
    calibration answers that were trusted and right (``N``); ``stopped`` how many of them the
    threshold stops (``K``) and ``p_value`` its test's p-value (1 where nothing was certified)."""

    threshold: float
    epsilon: float
    delta: float
    n_protected: int
    stopped: int
    p_value: float

    def to_json(self) -> dict:
        return {k: (float(v) if isinstance(v, (float, np.floating)) else int(v)) for k, v in self._asdict().items()}


def _scores(scores: Any) -> np.ndarray:
    arr = np.asarray(scores, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[1] < 1:
        raise InputError(f"scores must be [answers, checkpoints], got shape {arr.shape}")
    bad = np.isinf(arr) | (arr < 0) | (arr > 1)
    if bad.any():
        i, j = np.argwhere(bad)[0]
        raise InputError(f"scores[{i}, {j}] = {arr[i, j]} is not a probability in [0, 1] (NaN marks an ended answer)")
    return arr


def first_stop(scores: Any, threshold: float) -> np.ndarray:
    """int [n]: the index of each answer's first checkpoint with score ``< threshold``, -1 for an
    answer the rule lets run to its end."""
    arr = _scores(scores)
    below = np.nan_to_num(arr, nan=np.inf) < threshold
    return np.where(below.any(axis=1), below.argmax(axis=1), -1)


def stopped_share(scores: Any, trusted: Any, correct: Any, threshold: float) -> float:
    """The share of the trusted and right answers the rule stops at ``threshold`` (NaN when there
    are none): the realised cost the certificate bounds."""
    protected = (check_correct(trusted, name="trusted") & check_correct(correct)).astype(bool)
    if not protected.any():
        return float("nan")
    return float(np.mean(first_stop(np.asarray(scores)[protected], threshold) >= 0))


def certify_stopping(scores: Any, trusted: Any, correct: Any, epsilon: float, delta: float = 0.1, *,
                     grid: Any = None) -> StopRule:
    """The largest threshold of ``grid`` (default :data:`DEFAULT_STOP_GRID`, ascending) that
    fixed-sequence testing certifies (see the module docstring); ``trusted`` and ``correct``
    (bool [n]) say which calibration answers the final gate trusts and which are right."""
    arr = _scores(scores)
    epsilon = check_level(epsilon, "epsilon", "the share of right, trusted answers a stop may cost")
    delta = check_level(delta, "delta", "the chance the calibration answers were unlucky")
    trusted = check_correct(trusted, name="trusted", allow_empty=True).astype(bool)
    correct = check_correct(correct, allow_empty=True).astype(bool)
    if not (len(trusted) == len(correct) == len(arr)):
        raise InputError(f"scores, trusted and correct must have one row per answer, got {len(arr)}, "
                         f"{len(trusted)} and {len(correct)}")
    grid = DEFAULT_STOP_GRID if grid is None else np.asarray(grid, dtype=np.float64)
    if grid.ndim != 1 or grid.size == 0 or np.any(np.diff(grid) <= 0):
        raise InputError("grid must be an increasing 1-D array of thresholds")
    protected = arr[trusted & correct]
    n = len(protected)
    stopped = np.array([(first_stop(protected, t) >= 0).sum() for t in grid]) if n else np.zeros(grid.size, int)
    p = binomial_p(np.full(grid.size, n), stopped, epsilon) if n else np.ones(grid.size)
    passed = np.cumprod(p <= delta).astype(bool)
    if not passed.any():
        return StopRule(0.0, epsilon, delta, n, 0, 1.0)
    j = int(np.flatnonzero(passed)[-1])
    return StopRule(float(grid[j]), epsilon, delta, n, int(stopped[j]), float(p[j]))
