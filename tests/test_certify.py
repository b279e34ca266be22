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

from acute.metrics import certify as C
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
        certify_threshold(c, y, 0.05, 0.1)
    with pytest.raises(InputError, match="at least 45 are needed"):
        certify_threshold(c[:44], y[:44], 0.05, 0.1, fwer="fixed_sequence")
    certify_threshold(c[:45], y[:45], 0.05, 0.1, fwer="fixed_sequence")  # enough to be tried


@pytest.mark.parametrize("alpha, delta, fwer, m", [
    (0.05, 0.1, "fixed_sequence", 100), (0.05, 0.1, "bonferroni_holm", 100),
    (0.1, 0.1, "fixed_sequence", 100), (0.1, 0.05, "bonferroni_holm", 20), (0.3, 0.5, "fixed_sequence", 1),
])
def test_min_calibration_records_is_the_smallest_count(alpha, delta, fwer, m):
    n = min_calibration_records(alpha, delta, fwer=fwer, n_thresholds=m)
    level = delta if fwer == "fixed_sequence" else delta / m
    assert (1 - alpha) ** n <= level * (1 + 1e-12) and (1 - alpha) ** (n - 1) > level
    assert {(0.05, 0.1, "fixed_sequence"): 45, (0.05, 0.1, "bonferroni_holm"): 135}.get(
        (alpha, delta, fwer), n) == n


@pytest.mark.parametrize("kwargs, match", [
    (dict(grid=[0.5, 0.5]), "grid: thresholds must be distinct"),
    (dict(grid=[0.5, 1.2]), r"grid: thresholds must lie in \[0, 1\]"),
    (dict(grid=[]), "grid: expected a non-empty 1-D array"),
    (dict(grid=[[0.5]]), "grid: expected a non-empty 1-D array"),
    (dict(grid=["a"]), "grid: expected a 1-D array"),
    (dict(fwer="holm"), "fwer must be one of 'bonferroni_holm', 'fixed_sequence'"),
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
        certify_threshold(c, y, 0.1, 0.1)
    assert certify_threshold(c, y, 0.1, 0.1, backend="binomial").valid  # no MAPIE needed


def test_old_mapie_is_refused_with_the_version_needed(monkeypatch):
    import mapie

    monkeypatch.setattr(mapie, "__version__", "1.3.0")
    with pytest.raises(InputError, match=r"mapie>=1.4,<2 .*found mapie 1.3.0"):
        certify_threshold(*draw(np.random.default_rng(0), 500), 0.1, 0.1)


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


@pytest.mark.parametrize("fwer", C.FWER_METHODS)
def test_mapie_and_binomial_agree_on_a_fixed_example(fwer):
    conf, correct = _power_of_two_example()
    grid = C._check_grid(None)
    _, p_mapie = C._mapie_rejected(conf, correct, 0.1, 0.1, grid, fwer)
    trusted, wrong = (a[0] for a in C._grid_counts(conf[None], correct[None], grid))
    p_exact = C.binomial_p_values(trusted, wrong, 0.1)
    np.testing.assert_allclose(p_mapie, p_exact, rtol=1e-12, atol=0)
    m = certify_threshold(conf, correct, 0.1, 0.1, fwer=fwer)
    b = certify_threshold(conf, correct, 0.1, 0.1, fwer=fwer, backend="binomial")
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
    a subset and its threshold never lower. Here the two thresholds are equal in 26 (Holm) and
    23 (fixed sequence) of 40 draws; otherwise MAPIE's is a grid step or two higher."""
    rng = np.random.default_rng(11)
    grid = C._check_grid(None)
    same = 0
    for _ in range(40):
        c, y = draw(rng, 600)
        rejected_m, p_m = C._mapie_rejected(c, y, 0.1, 0.1, grid, fwer)
        trusted, wrong = (a[0] for a in C._grid_counts(c[None], y[None], grid))
        p_b = C.binomial_p_values(trusted, wrong, 0.1)
        assert np.all(np.nan_to_num(p_m, nan=1.0) >= p_b * (1 - 1e-12))
        rejected_b = C._reject(p_b[None], 0.1, fwer)[0]
        assert not np.any(rejected_m & ~rejected_b)
        tm = certify_threshold(c, y, 0.1, 0.1, fwer=fwer).threshold
        tb = ltt_thresholds(c, y, 0.1, 0.1, fwer=fwer).threshold[0]
        if tm is not None:  # MAPIE certified: so did the exact test, at the same or a lower one
            assert tb <= tm
        same += (tm is None and np.isnan(tb)) or tm == tb
    assert same >= 20


def test_mapie_holm_alone_certifies_nothing_when_a_threshold_is_unreached():
    """Why the Holm adapter exists: MAPIE 1.6 gives an unreached threshold a NaN p-value and its
    Holm step takes NaN as the smallest and stops."""
    from mapie.risk_control import BinaryClassificationController

    rng = np.random.default_rng(0)
    c = rng.uniform(size=2000) * 0.9  # nothing reaches the grid's thresholds above 0.9
    y = rng.uniform(size=2000) < c + 0.1
    plain = BinaryClassificationController(C._confidence_as_proba, "precision", 0.9,
                                           confidence_level=0.9, list_predict_params=DEFAULT_GRID,
                                           fwer_method="bonferroni_holm")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain.calibrate(c, y)
    assert plain.best_predict_param is None and np.isnan(plain.p_values).any()
    cert = certify_threshold(c, y, 0.1, 0.1)
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
    plain = BinaryClassificationController(C._confidence_as_proba, "precision", 0.9,
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
    trusted, wrong = C._grid_counts(conf, y, np.array([1.0, 0.7, 0.5, 0.0]))
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
    cert = certify_threshold(c, y, 0.1, 0.1)
    assert not cert.valid and cert.threshold is None and cert.calibration_coverage is None
    assert cert.reason.startswith("no threshold passed") and "calibration records" in cert.reason
    assert isinstance(cert.n_needed, int) and cert.n_needed > 200
    with pytest.raises(InputError, match="^certificate: no certified threshold"):
        decide(c, cert)
    # the projection is a usable guide: that many records from the same model certify in most draws
    cc, yy = draw(rng, (50, cert.n_needed))
    assert ltt_thresholds(cc, yy, 0.1, 0.1).valid.mean() >= 0.5


def test_no_threshold_reaches_the_precision_even_on_calibration_records():
    rng = np.random.default_rng(4)
    c = rng.uniform(size=1000)
    y = rng.uniform(size=1000) < 0.6  # confidence unrelated to correctness
    cert = certify_threshold(c, y, 0.05, 0.1)
    assert not cert.valid and cert.n_needed is None
    assert "more records like these will not help" in cert.reason
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
    t = np.array([np.nan if (r := certify_threshold(c[i], y[i], ALPHA, DELTA)).threshold is None
                  else r.threshold for i in range(D)])
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
    trusted, wrong = C._grid_counts(c, y.astype(np.int64), grid)
    ok = (trusted > 0) & (wrong <= ALPHA * trusted)
    j = grid.size - 1 - np.argmax(ok[:, ::-1], axis=1)
    t = np.where(ok.any(1), grid[j], np.nan)
    test_share, pop_share = _violations(np.random.default_rng(1), t, 0.0)
    assert test_share > 3 * DELTA and pop_share > 3 * DELTA
