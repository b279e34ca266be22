"""acute.estimators.calibration: one calibrator class per method, shared by the baselines, the
probe and the probe file. Equality with what each of them computed before it was shared, and
with the scikit-learn fits they stand for; sample weights against repeated records."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import minimize
from sklearn.isotonic import IsotonicRegression
from sklearn.linear_model import LogisticRegression

from acute.estimators.inputs import Inputs
from acute.estimators import ActivationProbe, load_probe
from acute.estimators.calibration import make_calibrator
from acute.estimators.calibration import (CALIBRATION_ARRAYS, CALIBRATIONS, CALIBRATORS, IsotonicCalibration,
                                          PlattScaling, StackedCalibration, calibration_scores, calibrator_arrays,
                                          calibrator_from_arrays, make_calibrator, probe_calibrator)


def _data(seed: int, n: int = 300):
    r = np.random.default_rng(seed)
    p = r.random(n)
    return p, r.random(n) < p


def _platt_bfgs(p: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """The probe's Platt fit before it was shared (scipy BFGS on the smoothed targets)."""
    n_pos = float(y.sum())
    n_neg = float(len(y) - n_pos)
    t = np.where(y, (n_pos + 1.0) / (n_pos + 2.0), 1.0 / (n_neg + 2.0))

    def loss(params):
        z = params[0] * p + params[1]
        r = 0.5 * (1.0 + np.tanh(0.5 * z)) - t
        return float(np.sum(np.logaddexp(0.0, z) - t * z)), np.array([np.dot(r, p), r.sum()])

    b0 = math.log((n_pos + 1.0) / (n_neg + 1.0))
    res = minimize(loss, np.array([0.0, b0]), jac=True, method="BFGS", options={"gtol": 1e-10})
    return float(res.x[0]), float(res.x[1])


def test_platt_baseline_is_the_logistic_regression_on_logits_it_always_was():
    """The platt baseline: bit for bit the unpenalised scikit-learn fit on clipped logits."""
    from scipy.special import expit, logit

    conf, y = _data(0)
    lr = LogisticRegression(C=np.inf, solver="lbfgs", max_iter=10_000, tol=1e-10).fit(
        logit(np.clip(conf, 1e-6, 1 - 1e-6))[:, None], y.astype(np.int64))
    est = make_calibrator("platt").fit(conf, y)
    assert (est.coef_, est.intercept_) == (float(lr.coef_[0, 0]), float(lr.intercept_[0]))
    t = np.linspace(0, 1, 101)
    np.testing.assert_array_equal(est.predict_proba(t)[:, 1],
                                  expit(est.coef_ * logit(np.clip(t, 1e-6, 1 - 1e-6)) + est.intercept_))


def test_smoothed_platt_on_probabilities_matches_the_earlier_bfgs_fit():
    """The probe's Platt calibration is now the same logistic fit as the baseline's (smoothed
    targets as weights of duplicated rows). Against the scipy BFGS fit it replaced: parameters
    within 1e-6 and probabilities within 1e-7 (measured: <= 7e-8 and <= 5e-9 over 40 fits)."""
    for seed in range(10):
        p, y = _data(seed, 50 + 40 * seed)
        if seed % 3 == 0:
            p = np.round(p * 30) / 30  # a forest's few distinct values, 0 and 1 included
        a0, b0 = _platt_bfgs(p, y)
        fitted = PlattScaling(on="probability", smoothed_targets=True).fit(p, y)
        a1, b1 = fitted.coef_, fitted.intercept_
        assert abs(a0 - a1) < 1e-6 and abs(b0 - b1) < 1e-6
        t = np.linspace(0, 1, 201)
        np.testing.assert_allclose(fitted.predict_proba(t)[:, 1],
                                   1.0 / (1.0 + np.exp(-(a0 * t + b0))), rtol=0, atol=1e-7)


def test_isotonic_is_scikit_learns_prediction():
    for seed in range(5):
        conf, y = _data(seed)
        iso = IsotonicRegression(y_min=0.0, y_max=1.0, increasing=True, out_of_bounds="clip").fit(conf, y)
        t = np.concatenate([np.random.default_rng(seed).random(500), [-0.1, 0.0, 1.0, 1.1]])
        x, iy = IsotonicCalibration().fit(conf, y).thresholds_
        np.testing.assert_array_equal(np.interp(t, x, iy), iso.predict(t))
        inside = t[(t >= 0) & (t <= 1)]
        np.testing.assert_array_equal(make_calibrator("isotonic").fit(conf, y).predict_proba(inside)[:, 1],
                                      iso.predict(inside))


def test_the_stacker_is_the_two_feature_logistic():
    from acute.estimators.calibration import stack_features

    p, y = _data(3)
    c = np.clip(p + np.random.default_rng(3).normal(scale=0.1, size=p.size), 0, 1)
    lr = LogisticRegression(C=np.inf, solver="lbfgs", max_iter=10_000, tol=1e-10).fit(stack_features(p, c),
                                                                                      y.astype(np.int64))
    fitted = StackedCalibration().fit(np.column_stack([p, c]), y)
    assert (*fitted.coef_, fitted.intercept_) == (float(lr.coef_[0, 0]), float(lr.coef_[0, 1]), float(lr.intercept_[0]))


