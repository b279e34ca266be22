"""Tests for acute.metrics against hand values and independent reference computations."""

from __future__ import annotations

import functools
import math
import warnings
from pathlib import Path

import numpy as np
import pytest

from acute import metrics as M
from acute.metrics.binned import NLL_EPS

RNG_SEED = 12345
trapezoid = getattr(np, "trapezoid", None) or np.trapz  # numpy < 2 has only trapz


def _random_case(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    conf = rng.beta(rng.uniform(0.3, 5), rng.uniform(0.3, 5), n)
    correct = rng.uniform(size=n) < conf ** rng.uniform(0.3, 3)
    return conf, correct


# ------------------------------------------------------------------------------------------
# input validation
# ------------------------------------------------------------------------------------------

ALL_METRICS = {
    "ece": M.ece,
    "smece": M.smece,
    "smece_bandwidth": M.smece_bandwidth,
    "smooth_reliability": M.smooth_reliability,
    "kde_ece": M.kde_ece,
    "kde_ece_bandwidth": M.kde_ece_bandwidth,
    "ks_cal": M.ks_cal,
    "brier": M.brier,
    "nll": M.nll,
    "auroc": M.auroc,
    "euro": functools.partial(M.euro, u_ca=0.5),
    "euro_curve": M.euro_curve,
    "auc_euro": M.auc_euro,
    "auc_euro_exact": functools.partial(M.auc_euro, exact=True),
}

BAD_INPUTS = [
    ([], [], "confidence: is empty"),
    ([0.5, 0.2], [1], "same length"),
    ([0.5, np.nan], [1, 0], "confidence: contains NaN"),
    ([0.5, 1.2], [1, 0], r"confidence: values must lie in \[0, 1\]"),
    ([-0.1, 0.5], [1, 0], r"confidence: values must lie in \[0, 1\]"),
    ([0.5, np.inf], [1, 0], r"confidence: values must lie in \[0, 1\]"),
    ([0.5, 0.2], [1, 2], "correct: labels must be 0/1"),
    ([0.5, 0.2], [1, -1], "correct: labels must be 0/1"),
    ([0.5, 0.2], [1.0, 0.5], "correct: labels must be 0/1"),
    ([0.5, 0.2], [1.0, np.nan], "correct: contains NaN"),
    ([[0.5, 0.2]], [1, 0], "confidence: expected a 1-D array"),
    (["a", "b"], [1, 0], "confidence: expected numbers"),
    ([0.5, 0.2], ["yes", "no"], "correct: expected booleans or 0/1"),
    ([0.5], [], "correct: is empty"),
]


@pytest.mark.parametrize("name", sorted(ALL_METRICS))
@pytest.mark.parametrize("conf,correct,message", BAD_INPUTS)
def test_bad_input_raises_value_error_naming_argument(name, conf, correct, message):
    with pytest.raises(ValueError, match=message):
        ALL_METRICS[name](conf, correct)


@pytest.mark.parametrize("name", sorted(ALL_METRICS))
def test_accepts_bool_int_and_float_labels_identically(name):
    conf = np.array([0.1, 0.4, 0.35, 0.8, 0.65, 0.9])
    labels = np.array([False, True, False, True, False, True])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        a = ALL_METRICS[name](conf, labels)
        b = ALL_METRICS[name](conf, labels.astype(int))
        c = ALL_METRICS[name](list(conf), list(labels.astype(float)))
    if isinstance(a, M.SmoothReliability):
        a, b, c = a.curve, b.curve, c.curve
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, c)


@pytest.mark.parametrize("name", sorted(ALL_METRICS))
@pytest.mark.parametrize("label", [0, 1])
def test_single_class_input_is_defined(name, label):
    conf = np.array([0.2, 0.7, 0.7, 0.95])
    correct = np.full(4, label)
    if name == "auroc":
        with pytest.warns(RuntimeWarning, match="undefined"):
            assert math.isnan(M.auroc(conf, correct))
        return
    out = ALL_METRICS[name](conf, correct)
    values = out.curve if isinstance(out, M.SmoothReliability) else np.atleast_1d(out)
    assert np.all(np.isfinite(values))


