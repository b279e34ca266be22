from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import minimize
from sklearn.base import clone
from sklearn.isotonic import IsotonicRegression

from acute.estimators.baselines import BASELINES
from acute.estimators.calibration import make_calibrator


def _sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def _miscalibrated(n, seed):
    """Overconfident raw confidence: true P(correct) = p**3, far below p."""
    rng = np.random.default_rng(seed)
    p = rng.uniform(0.0, 1.0, n)
    y = (rng.uniform(size=n) < p**3).astype(int)
    return p, y


# ---------------------------------------------------------------- interface
@pytest.mark.parametrize("name", BASELINES)
def test_interface_shape_and_params(name):
    p, y = _miscalibrated(400, 0)
    est = make_calibrator(name)
    assert est.get_params() == clone(est).get_params()
    out = est.fit(p, y).predict_proba(np.array([0.0, 0.3, 1.0]))
    assert out.shape == (3, 2)
    np.testing.assert_allclose(out.sum(axis=1), 1.0)
    assert np.all((out >= 0) & (out <= 1))
    assert est.predict_proba(np.zeros(0)).shape == (0, 2)


def test_raw_is_identity():
    p = np.array([0.0, 0.25, 0.9, 1.0])
    est = make_calibrator("raw").fit(p, [0, 1, 1, 0])
    np.testing.assert_array_equal(est.predict_proba(p)[:, 1], p)


# ---------------------------------------------------------------- hre
def test_hre_hand_example():
    conf = np.array([0.6, 0.1, 0.4, 0.2, 0.5, 0.3])  # unsorted on purpose
    y = np.array([1, 0, 0, 0, 1, 1])
    # sorted: 0.1:0 0.2:0 | 0.3:1 0.4:0 | 0.5:1 0.6:1 -> thresholds 0.25, 0.45; accuracies 0, .5, 1
    est = make_calibrator("hre", n_bins=3).fit(conf, y)
    np.testing.assert_allclose(est.edges_, [0.25, 0.45])
    np.testing.assert_allclose(est.bin_accuracy_, [0.0, 0.5, 1.0])
    np.testing.assert_array_equal(est.bin_count_, [2, 2, 2])
    got = est.predict_proba([0.0, 0.1, 0.26, 0.44, 0.45, 0.99, 1.0])[:, 1]
    np.testing.assert_allclose(got, [0.0, 0.0, 0.5, 0.5, 1.0, 1.0, 1.0])


def test_hre_ties_share_a_bin_and_no_empty_bins():
    conf = np.array([0.2, 0.2, 0.2, 0.5, 0.7, 0.9])
    y = np.array([1, 0, 0, 1, 0, 1])
    # the rank-2 boundary falls inside the run of 0.2s and moves to its end (rank 3):
    # bins {0.2, 0.2, 0.2} | {0.5} | {0.7, 0.9}
    est = make_calibrator("hre", n_bins=3).fit(conf, y)
    np.testing.assert_allclose(est.edges_, [0.35, 0.6])
    np.testing.assert_array_equal(est.bin_count_, [3, 1, 2])
    np.testing.assert_allclose(est.predict_proba([0.2, 0.5, 0.8])[:, 1], [1 / 3, 1.0, 0.5])
    # all-equal confidence: a single bin predicting the overall accuracy
    est = make_calibrator("hre", n_bins=5).fit(np.full(10, 0.4), [1] * 3 + [0] * 7)
    assert est.edges_.size == 0
    np.testing.assert_allclose(est.predict_proba([0.0, 1.0])[:, 1], [0.3, 0.3])


def test_hre_bins_rules():
    p, y = _miscalibrated(100, 1)
    assert make_calibrator("hre", n_bins="sqrt").fit(p, y).bin_count_.size == 10
    assert make_calibrator("hre", n_bins=1000).fit(p[:7], y[:7]).bin_count_.size == 7
    counts = make_calibrator("hre").fit(p, y).bin_count_
    assert counts.size == 15 and counts.min() >= 6 and counts.max() <= 7
    with pytest.raises(ValueError, match="n_bins"):
        make_calibrator("hre", n_bins=0).fit(p, y)
    with pytest.raises(ValueError, match="n_bins"):
        make_calibrator("hre", n_bins="sturges").fit(p, y)


