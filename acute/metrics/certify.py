"""Certified trust thresholds: Learn-then-Test (Angelopoulos, Bates, Candes, Jordan & Lei 2021).

acute's default rule trusts an answer iff its confidence exceeds a risk level u. That promises
nothing about the answers let through. A **certificate** does: from labelled calibration
records the confidence estimator was *not fitted on*, :func:`certify_threshold` picks the
threshold with the most coverage such that, on new answers from the same distribution,

    P( precision among trusted answers >= 1 - alpha ) >= 1 - delta

(``alpha`` = ``max_error``, the error rate allowed among trusted answers; ``delta`` the chance
that the calibration records were unlucky). The rule it certifies is **trust iff confidence
>= threshold** (MAPIE's convention; note the ``>=``, where the risk-level rule uses ``>``); apply
it with :func:`decide`. The guarantee holds for any estimator, calibrated or not (it needs only
calibration and deployment answers to be exchangeable); a better-ranked confidence buys
coverage, not validity.

How (Learn-then-Test)
---------------------
For each threshold ``t`` of a grid fixed in advance (default 0.00, 0.01, ..., 0.99) the null
hypothesis "precision(t) < 1 - alpha" is tested with the exact binomial tail p-value
``P(Binomial(N_t, alpha) <= K_t)``, where ``N_t`` calibration records have confidence >= t and
``K_t`` of them are wrong (given ``N_t`` the wrong count is binomial, so the p-value is valid
for the random denominator). A family-wise error procedure at level delta keeps the
thresholds whose nulls it rejects; all of them are certified at once, and the lowest (most
coverage) is returned. ``fwer``:

* ``"bonferroni_holm"`` (default): Holm's step-down; valid whatever the shape of the precision
  curve; its first rejection needs p <= delta / len(grid).
* ``"fixed_sequence"``: from the highest threshold down, each at level delta, stopping at the
  first non-rejection. More coverage when the grid's top threshold is reached by enough
  calibration records, **vacuous when it is not**: with alpha = 0.05, delta = 0.1 the top must
  hold at least 45 records, all correct. Pass a ``grid`` whose top suits the confidences
  (chosen on other records, never on the calibration set) before using it.

Holm is the default because it is never vacuous for that reason: in
``benchmarks/certify_labels.md`` the fixed sequence adds 0.03 to 0.13 coverage on a
well-ranked confidence (6% of answers at c >= 0.99) and certifies nothing on a weakly ranked
one (0.1% there), where Holm certifies at alpha 0.10 from a few thousand records.

Backends
--------
``backend="mapie"`` (default) runs ``mapie.risk_control.BinaryClassificationController``
(MAPIE >= 1.4: ``fwer_method`` and ``FWERProcedure`` arrived in 1.4.0), the ``acute[risk]``
extra, imported lazily. The controller wants a ``predict_proba``-like callable: acute passes
the calibration *confidences themselves* as ``X`` and the function ``x -> [1 - x, x]``, so
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

MAPIE's p-value is ``binom.cdf(ceil(N * risk_hat), N, alpha)`` with ``risk_hat`` a float, so
``N * risk_hat`` often lands one ulp above the integer count (3 * (1 - 2/3) = 1.0000000000000002)
and counts one error more: valid, slightly conservative (in the tests its threshold is a grid
step or two higher in about a third of random calibration sets). ``backend="binomial"`` is
acute's own implementation with the exact count (the same thresholds or lower ones, tested), and
:func:`ltt_thresholds` runs it vectorised over many calibration sets (simulations).

No valid threshold, too few records
-----------------------------------
When no threshold is certified the result says so: ``threshold=None``, ``valid=False``, a
``reason`` and ``n_needed``, the projected number of calibration records that would certify a
threshold if each kept its calibration coverage and error rate (add-one smoothed, and never
higher at a higher threshold than at a lower one), by the Chernoff bound, which the exact test
never needs more than: a rough, rather conservative guide (in simulations that many records
certified in half to all of the draws). ``n_needed`` is ``None`` when no threshold gets below
the error rate alpha even so; more records of the same kind do not help then. There is no
silent fallback. Fewer records than :func:`min_calibration_records`
(the count that could certify something even if all were trusted and correct) is an
:class:`~acute.errors.InputError` naming ``correct``; so are ``max_error`` or ``delta`` outside
(0, 1), a bad grid, an unknown ``fwer`` or ``backend``, and MAPIE missing.
"""