def test_single_class_values_match_their_definition():
    conf = np.array([0.2, 0.7, 0.7, 0.95])
    wrong, right = np.zeros(4, bool), np.ones(4, bool)
    assert M.ece(conf, wrong) == pytest.approx(conf.mean())
    assert M.ece(conf, right) == pytest.approx(1 - conf.mean())
    assert M.ks_cal(conf, wrong) == pytest.approx(conf.mean())
    # euro: all correct -> fraction trusted; all wrong -> fraction rejected
    assert M.euro(conf, right, 0.5) == pytest.approx(3 / 4)
    assert M.euro(conf, wrong, 0.5) == pytest.approx(1 / 4)
    assert M.euro(conf, wrong, 0.8) == pytest.approx(3 / 4)


def test_metric_parameters_are_validated():
    conf, correct = [0.2, 0.8], [0, 1]
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="n_bins"):
            M.ece(conf, correct, n_bins=bad)
    for bad in (0.0, 1.0, -0.2, 1.5, float("nan")):
        with pytest.raises(ValueError, match="u_ca"):
            M.euro(conf, correct, bad)
    with pytest.raises(ValueError, match="u_ca"):
        M.euro(conf, correct, [0.2, 0.3])
    with pytest.raises(ValueError, match="grid"):
        M.euro_curve(conf, correct, grid=[0.2, 1.0])
    with pytest.raises(ValueError, match="grid"):
        M.euro_curve(conf, correct, grid=[])
    with pytest.raises(ValueError, match="band"):
        M.auc_euro(conf, correct, band="middle")
    with pytest.raises(ValueError, match="eps"):
        M.nll(conf, correct, eps=0.0)
    with pytest.raises(ValueError, match="sigma"):
        M.smooth_reliability(conf, correct, sigma=0.0)
    with pytest.raises(ValueError, match="grid"):
        M.smooth_reliability(conf, correct, grid=1)
    with pytest.raises(ValueError, match="grid"):
        M.smooth_reliability(conf, correct, grid=[0.5, 1.5])


# ------------------------------------------------------------------------------------------
# the ACUTE paper's worked example (50% accuracy)
# ------------------------------------------------------------------------------------------


@pytest.fixture
def half_correct():
    return np.arange(1000) % 2 == 0


def test_worked_example_oracle(half_correct):
    oracle = half_correct.astype(float)
    assert M.ece(oracle, half_correct) == 0.0
    assert M.auc_euro(oracle, half_correct) == pytest.approx(1.0)
    assert M.auc_euro(oracle, half_correct, exact=True) == pytest.approx(1.0)
    for band in ("low", "med", "high"):
        assert M.auc_euro(oracle, half_correct, band=band) == pytest.approx(1.0)
    anti = 1.0 - oracle
    assert M.auc_euro(anti, half_correct) == pytest.approx(0.0)
    assert M.auc_euro(anti, half_correct, exact=True) == pytest.approx(0.0)


def test_worked_example_constant_half(half_correct):
    const = np.full(half_correct.size, 0.5)
    assert M.ece(const, half_correct) == 0.0
    # euro(u) = max(u, 1 - u): mean over the grid = 749 / 999, integral = 3/4
    assert M.auc_euro(const, half_correct) == pytest.approx(749 / 999)
    assert round(M.auc_euro(const, half_correct), 4) == 0.7497
    assert M.auc_euro(const, half_correct, exact=True) == pytest.approx(0.75, abs=1e-12)
    # bands: low/high integrate 1-u over [0,1/3) and u over [2/3,1]: 5/6; med: 7/12
    assert M.auc_euro(const, half_correct, "low", exact=True) == pytest.approx(5 / 6)
    assert M.auc_euro(const, half_correct, "med", exact=True) == pytest.approx(7 / 12)
    assert M.auc_euro(const, half_correct, "high", exact=True) == pytest.approx(5 / 6)
    low_grid = np.arange(1, 334) / 1000
    assert M.auc_euro(const, half_correct, "low") == pytest.approx(np.mean(1 - low_grid))


