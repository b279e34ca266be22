"""acute.metrics.certify: Learn-then-Test thresholds, MAPIE's controller against acute's own binomial
LTT, the certificate's JSON, bad input, and the guarantee itself on synthetic data."""

from __future__ import annotations

import json
import sys
import warnings

import numpy as np
import pytest
from scipy.special import expit, logit
from scipy.stats import binom, norm

from acute.metrics import certify as C, ltt
from acute.metrics.certify_mapie import confidence_as_proba, mapie_rejected
from acute.metrics.certify import (
    DEFAULT_GRID,
    Certificate,
    certify_threshold,
    decide,
    ltt_thresholds,
    min_calibration_records,
)
from acute.errors import InputError

pytest.importorskip("mapie", reason="MAPIE (the acute[risk] extra) runs the default backend")

# ----------------------------------------------------------------------------------------
# The synthetic model: x ~ N(0, 1), true logit z = A x, P(correct) = sigmoid(z). An estimator
# overconfident by `shift` reports c = sigmoid(z + shift), so P(correct | c) is known:
# sigmoid(logit(c) - shift). shift 0 is calibrated; shift 2 says 0.9 where the truth is 0.55.
# ----------------------------------------------------------------------------------------
A = 3.0
_X = np.linspace(-10.0, 10.0, 200_001)
_W = norm.pdf(_X)
_GOOD_TAIL = np.cumsum((_W * expit(A * _X))[::-1])[::-1]
_MASS_TAIL = np.cumsum(_W[::-1])[::-1]


