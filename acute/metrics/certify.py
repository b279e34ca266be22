"""Certified trust thresholds: Learn-then-Test (Angelopoulos, Bates, Candes, Jordan & Lei 2021).

acute's default rule trusts an answer iff its confidence exceeds a risk level u. That promises
nothing about the answers let through. A **certificate** does: from labelled calibration
records the confidence estimator was *not fitted on*, :func:`certify_threshold` picks the
threshold with the most coverage such that, on new answers from the same distribution,

    P( precision among trusted answers >= 1 - alpha ) >= 1 - delta

(``alpha`` = ``max_error``, the error rate allowed among trusted answers; ``delta`` the chance
that the calibration records were unlucky). The rule it certifies is **trust iff confidence
>= threshold** (MAPIE's convention; note the ``>=``, where the risk-level rule uses ``>``); apply
it with :func:`decide`. The guarantee holds for any estimator, calibrated or not (it needs
calibration and deployment answers to be exchangeable; the default procedure's proof also needs
P(correct | confidence) not to decrease in the confidence, and simulations of curves that do
not, below, found it valid there too); a better-ranked confidence buys coverage, not validity.

How (Learn-then-Test)
---------------------
Each candidate threshold ``t`` is the null hypothesis "precision(t) < 1 - alpha", tested with the
exact binomial tail p-value ``P(Binomial(N_t, alpha) <= K_t)`` (``N_t`` calibration records have
confidence >= t, ``K_t`` of them wrong); a multiple-testing procedure at level delta keeps the
thresholds whose nulls it rejects; all of them are certified at once, and the lowest (most
coverage) is returned. ``fwer`` names the procedure (:mod:`acute.metrics.ltt` defines each):

* ``"quantile_sequence"`` (default, :data:`DEFAULT_FWER`): fixed-sequence testing from the top
  down over thresholds placed by the calibration confidences alone (never the labels), the first
  just above the m most confident records (m: the fewest records that pass at half the allowed
  error rate), then every ceil(n / 100) records further, each at level delta, stopping at the
  first non-rejection. Exactly valid when P(correct | confidence) does not decrease in the
  confidence; checked by simulation for curves that do not.
* ``"quantile_holm"``: Holm over 20 such label-free thresholds (exact for any curve).
* ``"split_sequence"``: split fixed sequence: a fixed random 30% of the records orders the
  thresholds (starting at its most significant one), the other 70% test them in that order
  (exact for any curve).
* ``"bonferroni_holm"``: Holm over the grid fixed in advance (default 0.00, 0.01, ..., 0.99);
  its first rejection needs p <= delta / len(grid).
* ``"fixed_sequence"``: the fixed grid from its highest threshold down, each at level delta;
  **vacuous when few records reach the grid's top** (at alpha 0.05, delta 0.1 the top needs 45
  records, all correct). Pass a ``grid`` whose top suits the confidences (chosen on other
  records, never on the calibration set).

``grid`` applies to the two fixed-grid procedures only. Why the default:
``benchmarks/certify_labels.md`` compares the five on 1,000 calibration sets in each of 175
settings (known precision curves, one not monotone, tied confidences, models matched to the
committed evaluations, a flat curve just below the target): all five stay valid (the share of
calibration sets whose certified threshold misses the target is at most 0.104 at delta 0.1) and
the default certifies the most: mean coverage 0.223 against 0.203 (split sequence), 0.190 (fixed
sequence), 0.170 (Holm) and 0.161 (quantile Holm). It certifies in 90% of
the calibration sets from 2 to 5 times fewer labels than Holm (e.g. 1,000 instead of 5,000 for
a well-ranked confidence at alpha 0.05).

Backends
--------
``backend="binomial"`` (default, :data:`DEFAULT_BACKEND`) is acute's own exact binomial test;
:func:`ltt_thresholds` runs it vectorised over many calibration sets (simulations).
``backend="mapie"`` runs MAPIE's ``BinaryClassificationController`` on the same candidates (the
``acute[risk]`` extra; :mod:`acute.metrics.certify_mapie` says how it is adapted).

Both backends test the same candidates (placed by acute). MAPIE's p-value is the smaller of
``binom.cdf(ceil(N * risk_hat), N, alpha)`` and a Hoeffding bound, with ``risk_hat`` a float, so
``N * risk_hat`` often lands one ulp above the integer count (18 * (1 - 17/18) =
1.0000000000000009) and counts one error more: valid, but conservative where it matters, since a
sequence stops at the first test that fails. That is why the default is the exact count: on
the default procedure MAPIE's certificates cover up to 0.09 less of the answers
(0.157 against 0.244 for a weakly ranked confidence at alpha 0.2, certifying in 57% of the
calibration sets against 92%; ``benchmarks/certify_labels.md``); its certified set is never
larger than the exact test's (tested).

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

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import rel_entr
from scipy.stats import binom

from ..errors import InputError
from ..validation import check_confidence, check_correct, check_level
from . import ltt
from .certify_mapie import mapie_rejected, require_mapie

__all__ = [
    "BACKENDS",
    "Certificate",
    "DEFAULT_BACKEND",
    "DEFAULT_DELTA",
    "DEFAULT_FWER",
    "DEFAULT_GRID",
    "FWER_METHODS",
    "LTTResult",
    "METHODS",
    "RULE",
    "binomial_p_values",
    "certify_threshold",
    "check_backend",
    "check_delta",
    "check_max_error",
    "check_max_errors",
    "cross_certified",
    "decide",
    "ltt_thresholds",
    "min_calibration_records",
]

#: Thresholds tested by default: 0.00, 0.01, ..., 0.99 (MAPIE's default grid, exact decimals).
DEFAULT_GRID = np.arange(100) / 100.0
DEFAULT_GRID.flags.writeable = False
#: the procedures ``fwer`` names (:mod:`acute.metrics.ltt`); the default certifies the most
#: coverage among the valid ones in ``benchmarks/certify_labels.md``
FWER_METHODS = ltt.PROCEDURES
DEFAULT_FWER = "quantile_sequence"
BACKENDS = ("mapie", "binomial")
#: the exact count (MAPIE's float count costs the sequences coverage: module doc)
DEFAULT_BACKEND = "binomial"
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


class CrossCertified(NamedTuple):
    """:func:`cross_certified` on one set of out-of-fold confidences: ``trusted`` (bool [n]:
    each record trusted by the threshold certified without its fold), ``certified`` (folds whose
    other folds certified a threshold) and ``folds``."""

    trusted: np.ndarray
    certified: int
    folds: int


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


def check_max_errors(max_error: Any, name: str = "max_error") -> list[float]:
    """The error rates to certify at: one ``max_error`` or a sequence (list, tuple, array) of
    them, each checked by :func:`check_max_error` (an item named ``name[i]``), at least one and
    each once; :class:`InputError` naming ``name`` otherwise."""
    if not isinstance(max_error, (list, tuple, np.ndarray)):
        return [check_max_error(max_error, name)]
    if len(max_error) == 0:
        raise InputError(f"{name}: give at least one error rate to certify")
    alphas = [check_max_error(a, name if len(max_error) == 1 else f"{name}[{i}]") for i, a in enumerate(max_error)]
    if len({round(a, 9) for a in alphas}) != len(alphas):
        raise InputError(f"{name}: give each error rate once, got {alphas}")
    return alphas


def _check_alpha_delta(max_error: Any, delta: Any) -> tuple[float, float]:
    return check_max_error(max_error), check_delta(delta)


def check_backend(backend: Any) -> str:
    """``backend``, one of :data:`BACKENDS`, usable here (MAPIE installed for ``"mapie"``,
    :func:`acute.metrics.certify_mapie.require_mapie`); :class:`InputError` otherwise."""
    backend = _check_choice(backend, "backend", BACKENDS)
    if backend == "mapie":
        require_mapie()
    return backend


def _check_choice(value: Any, name: str, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise InputError(f"{name} must be one of {', '.join(map(repr, choices))}; got {value!r}")
    return value


def _check_grid(grid: ArrayLike | None, fwer: str = "bonferroni_holm") -> np.ndarray:
    """The grid as distinct thresholds in [0, 1], sorted from highest to lowest (``None``: the
    default grid); only the fixed-grid procedures take one."""
    if grid is None:
        return DEFAULT_GRID[::-1].copy()
    if fwer not in ltt.GRID_PROCEDURES:
        raise InputError(f"grid: {fwer} places its own thresholds (label-free, from the calibration "
                         f"confidences); a grid goes with fwer='bonferroni_holm' or 'fixed_sequence'")
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


def _smallest_all_correct(alpha: float, level: float) -> int:
    """The smallest N with (1 - alpha) ** N <= level: N records, all trusted and correct, pass."""
    n = max(1, math.ceil(math.log(level) / math.log1p(-alpha)))
    while binom.cdf(0, n, alpha) > level:  # the log estimate can be one off either way
        n += 1
    while n > 1 and binom.cdf(0, n - 1, alpha) <= level:
        n -= 1
    return n


def min_calibration_records(max_error: float, delta: float, *, fwer: str = DEFAULT_FWER,
                            n_thresholds: int = DEFAULT_GRID.size) -> int:
    """The fewest calibration records that could certify any threshold: the smallest N with
    ``(1 - max_error) ** N <= level`` (all N trusted and correct) at the level of the first
    rejection: delta for the sequences and for ``quantile_holm`` (below its first label-free
    count it tests all records as one threshold), delta / n_thresholds for Holm over a grid;
    ``split_sequence`` needs that many among its 70% testing records. E.g. 45 at max_error 0.05,
    delta 0.1 (a sequence), 135 with Holm over 100 thresholds, 65 for the split sequence."""
    alpha, delta = _check_alpha_delta(max_error, delta)
    fwer = _check_choice(fwer, "fwer", FWER_METHODS)
    if isinstance(n_thresholds, bool) or not isinstance(n_thresholds, (int, np.integer)) \
            or n_thresholds < 1:
        raise InputError(f"n_thresholds must be an int >= 1, got {n_thresholds!r}")
    return _min_records(alpha, delta, fwer, int(n_thresholds))


def _min_records(alpha: float, delta: float, fwer: str, n_thresholds: int) -> int:
    """:func:`min_calibration_records` of checked arguments."""
    level = delta / n_thresholds if fwer == "bonferroni_holm" else delta
    n = _smallest_all_correct(alpha, level)
    if fwer != "split_sequence":
        return n
    total = math.ceil(n / (1.0 - ltt.LEARN_FRACTION))  # the testing share has floor() on its side
    while total > 1 and ltt.split_indices(total - 1)[1].size >= n:
        total -= 1
    while ltt.split_indices(total)[1].size < n:
        total += 1
    return total


def _calibration_inputs(confidence: ArrayLike, correct: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    conf = check_confidence(confidence)
    y = check_correct(correct, n=conf.shape[0])
    return conf, y


# ------------------------------------------------------------------------- LTT in numpy
def binomial_p_values(trusted: ArrayLike, wrong: ArrayLike, max_error: float) -> np.ndarray:
    """Exact p-values of "precision < 1 - max_error": ``P(Binomial(trusted, max_error) <= wrong)``
    (1 where nothing is trusted: no evidence)."""
    return ltt.binomial_p(trusted, wrong, check_max_error(max_error))


def _checked_rows(confidence: ArrayLike, correct: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    conf = np.atleast_2d(np.asarray(confidence))
    y = np.atleast_2d(np.asarray(correct))
    if conf.ndim != 2 or conf.shape != y.shape:
        raise InputError(f"confidence and correct must have the same shape [D, n]; got "
                         f"{conf.shape} and {y.shape}")
    return check_confidence(conf.ravel()).reshape(conf.shape), check_correct(y.ravel()).reshape(y.shape)


def ltt_thresholds(confidence: ArrayLike, correct: ArrayLike, max_error: float, delta: float, *,
                   grid: ArrayLike | None = None, fwer: str = DEFAULT_FWER) -> LTTResult:
    """:func:`certify_threshold`'s binomial backend on many calibration sets at once.

    ``confidence`` and ``correct`` are ``[D, n]`` (one calibration set per row) or 1-D; every
    row is validated like a 1-D input. Meant for simulations (validity checks, how many labels
    a certificate needs); it skips the ``min_calibration_records`` error and the reasons.
    """
    alpha, delta = _check_alpha_delta(max_error, delta)
    fwer = _check_choice(fwer, "fwer", FWER_METHODS)
    g = _check_grid(grid, fwer)
    conf, y = _checked_rows(confidence, correct)
    tested = ltt.run(conf, y, alpha, delta, fwer, g)
    valid, j = ltt.lowest_rejected(tested.thresholds, tested.rejected)
    threshold = np.where(valid, tested.thresholds[np.arange(conf.shape[0]), j], np.nan)
    with np.errstate(invalid="ignore"):  # NaN thresholds trust nothing
        coverage = (conf >= threshold[:, None]).sum(axis=1) / conf.shape[1]
    return LTTResult(threshold, coverage, valid)


# ------------------------------------------------------------------------ certificates
class _Candidates(NamedTuple):
    """One calibration set's tested candidates, in the order tested (the active ones only)."""

    thresholds: np.ndarray
    trusted: np.ndarray
    wrong: np.ndarray
    p: np.ndarray
    rejected: np.ndarray
    n_tested: int