def test_worked_example_probabilistic_oracle(half_correct):
    prob = np.where(half_correct, 0.75, 0.25)
    assert M.euro(prob, half_correct, 0.5) == pytest.approx(1.0)
    assert M.euro(prob, half_correct, 0.9) == pytest.approx(0.9)
    assert M.ece(prob, half_correct) == pytest.approx(0.25)


# ------------------------------------------------------------------------------------------
# ECE, KS, Brier, NLL, AUROC
# ------------------------------------------------------------------------------------------


def test_ece_hand_value():
    conf = [0.05, 0.15, 0.15, 0.95, 1.0]
    correct = [0, 1, 0, 1, 1]
    # bin 0: |0 - .05| * 1/5; bin 1: |.5 - .15| * 2/5; bin 9 (with 1.0): |1 - .975| * 2/5
    assert M.ece(conf, correct) == pytest.approx(0.01 + 0.14 + 0.01)
    # with 2 bins: [0, .5): acc 1/3, conf 0.35/3; [.5, 1]: acc 1, conf .975
    assert M.ece(conf, correct, n_bins=2) == pytest.approx(
        3 / 5 * abs(1 / 3 - 0.35 / 3) + 2 / 5 * 0.025
    )


def test_ece_one_falls_in_last_bin():
    # 1.0 shares the bin [0.9, 1.0] with 0.95: |0.5 - 0.975| = 0.475 (not 0.525)
    assert M.ece([1.0, 0.95], [0, 1]) == pytest.approx(0.475)


def _ece_loop(conf, correct, n_bins):
    total = 0.0
    for b in range(n_bins):
        lo, hi = b / n_bins, (b + 1) / n_bins
        members = [i for i, c in enumerate(conf) if lo <= c < hi or (b == n_bins - 1 and c == 1.0)]
        if members:
            acc = np.mean([correct[i] for i in members])
            avg = np.mean([conf[i] for i in members])
            total += len(members) / len(conf) * abs(acc - avg)
    return total


@pytest.mark.parametrize("n_bins", [1, 10, 15])
def test_ece_matches_loop_reference(n_bins):
    rng = np.random.default_rng(RNG_SEED)
    # confidences away from bin edges so float rounding of the edge cannot matter
    conf = (rng.integers(0, 1000, 300) + 0.37) / 1000.37
    correct = rng.uniform(size=300) < conf
    assert M.ece(conf, correct, n_bins) == pytest.approx(_ece_loop(conf, correct, n_bins))


def test_ks_cal_hand_values_and_stable_tie_order():
    # sorted: .2 (0), .5 (1), .8 (1): partial sums .2, -.3, -.5
    assert M.ks_cal([0.2, 0.8, 0.5], [0, 1, 1]) == pytest.approx(0.5 / 3)
    # ties keep input order
    assert M.ks_cal([0.5, 0.5, 0.5], [1, 1, 0]) == pytest.approx(1.0 / 3)
    assert M.ks_cal([0.5, 0.5, 0.5], [0, 1, 1]) == pytest.approx(0.5 / 3)


def test_ks_cal_matches_quadratic_reference():
    rng = np.random.default_rng(RNG_SEED)
    conf, correct = _random_case(rng, 200)
    conf = np.round(conf, 1)  # heavy ties
    order = sorted(range(200), key=lambda i: (conf[i], i))
    partial, best = 0.0, 0.0
    for i in order:
        partial += conf[i] - correct[i]
        best = max(best, abs(partial))
    assert M.ks_cal(conf, correct) == pytest.approx(best / 200)


