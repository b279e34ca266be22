"""acute.metrics.selective: risk-coverage curve, AURC, E-AURC and coverage at a target error, checked
against values worked out by hand on tiny arrays and against brute-force definitions."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from acute.errors import InputError
from acute.metrics.selective import (
    aurc,
    aurc_optimal,
    aurc_rows,
    coverage_at_error,
    coverage_at_error_rows,
    e_aurc,
    e_aurc_rows,
    risk_coverage_curve,
    selective_summary,
)

# ------------------------------------------------------------------------ by hand, no ties
# confidence 0.9  0.7  0.5  0.2      trusting the top i answers:
# correct      1    0    1    0      i=1: 0/1   i=2: 1/2   i=3: 1/3   i=4: 2/4
CONF = [0.9, 0.7, 0.5, 0.2]
CORRECT = [1, 0, 1, 0]


def test_curve_by_hand():
    cov, risk, thr = risk_coverage_curve(CONF, CORRECT)
    np.testing.assert_allclose(cov, [0.25, 0.5, 0.75, 1.0])
    np.testing.assert_allclose(risk, [0.0, 1 / 2, 1 / 3, 1 / 2])
    np.testing.assert_allclose(thr, [0.9, 0.7, 0.5, 0.2])


def test_aurc_and_e_aurc_by_hand():
    # AURC = (0 + 1/2 + 1/3 + 1/2) / 4 = 1/3
    assert aurc(CONF, CORRECT) == pytest.approx(1 / 3, abs=1e-15)
    # perfect ranking of 2 correct + 2 wrong: risks 0, 0, 1/3, 2/4 -> (1/3 + 1/2) / 4 = 5/24
    assert aurc_optimal(CORRECT) == pytest.approx(5 / 24, abs=1e-15)
    assert e_aurc(CONF, CORRECT) == pytest.approx(1 / 3 - 5 / 24, abs=1e-15)


def test_coverage_at_error_by_hand():
    assert coverage_at_error(CONF, CORRECT, 0.0) == 0.25
    assert coverage_at_error(CONF, CORRECT, 0.3) == 0.25
    # risk is not monotone in coverage: 1/2 at coverage 0.5 but 1/3 at 0.75, so at alpha = 0.4
    # the largest qualifying coverage is 0.75, past the first step that fails
    assert coverage_at_error(CONF, CORRECT, 0.4) == 0.75
    assert coverage_at_error(CONF, CORRECT, 0.5) == 1.0
    assert coverage_at_error([0.9, 0.1], [0, 1], 0.4) == 0.0


def test_coverage_at_error_boundary_is_inclusive():
    # 3 wrong of 30 is exactly 0.1 (3/30 and 0.1 * 30 both carry rounding)
    conf = np.linspace(1.0, 0.5, 30)
    correct = np.ones(30, dtype=int)
    correct[[3, 10, 20]] = 0
    assert coverage_at_error(conf, correct, 0.1) == 1.0
    assert coverage_at_error(conf, correct, 0.0999) < 1.0


# ------------------------------------------------------------------------------- ties
def test_ties_are_one_step_by_hand():
    # 0.8 is shared by a correct and a wrong answer: no threshold separates them
    conf, correct = [0.9, 0.8, 0.8, 0.3], [1, 1, 0, 0]
    cov, risk, thr = risk_coverage_curve(conf, correct)
    np.testing.assert_allclose(cov, [0.25, 0.75, 1.0])
    np.testing.assert_allclose(risk, [0.0, 1 / 3, 1 / 2])
    np.testing.assert_allclose(thr, [0.9, 0.8, 0.3])
    # coverage levels 2/4 and 3/4 both take the run's risk 1/3: (0 + 1/3 + 1/3 + 1/2) / 4
    assert aurc(conf, correct) == pytest.approx(7 / 24, abs=1e-15)
    assert coverage_at_error(conf, correct, 0.2) == 0.25  # the run enters whole or not at all


def test_ties_do_not_depend_on_record_order():
    rng = np.random.default_rng(0)
    conf = np.round(rng.uniform(size=300), 1)  # 11 distinct values, many ties
    correct = rng.uniform(size=300) < conf
    ref = (aurc(conf, correct), e_aurc(conf, correct), coverage_at_error(conf, correct, 0.2))
    for _ in range(5):
        perm = rng.permutation(300)
        got = (aurc(conf[perm], correct[perm]), e_aurc(conf[perm], correct[perm]),
               coverage_at_error(conf[perm], correct[perm], 0.2))
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-15)


# ---------------------------------------------------------------- brute-force definitions
def _brute_force(conf: np.ndarray, correct: np.ndarray, alpha: float):
    """Per record i: the selective risk of trusting every answer with confidence >= conf_i
    (ties as one step). AURC is their mean; coverage at error the largest qualifying coverage."""
    risks, covs = [], []
    for c in conf:
        trusted = conf >= c
        risks.append(np.mean(~correct[trusted]))
        covs.append(trusted.mean())
    risks, covs = np.array(risks), np.array(covs)
    ok = risks <= alpha
    return float(np.mean(risks)), (float(covs[ok].max()) if ok.any() else 0.0)


@pytest.mark.parametrize("decimals", [None, 2, 1])
def test_against_brute_force(decimals):
    rng = np.random.default_rng(1 if decimals is None else decimals)
    for _ in range(20):
        n = int(rng.integers(1, 60))
        conf = rng.uniform(size=n)
        if decimals is not None:
            conf = np.round(conf, decimals)
        correct = rng.uniform(size=n) < conf ** rng.uniform(0.3, 3)
        ref_aurc, ref_cov = _brute_force(conf, correct, 0.25)
        assert aurc(conf, correct) == pytest.approx(ref_aurc, abs=1e-12)
        assert coverage_at_error(conf, correct, 0.25) == pytest.approx(ref_cov, abs=1e-12)
        cov, risk, thr = risk_coverage_curve(conf, correct)
        assert np.all(np.diff(thr) < 0) and np.all(np.diff(cov) > 0) and cov[-1] == 1.0
        for c, r, t in zip(cov, risk, thr):
            trusted = conf >= t
            assert c == pytest.approx(trusted.mean()) and r == pytest.approx(np.mean(~correct[trusted]))


def test_aurc_without_ties_is_the_per_record_mean():
    # Geifman et al.: (1/n) sum_i risk(top i), sorting by confidence
    rng = np.random.default_rng(2)
    conf = rng.permutation(np.linspace(0.01, 0.99, 97))
    correct = rng.uniform(size=97) < conf
    y = correct[np.argsort(-conf)]
    per_record = np.cumsum(~y) / np.arange(1, 98)
    assert aurc(conf, correct) == pytest.approx(per_record.mean(), abs=1e-15)


def test_e_aurc_is_aurc_minus_a_perfect_ranking():
    """E-AURC by its definition: AURC minus the AURC of a perfect ranking of the same labels
    (here an explicit score that puts every correct answer above every wrong one, no ties)."""
    rng = np.random.default_rng(3)
    for n in (1, 2, 7, 100, 1000):
        conf = rng.uniform(size=n)
        correct = rng.uniform(size=n) < conf
        perfect = (correct + rng.permutation(n) / n) / 2  # correct in [0.5, 1), wrong in [0, 0.5)
        assert aurc_optimal(correct) == pytest.approx(aurc(perfect, correct), abs=1e-15)
        assert e_aurc(conf, correct) == pytest.approx(
            aurc(conf, correct) - aurc(perfect, correct), abs=1e-15)
        assert e_aurc(conf, correct) >= -1e-15
        assert e_aurc(perfect, correct) == pytest.approx(0.0, abs=1e-15)


def test_aurc_optimal_matches_the_asymptotic_formula():
    # Geifman et al. 2019: AURC* = r + (1 - r) ln(1 - r) for error rate r, as n grows
    correct = np.r_[np.ones(70_000), np.zeros(30_000)]
    r = 0.3
    assert aurc_optimal(correct) == pytest.approx(r + (1 - r) * math.log(1 - r), abs=1e-4)


def test_single_class():
    conf = [0.9, 0.4, 0.4, 0.1]
    assert aurc(conf, [1, 1, 1, 1]) == 0.0 and e_aurc(conf, [1, 1, 1, 1]) == 0.0
    assert coverage_at_error(conf, [1, 1, 1, 1], 0.0) == 1.0
    assert aurc(conf, [0, 0, 0, 0]) == 1.0 and e_aurc(conf, [0, 0, 0, 0]) == pytest.approx(0.0)
    assert coverage_at_error(conf, [0, 0, 0, 0], 0.5) == 0.0


def test_summary_matches_the_functions_and_is_json():
    rng = np.random.default_rng(4)
    conf = rng.uniform(size=500)
    correct = rng.uniform(size=500) < conf
    s = selective_summary(conf, correct)
    assert list(s) == ["aurc", "e_aurc", "coverage@0.05", "coverage@0.1"]
    assert s["aurc"] == aurc(conf, correct)
    assert s["e_aurc"] == pytest.approx(e_aurc(conf, correct), abs=1e-15)
    assert s["coverage@0.05"] == coverage_at_error(conf, correct, 0.05)
    assert s["coverage@0.1"] == coverage_at_error(conf, correct, 0.10)
    assert json.loads(json.dumps(s)) == s


# -------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("conf, correct, match", [
    ([], [], "confidence: is empty"),
    ([0.5, 0.2], [1], "correct: expected length 2"),
    ([0.5, np.nan], [1, 0], "confidence: contains NaN"),
    ([0.5, 1.2], [1, 0], r"confidence: values must lie in \[0, 1\]"),
    ([0.5, 0.2], [1, 2], "correct: labels must be 0/1"),
    ([[0.5, 0.2]], [1, 0], "confidence: expected a 1-D array"),
])
def test_bad_arrays(conf, correct, match):
    for fn in (risk_coverage_curve, aurc, e_aurc, selective_summary,
               lambda c, y: coverage_at_error(c, y, 0.1)):
        with pytest.raises(InputError, match=match):
            fn(conf, correct)


@pytest.mark.parametrize("alpha", [-0.1, 1.5, float("nan"), "0.1", None, True])
def test_bad_alpha(alpha):
    with pytest.raises(InputError, match="alpha"):
        coverage_at_error(CONF, CORRECT, alpha)
    with pytest.raises(InputError, match="alphas"):
        selective_summary(CONF, CORRECT, alphas=(0.05, alpha))


@pytest.mark.parametrize("decimals", [None, 1])
def test_rows_equal_the_brute_force_per_row(decimals):
    """The batched forms (the bootstrap's path) equal the brute-force reference row by row, ties
    included, and the resampling engine uses them for the results-table columns."""
    from acute.metrics import METRICS, bootstrap_indices, metric_over_resamples

    rng = np.random.default_rng(5)
    conf = rng.uniform(size=(30, 45))
    if decimals is not None:
        conf = np.round(conf, decimals)
    correct = rng.uniform(size=conf.shape) < conf
    ref = [_brute_force(c, y, 0.1) for c, y in zip(conf, correct)]
    np.testing.assert_allclose(aurc_rows(conf, correct), [a for a, _ in ref], atol=1e-12)
    np.testing.assert_allclose(coverage_at_error_rows(conf, correct, 0.1), [c for _, c in ref], atol=1e-12)
    np.testing.assert_allclose(e_aurc_rows(conf, correct),
                               [a - aurc_optimal(y) for (a, _), y in zip(ref, correct)], atol=1e-12)
    idx = bootstrap_indices(45, 50, seed=3)
    for key in ("aurc", "e_aurc", "coverage_05", "coverage_10"):
        fn = METRICS[key].fn
        loop = [fn(conf[0][i], correct[0][i]) for i in idx]
        np.testing.assert_allclose(metric_over_resamples(fn, conf[0], correct[0], idx), loop, atol=1e-12)
