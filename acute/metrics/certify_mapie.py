"""The MAPIE backend of :func:`acute.metrics.certify.certify_threshold` (``backend="mapie"``).

It runs ``mapie.risk_control.BinaryClassificationController`` (MAPIE >= 1.4: ``fwer_method``
and ``FWERProcedure`` arrived in 1.4.0), the ``acute[risk]`` extra, imported on first use. The
controller wants a ``predict_proba``-like callable: acute passes the calibration *confidences
themselves* as ``X`` and the function ``x -> [1 - x, x]`` (:func:`confidence_as_proba`), so
MAPIE's "predict 1 iff proba[:, 1] >= t" is exactly "trust iff confidence >= t"; no model is
refitted. Two adapters, both passed as MAPIE ``FWERProcedure`` instances, make it serve
(behaviour of MAPIE 1.4.0 to 1.6.0, each shown by a test; the tests pass on all three):

1. A threshold no calibration record reaches gets a NaN p-value in MAPIE, and its Holm step
   takes NaN as the smallest p-value and stops, certifying nothing even when other thresholds
   have p ~ 1e-5. No record means no evidence, i.e. p = 1: the adapter runs MAPIE's own Holm
   on the p-values with NaN read as 1.
2. MAPIE's ``"fixed_sequence"`` picks its direction from the data (1.5, 1.6: ascending when
   the empirical risk at the top is higher than at the bottom, as it is when the top is empty;
   1.4 refuses any non-monotone empirical precision curve), which is not a sequence fixed in
   advance. The adapter tests the grid in the order given (descending), as fixed-sequence
   testing requires.

The candidates it tests are placed by acute (:mod:`acute.metrics.ltt`), as for the binomial
backend.
"""

from __future__ import annotations

import functools
import logging
import warnings
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from ..errors import InputError
from . import ltt

__all__ = ["MAPIE_REQUIREMENT", "confidence_as_proba", "mapie_rejected", "require_mapie"]

log = logging.getLogger(__name__)

MAPIE_REQUIREMENT = "mapie>=1.4,<2"
_MAPIE_MIN = (1, 4)


def require_mapie() -> Any:
    """The ``mapie`` module; :class:`InputError` saying what to install when it is missing or
    older than :data:`MAPIE_REQUIREMENT`."""
    try:
        import mapie  # optional: mapie
        from mapie.risk_control import BinaryClassificationController  # noqa: F401
        from mapie.risk_control.fwer_control import FWERProcedure  # noqa: F401
    except ImportError as exc:
        raise InputError(
            f"certify_threshold(backend='mapie') needs MAPIE ({MAPIE_REQUIREMENT}): install the "
            f"acute[risk] extra (pip install 'acute[risk]'), or pass backend='binomial' "
            f"({exc})") from None
    version = tuple(int(part) for part in mapie.__version__.split(".")[:2] if part.isdigit())
    if version < _MAPIE_MIN:
        raise InputError(f"certify_threshold(backend='mapie') needs {MAPIE_REQUIREMENT} (fwer_method "
                         f"arrived in 1.4.0); found mapie {mapie.__version__}: pip install "
                         f"'acute[risk]', or pass backend='binomial'")
    return mapie


@functools.lru_cache(maxsize=1)
def _procedures() -> dict[str, type]:
    """MAPIE FWER procedures for each ``fwer``: Holm or a sequence in the order given (see the
    module doc for why these two)."""
    from mapie.risk_control.fwer_control import FWERBonferroniHolm, FWERProcedure  # optional: mapie

    class HolmNoEvidenceIsOne(FWERBonferroniHolm):
        """MAPIE's Holm step-down, reading the NaN p-value of an unreached threshold as 1."""

        def run(self, p_values, delta):
            return super().run(np.nan_to_num(np.asarray(p_values, float), nan=1.0), delta)

    class FixedSequenceInOrder(FWERProcedure):
        """Fixed-sequence testing in the grid's own order (first to last), one start."""

        def _init_state(self, n_lambdas, delta):
            self._n, self._delta, self._next = n_lambdas, delta, 0

        def _select_next_hypothesis(self, p_values):
            return self._next if self._next < self._n else None

        def _local_significance_levels(self):
            levels = np.zeros(self._n)
            if self._next < self._n:
                levels[self._next] = self._delta
            return levels

        def _update_on_reject(self, hypothesis_index):
            self._next = hypothesis_index + 1

    return {fwer: HolmNoEvidenceIsOne if fwer.endswith("holm") else FixedSequenceInOrder
            for fwer in ltt.PROCEDURES}


def confidence_as_proba(x: ArrayLike) -> np.ndarray:
    """``predict_proba`` for MAPIE when ``X`` is the confidence itself: ``[1 - x, x]``."""
    c = np.asarray(x, dtype=np.float64).reshape(-1)
    return np.column_stack([1.0 - c, c])


def mapie_rejected(conf: np.ndarray, y: np.ndarray, alpha: float, delta: float, grid: np.ndarray,
                   fwer: str) -> tuple[np.ndarray, np.ndarray]:
    """(rejected [m], MAPIE's p-values [m]) over the thresholds ``grid`` in the order tested, for
    checked calibration arrays and levels (MAPIE's warnings go to the debug log: the certificate
    reports what happened)."""
    require_mapie()
    from mapie.risk_control import BinaryClassificationController  # optional: mapie

    controller = BinaryClassificationController(
        predict_function=confidence_as_proba, risk="precision", target_level=1.0 - alpha,
        confidence_level=1.0 - delta, list_predict_params=grid,
        fwer_method=_procedures()[fwer]())
    with warnings.catch_warnings(record=True) as caught:  # reported in the certificate instead
        warnings.simplefilter("always")
        controller.calibrate(conf, y)
    for w in caught:
        log.debug("MAPIE: %s", w.message)
    rejected = np.isin(grid, np.asarray(controller.valid_predict_params, dtype=np.float64))
    return rejected, np.asarray(controller.p_values, dtype=np.float64).reshape(-1)