def test_brier_and_nll_match_sklearn():
    sk = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(RNG_SEED)
    conf, correct = _random_case(rng, 500)
    conf = np.clip(conf, 1e-6, 1 - 1e-6)
    assert M.brier(conf, correct) == pytest.approx(sk.brier_score_loss(correct, conf))
    assert M.nll(conf, correct) == pytest.approx(sk.log_loss(correct, conf, labels=[0, 1]))


def test_nll_clipping_is_documented_eps():
    assert M.nll([0.0], [1]) == pytest.approx(-math.log(NLL_EPS))
    assert M.nll([1.0], [0]) == pytest.approx(-math.log(NLL_EPS), rel=1e-6)
    assert M.nll([1.0, 0.0], [1, 0]) == pytest.approx(-math.log1p(-NLL_EPS), abs=1e-15)
    assert M.nll([0.0], [1], eps=1e-3) == pytest.approx(-math.log(1e-3))


def test_auroc_hand_value_with_ties():
    # correct: .9, .5; wrong: .5, .1 -> pairs (.9>.5)=1, (.9>.1)=1, (.5=.5)=.5, (.5>.1)=1
    assert M.auroc([0.9, 0.5, 0.5, 0.1], [1, 1, 0, 0]) == pytest.approx(3.5 / 4)


@pytest.mark.parametrize("decimals", [None, 1])
def test_auroc_matches_sklearn(decimals):
    sk = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(RNG_SEED)
    conf, correct = _random_case(rng, 700)
    if decimals is not None:
        conf = np.round(conf, decimals)
    assert M.auroc(conf, correct) == pytest.approx(sk.roc_auc_score(correct, conf))


# ------------------------------------------------------------------------------------------
# smooth ECE against relplot
# ------------------------------------------------------------------------------------------


def _smece_cases():
    rng = np.random.default_rng(RNG_SEED)
    cases = []
    for n in (1, 2, 7, 60, 500, 3000):
        conf, correct = _random_case(rng, n)
        cases.append((f"random-{n}", conf, correct))
    cases += [
        ("n1-correct", np.array([0.63]), np.array([True])),
        ("n1-wrong-at-1", np.array([1.0]), np.array([False])),
        ("n1-correct-at-0", np.array([0.0]), np.array([True])),
        ("all-equal-calibrated", np.full(200, 0.5), np.arange(200) % 2 == 0),
        ("all-equal-miscalibrated", np.full(200, 0.9), np.arange(200) % 4 == 0),
        ("conf-all-0/1", rng.integers(0, 2, 300).astype(float), rng.uniform(size=300) < 0.6),
        ("oracle", (np.arange(300) % 3 == 0).astype(float), np.arange(300) % 3 == 0),
        ("anti-oracle", (np.arange(300) % 3 != 0).astype(float), np.arange(300) % 3 == 0),
        ("all-correct", rng.uniform(size=400), np.ones(400, bool)),
        ("all-wrong", rng.uniform(size=400), np.zeros(400, bool)),
        ("heavy-ties", np.round(rng.uniform(size=2000), 1), rng.uniform(size=2000) < 0.7),
        ("u-shaped", rng.beta(0.1, 0.1, 1000), rng.uniform(size=1000) < 0.5),
    ]
    big = rng.uniform(size=20000)
    cases.append(("near-calibrated-large", big, rng.uniform(size=big.size) < big))
    return [pytest.param(conf, correct, id=name) for name, conf, correct in cases]


@pytest.mark.parametrize("conf,correct", _smece_cases())
def test_smece_matches_relplot(conf, correct):
    relplot = pytest.importorskip("relplot")
    expected, width = relplot.smECE(conf, correct.astype(float), return_width=True)
    assert M.smece(conf, correct) == pytest.approx(expected, abs=1e-9)
    assert M.smece_bandwidth(conf, correct) == pytest.approx(width, abs=1e-12)
    # the fixed point: smECE at sigma* is at most sigma* (sigma* = 1 means no fixed point below)
    assert M.smece(conf, correct) <= M.smece_bandwidth(conf, correct) + 1e-12