from __future__ import annotations

import functools
import logging
import math
import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import rel_entr
from scipy.stats import binom

from ..errors import InputError
from ..validation import check_confidence, check_correct, check_level

__all__ = [
    "BACKENDS",
    "Certificate",
    "DEFAULT_DELTA",
    "DEFAULT_GRID",
    "FWER_METHODS",
    "LTTResult",
    "METHODS",
    "RULE",
    "binomial_p_values",
    "certify_threshold",
    "check_delta",
    "check_max_error",
    "decide",
    "ltt_thresholds",
    "min_calibration_records",
]

log = logging.getLogger(__name__)

#: Thresholds tested by default: 0.00, 0.01, ..., 0.99 (MAPIE's default grid, exact decimals).
DEFAULT_GRID = np.arange(100) / 100.0
DEFAULT_GRID.flags.writeable = False
FWER_METHODS = ("bonferroni_holm", "fixed_sequence")
BACKENDS = ("mapie", "binomial")
#: ``Certificate.method`` for each backend.
METHODS = {
    "mapie": "learn-then-test, MAPIE BinaryClassificationController",
    "binomial": "learn-then-test, exact binomial tail p-values (acute)",
}
RULE = "trust iff confidence >= threshold"
#: the chance a certificate may fail when the caller names none (``acute export --delta``)
DEFAULT_DELTA = 0.1
#: what ``max_error`` and ``delta`` mean, in every refusal of a bad value
MAX_ERROR_MEANING = "the error rate allowed among trusted answers"
DELTA_MEANING = "the probability that the guarantee fails"
MAPIE_REQUIREMENT = "mapie>=1.4,<2"
_MAPIE_MIN = (1, 4)


@dataclass(frozen=True)
class Certificate:
    """A certified trust threshold, or the statement that none could be certified.

    ``threshold``: trust iff confidence >= it (``None`` when ``valid`` is False). ``alpha``:
    the error rate allowed among trusted answers (``max_error``); ``delta``: the probability
    the guarantee may fail. ``n_calibration`` records were used; at the threshold they gave
    ``calibration_coverage`` (fraction trusted) and ``calibration_precision`` (fraction of the
    trusted that were correct), with p-value ``p_value``. ``reason`` says why in words;
    ``n_needed`` (invalid only) the projected number of records that would certify one.
    ``to_dict`` / ``from_dict`` round-trip through JSON.
    """

    method: str
    fwer: str
    threshold: float | None
    alpha: float
    delta: float
    n_calibration: int
    n_thresholds: int
    calibration_coverage: float | None
    calibration_precision: float | None
    p_value: float | None
    valid: bool
    reason: str
    n_needed: int | None = None
    rule: str = RULE

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types only (str, float, int, bool, None)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Certificate:
        """The certificate ``to_dict`` wrote; unknown or missing keys, or a rule other than
        :data:`RULE`, are an InputError naming them."""
        if not isinstance(data, Mapping):
            raise InputError(f"certificate: expected a mapping, got {type(data).__name__}")
        names = {f.name for f in fields(cls)}
        required = {f.name for f in fields(cls) if f.name not in ("n_needed", "rule")}
        unknown, missing = sorted(set(data) - names), sorted(required - set(data))
        if unknown or missing:
            raise InputError(f"certificate: unknown keys {unknown}, missing keys {missing}")
        if data.get("rule", RULE) != RULE:
            raise InputError(f"certificate: rule {data['rule']!r} is not {RULE!r}")
        cert = cls(**dict(data))
        if cert.valid is not (cert.threshold is not None):
            raise InputError("certificate: 'valid' must be true exactly when 'threshold' is set")
        t = cert.threshold
        if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float))
                              or not 0.0 <= t <= 1.0):
            raise InputError(f"certificate: threshold must be a number in [0, 1], got "
                             f"{cert.threshold!r}")
        _check_alpha_delta(cert.alpha, cert.delta)
        return cert


class LTTResult(NamedTuple):
    """:func:`ltt_thresholds` over D calibration sets: ``threshold`` [D] (NaN where none is
    certified), ``coverage`` [D] (calibration coverage there, 0 where none) and ``valid`` [D]."""

    threshold: np.ndarray
    coverage: np.ndarray
    valid: np.ndarray