def draw(rng: np.random.Generator, shape, shift: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    z = A * rng.standard_normal(shape)
    return expit(z + shift), rng.uniform(size=shape) < expit(z)


def population_precision(t: np.ndarray, shift: float) -> np.ndarray:
    """P(correct | c >= t) under the model, by quadrature (c >= t iff x >= (logit(t) - shift) / A)."""
    with np.errstate(divide="ignore"):
        i = np.minimum(np.searchsorted(_X, (logit(np.asarray(t, dtype=float)) - shift) / A),
                       _X.size - 1)
    return _GOOD_TAIL[i] / _MASS_TAIL[i]


def test_population_precision_against_monte_carlo():
    c, y = draw(np.random.default_rng(0), 400_000, shift=2.0)
    for t in (0.0, 0.5, 0.9, 0.99):
        assert population_precision(t, 2.0) == pytest.approx(y[c >= t].mean(), abs=0.004)


# ------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize("value", [0, 1, 0.0, 1.0, -0.1, 1.5, float("nan"), "0.1", None, True])
def test_alpha_and_delta_outside_the_open_interval(value):
    c, y = draw(np.random.default_rng(0), 2000)
    with pytest.raises(InputError, match="^max_error must"):
        certify_threshold(c, y, value, 0.1)
    with pytest.raises(InputError, match="^delta must"):
        certify_threshold(c, y, 0.1, value)
    with pytest.raises(InputError, match="^max_error must"):
        ltt_thresholds(c, y, value, 0.1)
    with pytest.raises(InputError, match="^delta must"):
        min_calibration_records(0.1, value)


@pytest.mark.parametrize("m", [0, -3, 2.5, True, None])
def test_bad_n_thresholds(m):
    with pytest.raises(InputError, match="^n_thresholds must be an int >= 1"):
        min_calibration_records(0.1, 0.1, n_thresholds=m)


def test_too_few_records_says_how_many_are_needed():
    c, y = draw(np.random.default_rng(0), 134)
    with pytest.raises(InputError, match=r"^correct: 134 calibration records cannot certify any "
                       r"threshold at max_error=0.05, delta=0.1 \(bonferroni_holm over 100 "
                       r"thresholds\).*at least 135 are needed"):
        certify_threshold(c, y, 0.05, 0.1, fwer="bonferroni_holm")
    for fwer in ("fixed_sequence", "quantile_sequence", "quantile_holm"):  # their first level: delta
        with pytest.raises(InputError, match=rf"\({fwer}( over 100 thresholds)?\): even if .*at least 45 are needed"):
            certify_threshold(c[:44], y[:44], 0.05, 0.1, fwer=fwer)
        certify_threshold(c[:45], y[:45], 0.05, 0.1, fwer=fwer)  # enough to be tried
    with pytest.raises(InputError, match=r"at least 45 are needed"):  # the default
        certify_threshold(c[:44], y[:44], 0.05, 0.1)
    # the split sequence tests on 70%: 63 records leave 45 (floor(0.3 * 63) = 18 learn), 62 leave 44
    with pytest.raises(InputError, match="at least 63 are needed"):
        certify_threshold(c[:62], y[:62], 0.05, 0.1, fwer="split_sequence")
    certify_threshold(c[:63], y[:63], 0.05, 0.1, fwer="split_sequence")


@pytest.mark.parametrize("alpha, delta, fwer, m", [
    (0.05, 0.1, "fixed_sequence", 100), (0.05, 0.1, "bonferroni_holm", 100),
    (0.1, 0.1, "fixed_sequence", 100), (0.1, 0.05, "bonferroni_holm", 20), (0.3, 0.5, "fixed_sequence", 1),
    (0.2, 0.05, "quantile_sequence", 100), (0.05, 0.1, "quantile_holm", 100),
])
def test_min_calibration_records_is_the_smallest_count(alpha, delta, fwer, m):
    n = min_calibration_records(alpha, delta, fwer=fwer, n_thresholds=m)
    level = delta if fwer != "bonferroni_holm" else delta / m
    assert (1 - alpha) ** n <= level * (1 + 1e-12) and (1 - alpha) ** (n - 1) > level
    assert {(0.05, 0.1, "fixed_sequence"): 45, (0.05, 0.1, "bonferroni_holm"): 135,
            (0.2, 0.05, "quantile_sequence"): 14}.get((alpha, delta, fwer), n) == n


@pytest.mark.parametrize("kwargs, match", [
    (dict(grid=[0.5, 0.5], fwer="bonferroni_holm"), "grid: thresholds must be distinct"),
    (dict(grid=[0.5, 1.2], fwer="fixed_sequence"), r"grid: thresholds must lie in \[0, 1\]"),
    (dict(grid=[], fwer="bonferroni_holm"), "grid: expected a non-empty 1-D array"),
    (dict(grid=[[0.5]], fwer="bonferroni_holm"), "grid: expected a non-empty 1-D array"),
    (dict(grid=["a"], fwer="bonferroni_holm"), "grid: expected a 1-D array"),
    (dict(grid=[0.5, 0.9]), "grid: quantile_sequence places its own thresholds .* a grid goes with "
                            "fwer='bonferroni_holm' or 'fixed_sequence'"),
    (dict(grid=[0.5, 0.9], fwer="split_sequence"), "grid: split_sequence places its own"),
    (dict(fwer="holm"), "fwer must be one of 'bonferroni_holm', 'fixed_sequence', 'quantile_sequence', "
                        "'quantile_holm', 'split_sequence'"),
    (dict(backend="torch"), "backend must be one of 'mapie', 'binomial'"),
])
def test_bad_options(kwargs, match):
    c, y = draw(np.random.default_rng(0), 500)
    with pytest.raises(InputError, match=match):
        certify_threshold(c, y, 0.1, 0.1, **kwargs)


def test_bad_arrays_name_the_argument():
    with pytest.raises(InputError, match="^correct: expected length 3"):
        certify_threshold([0.5, 0.6, 0.7], [1, 0], 0.1, 0.1)
    with pytest.raises(InputError, match="^confidence: values must lie"):
        certify_threshold([0.5, 1.6], [1, 0], 0.1, 0.1)
    with pytest.raises(InputError, match="same shape"):
        ltt_thresholds(np.zeros((2, 3)), np.zeros((2, 4)), 0.1, 0.1)


def test_missing_mapie_names_the_extra(monkeypatch):
    c, y = draw(np.random.default_rng(0), 500)
    monkeypatch.setitem(sys.modules, "mapie", None)  # makes `import mapie` raise ImportError
    with pytest.raises(InputError, match=r"acute\[risk\].*backend='binomial'"):
        certify_threshold(c, y, 0.1, 0.1, backend="mapie")
    assert certify_threshold(c, y, 0.1, 0.1).valid  # the default needs no MAPIE


def test_old_mapie_is_refused_with_the_version_needed(monkeypatch):
    import mapie

    monkeypatch.setattr(mapie, "__version__", "1.3.0")
    with pytest.raises(InputError, match=r"mapie>=1.4,<2 .*found mapie 1.3.0"):
        certify_threshold(*draw(np.random.default_rng(0), 500), 0.1, 0.1, backend="mapie")


# --------------------------------------------------------------- MAPIE vs acute's binomial
def _power_of_two_example() -> tuple[np.ndarray, np.ndarray]:
    """Confidences on 5 levels whose cumulative counts are 64, 128, 256, 512, 1024: at every
    grid threshold N is a power of two, so MAPIE's float count N * (1 - precision) is exact."""
    levels = [(0.995, 64, 0), (0.95, 64, 2), (0.85, 128, 12), (0.6, 256, 60), (0.3, 512, 300)]
    conf, correct = [], []
    for value, count, wrong in levels:
        conf += [value] * count
        correct += [0] * wrong + [1] * (count - wrong)
    return np.array(conf), np.array(correct)


@pytest.mark.parametrize("fwer", ltt.GRID_PROCEDURES)
def test_mapie_and_binomial_agree_on_a_fixed_example(fwer):
    conf, correct = _power_of_two_example()
    grid = C._check_grid(None)
    _, p_mapie = mapie_rejected(conf, correct, 0.1, 0.1, grid, fwer)
    trusted, wrong = (a[0] for a in ltt.grid_counts(conf[None], correct[None], grid))
    p_exact = C.binomial_p_values(trusted, wrong, 0.1)
    np.testing.assert_allclose(p_mapie, p_exact, rtol=1e-12, atol=0)
    m = certify_threshold(conf, correct, 0.1, 0.1, fwer=fwer, backend="mapie")
    b = certify_threshold(conf, correct, 0.1, 0.1, fwer=fwer)
    assert m.method == "learn-then-test, MAPIE BinaryClassificationController"
    assert b.method == "learn-then-test, exact binomial tail p-values (acute)"
    # Holm: the 128 records >= 0.95 (2 wrong, p = 1.6e-4) pass its first level 0.1/100 at the
    # ten thresholds 0.86..0.95; then 0.96..0.99 (64 records, none wrong, p = 0.00118) miss
    # 0.1/90. Fixed sequence: 0.99 down to 0.61 pass at 0.1 (256 records, 14 wrong at 0.61,
    # p = 0.0068), 0.60 adds 256 records with 60 wrong and stops it.
    assert m.threshold == b.threshold == {"bonferroni_holm": 0.86, "fixed_sequence": 0.61}[fwer]
    assert m.calibration_coverage == b.calibration_coverage == \
        {"bonferroni_holm": 128 / 1024, "fixed_sequence": 256 / 1024}[fwer]
    assert (m.calibration_precision, m.valid, m.n_calibration) == \
        (b.calibration_precision, b.valid, b.n_calibration)
    assert m.p_value == pytest.approx(b.p_value, rel=1e-12)


@pytest.mark.parametrize("fwer", C.FWER_METHODS)
def test_mapie_is_never_more_liberal_than_the_exact_binomial(fwer):
    """MAPIE's p-value counts ceil(N * risk_hat) errors, one more than K when the float product
    lands an ulp above it; its p-values are never below the exact ones, so its certified set is
    a subset and its threshold never lower. Here the two thresholds are equal in 26 (Holm), 23
    (fixed sequence), 25 (quantile sequence), 38 (quantile Holm) and 19 (split sequence) of 40
    draws; otherwise MAPIE's is a step or two higher."""
    rng = np.random.default_rng(11)
    grid = C._check_grid(None)
    same = 0
    for _ in range(40):
        c, y = draw(rng, 600)
        if fwer in ltt.GRID_PROCEDURES:
            rejected_m, p_m = mapie_rejected(c, y, 0.1, 0.1, grid, fwer)
            trusted, wrong = (a[0] for a in ltt.grid_counts(c[None], y[None], grid))
            p_b = C.binomial_p_values(trusted, wrong, 0.1)
            assert np.all(np.nan_to_num(p_m, nan=1.0) >= p_b * (1 - 1e-12))
            rejected_b = (ltt.holm if fwer == "bonferroni_holm" else ltt.sequence)(p_b[None], 0.1)[0]
            assert not np.any(rejected_m & ~rejected_b)
        tm = certify_threshold(c, y, 0.1, 0.1, fwer=fwer, backend="mapie").threshold
        tb = ltt_thresholds(c, y, 0.1, 0.1, fwer=fwer).threshold[0]
        if tm is not None:  # MAPIE certified: so did the exact test, at the same or a lower one
            assert tb <= tm
        same += (tm is None and np.isnan(tb)) or tm == tb
    assert same >= {"quantile_holm": 35, "split_sequence": 17}.get(fwer, 20)


def test_mapie_holm_alone_certifies_nothing_when_a_threshold_is_unreached():
    """Why the Holm adapter exists: MAPIE 1.6 gives an unreached threshold a NaN p-value and its
    Holm step takes NaN as the smallest and stops."""
    from mapie.risk_control import BinaryClassificationController

    rng = np.random.default_rng(0)
    c = rng.uniform(size=2000) * 0.9  # nothing reaches the grid's thresholds above 0.9
    y = rng.uniform(size=2000) < c + 0.1
    plain = BinaryClassificationController(confidence_as_proba, "precision", 0.9,
                                           confidence_level=0.9, list_predict_params=DEFAULT_GRID,
                                           fwer_method="bonferroni_holm")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain.calibrate(c, y)
    assert plain.best_predict_param is None and np.isnan(plain.p_values).any()
    cert = certify_threshold(c, y, 0.1, 0.1, fwer="bonferroni_holm")
    assert cert.valid and cert.threshold <= 0.8 and cert.p_value < 1e-3


def test_mapie_fixed_sequence_alone_picks_its_direction_from_the_data():
    """Why the fixed-sequence adapter exists: given the grid from the top down, MAPIE 1.6's own
    "fixed_sequence" reverses it when the empirical risk at the top exceeds the risk at the
    bottom, and so tests from threshold 0 up: an order chosen by the labels (MAPIE 1.4 instead
    refuses any precision curve that is not monotone, i.e. nearly every real one)."""
    from mapie.risk_control import BinaryClassificationController

    rng = np.random.default_rng(0)
    c = np.linspace(0.0, 1.0, 2000)
    y = (c < 0.95) & (rng.uniform(size=2000) > 0.02)  # the most confident 5% are all wrong
    plain = BinaryClassificationController(confidence_as_proba, "precision", 0.9,
                                           confidence_level=0.9,
                                           list_predict_params=C._check_grid(None),
                                           fwer_method="fixed_sequence")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            plain.calibrate(c, y)
        except ValueError as exc:  # MAPIE 1.4
            assert "monotonic" in str(exc)
        else:
            assert 0.0 in plain.valid_predict_params  # it started at the bottom
    cert = certify_threshold(c, y, 0.1, 0.1, fwer="fixed_sequence")
    assert not cert.valid and cert.reason.startswith("fixed-sequence testing stopped at its "
                                                     "first threshold 0.99")


def test_fixed_sequence_runs_from_the_top_in_grid_order():
    # the top threshold is reached by 3 records, one wrong: the sequence stops there, whatever
    # lies below (MAPIE's own "fixed_sequence" would pick its direction from the data instead)
    c = np.r_[np.full(3, 0.995), np.linspace(0.5, 0.97, 2000)]
    y = np.r_[[1, 0, 1], np.ones(2000, dtype=int)]
    for backend in C.BACKENDS:
        cert = certify_threshold(c, y, 0.1, 0.1, fwer="fixed_sequence", backend=backend)
        assert not cert.valid and cert.reason.startswith(
            "fixed-sequence testing stopped at its first threshold 0.99: 3 calibration records "
            "reach it, 1 wrong")
        # a grid whose top the records reach certifies nearly everything
        ok = certify_threshold(c, y, 0.1, 0.1, fwer="fixed_sequence", backend=backend,
                               grid=np.arange(50, 96) / 100)
        assert ok.valid and ok.threshold == 0.5
    assert certify_threshold(c, y, 0.1, 0.1).valid  # Holm is not stopped by the top


# ------------------------------------------------- the label-free and split procedures by hand
def _thirty() -> tuple[np.ndarray, np.ndarray]:
    """30 records, confidence 1.0, 29/30, ..., 1/30 (rank i has (31 - i) / 30); ranks 3 and 19 wrong."""
    c = (30 - np.arange(30)) / 30
    y = np.ones(30, dtype=int)
    y[[2, 18]] = 0
    return c, y


def test_start_count_is_the_fewest_records_passing_at_half_the_error_rate():
    for alpha, level, n in [(0.2, 0.1, 30), (0.1, 0.1, 5000), (0.05, 0.1, 5000), (0.1, 0.005, 1000),
                            (0.02, 0.1, 400)]:
        m = ltt.start_count(alpha, level, n)
        assert binom.cdf(np.floor(m * alpha / 2), m, alpha) <= level
        assert all(binom.cdf(np.floor(k * alpha / 2), k, alpha) > level for k in range(1, m))
    assert (ltt.start_count(0.2, 0.1, 30), ltt.start_count(0.1, 0.1, 5000), ltt.start_count(0.05, 0.1, 5000)) \
        == (18, 38, 77)
    assert ltt.start_count(0.01, 0.1, 100) == 100  # none of 1..100 passes: the count is n itself


def test_quantile_sequence_by_hand():
    """alpha 0.2, delta 0.1, n 30: m = 18, s = ceil(30 / 100) = 1, so the candidates sit just above
    the records at ranks 19, 20, ..., 30, then at 0. The 18 most confident hold one wrong record
    (rank 3): p = P(Binomial(18, 0.2) <= 1) = 0.0991 <= 0.1, rejected; adding rank 19 (wrong) gives
    P(Binomial(19, 0.2) <= 2) = 0.237 > 0.1 and the sequence stops. Certified: just above rank
    19's confidence 0.4, trusting the 18 records above it."""
    c, y = _thirty()
    tested = ltt.run(c[None], y[None], 0.2, 0.1, "quantile_sequence", None)
    np.testing.assert_array_equal(ltt.schedule("quantile_sequence", 30, 0.2, 0.1), np.arange(18, 31))
    expected_t = np.r_[np.nextafter((30 - np.arange(18, 30)) / 30, 1), 0.0]
    np.testing.assert_array_equal(tested.thresholds[0], expected_t)
    np.testing.assert_array_equal(tested.trusted[0], np.arange(18, 31))
    assert tested.p[0, 0] == pytest.approx(binom.cdf(1, 18, 0.2)) and binom.cdf(1, 18, 0.2) <= 0.1
    assert tested.p[0, 1] == pytest.approx(binom.cdf(2, 19, 0.2)) and binom.cdf(2, 19, 0.2) > 0.1
    assert tested.rejected[0].tolist() == [True] + [False] * 12
    cert = certify_threshold(c, y, 0.2, 0.1, backend="binomial")
    assert cert.fwer == "quantile_sequence" and cert.threshold == np.nextafter(0.4, 1)
    assert (cert.calibration_coverage, cert.calibration_precision) == (18 / 30, 17 / 18)
    assert cert.p_value == pytest.approx(0.0990792) and cert.n_thresholds == 13
    assert decide(c, cert).tolist() == [True] * 18 + [False] * 12  # 0.4 itself is not trusted
    # the fixed grid's top, 0.99, holds one record: its sequence stops there; Holm needs 31 records
    fixed = certify_threshold(c, y, 0.2, 0.1, fwer="fixed_sequence", backend="binomial")
    assert not fixed.valid and "first threshold 0.99: 1 calibration records reach it" in fixed.reason
    with pytest.raises(InputError, match="at least 31 are needed"):
        certify_threshold(c, y, 0.2, 0.1, fwer="bonferroni_holm")
    # MAPIE counts 18 * (1 - 17/18) = 1.0000000000000009 errors as 2 (binomial p = 0.271, so it
    # takes its Hoeffding bound, 0.214): above delta, and its sequence stops at once
    mapie = certify_threshold(c, y, 0.2, 0.1, backend="mapie")
    assert not mapie.valid and "18 calibration records reach it, 1 wrong, p = 0.214" in mapie.reason


def test_quantile_holm_by_hand():
    c, y = _thirty()
    # n 30 is below m20 (alpha 0.2 at level 0.1 / 20): one candidate, all 30 records at threshold
    # 0, level delta: 2 wrong, P(Binomial(30, 0.2) <= 2) = 0.0442
    np.testing.assert_array_equal(ltt.schedule("quantile_holm", 30, 0.2, 0.1), [30])
    cert = certify_threshold(c, y, 0.2, 0.1, fwer="quantile_holm", backend="binomial")
    assert (cert.threshold, cert.calibration_coverage, cert.n_thresholds) == (0.0, 1.0, 1)
    assert cert.p_value == pytest.approx(binom.cdf(2, 30, 0.2))
    # n 1000, alpha 0.1: 20 counts from m20 = 195 geometrically to 1000, Holm over their p-values
    # (checked against acute.metrics.intervals.holm, written separately)
    from acute.metrics.intervals import holm

    k = ltt.schedule("quantile_holm", 1000, 0.1, 0.1)
    assert k[0] == ltt.start_count(0.1, 0.1 / 20, 1000) == 195 and k[-1] == 1000 and k.size == 20
    np.testing.assert_allclose(k[1:] / k[:-1], (1000 / 195) ** (1 / 19), rtol=0.02)
    rng = np.random.default_rng(8)
    for _ in range(5):
        c, y = draw(rng, 1000)
        tested = ltt.run(c[None], y[None], 0.1, 0.1, "quantile_holm", None)
        order = np.sort(c)[::-1]
        t = np.r_[np.nextafter(order[k[:-1]], 1), 0.0]
        np.testing.assert_array_equal(tested.thresholds[0], t)
        p = np.array([binom.cdf(np.sum(~y.astype(bool) & (c >= ti)), np.sum(c >= ti), 0.1) for ti in t])
        np.testing.assert_allclose(tested.p[0], p, rtol=1e-12)
        rejected = np.asarray(holm(p, 0.1), dtype=bool)
        np.testing.assert_array_equal(tested.rejected[0], rejected)
        cert = certify_threshold(c, y, 0.1, 0.1, fwer="quantile_holm", backend="binomial")
        assert cert.threshold == (t[rejected].min() if rejected.any() else None)


def test_split_sequence_by_hand():
    """n 100: the 30 learning records (split_indices: seed 0) have confidences 0.99, 0.98, ...,
    0.70; the top 20 are correct, the bottom 10 wrong. Their p-values are 0.9 ** r down to 0.80
    (r = 20: 0.1216), then 0.365 and up: the sequence starts at 0.80 and runs down over 0.79, ...,
    0.70 (11 thresholds). Of the 70 testing records 40 reach 0.80, all correct (p = 0.9 ** 40 =
    0.0148), and 5 more at 0.795 are all wrong (45 records, 5 wrong: p = 0.70 at 0.79): certified
    0.80, trusting 20 + 40 of the 100 records."""
    learn, test = ltt.split_indices(100)
    assert (learn.size, test.size) == (30, 70) and not set(learn) & set(test)
    c, y = np.empty(100), np.empty(100, dtype=int)
    c[learn], y[learn] = 0.99 - np.arange(30) / 100, np.r_[np.ones(20), np.zeros(10)]
    c[test] = np.r_[np.linspace(0.99, 0.81, 40), np.full(5, 0.795), np.full(25, 0.5)]
    y[test] = np.r_[np.ones(40), np.zeros(5), np.arange(25) % 2]
    for backend in C.BACKENDS:
        cert = certify_threshold(c, y, 0.1, 0.1, fwer="split_sequence", backend=backend)
        assert cert.threshold == pytest.approx(0.80) and cert.n_thresholds == 11
        assert (cert.calibration_coverage, cert.calibration_precision) == (0.6, 1.0)
        assert cert.p_value == pytest.approx(0.9 ** 40)
        assert "40 of the 70 testing records reach 0.8" in cert.reason
    # the learning records' own labels never enter a test: flipping them all moves the start only
    y2 = y.copy()
    y2[learn] = 1
    tested = ltt.run(c[None], y2[None], 0.1, 0.1, "split_sequence", None)
    assert tested.active[0].sum() == 1 and tested.thresholds[0][tested.active[0]][0] == pytest.approx(0.70)


@pytest.mark.parametrize("fwer", ["quantile_sequence", "quantile_holm"])
def test_label_free_thresholds_do_not_depend_on_the_labels(fwer):
    c, y = draw(np.random.default_rng(9), (3, 700))
    a = ltt.run(c, y.astype(int), 0.1, 0.1, fwer, None)
    b = ltt.run(c, 1 - y.astype(int), 0.1, 0.1, fwer, None)
    np.testing.assert_array_equal(a.thresholds, b.thresholds)
    np.testing.assert_array_equal(a.active, b.active)


def test_tied_confidences_skip_repeated_candidates():
    """Records tied at the top: the candidates that would sit above 1 or repeat one are skipped,
    not tested (a sequence would otherwise stop at an empty one)."""
    c = np.r_[np.ones(100), np.linspace(0.9, 0.1, 200)]
    y = np.r_[np.ones(100), np.linspace(0.9, 0.1, 200) > 0.5].astype(int)
    tested = ltt.run(c[None], y[None], 0.1, 0.1, "quantile_sequence", None)
    t = tested.thresholds[0][tested.active[0]]
    assert t.max() <= 1.0 and np.unique(t).size == t.size
    # the first tested: the 100 tied at 1.0 and the next few (counts 38, 41, ..., 101 for s = 3)
    assert tested.trusted[0][tested.active[0]][0] == 101
    cert = certify_threshold(c, y, 0.1, 0.1, backend="binomial")
    assert cert.valid and cert.calibration_coverage > 100 / 300


def test_ltt_thresholds_rows_match_one_at_a_time():
    rng = np.random.default_rng(5)
    c, y = draw(rng, (30, 400))
    for fwer in C.FWER_METHODS:
        batch = ltt_thresholds(c, y, 0.1, 0.1, fwer=fwer)
        for i in range(30):
            one = certify_threshold(c[i], y[i], 0.1, 0.1, fwer=fwer, backend="binomial")
            assert batch.valid[i] == one.valid
            if one.valid:
                assert batch.threshold[i] == one.threshold
                assert batch.coverage[i] == one.calibration_coverage


def test_grid_counts_are_exact_at_ties_with_the_threshold():
    conf = np.array([[0.3, 0.5, 0.5, 0.7, 0.7000000000000001, 1.0]])
    y = np.array([[1, 0, 1, 1, 0, 1]])
    trusted, wrong = ltt.grid_counts(conf, y, np.array([1.0, 0.7, 0.5, 0.0]))
    np.testing.assert_array_equal(trusted, [[1, 3, 5, 6]])
    np.testing.assert_array_equal(wrong, [[0, 1, 2, 2]])


# ---------------------------------------------------------------------- the certificate
def test_certificate_records_what_was_certified_and_round_trips_through_json():
    c, y = draw(np.random.default_rng(7), 1000)
    cert = certify_threshold(c, y, 0.1, 0.1)
    d = cert.to_dict()
    assert set(d) == {"method", "fwer", "threshold", "alpha", "delta", "n_calibration",
                      "n_thresholds", "calibration_coverage", "calibration_precision", "p_value",
                      "valid", "reason", "n_needed", "rule"}
    assert d["alpha"] == 0.1 and d["delta"] == 0.1 and d["n_calibration"] == 1000
    assert d["rule"] == "trust iff confidence >= threshold" and d["n_needed"] is None
    trusted = c >= cert.threshold
    assert cert.calibration_coverage == trusted.mean()
    assert cert.calibration_precision == pytest.approx(y[trusted].mean(), abs=1e-15)
    assert cert.calibration_precision >= 0.9 and cert.p_value <= 0.1
    back = Certificate.from_dict(json.loads(json.dumps(d)))
    assert back == cert
    np.testing.assert_array_equal(decide(c, cert), trusted)
    np.testing.assert_array_equal(decide(c, d), trusted)  # a dict read from JSON works too


def test_a_certificate_written_before_the_procedures_changed_still_loads():
    """A probe.json entry of the Holm era (no n_needed or rule keys: older still) loads and
    decides; a new certificate names its procedure in ``fwer`` and its backend in ``method``."""
    old = {"method": "learn-then-test, MAPIE BinaryClassificationController", "fwer": "bonferroni_holm",
           "threshold": 0.62, "alpha": 0.1, "delta": 0.1, "n_calibration": 2041, "n_thresholds": 100,
           "calibration_coverage": 0.31, "calibration_precision": 0.93, "p_value": 0.0004, "valid": True,
           "reason": "the lowest of 7 certified thresholds"}
    cert = Certificate.from_dict(json.loads(json.dumps(old)))
    assert cert.fwer == "bonferroni_holm" and cert.rule == "trust iff confidence >= threshold"
    assert decide([0.61, 0.62, 0.9], cert).tolist() == [False, True, True]
    new = certify_threshold(*draw(np.random.default_rng(7), 1000), 0.1, 0.1, backend="binomial").to_dict()
    assert new["fwer"] == C.DEFAULT_FWER == "quantile_sequence"
    assert new["method"] == "learn-then-test, exact binomial tail p-values (acute)"
    assert Certificate.from_dict(json.loads(json.dumps(new))).to_dict() == new


def test_from_dict_refuses_other_keys_and_rules():
    d = certify_threshold(*draw(np.random.default_rng(7), 1000), 0.1, 0.1).to_dict()
    with pytest.raises(InputError, match=r"unknown keys \['extra'\]"):
        Certificate.from_dict({**d, "extra": 1})
    with pytest.raises(InputError, match=r"missing keys \['threshold'\]"):
        Certificate.from_dict({k: v for k, v in d.items() if k != "threshold"})
    with pytest.raises(InputError, match="rule"):
        Certificate.from_dict({**d, "rule": "trust iff confidence > threshold"})
    with pytest.raises(InputError, match="valid"):
        Certificate.from_dict({**d, "threshold": None})
    with pytest.raises(InputError, match="threshold must be a number in"):
        Certificate.from_dict({**d, "threshold": "0.9"})
    with pytest.raises(InputError, match="^delta must"):
        Certificate.from_dict({**d, "delta": 1.5})
    with pytest.raises(InputError, match="expected a mapping"):
        Certificate.from_dict([("threshold", 0.9)])


def test_no_valid_threshold_says_so_and_how_many_records_would_do():
    rng = np.random.default_rng(3)
    c, y = draw(rng, 200)
    cert = certify_threshold(c, y, 0.1, 0.1, fwer="bonferroni_holm")
    assert not cert.valid and cert.threshold is None and cert.calibration_coverage is None
    assert cert.reason.startswith("no threshold passed") and "calibration records" in cert.reason
    assert isinstance(cert.n_needed, int) and cert.n_needed > 200
    with pytest.raises(InputError, match="^certificate: no certified threshold"):
        decide(c, cert)
    # the projection is a usable guide: that many records from the same model certify in most draws
    cc, yy = draw(rng, (50, cert.n_needed))
    assert ltt_thresholds(cc, yy, 0.1, 0.1, fwer="bonferroni_holm").valid.mean() >= 0.5


def test_the_default_sequence_says_where_it_stopped():
    """alpha 0.02: m = 194 (P(Binomial(194, 0.02) <= 1) = 0.0985 <= delta = 0.1, and 0.1001 at 193).
    Of 400 records from the well-ranked model the 194 most confident hold 28 wrong ones, so the
    sequence stops at its first threshold, just above the 195th most confident record."""
    rng = np.random.default_rng(3)
    c, y = draw(rng, 400)
    cert = certify_threshold(c, y, 0.02, 0.1)
    top = np.argsort(-c)[:194]
    assert binom.cdf(1, 194, 0.02) <= 0.1 < binom.cdf(1, 193, 0.02)
    assert ltt.start_count(0.02, 0.1, 400) == 194 and (~y[top]).sum() == 28
    assert not cert.valid and cert.fwer == "quantile_sequence"
    assert cert.reason.startswith(f"the quantile sequence stopped at its first threshold "
                                  f"{np.nextafter(np.sort(c)[::-1][194], 1):g}: 194 calibration records "
                                  f"reach it, {(~y[top]).sum()} wrong")
    assert "just above the 194 most confident records" in cert.reason


def test_no_threshold_reaches_the_precision_even_on_calibration_records():
    rng = np.random.default_rng(4)
    c = rng.uniform(size=1000)
    y = rng.uniform(size=1000) < 0.6  # confidence unrelated to correctness
    cert = certify_threshold(c, y, 0.05, 0.1, fwer="bonferroni_holm")
    assert not cert.valid and cert.n_needed is None
    assert "more records like these will not help" in cert.reason
    for fwer in ("quantile_sequence", "split_sequence"):
        cert = certify_threshold(c, y, 0.05, 0.1, fwer=fwer)
        assert not cert.valid and cert.n_needed is None
        assert "no number of records like these would carry the sequence" in cert.reason
    top_unreached = certify_threshold(c * 0.9, y, 0.05, 0.1, fwer="fixed_sequence")
    assert top_unreached.n_needed is None and "0 calibration records reach it" in \
        top_unreached.reason and "no record reaches them" in top_unreached.reason


# ------------------------------------------------------------------------ the guarantee
D, N_CAL, N_TEST, ALPHA, DELTA = 500, 1000, 10_000, 0.1, 0.1
#: If each draw breaks the target with probability <= delta, more than this share of the D
#: draws breaks it with probability < 0.001 (binomial upper quantile): 72 / 500 = 0.144.
TOLERANCE = binom.ppf(0.999, D, DELTA) / D


def _test_precision(rng: np.random.Generator, thresholds: np.ndarray, shift: float,
                    strict: bool = False) -> np.ndarray:
    """Precision among trusted answers on a fresh test set of N_TEST per draw (NaN where none is
    trusted, e.g. no certified threshold: an abstaining gate promises nothing and breaks nothing)."""
    out = np.empty(thresholds.size)
    for start in range(0, thresholds.size, 100):  # 100 draws at a time: ~10 MB a block
        t = thresholds[start:start + 100, None]
        c, y = draw(rng, (t.shape[0], N_TEST), shift)
        trusted = (c > t) if strict else (c >= t)  # NaN thresholds trust nothing
        with np.errstate(invalid="ignore"):
            out[start:start + 100] = (trusted & y).sum(1) / trusted.sum(1)
    return out


def _violations(rng, thresholds, shift, strict=False) -> tuple[float, float]:
    """(share of draws whose test precision < 1 - alpha, share whose population precision is)."""
    test = _test_precision(rng, thresholds, shift, strict)
    pop = np.where(np.isnan(thresholds), 1.0,
                   population_precision(np.nan_to_num(thresholds), shift))
    return float(np.mean(test < 1 - ALPHA)), float(np.mean(pop < 1 - ALPHA))


@pytest.fixture(scope="module")
def calibration_draws():
    rng = np.random.default_rng(2024)
    return {shift: draw(rng, (D, N_CAL), shift) for shift in (0.0, 2.0)}


@pytest.mark.parametrize("shift", [0.0, 2.0], ids=["calibrated", "overconfident"])
@pytest.mark.parametrize("fwer", C.FWER_METHODS)
def test_certified_precision_holds_in_all_but_delta_of_draws(calibration_draws, shift, fwer):
    c, y = calibration_draws[shift]
    result = ltt_thresholds(c, y, ALPHA, DELTA, fwer=fwer)
    test_share, pop_share = _violations(np.random.default_rng(1), result.threshold, shift)
    assert test_share <= TOLERANCE and pop_share <= TOLERANCE
    assert result.valid.mean() >= 0.5  # not valid by abstaining: most draws certify something
    assert result.coverage[result.valid].mean() >= 0.1


def test_mapie_certificates_hold_on_the_overconfident_estimator(calibration_draws):
    c, y = calibration_draws[2.0]
    t = np.array([np.nan if (r := certify_threshold(c[i], y[i], ALPHA, DELTA, backend="mapie")).threshold
                  is None else r.threshold for i in range(D)])
    test_share, pop_share = _violations(np.random.default_rng(1), t, 2.0)
    assert test_share <= TOLERANCE and pop_share <= TOLERANCE
    assert np.mean(~np.isnan(t)) >= 0.5


def test_plain_rule_breaks_the_target_on_the_overconfident_estimator():
    """Trusting iff the estimate exceeds u = 1 - alpha holds for a calibrated estimator and
    fails in nearly every draw for an overconfident one (precision 0.85 < 0.9)."""
    plain = np.full(D, 1 - ALPHA)
    test_share, pop_share = _violations(np.random.default_rng(1), plain, 2.0, strict=True)
    assert test_share >= 0.95 and pop_share == 1.0
    test_share, pop_share = _violations(np.random.default_rng(1), plain, 0.0, strict=True)
    assert test_share <= TOLERANCE and pop_share == 0.0


def test_uncertified_empirical_threshold_breaks_the_target(calibration_draws):
    """Choosing the threshold with the most calibration coverage at calibration precision
    >= 1 - alpha (no test) fails far more often than delta, even when calibrated."""
    c, y = calibration_draws[0.0]
    grid = C._check_grid(None)
    trusted, wrong = ltt.grid_counts(c, y.astype(np.int64), grid)
    ok = (trusted > 0) & (wrong <= ALPHA * trusted)
    j = grid.size - 1 - np.argmax(ok[:, ::-1], axis=1)
    t = np.where(ok.any(1), grid[j], np.nan)
    test_share, pop_share = _violations(np.random.default_rng(1), t, 0.0)
    assert test_share > 3 * DELTA and pop_share > 3 * DELTA


# ----------------------------------- the guarantee where the label-free sequence has no proof
# Two curves the quantile sequence's exactness argument does not cover, and a flat one where
# every threshold is a null: the Monte-Carlo check must pass for every procedure and fail for
# testing each grid threshold at delta with no correction.
D_HARD, N_HARD = 400, 1000
TOLERANCE_HARD = binom.ppf(0.999, D_HARD, DELTA) / D_HARD  # 0.1 + about 3.1 standard errors
_MAIN_GOOD, _MAIN_MASS = _GOOD_TAIL / _MASS_TAIL[0], _MASS_TAIL / _MASS_TAIL[0]


def _main_tail(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(P(correct, X >= x), P(X >= x)) of the calibrated A = 3 model."""
    i = np.minimum(np.searchsorted(_X, x), _X.size - 1)
    return _MAIN_GOOD[i], _MAIN_MASS[i]


def _hard_model(name: str, rng: np.random.Generator, shape) -> tuple[np.ndarray, np.ndarray]:
    x = rng.standard_normal(shape)
    if name == "not monotone":  # 2% confidently wrong: c uniform in [0.97, 0.99], correct w.p. 0.3
        odd = rng.uniform(size=shape) < 0.02
        c = np.where(odd, rng.uniform(0.97, 0.99, size=shape), expit(A * x))
        return c, rng.uniform(size=shape) < np.where(odd, 0.3, expit(A * x))
    if name == "tied":  # overconfident, rounded to 0.05
        return np.round(expit(A * x + 1.0) * 20) / 20, rng.uniform(size=shape) < expit(A * x)
    return expit(A * x), rng.uniform(size=shape) < 1 - ALPHA - 0.001  # flat, just below the target


def _hard_precision(name: str, t: np.ndarray) -> np.ndarray:
    """Population precision of "trust iff c >= t" (t = NaN: nothing trusted, precision 1)."""
    t = np.asarray(t, dtype=float)
    none = np.isnan(t)
    t = np.nan_to_num(t, nan=0.5)
    with np.errstate(divide="ignore"):
        if name == "not monotone":
            good, mass = _main_tail(logit(t) / A)
            band = 0.02 * np.clip((0.99 - np.maximum(t, 0.97)) / 0.02, 0.0, 1.0)
            prec = (0.98 * good + 0.3 * band) / (0.98 * mass + band)
        elif name == "tied":  # the reported values k / 20 >= t  <=>  c >= (k - 0.5) / 20, k the first
            b = (np.searchsorted(np.arange(21) / 20, t, side="left") - 0.5) / 20
            good, mass = _main_tail(np.where(b <= 0, -np.inf, (logit(np.clip(b, 0, 1)) - 1.0) / A))
            prec = good / mass
        else:
            prec = np.full(t.shape, 1 - ALPHA - 0.001)
    return np.where(none, 1.0, prec)


def test_hard_population_precision_against_monte_carlo():
    rng = np.random.default_rng(0)
    for name in ("not monotone", "tied"):
        c, y = _hard_model(name, rng, 1_000_000)
        for t in (0.5, 0.8, 0.9, 0.96, 0.975, 0.991):
            assert _hard_precision(name, np.array([t]))[0] == pytest.approx(y[c >= t].mean(), abs=0.003)
    assert _hard_precision("not monotone", np.array([0.97, 0.9]))[0] < 0.9 < \
        _hard_precision("not monotone", np.array([0.97, 0.9]))[1]  # a dip, then back above


@pytest.fixture(scope="module")
def hard_draws():
    rng = np.random.default_rng(77)
    return {name: _hard_model(name, rng, (D_HARD, N_HARD)) for name in ("not monotone", "tied", "flat")}


@pytest.mark.parametrize("name", ["not monotone", "tied", "flat"])
@pytest.mark.parametrize("fwer", C.FWER_METHODS)
def test_certified_precision_holds_on_hard_curves(hard_draws, name, fwer):
    c, y = hard_draws[name]
    t = ltt_thresholds(c, y, ALPHA, DELTA, fwer=fwer).threshold
    assert np.mean(_hard_precision(name, t) < 1 - ALPHA) <= TOLERANCE_HARD


def test_the_hard_check_fails_a_procedure_with_no_correction(hard_draws):
    """Every grid threshold tested at delta, the lowest that passes: on the flat curve about a
    third of the draws certify a threshold whose precision is below the target."""
    c, y = hard_draws["flat"]
    grid = C._check_grid(None)
    trusted, wrong = ltt.grid_counts(c, y.astype(np.int64), grid)
    passed = C.binomial_p_values(trusted, wrong, ALPHA) <= DELTA
    t = np.where(passed.any(1), grid[grid.size - 1 - np.argmax(passed[:, ::-1], axis=1)], np.nan)
    assert np.mean(_hard_precision("flat", t) < 1 - ALPHA) > 2 * TOLERANCE_HARD


# ------------------------------------------------------------------ cross_certified
def _folds(n: int, k: int = 5) -> list[np.ndarray]:
    return [np.arange(i, n, k) for i in range(k)]


def test_cross_certified_trusts_exactly_the_correct_answers_when_confidence_separates_them():
    # 200 correct answers in [0.6, 0.99], 100 wrong in [0.01, 0.4]: every fold's certificate
    # (fitted on 240 records) lets through every correct one and, as 10% error is allowed, only
    # the most confident wrong ones, fewer than 10% of those trusted
    y = np.r_[np.ones(200, int), np.zeros(100, int)]
    conf = np.r_[np.linspace(0.6, 0.99, 200), np.linspace(0.01, 0.4, 100)]
    out = C.cross_certified(conf, y, _folds(300), 0.1, 0.1)
    assert out.certified == out.folds == 5
    assert out.trusted[y == 1].all()
    wrong = out.trusted & (y == 0)
    assert 0 < wrong.sum() < 0.1 * out.trusted.sum()
    assert conf[wrong].min() > np.median(conf[y == 0])


def test_cross_certified_applies_each_fold_the_certificate_of_the_other_folds():
    rng = np.random.default_rng(3)
    x = rng.normal(size=600)
    conf = expit(2.5 * x + 1.5)
    y = (rng.random(600) < conf).astype(int)
    folds = _folds(600)
    out = C.cross_certified(conf, y, folds, 0.1, 0.1)
    for te in folds:
        rest = np.setdiff1d(np.arange(600), te)
        cert = C.certify_threshold(conf[rest], y[rest], 0.1, 0.1)
        assert cert.valid
        np.testing.assert_array_equal(out.trusted[te], conf[te] >= cert.threshold)
    # a fold's own labels never move its threshold: flipping them changes only the other folds
    flipped = y.copy()
    flipped[folds[0]] = 1 - flipped[folds[0]]
    again = C.cross_certified(conf, flipped, folds, 0.1, 0.1)
    np.testing.assert_array_equal(again.trusted[folds[0]], out.trusted[folds[0]])


def test_cross_certified_trusts_nothing_where_nothing_can_be_certified():
    y = np.ones(30, int)  # 24 calibration records cannot certify 5% error at delta 0.1 (45 needed)
    out = C.cross_certified(np.full(30, 0.99), y, _folds(30), 0.05, 0.1)
    assert (out.certified, out.folds) == (0, 5) and not out.trusted.any()
    rng = np.random.default_rng(0)  # enough records, but confidence says nothing: no fold certifies
    y = rng.integers(0, 2, 500)
    out = C.cross_certified(rng.random(500), y, _folds(500), 0.1, 0.1)
    assert out.certified == 0 and not out.trusted.any()


def test_cross_certified_refuses_folds_that_overlap_or_leave_the_records():
    y = np.r_[np.ones(50, int), np.zeros(50, int)]
    with pytest.raises(InputError, match="record 3 is in more than one fold"):
        C.cross_certified(np.full(100, 0.5), y, [np.arange(0, 10), np.arange(3, 20)], 0.1, 0.1)
    with pytest.raises(InputError, match="outside 0..99"):
        C.cross_certified(np.full(100, 0.5), y, [np.array([0, 100])], 0.1, 0.1)