@pytest.mark.parametrize("sigma", [None, 0.05, 0.003])
def test_smooth_reliability_matches_relplot_smoother(sigma):
    relplot = pytest.importorskip("relplot")
    from relplot.estimators import CenteredRegressor, KernelSmoother
    from relplot.kernels import ReflectedGaussianKernel

    rng = np.random.default_rng(RNG_SEED)
    conf, correct = _random_case(rng, 800)
    rel = M.smooth_reliability(conf, correct, sigma=sigma, grid=150)
    s = relplot.smECE(conf, correct.astype(float), return_width=True)[1] if sigma is None else sigma
    assert rel.sigma == s
    kernel = ReflectedGaussianKernel(s)
    reg = CenteredRegressor(KernelSmoother(kernel)).fit(conf.reshape(-1, 1), correct.astype(float))
    np.testing.assert_allclose(rel.grid, np.linspace(0, 1, 150))
    np.testing.assert_allclose(rel.curve, reg.predict(rel.grid.reshape(-1, 1)), atol=1e-9)
    np.testing.assert_allclose(rel.density, kernel.kde(conf, rel.grid), rtol=1e-9, atol=1e-9)
    assert rel.smece == pytest.approx(relplot.smECE_sigma(conf, correct.astype(float), s), abs=1e-9)
    # the density integrates to about one over [0, 1]
    fine = M.smooth_reliability(conf, correct, sigma=s, grid=4001)
    assert trapezoid(fine.density, fine.grid) == pytest.approx(1.0, abs=0.01)


def test_smooth_reliability_recovers_a_known_calibration_curve():
    rng = np.random.default_rng(RNG_SEED)
    conf = rng.uniform(0.05, 0.95, 40000)
    correct = rng.uniform(size=conf.size) < conf**2
    rel = M.smooth_reliability(conf, correct, sigma=0.03, grid=np.array([0.3, 0.5, 0.7]))
    np.testing.assert_allclose(rel.curve, [0.09, 0.25, 0.49], atol=0.03)


# ------------------------------------------------------------------------------------------
# KDE-ECE
# ------------------------------------------------------------------------------------------


def _kde_ece_direct(conf, correct):
    """Direct O(n * grid) evaluation of the documented estimator (no binning, no FFT)."""
    n = conf.size
    src = conf[correct] if correct.any() else conf
    h = np.std(src) * (2 * n) ** -0.2
    low = conf < 0.5
    data = np.concatenate([conf, -conf[low], 2 - conf[~low]])
    pos = np.concatenate([correct, correct[low], correct[~low]]).astype(float)
    t = np.linspace(0, 1, 8001)
    u = (t[:, None] - data[None, :]) / (3 * h)
    k = np.where(np.abs(u) < 1, 35 / 32 * (1 - u * u) ** 3, 0.0) / (3 * h)
    p, q = k.sum(axis=1), k @ pos
    return trapezoid(np.abs(t * p - q), t) / trapezoid(p, t), h


@pytest.mark.parametrize("n", [3, 40, 400])
def test_kde_ece_matches_direct_kernel_sum(n):
    rng = np.random.default_rng(RNG_SEED + n)
    conf, correct = _random_case(rng, n)
    correct[:2], correct[-1] = True, False  # two correct records, so h > 0
    expected, h = _kde_ece_direct(conf, correct)
    assert M.kde_ece_bandwidth(conf, correct) == pytest.approx(h)
    assert M.kde_ece(conf, correct) == pytest.approx(expected, abs=2e-4)