def _records_word(fwer: str, n_tested: int) -> str:
    return (f"of the {n_tested} testing records" if fwer == "split_sequence"
            else "calibration records")


def _projected_records(c: _Candidates, n: int, alpha: float, delta: float, fwer: str) -> int | None:
    """Calibration records that would certify some threshold if each kept its calibration
    coverage and its (add-one smoothed) error rate: the Chernoff bound
    ``exp(-N KL(e || alpha)) <= level`` on the N trusted at the threshold, N = n_needed * coverage.
    In a sequence every threshold before it must pass too. ``None`` if none could."""
    level = ltt.first_level(delta, fwer, c.thresholds.size)
    e = (c.wrong + 1.0) / (c.trusted + 2.0)  # add-one: no 'perfect' thresholds from 3 records
    e = np.minimum.accumulate(e[::-1])[::-1]  # and a higher threshold errs no more than a lower one
    kl = rel_entr(e, alpha) + rel_entr(1.0 - e, 1.0 - alpha)  # KL(e || alpha), 0 log 0 = 0
    with np.errstate(divide="ignore", invalid="ignore"):
        need = np.where((e < alpha) & (c.trusted > 0),
                        math.log(1.0 / level) / kl * c.n_tested / c.trusted * n / c.n_tested, np.inf)
    if fwer in ltt.SEQUENCES:
        need = np.maximum.accumulate(need)
    best = float(np.min(need)) if need.size else math.inf
    return max(math.ceil(best), n + 1) if math.isfinite(best) else None