# ------------------------------------------------------------------------------ checks
def check_max_error(max_error: Any, name: str = "max_error") -> float:
    """``max_error`` (alpha) as a float in (0, 1) (:func:`acute.validation.check_level`: booleans,
    strings, NaN refused); :class:`InputError` naming ``name`` otherwise."""
    return check_level(max_error, name, MAX_ERROR_MEANING)


def check_delta(delta: Any, name: str = "delta") -> float:
    """``delta`` as a float in (0, 1) (:func:`acute.validation.check_level`); :class:`InputError`
    naming ``name`` otherwise."""
    return check_level(delta, name, DELTA_MEANING)


def _check_alpha_delta(max_error: Any, delta: Any) -> tuple[float, float]:
    return check_max_error(max_error), check_delta(delta)


def _check_choice(value: Any, name: str, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise InputError(f"{name} must be one of {', '.join(map(repr, choices))}; got {value!r}")
    return value


def _check_grid(grid: ArrayLike | None) -> np.ndarray:
    """The grid as distinct thresholds in [0, 1], sorted from highest to lowest."""
    if grid is None:
        return DEFAULT_GRID[::-1].copy()
    try:
        g = np.asarray(grid, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError("grid: expected a 1-D array of thresholds in [0, 1]") from None
    if g.ndim != 1 or g.size == 0:
        raise InputError(f"grid: expected a non-empty 1-D array of thresholds, got shape {g.shape}")
    if not np.all((g >= 0.0) & (g <= 1.0)):  # also refuses NaN
        raise InputError("grid: thresholds must lie in [0, 1]")
    if np.unique(g).size != g.size:
        raise InputError("grid: thresholds must be distinct (a repeated one would be tested twice)")
    return np.sort(g)[::-1]


def _first_level(delta: float, fwer: str, n_thresholds: int) -> float:
    """The level the first rejection has to meet: delta (fixed sequence) or delta / m (Holm)."""
    return delta if fwer == "fixed_sequence" else delta / n_thresholds


def min_calibration_records(max_error: float, delta: float, *, fwer: str = "bonferroni_holm",
                            n_thresholds: int = DEFAULT_GRID.size) -> int:
    """The fewest calibration records that could certify any threshold: the smallest N with
    ``(1 - max_error) ** N <= level`` (all N trusted and correct), level = delta for the fixed
    sequence and delta / n_thresholds for Holm. E.g. 45 at max_error 0.05, delta 0.1, fixed
    sequence; 135 with Holm over 100 thresholds."""
    alpha, delta = _check_alpha_delta(max_error, delta)
    fwer = _check_choice(fwer, "fwer", FWER_METHODS)
    if isinstance(n_thresholds, bool) or not isinstance(n_thresholds, (int, np.integer)) \
            or n_thresholds < 1:
        raise InputError(f"n_thresholds must be an int >= 1, got {n_thresholds!r}")
    level = _first_level(delta, fwer, int(n_thresholds))
    n = max(1, math.ceil(math.log(level) / math.log1p(-alpha)))
    while binom.cdf(0, n, alpha) > level:  # the log estimate can be one off either way
        n += 1
    while n > 1 and binom.cdf(0, n - 1, alpha) <= level:
        n -= 1
    return n


def _calibration_inputs(confidence: ArrayLike, correct: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    conf = check_confidence(confidence)
    y = check_correct(correct, n=conf.shape[0])
    return conf, y


# ------------------------------------------------------------------------- LTT in numpy
def _grid_counts(conf: np.ndarray, y: np.ndarray, grid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(trusted [D, m], wrong [D, m]): records with confidence >= each grid threshold, per row."""
    n = conf.shape[1]
    order = np.argsort(conf, axis=1, kind="stable")
    c = np.take_along_axis(conf, order, axis=1)
    wrong_sorted = 1 - np.take_along_axis(y, order, axis=1)
    # wrong_from[:, i] = wrong records among sorted positions i..n-1 (0 at i = n)
    wrong_from = np.zeros((conf.shape[0], n + 1), dtype=np.int64)
    wrong_from[:, :n] = np.cumsum(wrong_sorted[:, ::-1], axis=1)[:, ::-1]
    first = np.stack([np.searchsorted(row, grid, side="left") for row in c])  # exact, per row
    return n - first, np.take_along_axis(wrong_from, first, axis=1)


def binomial_p_values(trusted: ArrayLike, wrong: ArrayLike, max_error: float) -> np.ndarray:
    """Exact p-values of "precision < 1 - max_error": ``P(Binomial(trusted, max_error) <= wrong)``
    (1 where nothing is trusted: no evidence)."""
    alpha = check_max_error(max_error)
    return binom.cdf(np.asarray(wrong), np.asarray(trusted), alpha)


def _reject(p: np.ndarray, delta: float, fwer: str) -> np.ndarray:
    """Rejected nulls [D, m] for p-values [D, m] over the descending grid."""
    if fwer == "fixed_sequence":
        return np.cumprod(p <= delta, axis=1).astype(bool)
    m = p.shape[1]
    order = np.argsort(p, axis=1, kind="stable")
    passed = np.take_along_axis(p, order, axis=1) <= delta / (m - np.arange(m))
    rejected = np.zeros_like(passed)
    np.put_along_axis(rejected, order, np.cumprod(passed, axis=1).astype(bool), axis=1)
    return rejected


def _lowest_rejected(rejected: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(any rejected [D], index of the lowest rejected threshold [D], 0 where none)."""
    m = rejected.shape[1]
    last = m - 1 - np.argmax(rejected[:, ::-1], axis=1)
    return rejected.any(axis=1), last


def ltt_thresholds(confidence: ArrayLike, correct: ArrayLike, max_error: float, delta: float, *,
                   grid: ArrayLike | None = None, fwer: str = "bonferroni_holm") -> LTTResult:
    """:func:`certify_threshold`'s binomial backend on many calibration sets at once.

    ``confidence`` and ``correct`` are ``[D, n]`` (one calibration set per row) or 1-D; every
    row is validated like a 1-D input. Meant for simulations (validity checks, how many labels
    a certificate needs); it skips the ``min_calibration_records`` error and the reasons.
    """
    alpha, delta = _check_alpha_delta(max_error, delta)
    fwer = _check_choice(fwer, "fwer", FWER_METHODS)
    g = _check_grid(grid)
    conf = np.atleast_2d(np.asarray(confidence))
    y = np.atleast_2d(np.asarray(correct))
    if conf.ndim != 2 or conf.shape != y.shape:
        raise InputError(f"confidence and correct must have the same shape [D, n]; got "
                         f"{conf.shape} and {y.shape}")
    conf = check_confidence(conf.ravel()).reshape(conf.shape)
    y = check_correct(y.ravel()).reshape(y.shape)
    trusted, wrong = _grid_counts(conf, y, g)
    rejected = _reject(binomial_p_values(trusted, wrong, alpha), delta, fwer)
    valid, j = _lowest_rejected(rejected)
    rows = np.arange(conf.shape[0])
    threshold = np.where(valid, g[j], np.nan)
    coverage = np.where(valid, trusted[rows, j] / conf.shape[1], 0.0)
    return LTTResult(threshold, coverage, valid)


# ----------------------------------------------------------------------------- MAPIE
def _import_mapie() -> Any:
    try:
        import mapie
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
def _mapie_procedures() -> dict[str, type]:
    """MAPIE FWER procedures for each ``fwer`` (see the module doc for why these two)."""
    from mapie.risk_control.fwer_control import FWERBonferroniHolm, FWERProcedure

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

    return {"bonferroni_holm": HolmNoEvidenceIsOne, "fixed_sequence": FixedSequenceInOrder}


def _confidence_as_proba(x: ArrayLike) -> np.ndarray:
    """``predict_proba`` for MAPIE when ``X`` is the confidence itself: ``[1 - x, x]``."""
    c = np.asarray(x, dtype=np.float64).reshape(-1)
    return np.column_stack([1.0 - c, c])


def _mapie_rejected(conf: np.ndarray, y: np.ndarray, alpha: float, delta: float, grid: np.ndarray,
                    fwer: str) -> tuple[np.ndarray, np.ndarray]:
    """(rejected [m], MAPIE's p-values [m]) over the descending grid."""
    _import_mapie()
    from mapie.risk_control import BinaryClassificationController

    controller = BinaryClassificationController(
        predict_function=_confidence_as_proba, risk="precision", target_level=1.0 - alpha,
        confidence_level=1.0 - delta, list_predict_params=grid,
        fwer_method=_mapie_procedures()[fwer]())
    with warnings.catch_warnings(record=True) as caught:  # reported in the certificate instead
        warnings.simplefilter("always")
        controller.calibrate(conf, y)
    for w in caught:
        log.debug("MAPIE: %s", w.message)
    rejected = np.isin(grid, np.asarray(controller.valid_predict_params, dtype=np.float64))
    return rejected, np.asarray(controller.p_values, dtype=np.float64).reshape(-1)


# ------------------------------------------------------------------------ certificates
def _projected_records(trusted: np.ndarray, wrong: np.ndarray, n: int, alpha: float, delta: float,
                       fwer: str) -> int | None:
    """Calibration records that would certify some threshold if each kept its calibration
    coverage and its (add-one smoothed) error rate: the Chernoff bound
    ``exp(-N KL(e || alpha)) <= level`` on the N trusted at the threshold, N = n_needed * coverage.
    For the fixed sequence every threshold above it must pass too. ``None`` if none could."""
    level = _first_level(delta, fwer, trusted.size)
    e = (wrong + 1.0) / (trusted + 2.0)  # add-one: no 'perfect' thresholds from 3 records
    e = np.minimum.accumulate(e[::-1])[::-1]  # and a higher threshold errs no more than a lower one
    kl = rel_entr(e, alpha) + rel_entr(1.0 - e, 1.0 - alpha)  # KL(e || alpha), 0 log 0 = 0
    with np.errstate(divide="ignore"):
        need = np.where((e < alpha) & (trusted > 0), math.log(1.0 / level) / kl * n / trusted, np.inf)
    if fwer == "fixed_sequence":
        need = np.maximum.accumulate(need)
    best = float(np.min(need))
    return max(math.ceil(best), n + 1) if math.isfinite(best) else None


def _invalid_reason(trusted: np.ndarray, wrong: np.ndarray, p: np.ndarray, grid: np.ndarray,
                    alpha: float, delta: float, fwer: str, n_needed: int | None) -> str:
    if fwer == "fixed_sequence" and not p[0] <= delta:
        why = (f"fixed-sequence testing stopped at its first threshold {grid[0]:g}: "
               f"{int(trusted[0])} calibration records reach it, {int(wrong[0])} wrong, "
               f"p = {p[0]:.3g} > delta = {delta:g} (it needs at least "
               f"{min_calibration_records(alpha, delta, fwer=fwer)} there, all correct: pass a "
               f"grid whose top the confidences reach, chosen on other records, or use "
               f"fwer='bonferroni_holm')")
    else:
        level = _first_level(delta, fwer, grid.size)
        i = int(np.argmin(p))
        prec = 1.0 - wrong[i] / trusted[i] if trusted[i] else float("nan")
        why = (f"no threshold passed: the smallest p-value, {p[i]:.3g} at threshold {grid[i]:g} "
               f"({int(trusted[i])} records, precision {prec:.3f}), is above the first level "
               f"{level:.3g} that {fwer} requires")
    if n_needed is not None:
        return (f"{why}; about {n_needed} calibration records with the same precision and "
                f"coverage per threshold would certify one (projected)")
    if fwer == "fixed_sequence":
        return (f"{why}; no number of records like these would carry the sequence past its first "
                f"thresholds (no record reaches them, or their calibration error rate, add-one "
                f"smoothed, is not below max_error={alpha:g})")
    return (f"{why}; no threshold's calibration error rate (add-one smoothed) is below "
            f"max_error={alpha:g}, so more records like these will not help: use a better-ranked "
            f"confidence or a larger max_error")


def _certificate(method: str, fwer: str, grid: np.ndarray, rejected: np.ndarray, p: np.ndarray,
                 trusted: np.ndarray, wrong: np.ndarray, n: int, alpha: float,
                 delta: float) -> Certificate:
    """The certificate for one calibration set from its rejected nulls over the descending grid
    (a NaN p-value, MAPIE's for a threshold no record reaches, reads as 1: no evidence)."""
    p = np.nan_to_num(np.asarray(p, dtype=np.float64), nan=1.0)
    common = dict(method=method, fwer=fwer, alpha=alpha, delta=delta, n_calibration=n,
                  n_thresholds=int(grid.size))
    if not rejected.any():
        n_needed = _projected_records(trusted, wrong, n, alpha, delta, fwer)
        return Certificate(threshold=None, calibration_coverage=None, calibration_precision=None,
                           p_value=None, valid=False, n_needed=n_needed,
                           reason=_invalid_reason(trusted, wrong, p, grid, alpha, delta, fwer,
                                                  n_needed), **common)
    j = int(np.flatnonzero(rejected)[-1])  # the lowest certified threshold: the most coverage
    reason = (f"the lowest of {int(rejected.sum())} certified thresholds: {int(trusted[j])} of {n} "
              f"calibration records reach {grid[j]:g}, {int(wrong[j])} wrong, p = {p[j]:.3g} "
              f"({fwer} at delta = {delta:g})")
    return Certificate(threshold=float(grid[j]), calibration_coverage=float(trusted[j] / n),
                       calibration_precision=float(1.0 - wrong[j] / trusted[j]),
                       p_value=float(p[j]), valid=True, reason=reason, **common)


def certify_threshold(confidence: ArrayLike, correct: ArrayLike, max_error: float, delta: float, *,
                      grid: ArrayLike | None = None, fwer: str = "bonferroni_holm",
                      backend: str = "mapie") -> Certificate:
    """The certified threshold with the most coverage (module doc), from labelled calibration
    records the estimator was not fitted on.

    ``confidence``: the estimator's P(correct) for each calibration record; ``correct``: its
    label. ``max_error``: the error rate allowed among trusted answers (alpha, in (0, 1));
    ``delta``: the probability the guarantee may fail (in (0, 1)). ``grid``: the thresholds to
    test, fixed before seeing the calibration records (default :data:`DEFAULT_GRID`). ``fwer``:
    ``"bonferroni_holm"`` or ``"fixed_sequence"``. ``backend``: ``"mapie"`` (MAPIE's
    BinaryClassificationController, the ``acute[risk]`` extra) or ``"binomial"`` (acute's own
    exact-binomial LTT, no dependency). Returns a :class:`Certificate`, valid or saying why not.
    """
    alpha, delta = _check_alpha_delta(max_error, delta)
    fwer = _check_choice(fwer, "fwer", FWER_METHODS)
    backend = _check_choice(backend, "backend", BACKENDS)
    g = _check_grid(grid)
    conf, y = _calibration_inputs(confidence, correct)
    n, n_min = conf.shape[0], min_calibration_records(alpha, delta, fwer=fwer, n_thresholds=g.size)
    if n < n_min:
        raise InputError(
            f"correct: {n} calibration records cannot certify any threshold at max_error={alpha:g}, "
            f"delta={delta:g} ({fwer} over {g.size} thresholds): even if every one were trusted "
            f"and correct, at least {n_min} are needed")
    trusted, wrong = (a[0] for a in _grid_counts(conf[None, :], y[None, :], g))
    if backend == "mapie":
        rejected, p = _mapie_rejected(conf, y, alpha, delta, g, fwer)
    else:
        p = binomial_p_values(trusted, wrong, alpha)
        rejected = _reject(p[None, :], delta, fwer)[0]
    return _certificate(METHODS[backend], fwer, g, rejected, p, trusted, wrong, n, alpha, delta)


def decide(confidence: ArrayLike, certificate: Certificate | Mapping[str, Any]) -> np.ndarray:
    """Trust decisions (bool array): confidence >= ``certificate.threshold``. ``certificate`` is
    a :class:`Certificate` or the dict its ``to_dict`` wrote (read back with ``from_dict``).

    A certificate with no threshold is an InputError carrying its reason: nothing can be
    trusted under that guarantee, and acute does not pick another rule behind your back.
    """
    if isinstance(certificate, Mapping):
        certificate = Certificate.from_dict(certificate)
    if not isinstance(certificate, Certificate):
        raise InputError(f"certificate: expected a Certificate, got {type(certificate).__name__}")
    if not certificate.valid or certificate.threshold is None:
        raise InputError(f"certificate: no certified threshold at max_error={certificate.alpha:g}, "
                         f"delta={certificate.delta:g} ({certificate.reason}); abstain on every "
                         f"answer or recalibrate")
    conf = check_confidence(confidence, allow_empty=True)
    return conf >= certificate.threshold
