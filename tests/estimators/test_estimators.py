"""The estimator registry: one interface for every row of the table, and ``auto``'s choice."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.model_selection import StratifiedGroupKFold, StratifiedKFold

from acute.estimators.inputs import Inputs
from acute import metrics
from acute.estimators.baselines import BASELINES
from acute.estimators.calibration import make_calibrator
from acute.estimators import (
    AUTO_CANDIDATES,
    DEFAULT_ESTIMATOR,
    ESTIMATORS,
    STATES_PROBE,
    AutoEstimator,
    make_estimator,
)
from acute.errors import InputError, UnknownEstimatorError
from acute.estimators import ActivationProbe
from acute.estimators.calibration import StackedCalibration

SMALL = {"n_estimators": 12, "search_n_estimators": 8}


def planted(n=160, seed=0, signal=1.5, conf_signal=0.1):
    """Layer 3 of 6 carries the label; the raw confidence carries ``conf_signal`` of it."""
    rng = np.random.default_rng(seed)
    y = rng.random(n) < 0.45
    X = rng.normal(size=(n, 7, 24))
    X[:, 3:, 0] += signal * (2.0 * y[:, None] - 1.0)
    conf = np.clip(0.5 + conf_signal * (2.0 * y - 1.0) + 0.2 * rng.normal(size=n), 0.0, 1.0)
    return X.astype(np.float32), y, conf


def test_every_name_fits_and_predicts_through_one_interface():
    X, y, c = planted(n=120)
    assert DEFAULT_ESTIMATOR == "acute-pca10-stacked" and DEFAULT_ESTIMATOR in ESTIMATORS and "auto" in ESTIMATORS
    assert STATES_PROBE == "acute-pca10-stacked"  # the states' own probe, whatever the default becomes
    for name in ESTIMATORS:
        est = make_estimator(name, probe_params=SMALL)
        assert not [k for k in vars(est) if k.endswith("_")], name  # nothing fitted in __init__
        p = est.fit(Inputs.of(X[:90], c[:90]), y[:90]).predict_proba(Inputs.of(X[90:], c[90:]))
        assert p.shape == (30, 2) and np.allclose(p.sum(axis=1), 1.0), name
        assert np.all((p >= 0) & (p <= 1)), name


def test_baselines_ignore_layer_means_and_equal_the_baseline_classes():
    X, y, c = planted(n=100)
    for name in BASELINES:
        a = make_estimator(name).fit(Inputs.of(confidence=c), y).predict_proba(Inputs.of(confidence=c))
        b = make_calibrator(name).fit(c, y).predict_proba(c)
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(make_estimator(name).fit(Inputs.of(X, c), y).predict_proba(Inputs.of(X, c)), b)
    with pytest.raises(ValueError, match=r"ConfidenceEstimator\(\) reads the 'confidence' source, which these inputs lack"):
        make_estimator("platt").fit(Inputs.of(X), y)


def test_names_map_to_probe_settings():
    p = make_estimator("acute-mid-stacked", random_state=3, probe_params={"n_estimators": 7, "cv": None})
    assert isinstance(p, ActivationProbe)
    assert (p.view, p.layer, p.calibration, p.cv, p.random_state, p.n_estimators) == (
        "mean", "mid", "stacked", 5, 3, 7)
    assert make_estimator("acute-pca20").get_params()["calibration"] is None
    with pytest.raises(ValueError, match="fixed by the estimator name"):
        make_estimator("acute-pca10", probe_params={"view": "cosine"})


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(UnknownEstimatorError, match="unknown estimator 'temperature'") as e:
        make_estimator("temperature")
    assert all(n in str(e.value) for n in ESTIMATORS)
    with pytest.raises(UnknownEstimatorError, match="not a probe"):
        X, y, c = planted(n=60)
        AutoEstimator(candidates=["platt"]).fit(Inputs.of(X, c), y)


def test_probes_module_exposes_the_registry():
    import acute.estimators as probes

    assert probes.make_estimator is make_estimator and probes.DEFAULT_ESTIMATOR == DEFAULT_ESTIMATOR
    with pytest.raises(AttributeError):
        probes.no_such_name  # noqa: B018


def test_auto_scores_by_hand_and_refits_the_winner():
    X, y, c = planted()
    auto = AutoEstimator(cv=4, probe_params=SMALL, random_state=1).fit(Inputs.of(X, c), y)
    folds = list(StratifiedKFold(4, shuffle=True, random_state=1).split(X, y))
    yi = y.astype(int)
    for view in ("acute-cosine", "acute-pca10"):
        forest = np.empty(len(y))
        for tr, te in folds:
            est = make_estimator(view, random_state=1, probe_params=SMALL).fit(Inputs.of(X[tr], c[tr]), yi[tr])
            forest[te] = est.predict_proba(Inputs.of(X[te], c[te]))[:, 1]
        assert auto.scores_[view]["auc_euro_all"] == pytest.approx(metrics.auc_euro(forest, yi))
        stacked = np.empty(len(y))
        for tr, te in folds:
            fitted = StackedCalibration().fit(np.column_stack([forest[tr], c[tr]]), yi[tr])
            stacked[te] = fitted.predict_proba(np.column_stack([forest[te], c[te]]))[:, 1]
        assert auto.scores_[f"{view}-stacked"]["smece"] == pytest.approx(metrics.smece(stacked, yi))
    platt = np.empty(len(y))
    for tr, te in folds:
        platt[te] = make_calibrator("platt").fit(c[tr], yi[tr]).predict_proba(c[te])[:, 1]
    assert auto.scores_["platt"]["auc_euro_all"] == pytest.approx(metrics.auc_euro(platt, yi))
    best = max(AUTO_CANDIDATES, key=lambda n: (auto.scores_[n]["auc_euro_all"], -auto.scores_[n]["smece"]))
    assert auto.best_ == best and auto.ranking_[0] == best  # the hidden states carry the signal
    assert auto.warning_ is None
    ref = make_estimator(best, random_state=1, probe_params=SMALL).fit(Inputs.of(X, c), y)
    np.testing.assert_array_equal(auto.predict_proba(Inputs.of(X, c)), ref.predict_proba(Inputs.of(X, c)))
    sel = auto.selection()
    assert sel["chosen"] == best and [r["estimator"] for r in sel["scores"]] == auto.ranking_


def test_auto_on_given_folds_holds_every_record_out_of_fold_never_out_of_bag():
    """cv given as (train, test) pairs (folds that keep each group whole): every candidate's
    held-out P(correct) is out of fold over them, by hand, even where the stacked probes calibrate
    out of bag (a forest's out-of-bag probabilities would score a record with trees that saw
    its group); with a number of folds the same estimator reads the out-of-bag ones."""
    X, y, c = planted()
    yi = y.astype(int)
    groups = np.arange(len(y)) % 11
    folds = list(StratifiedGroupKFold(4, shuffle=True, random_state=1).split(X, yi, groups))
    params = {**SMALL, "n_estimators": 40}  # every record out of bag for some tree
    auto = AutoEstimator(cv=folds, probe_params=params, random_state=1).fit(Inputs.of(X, c), y)
    drawn = AutoEstimator(cv=4, probe_params=params, random_state=1).fit(Inputs.of(X, c), y)
    for view in ("acute-cosine", "acute-pca10"):
        forest = np.empty(len(y))
        for tr, te in folds:
            est = make_estimator(view, random_state=1, probe_params=params).fit(Inputs.of(X[tr], c[tr]), yi[tr])
            forest[te] = est.predict_proba(Inputs.of(X[te], c[te]))[:, 1]
        np.testing.assert_allclose(auto.oof_[view], forest, rtol=0, atol=1e-12)
        stacked = np.empty(len(y))
        for tr, te in folds:
            fitted = StackedCalibration().fit(np.column_stack([forest[tr], c[tr]]), yi[tr])
            stacked[te] = fitted.predict_proba(np.column_stack([forest[te], c[te]]))[:, 1]
        np.testing.assert_allclose(auto.oof_[f"{view}-stacked"], stacked, rtol=0, atol=1e-12)
        oob = make_estimator(f"{view}-stacked", random_state=1, probe_params=params).fit(Inputs.of(X, c), yi).oof_proba_
        np.testing.assert_allclose(drawn.oof_[view], oob, rtol=0, atol=1e-12)
    assert [te.tolist() for _, te in auto.folds_] == [te.tolist() for _, te in folds]
    assert auto.selection()["cv"] == {"n_splits": 4, "given": True}


@pytest.mark.parametrize("cv, message", [
    ("five", "cv must be a number of folds or"),
    (True, "cv must be a number of folds or"),
    ([(np.arange(80), np.arange(80, 160))], "at least 2"),
    ([(np.arange(80), np.arange(80, 160)), (np.arange(80, 160), np.arange(80, 160))], "both its train and test"),
    ([(np.arange(80, 160), np.arange(80)), (np.arange(60), np.arange(60, 160))], "exactly once .0 never, 20 more"),
    ([(np.arange(80, 160), np.arange(80)), (np.arange(80), np.arange(80, 161))], "not record numbers in .0, 160."),
])
def test_auto_refuses_folds_that_do_not_partition_the_records(cv, message):
    X, y, c = planted()
    with pytest.raises(InputError, match=message):
        AutoEstimator(cv=cv, probe_params=SMALL).fit(Inputs.of(X, c), y)


def test_auto_says_when_a_baseline_beats_every_probe():
    X, y, c = planted(signal=0.0, conf_signal=0.3, seed=4)  # the states are noise
    # a plain forest re-learns the confidence badly from noise (a stacked probe nests Platt and
    # would tie it); with only the plain forest to choose from, a baseline ranks first
    auto = AutoEstimator(candidates=["acute-pca10"], cv=3, probe_params=SMALL).fit(Inputs.of(X, c), y)
    top = auto.ranking_[0]
    assert top in BASELINES and auto.best_baseline_ == top
    assert top in auto.warning_ and "add nothing measurable" in auto.warning_
    assert auto.best_ == "acute-pca10"  # what it ships is always an exportable probe
    assert auto.selection()["warning"] == auto.warning_


def test_auto_needs_enough_records_of_each_class():
    X, y, c = planted(n=60)
    y = np.zeros(60, bool)
    y[:3] = True
    with pytest.raises(ValueError, match="at least 5 correct and 5 wrong"):
        AutoEstimator().fit(Inputs.of(X, c), y)


def test_auto_with_a_fixed_refit_records_the_comparison_but_ships_that_probe():
    X, y, c = planted()
    fixed = AutoEstimator(cv=4, probe_params=SMALL, random_state=1, refit="acute-pca10").fit(Inputs.of(X, c), y)
    free = AutoEstimator(cv=4, probe_params=SMALL, random_state=1).fit(Inputs.of(X, c), y)
    assert fixed.scores_ == free.scores_ and fixed.best_ == free.best_
    assert fixed.chosen_ == "acute-pca10" and free.chosen_ == free.best_
    ref = make_estimator("acute-pca10", random_state=1, probe_params=SMALL).fit(Inputs.of(X, c), y)
    np.testing.assert_array_equal(fixed.predict_proba(Inputs.of(X, c)), ref.predict_proba(Inputs.of(X, c)))
    sel = fixed.selection()
    assert (sel["chosen"], sel["best_by_cv"], sel["refit"]) == ("acute-pca10", free.best_, "acute-pca10")
    with pytest.raises(ValueError, match="refit must be 'best' or one of the candidates"):
        AutoEstimator(refit="acute-mid").fit(Inputs.of(X, c), y)