@pytest.mark.parametrize("calibration", CALIBRATIONS)
def test_probe_file_scores_like_the_fitted_probe(tmp_path, calibration):
    """For every calibration the numpy scorer of the probe file equals the fitted estimator's
    predict_proba (to 1e-12), and the file's arrays round-trip the fitted parameters."""
    r = np.random.default_rng(0)
    y = r.random(200) < 0.6
    X = r.normal(size=(200, 5, 12)).astype(np.float32) + y[:, None, None] * 0.4
    c = np.clip(0.5 + 0.3 * (y - 0.5) + r.normal(scale=0.2, size=200), 0.001, 0.999)
    Xt, ct = r.normal(size=(80, 5, 12)).astype(np.float32), r.random(80)
    probe = ActivationProbe(view="pca10", calibration=calibration, n_estimators=20, cv=3).fit(Inputs.of(X, c), y)
    exported = load_probe(probe.save(tmp_path / "p"))
    np.testing.assert_allclose(exported.predict_proba(Inputs.of(Xt, ct)), probe.predict_proba(Inputs.of(Xt, ct)), rtol=0, atol=1e-12)
    arrays = calibrator_arrays(calibration, probe.calibrator_)
    assert set(arrays) == set(CALIBRATION_ARRAYS.get(calibration, {}))
    back = calibrator_from_arrays(calibration, arrays)
    raw = probe.predict_proba(Inputs.of(Xt, ct), calibrated=False)[:, 1]
    if calibration is None:
        assert back is None and probe.calibrator_ is None
        return
    scores = calibration_scores(calibration, raw, ct)
    np.testing.assert_array_equal(back.predict_proba(scores), probe.calibrator_.predict_proba(scores))


def test_the_shipped_probe_still_loads_and_scores_by_its_stored_map():
    """A probe written before the calibration module (models/smollm2-135m-instruct/probe, a
    stacked probe of format version 2) loads, and scores by its stored w, v, b."""
    from pathlib import Path

    from scipy.special import logit

    from acute.estimators.probe_file import forest_proba

    probe = load_probe(Path(__file__).resolve().parents[2] / "models" / "smollm2-135m-instruct" / "probe")
    r = np.random.default_rng(1)
    X = r.normal(size=(16, probe.n_layer_outputs, probe.hidden_size)).astype(np.float32)
    c = r.random(16)
    w, v, b = probe.arrays["calibration.stacked"]
    forest = forest_proba(probe.features(Inputs.of(X, c)), probe.arrays)
    z = w * logit(np.clip(forest, 1e-3, 1 - 1e-3)) + v * logit(np.clip(c, 1e-6, 1 - 1e-6)) + b
    np.testing.assert_array_equal(probe.predict_proba(Inputs.of(X, c))[:, 1], 0.5 * (1.0 + np.tanh(0.5 * z)))


@pytest.mark.parametrize("name", [n for n in CALIBRATORS if n != "hre"])
def test_integer_weights_are_repeated_records(name):
    """Every calibrator's ``sample_weight``: a record of weight k fits as k copies of it (hre's
    equal-mass bins count records, not weights: by hand below)."""
    r = np.random.default_rng(4)
    n = 120
    p = r.random(n)
    y = (r.random(n) < p).astype(int)
    w = r.integers(0, 4, n)
    w[:2] = [1, 2]
    cols = 2 if name == "stacked" else 1
    s = np.column_stack([p, np.clip(p + r.normal(scale=0.2, size=n), 0, 1)]) if cols == 2 else p
    kwargs = {"bandwidth": 0.1} if name == "nwkr" else {}
    weighted = make_calibrator(name, **kwargs).fit(s, y, sample_weight=w)
    repeated = make_calibrator(name, **kwargs).fit(np.repeat(s, w, axis=0), np.repeat(y, w))
    t = np.column_stack([np.linspace(0, 1, 41), np.linspace(1, 0, 41)]) if cols == 2 else np.linspace(0, 1, 41)
    np.testing.assert_allclose(weighted.predict_proba(t), repeated.predict_proba(t), rtol=0, atol=1e-6)


def test_weighted_histogram_by_hand():
    conf = np.array([0.1, 0.2, 0.3, 0.4])
    y = np.array([0, 1, 1, 0])
    est = make_calibrator("hre", n_bins=2).fit(conf, y, sample_weight=[1.0, 3.0, 1.0, 1.0])
    # bins {0.1, 0.2} | {0.3, 0.4}: weighted accuracies 3/4 and 1/2
    np.testing.assert_allclose(est.predict_proba([0.15, 0.35])[:, 1], [0.75, 0.5])
    np.testing.assert_array_equal(est.bin_count_, [2, 2])
    with pytest.raises(ValueError, match="sample_weight"):
        make_calibrator("platt").fit(conf, y, sample_weight=[1.0, -1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="sample_weight"):
        make_calibrator("platt").fit(conf, y, sample_weight=[1.0, 1.0])


def test_calibrators_are_scikit_learn_estimators_that_compose():
    """clone keeps the parameters; a calibrator fitted on the output of another is a composition
    (isotonic after Platt is monotone in the raw score and equals scikit-learn's on Platt's output)."""
    from sklearn.base import clone

    conf, y = _data(7, 400)
    platt = PlattScaling(on="probability", smoothed_targets=True)
    assert clone(platt).get_params() == platt.get_params()
    first = platt.fit(conf, y).predict_proba(conf)[:, 1]
    second = IsotonicCalibration().fit(first, y)
    ref = IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip").fit(first, y)
    t = np.linspace(0, 1, 101)
    np.testing.assert_array_equal(second.predict_proba(platt.predict_proba(t)[:, 1])[:, 1],
                                  ref.predict(platt.predict_proba(t)[:, 1]))
    assert probe_calibrator(None) is None and isinstance(probe_calibrator("stacked"), StackedCalibration)
    with pytest.raises(ValueError, match="calibration must be one of"):
        probe_calibrator("beta")
    with pytest.raises(ValueError, match="raw confidence"):
        calibration_scores("stacked", conf)
    with pytest.raises(ValueError, match=r"\[n, 2\]"):
        StackedCalibration().fit(conf, y)