# ---------------------------------------------------------------- nwkr
def _nwkr_loop(x, conf, y, s):
    phi = lambda u: math.exp(-0.5 * u * u)  # noqa: E731 - normalising constant cancels
    out = []
    for xi in x:
        num = den = 0.0
        for ci, yi in zip(conf, y):
            w = phi((xi - ci) / s) + phi((xi + ci) / s) + phi((xi - (2.0 - ci)) / s)
            num += w * yi
            den += w
        out.append(num / den)
    return np.array(out)


def test_nwkr_matches_direct_loop_with_reflection():
    rng = np.random.default_rng(3)
    conf = rng.uniform(size=60)
    y = (rng.uniform(size=60) < conf).astype(int)
    x = np.concatenate([[0.0, 0.01, 0.5, 0.99, 1.0], rng.uniform(size=20)])
    for s in (0.03, 0.1, 0.4):
        est = make_calibrator("nwkr", bandwidth=s).fit(conf, y)
        np.testing.assert_allclose(est.predict_proba(x)[:, 1], _nwkr_loop(x, conf, y, s), rtol=1e-10)


def test_nwkr_default_bandwidth_is_smece_sigma():
    from acute.metrics import smece_bandwidth

    p, y = _miscalibrated(300, 4)
    est = make_calibrator("nwkr").fit(p, y)
    assert est.bandwidth_ == pytest.approx(float(smece_bandwidth(p, y)))
    np.testing.assert_allclose(est.predict_proba(p[:15])[:, 1],
                               _nwkr_loop(p[:15], p, y, est.bandwidth_), rtol=1e-10)


def test_nwkr_tiny_bandwidth_is_finite():
    est = make_calibrator("nwkr", bandwidth=1e-4).fit([0.1, 0.2], [0, 1])
    got = est.predict_proba([0.9, 0.15001])[:, 1]
    assert np.all(np.isfinite(got))
    assert got[0] == pytest.approx(1.0)  # far away: nearest training point (0.2 -> 1) dominates


# ---------------------------------------------------------------- platt
def test_platt_matches_direct_logloss_minimisation():
    rng = np.random.default_rng(5)
    p = rng.uniform(0.02, 0.98, 500)
    y = (rng.uniform(size=500) < _sigmoid(0.6 * np.log(p / (1 - p)) - 0.4)).astype(float)
    z = np.log(p / (1 - p))

    def loss(theta):
        q = np.clip(_sigmoid(theta[0] * z + theta[1]), 1e-15, 1 - 1e-15)
        return -np.mean(y * np.log(q) + (1 - y) * np.log(1 - q))

    ref = minimize(loss, x0=[1.0, 0.0], method="Nelder-Mead",
                   options={"xatol": 1e-9, "fatol": 1e-12, "maxiter": 10_000}).x
    est = make_calibrator("platt").fit(p, y)
    np.testing.assert_allclose([est.coef_, est.intercept_], ref, atol=1e-4)
    np.testing.assert_allclose(est.predict_proba(p)[:, 1], _sigmoid(ref[0] * z + ref[1]), atol=1e-5)