_FIRST = {"fixed_sequence": "fixed-sequence testing",
          "quantile_sequence": "the quantile sequence",
          "split_sequence": "the split sequence"}
_HINT = {"fixed_sequence": "it needs at least {need} there, all correct: pass a grid whose top the "
                           "confidences reach, chosen on other records, or use another fwer",
         "quantile_sequence": "its first threshold sits just above the {m} most confident records; "
                              "they err more often than the test allows",
         "split_sequence": "its first threshold is the one with the smallest p-value on the "
                           "learning records; the testing records do not bear it out"}


def _invalid_reason(c: _Candidates, n: int, alpha: float, delta: float, fwer: str,
                    n_needed: int | None) -> str:
    records = _records_word(fwer, c.n_tested)
    if fwer in ltt.SEQUENCES:  # a sequence certifies nothing only when its first test fails
        hint = _HINT[fwer].format(need=_min_records(alpha, delta, "fixed_sequence", DEFAULT_GRID.size),
                                  m=int(c.trusted[0]))
        why = (f"{_FIRST[fwer]} stopped at its first threshold {c.thresholds[0]:g}: "
               f"{int(c.trusted[0])} {records} reach it, {int(c.wrong[0])} wrong, "
               f"p = {c.p[0]:.3g} > delta = {delta:g} ({hint})")
    else:
        level = ltt.first_level(delta, fwer, c.thresholds.size)
        i = int(np.argmin(c.p))
        prec = 1.0 - c.wrong[i] / c.trusted[i] if c.trusted[i] else float("nan")
        why = (f"no threshold passed: the smallest p-value, {c.p[i]:.3g} at threshold "
               f"{c.thresholds[i]:g} ({int(c.trusted[i])} records, precision {prec:.3f}), is above "
               f"the first level {level:.3g} that {fwer} requires")
    if n_needed is not None:
        return (f"{why}; about {n_needed} calibration records with the same precision and "
                f"coverage per threshold would certify one (projected)")
    if fwer in ltt.SEQUENCES:
        return (f"{why}; no number of records like these would carry the sequence past its first "
                f"thresholds (no record reaches them, or their calibration error rate, add-one "
                f"smoothed, is not below max_error={alpha:g})")
    return (f"{why}; no threshold's calibration error rate (add-one smoothed) is below "
            f"max_error={alpha:g}, so more records like these will not help: use a better-ranked "
            f"confidence or a larger max_error")