def test_kde_ece_degenerate_cases():
    # one confidence value: the estimate is |confidence - accuracy|
    assert M.kde_ece(np.full(10, 0.7), np.arange(10) < 4) == pytest.approx(0.3, abs=1e-9)
    assert M.kde_ece([0.3], [1]) == pytest.approx(0.7, abs=1e-9)
    assert M.kde_ece([1.0], [0]) == pytest.approx(1.0, abs=1e-9)
    assert M.kde_ece([0.0], [0]) == pytest.approx(0.0, abs=1e-9)
    rng = np.random.default_rng(RNG_SEED)
    conf = rng.uniform(0.1, 0.9, 3000)
    # single class: accuracy 0 (1) everywhere -> about the mean confidence (1 - mean)
    assert M.kde_ece(conf, np.zeros(conf.size, bool)) == pytest.approx(conf.mean(), abs=0.01)
    assert M.kde_ece(conf, np.ones(conf.size, bool)) == pytest.approx(1 - conf.mean(), abs=0.01)


def test_kde_ece_is_small_when_calibrated_and_tracks_miscalibration():
    rng = np.random.default_rng(RNG_SEED)
    conf = rng.uniform(size=20000)
    calibrated = rng.uniform(size=conf.size) < conf
    assert M.kde_ece(conf, calibrated) < 0.02
    # over-confident by a constant 0.1 in the interior
    shifted = rng.uniform(size=conf.size) < np.clip(conf - 0.1, 0, 1)
    assert M.kde_ece(conf, shifted) == pytest.approx(0.1, abs=0.02)


# ------------------------------------------------------------------------------------------
# euro / auc-euro
# ------------------------------------------------------------------------------------------


def _euro_brute(conf, correct, u):
    """Explicit utilities for a grid of risk levels (broadcast over records)."""
    u = np.asarray(u, dtype=float)[:, None]
    trust = conf[None, :] > u
    gain = np.where(trust & correct, 1 - u, 0.0) + np.where(~trust & ~correct, u, 0.0)
    best = np.where(correct, 1 - u, u)
    return gain.sum(axis=1) / best.sum(axis=1)


def test_euro_hand_values_and_strict_threshold():
    conf = [0.9, 0.6, 0.3, 0.1]
    correct = [1, 0, 1, 0]
    assert M.euro(conf, correct, 0.5) == pytest.approx(0.5)
    assert M.euro(conf, correct, 0.2) == pytest.approx(1.8 / 2.0)
    # confidence equal to u_ca is not trusted
    assert M.euro([0.5], [1], 0.5) == 0.0
    assert M.euro([0.5], [0], 0.5) == 1.0


def test_euro_curve_matches_brute_force_and_euro():
    rng = np.random.default_rng(RNG_SEED)
    conf, correct = _random_case(rng, 300)
    conf = np.round(conf, 2)  # ties with grid points
    curve = M.euro_curve(conf, correct)
    np.testing.assert_allclose(curve, _euro_brute(conf, correct, M.EURO_GRID), atol=1e-12)
    for i in (0, 250, 500, 998):
        assert M.euro(conf, correct, M.EURO_GRID[i]) == pytest.approx(curve[i])
    grid = np.array([0.05, 0.5, 0.95])
    np.testing.assert_allclose(M.euro_curve(conf, correct, grid), curve[[49, 499, 949]])
    assert np.all((curve >= 0) & (curve <= 1))


@pytest.mark.parametrize("n", [1, 2, 9, 31])
def test_auc_euro_exact_matches_numerical_integration(n):
    rng = np.random.default_rng(RNG_SEED + n)
    conf, correct = _random_case(rng, n)
    if n > 2:
        correct[:2] = [True, False]
        conf[-3:] = [0.0, 1.0, 1 / 3]  # breakpoints on band edges
    mids = (np.arange(300000) + 0.5) / 300000
    values = _euro_brute(conf, correct, mids)
    intervals = {"low": (0, 1 / 3), "med": (1 / 3, 2 / 3), "high": (2 / 3, 1), "all": (0, 1)}
    for band, (lo, hi) in intervals.items():
        inside = (mids >= lo) & (mids < hi)
        assert M.auc_euro(conf, correct, band, exact=True) == pytest.approx(
            values[inside].mean(), abs=2e-5
        ), band


