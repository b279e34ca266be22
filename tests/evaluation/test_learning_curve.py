"""Learning curves: sizes, nested stratified subsets, per-repeat metrics recomputed by hand."""

from __future__ import annotations

import numpy as np
import pytest

from acute import metrics
from acute.estimators.baselines import BASELINES
from acute.estimators.inputs import Inputs
from acute.estimators.calibration import make_calibrator
from acute.evaluation.crossval import cv_folds
from acute.evaluation.learning_curve import (DEFAULT_REPEATS, INTERVAL_METHOD, _subset, learning_curve, resolve_sizes,
                                  write_learning_curve)


def data(n=150, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.random(n) < 0.4
    X = rng.normal(size=(n, 5, 16)).astype(np.float32)
    X[:, 2:, 0] += 2.0 * y[:, None] - 1.0
    c = np.clip(0.5 + 0.05 * (2.0 * y - 1.0) + 0.2 * rng.normal(size=n), 0, 1)
    return X, y, c, [f"r{i}" for i in range(n)]


def test_resolve_sizes():
    assert resolve_sizes(None, 120) == [50, 100, 120]
    assert resolve_sizes(None, 50) == [50]
    assert resolve_sizes(None, 1632) == [50, 100, 200, 400, 800, 1632]  # not 1600: within 10% of the fold
    assert resolve_sizes(None, 1760) == [50, 100, 200, 400, 800, 1600, 1760]
    assert resolve_sizes([40, 20], 120) == [20, 40]
    with pytest.raises(ValueError, match="size 200 is larger than the 120 training records"):
        resolve_sizes([50, 200], 120)
    with pytest.raises(ValueError, match=">= 10"):
        resolve_sizes([5], 120)
    with pytest.raises(ValueError, match="duplicates"):
        resolve_sizes([20, 20], 120)


def test_subsets_are_nested_stratified_and_inside_the_pool():
    rng = np.random.default_rng(1)
    y = (rng.random(300) < 0.3).astype(int)
    pool = np.sort(rng.choice(300, size=200, replace=False))
    small, big = _subset(pool, y, 40, 7), _subset(pool, y, 120, 7)
    assert set(small) <= set(big) <= set(pool)
    assert len(small) == 40 and len(big) == 120
    share = y[pool].mean()
    assert abs(y[big].mean() - share) < 0.02 and abs(y[small].mean() - share) < 0.03
    with pytest.raises(ValueError, match="cannot hold 5 records of each class"):
        _subset(pool, np.where(np.arange(300) < 3, 1, 0), 20, 0)


def test_values_are_out_of_fold_metrics_recomputed_by_hand(tmp_path):
    X, y, c, ids = data()
    lc = learning_curve(Inputs.of(X, c), y, ids, estimators=["acute-pca10-stacked"], sizes=[30, 60],
                        n_splits=3, repeats=2, seed=0, probe_params={"n_estimators": 10})
    assert lc.sizes == [30, 60] and lc.estimators == list(BASELINES) + ["acute-pca10-stacked"]
    assert lc.shown == [lc.best_baseline, "acute-pca10-stacked"]
    yi = y.astype(int)
    folds = cv_folds(ids, yi, n_splits=3, n_repeats=2, seed=0)
    for i, size in enumerate(lc.sizes):
        for r, rep in enumerate(folds):
            oof = np.empty(len(y))
            for k, (tr, te) in enumerate(rep):
                sub = _subset(np.sort(tr), yi, size, r * 1009 + k)
                oof[np.sort(te)] = make_calibrator("platt").fit(c[sub], yi[sub]).predict_proba(c[np.sort(te)])[:, 1]
            assert lc.values["platt"]["auc_euro_all"][i, r] == pytest.approx(metrics.auc_euro(oof, yi))
            assert lc.values["platt"]["smece"][i, r] == pytest.approx(metrics.smece(oof, yi))
    s = lc.summary("platt", "auc_euro_all")[1]
    row = lc.values["platt"]["auc_euro_all"][1]
    assert s["mean"] == pytest.approx(row.mean()) and s["ci_low"] < s["mean"] < s["ci_high"]
    # the planted direction pays off with more records
    probe = lc.values["acute-pca10-stacked"]["auc_euro_all"].mean(axis=1)
    assert probe[-1] > lc.values[lc.best_baseline]["auc_euro_all"][-1].mean()
    files = write_learning_curve(lc, tmp_path, params={"seed": 0}, model="SmolLM2-135M-Instruct", task="sciq")
    assert {p.name for p in files.values()} == {"learning_curve.md", "learning_curve.csv",
                                                "learning_curve.json", "learning_curve.png"}
    md = (tmp_path / "learning_curve.md").read_text()
    assert "| 30 |" in md and "smECE" in md and lc.best_baseline in md
    assert not list(tmp_path.glob(".*"))


def test_bad_input():
    X, y, c, ids = data(n=60)
    with pytest.raises(ValueError, match="unknown estimator 'acute-x'.*acute-pca10-stacked"):
        learning_curve(Inputs.of(X, c), y, ids, estimators=["acute-x"])
    with pytest.raises(ValueError, match="larger than the 48 training records"):
        learning_curve(Inputs.of(X, c), y, ids, sizes=[100])
    with pytest.raises(ValueError, match="at least 5 of each class"):
        learning_curve(Inputs.of(X, c), np.arange(60) < 3, ids)


def test_default_repeats_are_at_least_five():
    import inspect

    assert DEFAULT_REPEATS >= 5
    assert inspect.signature(learning_curve).parameters["repeats"].default == DEFAULT_REPEATS


def _hand_oof(name, X, y, c, ids, size, seed):
    """Out-of-fold predictions of baseline ``name`` with one repeat, rebuilt by hand."""
    yi = y.astype(int)
    (rep,) = cv_folds(ids, yi, n_splits=3, n_repeats=1, seed=seed)
    oof = np.empty(len(y))
    for k, (tr, te) in enumerate(rep):
        sub = _subset(np.sort(tr), yi, size, seed * 1_000_003 + k)
        p = make_calibrator(name).fit(c[sub], yi[sub]).predict_proba(c[np.sort(te)])[:, 1]
        oof[np.sort(te)] = np.clip(p, 0, 1)
    return oof


def test_interval_with_one_repeat_is_the_bias_shifted_record_bootstrap():
    X, y, c, ids = data(n=150, seed=3)
    lc = learning_curve(Inputs.of(X, c), y, ids, estimators=[], sizes=[40, 80], n_splits=3, repeats=1,
                        seed=0, n_bootstrap=300)
    assert lc.shown == [lc.best_baseline] and lc.interval["n_bootstrap"] == 300
    yi = y.astype(int)
    for metric, fn in (("auc_euro_all", metrics.METRICS["auc_euro_all"].fn), ("smece", metrics.smece)):
        for i, size in enumerate(lc.sizes):
            oof = _hand_oof(lc.best_baseline, X, y, c, ids, size, 0)
            est = fn(oof, yi)
            s = lc.summary(lc.best_baseline, metric)[i]
            assert s["mean"] == pytest.approx(est)
            ref = metrics.bootstrap(fn, oof, yi, n=300, seed=0)  # the same record resamples
            draws = metrics.metric_over_resamples(fn, oof, yi, metrics.bootstrap_indices(yi.size, 300, 0))
            bias = draws.mean() - est
            assert s["ci_low"] == pytest.approx(max(0.0, ref.low - bias))
            assert s["ci_high"] == pytest.approx(min(1.0, ref.high - bias))
            assert 0.0 <= s["ci_low"] <= est <= s["ci_high"] <= 1.0


def test_intervals_hold_the_estimate_stay_in_range_and_are_recorded(tmp_path, monkeypatch):
    import json

    from acute.evaluation import plots

    X, y, c, ids = data(n=200, seed=5)
    y_cal = np.random.default_rng(5).random(200) < c  # calibrated raw confidences: smECE near 0
    lc = learning_curve(Inputs.of(X, c), y_cal, ids, estimators=[], sizes=[40, 120], n_splits=3, seed=1,
                        n_bootstrap=100)
    assert lc.repeats == DEFAULT_REPEATS and lc.values["raw"]["smece"].shape == (2, DEFAULT_REPEATS)
    for name in lc.shown:
        for metric in ("auc_euro_all", "smece"):
            for s in lc.summary(name, metric):
                assert 0.0 <= s["ci_low"] <= s["mean"] <= s["ci_high"] <= 1.0
                assert s["ci_high"] - s["ci_low"] > 0
    drawn = []
    save = plots._save
    monkeypatch.setattr(plots, "_save", lambda fig, out: drawn.append(fig) or save(fig, out))
    write_learning_curve(lc, tmp_path, model="SmolLM2-135M-Instruct", task="sciq")
    doc = json.loads((tmp_path / "learning_curve.json").read_text())
    assert doc["interval"] == {"method": INTERVAL_METHOD, "level": 0.95, "n_bootstrap": 100, "seed": 1}
    assert "bootstrap" in doc["interval"]["method"] and "clipped" in doc["interval"]["method"]
    assert doc["model"] == "SmolLM2-135M-Instruct" and doc["task"] == "sciq" and doc["repeats"] == DEFAULT_REPEATS
    for row in doc["rows"]:
        assert 0.0 <= row["smece_ci_low"] <= row["smece_mean"] <= row["smece_ci_high"] <= 1.0
    heading = drawn[-1]._suptitle.get_text()
    assert "SmolLM2-135M-Instruct" in heading and "sciq" in heading and "5 repeats" in heading
    assert "bootstrap" in (tmp_path / "learning_curve.md").read_text()
    # the plot's bands are the rows' intervals
    (auc_ax, _) = drawn[-1].axes
    assert auc_ax.get_ylim()[0] <= min(r["auc_euro_all_ci_low"] for r in doc["rows"])
    with pytest.raises(ValueError, match="n_bootstrap must be >= 1"):
        learning_curve(Inputs.of(X, c), y, ids, estimators=[], n_bootstrap=0)