def _certificate(method: str, fwer: str, c: _Candidates, conf: np.ndarray, y: np.ndarray,
                 alpha: float, delta: float) -> Certificate:
    """The certificate for one calibration set from its tested candidates (a NaN p-value,
    MAPIE's for a threshold no record reaches, reads as 1: no evidence)."""
    n = conf.shape[0]
    c = c._replace(p=np.nan_to_num(np.asarray(c.p, dtype=np.float64), nan=1.0))
    common = dict(method=method, fwer=fwer, alpha=alpha, delta=delta, n_calibration=n,
                  n_thresholds=int(c.thresholds.size))
    if not c.rejected.any():
        n_needed = _projected_records(c, n, alpha, delta, fwer)
        return Certificate(threshold=None, calibration_coverage=None, calibration_precision=None,
                           p_value=None, valid=False, n_needed=n_needed,
                           reason=_invalid_reason(c, n, alpha, delta, fwer, n_needed), **common)
    j = int(np.argmin(np.where(c.rejected, c.thresholds, np.inf)))  # the lowest: the most coverage
    t = float(c.thresholds[j])
    trusted = conf >= t
    reason = (f"the lowest of {int(c.rejected.sum())} certified thresholds: {int(c.trusted[j])} "
              f"{_records_word(fwer, c.n_tested) if fwer == 'split_sequence' else f'of {n} calibration records'} "
              f"reach {t:g}, {int(c.wrong[j])} wrong, p = {c.p[j]:.3g} ({fwer} at delta = {delta:g})")
    return Certificate(threshold=t, calibration_coverage=float(trusted.mean()),
                       calibration_precision=float(y[trusted].mean()),
                       p_value=float(c.p[j]), valid=True, reason=reason, **common)


