"""Tests for acute.evaluation.curves: binned reliability, the constant predictor's euro and the paired euro
difference, each against values computed by hand or by another function of acute.metrics."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from scipy.stats import binomtest

from acute import metrics
from acute.evaluation.curves import binned_reliability, constant_euro_curve, euro_difference


@pytest.fixture
def data():
    rng = np.random.default_rng(3)
    y = rng.random(400) < 0.45
    a = np.clip(0.45 + 0.25 * (2 * y - 1) + 0.2 * rng.normal(size=y.size), 0, 1)
    b = np.clip(0.45 + 0.05 * (2 * y - 1) + 0.2 * rng.normal(size=y.size), 0, 1)
    return a, b, y


def test_bins_by_hand():
    conf = np.array([0.1, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9])
    y = np.array([0, 1, 0, 1, 1, 0, 1, 1, 1, 1])
    # ranks 0..9 go to bin rank // 2; the tie at 0.1 (ranks 0, 1) stays together in bin 0
    b = binned_reliability(conf, y, n_bins=5)
    np.testing.assert_allclose(b.edges, [0.1, 0.2, 0.4, 0.6, 0.8, 0.9])
    np.testing.assert_array_equal(b.count, [2, 2, 2, 2, 2])
    np.testing.assert_allclose(b.mean_confidence, [0.1, 0.25, 0.45, 0.65, 0.85])
    np.testing.assert_allclose(b.accuracy, [0.5, 0.5, 0.5, 1.0, 1.0])
    # three bins: rank * 3 // 10 puts ranks 0-3, 4-6 and 7-9 together
    three = binned_reliability(conf, y, n_bins=3)
    np.testing.assert_array_equal(three.count, [4, 3, 3])
    np.testing.assert_allclose(three.edges, [0.1, 0.4, 0.7, 0.9])


def test_bins_are_equal_mass_and_wilson_matches_scipy():
    rng = np.random.default_rng(0)
    conf = rng.random(1000)
    y = rng.random(1000) < conf
    b = binned_reliability(conf, y)
    assert b.count.tolist() == [100] * 10
    for k in range(10):
        inside = (conf >= b.edges[k]) & ((conf < b.edges[k + 1]) if k < 9 else (conf <= b.edges[k + 1]))
        assert inside.sum() == b.count[k]
        assert b.accuracy[k] == pytest.approx(y[inside].mean())
        assert b.mean_confidence[k] == pytest.approx(conf[inside].mean())
        ci = binomtest(int(y[inside].sum()), int(inside.sum())).proportion_ci(method="wilson")
        assert (b.low[k], b.high[k]) == pytest.approx((ci.low, ci.high), abs=1e-12)
        assert b.low[k] <= b.accuracy[k] <= b.high[k]


def test_ties_stay_in_one_bin_and_tiny_inputs():
    conf = np.repeat([0.2, 0.5, 0.9], [70, 20, 10])
    y = np.arange(100) % 2
    b = binned_reliability(conf, y)
    np.testing.assert_array_equal(b.count, [70, 20, 10])
    np.testing.assert_allclose(b.mean_confidence, [0.2, 0.5, 0.9])
    one = binned_reliability([0.7], [1])
    assert one.count.tolist() == [1] and one.accuracy.tolist() == [1.0]
    # Wilson with k = 0 of n = 10: upper bound z^2 / (n + z^2)
    zero = binned_reliability(np.full(10, 0.3), np.zeros(10))
    z2 = 1.959963984540054 ** 2
    assert zero.low[0] == 0.0 and zero.high[0] == pytest.approx(z2 / (10 + z2))


def test_bins_reject_bad_input():
    with pytest.raises(ValueError, match="n_bins must be >= 1"):
        binned_reliability([0.2, 0.4], [0, 1], n_bins=0)
    with pytest.raises(ValueError, match="alpha"):
        binned_reliability([0.2, 0.4], [0, 1], alpha=1.5)
    with pytest.raises(ValueError, match="confidence: values must lie"):
        binned_reliability([0.2, 1.4], [0, 1])


def test_constant_euro_by_hand():
    y = [1, 1, 1, 0]  # accuracy 3/4, base rate 0.75
    u = np.array([0.5, 0.75, 0.8])
    # u < 0.75: trust all, ((1-u) 3/4) / ((1-u) 3/4 + u/4); u >= 0.75: reject all, (u/4) / (...)
    den = (1 - u) * 0.75 + u * 0.25
    hand = np.array([0.5 * 0.75 / den[0], 0.75 * 0.25 / den[1], 0.8 * 0.25 / den[2]])
    np.testing.assert_allclose(constant_euro_curve(y, grid=u), hand)
    np.testing.assert_allclose(hand, [0.75, 0.5, 0.2 / 0.35])
    # a training base rate of 0.9 trusts everything up to u = 0.9
    np.testing.assert_allclose(constant_euro_curve(y, base_rate=0.9, grid=[0.8]), [0.2 * 0.75 / 0.35])
    full = constant_euro_curve(y)
    assert full.shape == metrics.EURO_GRID.shape
    assert full.mean() == pytest.approx(metrics.auc_euro(np.full(4, 0.75), y))
    with pytest.raises(ValueError, match="base_rate"):
        constant_euro_curve(y, base_rate=1.5)
    with pytest.raises(ValueError, match="correct: labels"):
        constant_euro_curve([0, 2])


def test_euro_difference_matches_paired_bootstrap(data):
    a, b, y = data
    res = euro_difference(a, b, y, n_bootstrap=200, seed=4)
    assert res.risk_levels.shape == res.diff.shape == res.low.shape == res.high.shape == (999,)
    # the mean over the grid is the auc-euro (all) difference
    assert res.diff.mean() == pytest.approx(metrics.auc_euro(a, y) - metrics.auc_euro(b, y), abs=1e-12)
    for i in (49, 332, 499, 899):
        u = metrics.EURO_GRID[i]
        assert res.diff[i] == pytest.approx(metrics.euro(a, y, u) - metrics.euro(b, y, u), abs=1e-12)
        ref = metrics.paired_bootstrap(functools.partial(metrics.euro, u_ca=u), a, b, y, n=200, seed=4)
        assert (res.low[i], res.high[i]) == pytest.approx((ref.low, ref.high), abs=1e-12)
    assert np.all(res.low <= res.high)


def test_euro_difference_of_one_estimator_is_zero_and_grid(data):
    a, _, y = data
    res = euro_difference(a, a, y, grid=[0.2, 0.8], n_bootstrap=50)
    assert res.risk_levels.tolist() == [0.2, 0.8]
    assert np.all(res.diff == 0) and np.all(res.low == 0) and np.all(res.high == 0)
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        euro_difference(a, a, y, grid=[0.0, 0.5])
    with pytest.raises(ValueError, match="confidence_b and correct must have the same length"):
        euro_difference(a, a[:-1], y)
    with pytest.raises(ValueError, match="n_bootstrap must be >= 1"):
        euro_difference(a, a, y, n_bootstrap=0)


def test_binned_intervals_contain_a_proportion_of_exactly_one_or_zero():
    from acute.evaluation.curves import binned_reliability

    for y in (np.ones(50, bool), np.zeros(50, bool)):
        b = binned_reliability(np.random.default_rng(0).uniform(size=50), y)
        assert np.all(b.low <= b.accuracy) and np.all(b.accuracy <= b.high)