def test_auc_euro_exact_single_class():
    conf = np.array([0.1, 0.5, 0.9])
    # all correct: euro = fraction trusted = #(conf > u) / 3 -> integral over [0,1] = mean conf
    assert M.auc_euro(conf, np.ones(3, bool), exact=True) == pytest.approx(0.5)
    assert M.auc_euro(conf, np.zeros(3, bool), exact=True) == pytest.approx(0.5)
    # on [2/3, 1] only 0.9 is trusted, until u reaches 0.9: (0.9 - 2/3) / 3, over length 1/3
    assert M.auc_euro(conf, np.ones(3, bool), "high", exact=True) == pytest.approx(0.9 - 2 / 3)


def test_auc_euro_grid_and_exact_agree():
    rng = np.random.default_rng(RNG_SEED)
    for n in (10, 30, 100, 1000, 20000):
        for _ in range(8):
            conf, correct = _random_case(rng, n)
            for band in M.BANDS:
                grid = M.auc_euro(conf, correct, band)
                exact = M.auc_euro(conf, correct, band, exact=True)
                assert abs(grid - exact) <= 2e-3, (n, band)
    # with very few records one jump can move a band's grid mean by up to 1/333
    for _ in range(50):
        conf, correct = _random_case(rng, int(rng.integers(1, 6)))
        for band in M.BANDS:
            grid = M.auc_euro(conf, correct, band)
            assert abs(grid - M.auc_euro(conf, correct, band, exact=True)) <= 1 / 333 + 1e-9


def test_auc_euro_grid_is_mean_of_curve_over_band():
    rng = np.random.default_rng(RNG_SEED)
    conf, correct = _random_case(rng, 500)
    curve = _euro_brute(conf, correct, np.arange(1, 1000) / 1000)
    assert M.auc_euro(conf, correct, "low") == pytest.approx(curve[:333].mean())
    assert M.auc_euro(conf, correct, "med") == pytest.approx(curve[333:666].mean())
    assert M.auc_euro(conf, correct, "high") == pytest.approx(curve[666:].mean())
    assert M.auc_euro(conf, correct) == pytest.approx(curve.mean())


# ------------------------------------------------------------------------------------------
# bootstrap
# ------------------------------------------------------------------------------------------


def test_bootstrap_interval_of_a_mean_matches_normal_theory():
    rng = np.random.default_rng(RNG_SEED)
    correct = rng.uniform(size=2000) < 0.3
    zeros = np.zeros(correct.size)
    # brier with confidence 0 is the accuracy: a mean of Bernoulli draws
    iv = M.bootstrap(M.brier, zeros, correct, n=2000, seed=1)
    p = correct.mean()
    half = 1.959964 * math.sqrt(p * (1 - p) / correct.size)
    assert iv.estimate == pytest.approx(p)
    assert iv.low == pytest.approx(p - half, abs=0.004)
    assert iv.high == pytest.approx(p + half, abs=0.004)
    est, low, high = iv  # unpacks like a tuple
    assert (est, low, high) == (iv.estimate, iv.low, iv.high)


def test_bootstrap_is_deterministic_and_accepts_partials():
    rng = np.random.default_rng(RNG_SEED)
    conf, correct = _random_case(rng, 300)
    metric = functools.partial(M.euro, u_ca=0.7)
    a = M.bootstrap(metric, conf, correct, n=200, seed=3)
    b = M.bootstrap(metric, conf, correct, n=200, seed=3)
    c = M.bootstrap(metric, conf, correct, n=200, seed=4)
    assert a == b
    assert a != c
    assert a.estimate == pytest.approx(M.euro(conf, correct, 0.7))
    assert a.low < a.estimate < a.high
    wider = M.bootstrap(metric, conf, correct, n=200, seed=3, alpha=0.01)
    assert wider.low <= a.low and wider.high >= a.high


def test_bootstrap_resamples_records_not_columns():
    # every resample of a perfectly calibrated all-0/1 oracle stays perfect
    correct = np.arange(50) % 2 == 0
    iv = M.bootstrap(M.ece, correct.astype(float), correct, n=50)
    assert iv == (0.0, 0.0, 0.0)