def certify_threshold(confidence: ArrayLike, correct: ArrayLike, max_error: float, delta: float, *,
                      grid: ArrayLike | None = None, fwer: str = DEFAULT_FWER,
                      backend: str = DEFAULT_BACKEND) -> Certificate:
    """The certified threshold with the most coverage (module doc), from labelled calibration
    records the estimator was not fitted on.

    ``confidence``: the estimator's P(correct) for each calibration record; ``correct``: its
    label. ``max_error``: the error rate allowed among trusted answers (alpha, in (0, 1));
    ``delta``: the probability the guarantee may fail (in (0, 1)). ``fwer``: the procedure, one
    of :data:`FWER_METHODS` (default :data:`DEFAULT_FWER`). ``grid``: the thresholds to test,
    fixed before seeing the calibration records, for ``"bonferroni_holm"`` and
    ``"fixed_sequence"`` only (default :data:`DEFAULT_GRID`). ``backend``: ``"binomial"``
    (default: acute's own exact binomial tests, no dependency) or ``"mapie"`` (MAPIE's
    BinaryClassificationController runs the tests, the ``acute[risk]`` extra); the candidates are
    placed the same way for both. Returns a :class:`Certificate`, valid or saying why not; its ``fwer`` names the
    procedure.
    """
    alpha, delta = _check_alpha_delta(max_error, delta)
    fwer = _check_choice(fwer, "fwer", FWER_METHODS)
    backend = check_backend(backend)
    g = _check_grid(grid, fwer)
    conf, y = _calibration_inputs(confidence, correct)
    return _certified(conf, y, alpha, delta, fwer, g, backend)