# ---------------------------------------------------------------- isotonic
def _pav(y):
    """Pool-adjacent-violators on y already sorted by x (unit weights)."""
    blocks = []  # [mean, count]
    for v in y:
        blocks.append([float(v), 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            m2, c2 = blocks.pop()
            m1, c1 = blocks.pop()
            blocks.append([(m1 * c1 + m2 * c2) / (c1 + c2), c1 + c2])
    return np.concatenate([[m] * c for m, c in blocks])


def test_isotonic_monotone_and_equal_to_pav_and_sklearn():
    rng = np.random.default_rng(6)
    p = rng.uniform(size=200)  # continuous: no ties
    y = (rng.uniform(size=200) < p**2).astype(int)
    est = make_calibrator("isotonic").fit(p, y)
    order = np.argsort(p)
    fitted = est.predict_proba(p[order])[:, 1]
    np.testing.assert_allclose(fitted, _pav(y[order]), atol=1e-12)
    ref = IsotonicRegression(out_of_bounds="clip", y_min=0, y_max=1).fit(p, y).predict(p)
    np.testing.assert_allclose(est.predict_proba(p)[:, 1], ref)
    grid = np.linspace(0, 1, 501)
    g = est.predict_proba(grid)[:, 1]
    assert np.all(np.diff(g) >= -1e-12)
    assert g[0] == fitted[0] and g[-1] == fitted[-1]  # clipped outside the training range


# ---------------------------------------------------------------- beta
def test_beta_recovers_known_parameters():
    rng = np.random.default_rng(7)
    a, b, c = 2.0, 0.7, 0.4
    p = rng.uniform(0.01, 0.99, 40_000)
    q = _sigmoid(c + a * np.log(p) - b * np.log(1 - p))
    y = (rng.uniform(size=p.size) < q).astype(int)
    est = make_calibrator("beta").fit(p, y)
    assert est.a_ == pytest.approx(a, abs=0.12)
    assert est.b_ == pytest.approx(b, abs=0.12)
    assert est.c_ == pytest.approx(c, abs=0.12)
    grid = np.linspace(0.05, 0.95, 19)
    np.testing.assert_allclose(est.predict_proba(grid)[:, 1],
                               _sigmoid(c + a * np.log(grid) - b * np.log(1 - grid)), atol=0.03)


def test_beta_negative_coefficient_is_refitted_without_it():
    rng = np.random.default_rng(8)
    p = rng.uniform(0.01, 0.99, 20_000)
    # true a = -1.5 < 0, b = 1: refit on -ln(1-p) alone
    y = (rng.uniform(size=p.size) < _sigmoid(0.2 - 1.5 * np.log(p) - 1.0 * np.log(1 - p))).astype(float)
    est = make_calibrator("beta").fit(p, y)
    assert est.a_ == 0.0 and est.b_ > 0
    x = -np.log(1 - p)

    def loss(theta):
        q = np.clip(_sigmoid(theta[0] * x + theta[1]), 1e-15, 1 - 1e-15)
        return -np.mean(y * np.log(q) + (1 - y) * np.log(1 - q))

    ref = minimize(loss, x0=[1.0, 0.0], method="Nelder-Mead",
                   options={"xatol": 1e-9, "fatol": 1e-13, "maxiter": 10_000}).x
    np.testing.assert_allclose([est.b_, est.c_], ref, atol=1e-3)


# ---------------------------------------------------------------- improves calibration
@pytest.mark.parametrize("name", [n for n in BASELINES if n != "raw"])
def test_each_baseline_improves_ece_over_raw(name):
    from acute.metrics import ece

    p_tr, y_tr = _miscalibrated(2000, 10)
    p_te, y_te = _miscalibrated(2000, 11)
    raw_ece = ece(p_te, y_te)
    cal = make_calibrator(name).fit(p_tr, y_tr).predict_proba(p_te)[:, 1]
    assert raw_ece > 0.15
    assert ece(cal, y_te) < 0.5 * raw_ece


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize("name", BASELINES)
def test_bad_input_raises(name):
    est = make_calibrator(name)
    with pytest.raises(ValueError, match="not fitted"):
        est.predict_proba([0.5])
    with pytest.raises(ValueError, match="non-finite"):
        est.fit([0.2, np.nan, 0.4], [0, 1, 1])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        est.fit([0.2, 1.5, 0.4], [0, 1, 1])
    with pytest.raises(ValueError, match="entries"):
        est.fit([0.2, 0.3, 0.4], [0, 1])
    with pytest.raises(ValueError, match="0/1"):
        est.fit([0.2, 0.3, 0.4], [0, 2, 1])
    with pytest.raises(ValueError, match="0 records"):
        est.fit([], [])
    est.fit([0.2, 0.3, 0.4, 0.8], [0, 1, 0, 1])
    with pytest.raises(ValueError, match="confidence"):
        est.predict_proba([-0.1])


@pytest.mark.parametrize("name", ["platt", "beta"])
def test_single_class_raises_where_it_matters(name):
    with pytest.raises(ValueError, match="single class"):
        make_calibrator(name).fit([0.2, 0.3, 0.4], [1, 1, 1])


@pytest.mark.parametrize("name", ["raw", "hre", "isotonic"])
def test_single_class_is_fine_for_nonparametric(name):
    got = make_calibrator(name).fit([0.2, 0.3, 0.4], [1, 1, 1]).predict_proba([0.3])[:, 1]
    assert got[0] == (0.3 if name == "raw" else 1.0)


def test_unknown_baseline():
    from acute.estimators.baselines import ConfidenceEstimator
    from acute.estimators.inputs import Inputs

    with pytest.raises(ValueError, match="unknown calibrator"):
        make_calibrator("temperature")
    with pytest.raises(ValueError, match="unknown baseline"):
        ConfidenceEstimator("temperature").fit(Inputs.of(confidence=[0.2, 0.8]), [0, 1])