def test_bootstrap_drops_undefined_resamples_with_one_warning():
    conf = np.array([0.9, 0.2, 0.4])
    correct = np.array([1, 0, 0])
    with pytest.warns(RuntimeWarning, match="resamples gave a non-finite") as record:
        iv = M.bootstrap(M.auroc, conf, correct, n=100)
    assert len(record) == 1
    assert iv.estimate == 1.0 and iv.low == 1.0 and iv.high == 1.0


def test_paired_bootstrap():
    rng = np.random.default_rng(RNG_SEED)
    conf, correct = _random_case(rng, 400)
    same = M.paired_bootstrap(M.brier, conf, conf, correct, n=100)
    assert same == (0.0, 0.0, 0.0)
    oracle = correct.astype(float)
    diff = M.paired_bootstrap(M.brier, oracle, conf, correct, n=300, seed=5)
    assert diff.estimate == pytest.approx(-M.brier(conf, correct))
    assert diff.high < 0
    assert diff == M.paired_bootstrap(M.brier, oracle, conf, correct, n=300, seed=5)
    # the same records are used for both: a paired difference of a shifted estimator is exact
    shifted = np.clip(conf + 0.01, 0, 1)
    d = M.paired_bootstrap(M.ece, shifted, conf, correct, n=100, seed=2)
    assert d.low <= d.estimate <= d.high


def test_bootstrap_uses_the_published_indices():
    rng = np.random.default_rng(RNG_SEED)
    conf, correct = _random_case(rng, 120)
    other = np.clip(conf + rng.normal(0, 0.1, conf.size), 0, 1)
    idx = M.bootstrap_indices(conf.size, n=150, seed=9)
    assert idx.shape == (150, 120) and idx.min() >= 0 and idx.max() < 120
    np.testing.assert_array_equal(idx, M.bootstrap_indices(120, n=150, seed=9))
    stats = np.array([M.ks_cal(conf[i], correct[i]) for i in idx])
    iv = M.bootstrap(M.ks_cal, conf, correct, n=150, seed=9, alpha=0.1)
    assert (iv.low, iv.high) == tuple(np.percentile(stats, [5, 95]))
    diffs = np.array([M.brier(conf[i], correct[i]) - M.brier(other[i], correct[i]) for i in idx])
    pv = M.paired_bootstrap(M.brier, conf, other, correct, n=150, seed=9)
    assert (pv.low, pv.high) == pytest.approx(tuple(np.percentile(diffs, [2.5, 97.5])))
    with pytest.raises(ValueError, match="size"):
        M.bootstrap_indices(0)


def test_bootstrap_argument_validation():
    conf, correct = [0.2, 0.8], [0, 1]
    with pytest.raises(ValueError, match="n:"):
        M.bootstrap(M.brier, conf, correct, n=0)
    with pytest.raises(ValueError, match="alpha"):
        M.bootstrap(M.brier, conf, correct, alpha=1.0)
    with pytest.raises(ValueError, match="confidence: values"):
        M.bootstrap(M.brier, [0.2, 2.0], correct)
    with pytest.raises(ValueError, match="confidence_b"):
        M.paired_bootstrap(M.brier, conf, [0.1], correct)
    with pytest.raises(ValueError, match="confidence_a"):
        M.paired_bootstrap(M.brier, [np.nan, 0.1], conf, correct)


def test_package_does_not_import_relplot():
    import ast

    import acute.evaluation.plots as plots_module

    files = sorted(Path(M.__file__).resolve().parent.glob("*.py")) + [Path(plots_module.__file__)]
    seen = set()
    for path in files:
        tree = ast.parse(path.read_text())
        imported = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                imported.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module.split(".")[0])
        seen |= imported
        assert "relplot" not in imported, path
    assert "numpy" in seen  # the parse did find the imports