def _certified(conf: np.ndarray, y: np.ndarray, alpha: float, delta: float, fwer: str, g: np.ndarray,
               backend: str) -> Certificate:
    """:func:`certify_threshold` of checked arguments (``g``: the grid, highest first)."""
    n, n_min = conf.shape[0], _min_records(alpha, delta, fwer, g.size)
    if n < n_min:
        over = f" over {g.size} thresholds" if fwer in ltt.GRID_PROCEDURES else ""
        raise InputError(
            f"correct: {n} calibration records cannot certify any threshold at max_error={alpha:g}, "
            f"delta={delta:g} ({fwer}{over}): even if every one were trusted "
            f"and correct, at least {n_min} are needed")
    tested = ltt.run(conf[None, :], y[None, :], alpha, delta, fwer, g)
    act = tested.active[0]
    c = _Candidates(tested.thresholds[0][act], tested.trusted[0][act], tested.wrong[0][act],
                    tested.p[0][act], tested.rejected[0][act], tested.n_tested)
    if backend == "mapie":
        rows = ltt.split_indices(n)[1] if fwer == "split_sequence" else slice(None)
        rejected, p = mapie_rejected(conf[rows], y[rows], alpha, delta, c.thresholds, fwer)
        c = c._replace(rejected=rejected, p=p)
    return _certificate(METHODS[backend], fwer, c, conf, y, alpha, delta)


def cross_certified(confidence: ArrayLike, correct: ArrayLike, test_folds, max_error: float,
                    delta: float = DEFAULT_DELTA, *, fwer: str = DEFAULT_FWER) -> CrossCertified:
    """The certified counterpart of "coverage at a target error": what a certificate would have
    let through on records whose labels it never saw.

    ``confidence``: out-of-fold P(correct) of every record (``[n]``, e.g. one repeat of a
    cross-validation); ``test_folds``: the folds' test indices (disjoint; records in none are
    never trusted). For each fold, :func:`certify_threshold` (binomial backend, ``fwer``) runs
    on the records of the other folds at ``max_error`` and ``delta``, and the fold's records are
    trusted iff their confidence is >= that threshold; a fold whose other folds are too few or
    certify nothing trusts none. So ``trusted.mean()`` is the coverage of certificates fitted
    on about (k-1)/k of the labels, and the error among ``trusted`` what they let through. The
    threshold never reads the labels of the fold it is applied to, though the predictions it
    reads come from fold models fitted on them (so the guarantee is approximate here: a
    deployment certifies on records no model saw)."""
    alpha, delta = _check_alpha_delta(max_error, delta)
    fwer = _check_choice(fwer, "fwer", FWER_METHODS)
    grid = _check_grid(None, fwer)
    conf, y = _calibration_inputs(confidence, correct)
    n = conf.shape[0]
    trusted = np.zeros(n, dtype=bool)
    certified, n_min = 0, _min_records(alpha, delta, fwer, grid.size)
    folds = [np.asarray(f, dtype=np.intp) for f in test_folds]
    seen = np.zeros(n, dtype=np.intp)
    for te in folds:
        if te.size and (te.min() < 0 or te.max() >= n):
            raise InputError(f"test_folds: an index outside 0..{n - 1}")
        seen[te] += 1
    if (seen > 1).any():
        raise InputError(f"test_folds: record {int(np.argmax(seen > 1))} is in more than one fold")
    for te in folds:
        rest = np.ones(n, dtype=bool)
        rest[te] = False
        if rest.sum() < n_min:
            continue
        cert = _certified(conf[rest], y[rest], alpha, delta, fwer, grid, "binomial")
        if cert.valid:
            certified += 1
            trusted[te] = conf[te] >= cert.threshold
    return CrossCertified(trusted, certified, len(folds))


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
