"""Learning curves: sizes, nested stratified subsets, per-repeat metrics recomputed by hand."""

from __future__ import annotations

import numpy as np
import pytest

from acute import metrics
from acute.baselines import BASELINES, make_baseline
from acute.crossval import cv_folds
from acute.learning_curve import _subset, learning_curve, resolve_sizes, write_learning_curve


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
    lc = learning_curve(X, y, c, ids, estimators=["acute-pca10-stacked"], sizes=[30, 60],
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
                oof[np.sort(te)] = make_baseline("platt").fit(c[sub], yi[sub]).predict_proba(c[np.sort(te)])[:, 1]
            assert lc.values["platt"]["auc_euro_all"][i, r] == pytest.approx(metrics.auc_euro(oof, yi))
            assert lc.values["platt"]["smece"][i, r] == pytest.approx(metrics.smece(oof, yi))
    s = lc.summary("platt", "auc_euro_all")[1]
    row = lc.values["platt"]["auc_euro_all"][1]
    assert s["mean"] == pytest.approx(row.mean()) and s["ci_low"] < s["mean"] < s["ci_high"]
    # the planted direction pays off with more records
    probe = lc.values["acute-pca10-stacked"]["auc_euro_all"].mean(axis=1)
    assert probe[-1] > lc.values[lc.best_baseline]["auc_euro_all"][-1].mean()
    files = write_learning_curve(lc, tmp_path, params={"seed": 0})
    assert {p.name for p in files.values()} == {"learning_curve.md", "learning_curve.csv",
                                                "learning_curve.json", "learning_curve.png"}
    md = (tmp_path / "learning_curve.md").read_text()
    assert "| 30 |" in md and "smECE" in md and lc.best_baseline in md
    assert not list(tmp_path.glob(".*"))


def test_bad_input():
    X, y, c, ids = data(n=60)
    with pytest.raises(ValueError, match="unknown estimator 'acute-x'.*acute-pca10-stacked"):
        learning_curve(X, y, c, ids, estimators=["acute-x"])
    with pytest.raises(ValueError, match="larger than the 48 training records"):
        learning_curve(X, y, c, ids, sizes=[100])
    with pytest.raises(ValueError, match="at least 5 of each class"):
        learning_curve(X, np.arange(60) < 3, c, ids)
