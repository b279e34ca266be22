"""Records that share structure stay together: grouped folds by the task's default field and a
cluster bootstrap for every interval (issue 42)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from acute import metrics
from acute.errors import InputError
from acute.evaluation import evaluate_predictions, evaluate_store
from acute.evaluation.grouping import RECORD_IDS, resolve_group_by
from acute.metrics import resample_indices
from acute.metrics.resampling import cluster_bootstrap_indices
from acute.metrics.intervals import fold_differences

from test_evaluate import FakeStore, planted_store


def test_cluster_bootstrap_draws_groups_whole():
    groups = np.repeat([f"g{i}" for i in range(100)], 4)  # 100 groups of 4
    idx = cluster_bootstrap_indices(groups, n=200, seed=3)
    assert idx.shape == (200, 400) and idx.min() >= 0 and idx.max() < 400
    for row in idx:
        _, counts = np.unique(groups[row], return_counts=True)
        # every group drawn whole (a group drawn twice counts 8), except the one cut at the end
        assert (counts % 4 != 0).sum() <= 1
    assert np.array_equal(idx, cluster_bootstrap_indices(groups, n=200, seed=3))  # seeded


def test_cluster_bootstrap_variance_is_the_cluster_variance():
    """Every group all right or all wrong: the mean's variance is p(1-p)/G over G groups, k times the
    record bootstrap's p(1-p)/n (k records per group)."""
    rng = np.random.default_rng(0)
    k, g = 5, 200
    y = np.repeat(rng.integers(0, 2, g), k).astype(float)
    groups = np.repeat(np.arange(g), k)
    p = y.mean()
    clustered = y[cluster_bootstrap_indices(groups, n=4000, seed=1)].mean(axis=1).std()
    by_record = y[metrics.bootstrap_indices(y.size, 4000, 1)].mean(axis=1).std()
    assert clustered == pytest.approx(np.sqrt(p * (1 - p) / g), rel=0.08)
    assert by_record == pytest.approx(np.sqrt(p * (1 - p) / y.size), rel=0.08)


def test_resample_indices_keeps_record_draws_without_shared_groups():
    assert np.array_equal(resample_indices(50, 30, 2, groups=[f"r{i}" for i in range(50)]),
                          metrics.bootstrap_indices(50, 30, 2))
    assert np.array_equal(resample_indices(50, 30, 2), metrics.bootstrap_indices(50, 30, 2))
    with pytest.raises(InputError, match="groups has 3 values but there are 50 records"):
        resample_indices(50, 30, 2, groups=["a", "b", "c"])


def _grouped_store(n=300, per_group=6):
    store = planted_store(n=n, seed=4)
    store.manifest = {"model": "synthetic", "task": "apigen"}
    for i, rec in enumerate(store.records):
        rec["meta"] = {"toolset": f"t{i // per_group}", "n_gold_calls": 3}
    return store


def test_evaluation_groups_by_the_tasks_field_and_resamples_groups(tmp_path):
    store = _grouped_store()
    res = evaluate_store(store, out_dir=tmp_path, estimators=["raw", "platt", "isotonic"], controls=["constant"],
                         cv=5, repeats=2, n_bootstrap=50, progress=False)
    assert res.split["group_by"] == "toolset" and res.params["group_by"] == "toolset"
    assert "cluster bootstrap over the values of 'toolset'" in res.params["interval"]
    toolset = np.array([r["meta"]["toolset"] for r in store.records])
    folds = json.loads((tmp_path / "folds.json").read_text())
    fold_of = np.asarray(res.fold_of)
    for rep in fold_of:  # no tool set is split between folds
        for t in np.unique(toolset):
            assert np.unique(rep[toolset == t]).size == 1
    assert folds  # written
    # the intervals are the cluster bootstrap's: recomputed from the predictions with the same draws
    rows = evaluate_predictions(res.cv_predictions, res.test_correct, n_bootstrap=50, seed=0,
                                clusters=list(toolset))
    got = {r["estimator"]: r for r in res.rows}
    for r in rows:
        assert r["smece_ci_low"] == pytest.approx(got[r["estimator"]]["smece_ci_low"])
    by_record = evaluate_predictions(res.cv_predictions, res.test_correct, n_bootstrap=50, seed=0)
    assert any(a["smece_ci_low"] != b["smece_ci_low"] for a, b in zip(rows, by_record))


def test_record_ids_override_and_the_missing_field():
    store = _grouped_store()
    assert resolve_group_by(store, None) == "toolset"
    assert resolve_group_by(store, RECORD_IDS) is None
    assert resolve_group_by(store, "n_gold_calls") == "n_gold_calls"
    assert resolve_group_by(planted_store(n=20), None) is None  # a task without a default
    del store.records[7]["meta"]["toolset"]
    with pytest.raises(InputError, match=r"record 'q7' has no metadata field 'toolset'"):
        evaluate_store(store, estimators=["raw", "platt"], controls=False, cv=5, repeats=1, n_bootstrap=0,
                       progress=False)
    res = evaluate_store(store, estimators=["raw", "platt"], controls=False, cv=5, repeats=1, n_bootstrap=0,
                         progress=False, group_by=RECORD_IDS)
    assert res.split["group_by"] is None


def test_t_interval_is_centred_on_the_mean_fold_difference():
    store = planted_store(n=200, seed=5)
    res = evaluate_store(store, estimators=["raw", "platt", "isotonic"], controls=False, cv=5, repeats=2,
                         n_bootstrap=20, progress=False)
    rows = {r["estimator"]: r for r in res.rows}
    ref = rows["raw"]["reference"]
    other = next(n for n in rows if n != ref)
    folds = [[(np.flatnonzero(np.asarray(f) != k), np.flatnonzero(np.asarray(f) == k)) for k in range(5)]
             for f in res.fold_of]
    d = fold_differences(metrics.smece, res.cv_predictions[other], res.cv_predictions[ref],
                         res.test_correct.astype(int), folds)
    row = rows[other]
    assert row["diff_smece_t_mean"] == pytest.approx(d.mean())
    assert row["diff_smece_t_low"] < row["diff_smece_t_mean"] < row["diff_smece_t_high"]


def test_every_row_is_compared_with_the_visible_control():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 300)
    preds = {"raw": rng.uniform(size=300), "platt": np.clip(0.3 + 0.4 * y + rng.normal(0, 0.2, 300), 0, 1),
             "visible": np.clip(0.2 + 0.6 * y + rng.normal(0, 0.2, 300), 0, 1)}
    rows = {r["estimator"]: r for r in evaluate_predictions(preds, y, n_bootstrap=40)}
    assert rows["platt"]["diff_visible_auc_euro_all"] == pytest.approx(
        rows["platt"]["auc_euro_all"] - rows["visible"]["auc_euro_all"])
    assert rows["platt"]["diff_visible_auc_euro_all_ci_high"] < 0  # visible is far better here
    assert "diff_visible_auc_euro_all" not in evaluate_predictions({"raw": preds["raw"]}, y, n_bootstrap=0,
                                                                  reference="raw")[0]


def test_every_row_is_compared_with_the_best_control_without_hidden_states():
    """The best of visible, answer-surface, answer-text, platt+meta and tfidf+platt (here the reply
    surface, better than visible) is the reference of diff_best_visible_*: the same difference and
    intervals as an evaluation whose reference is that control; baselines never qualify."""
    rng = np.random.default_rng(1)
    n = 300
    y = rng.integers(0, 2, n)
    preds = {"raw": rng.uniform(size=n), "platt": np.clip(0.2 + 0.6 * y + rng.normal(0, 0.1, n), 0, 1),
             "visible": np.clip(0.3 + 0.4 * y + rng.normal(0, 0.25, n), 0, 1),
             "answer-surface": np.clip(0.25 + 0.5 * y + rng.normal(0, 0.15, n), 0, 1),
             "probe": np.clip(0.25 + 0.5 * y + rng.normal(0, 0.12, n), 0, 1)}
    rows = {r["estimator"]: r for r in evaluate_predictions(preds, y, n_bootstrap=60, seed=3)}
    assert rows["answer-surface"]["auc_euro_all"] > rows["visible"]["auc_euro_all"]
    assert rows["platt"]["auc_euro_all"] > rows["answer-surface"]["auc_euro_all"]  # a baseline: not a control
    want = {r["estimator"]: r for r in evaluate_predictions(preds, y, n_bootstrap=60, seed=3,
                                                            reference="answer-surface")}["probe"]
    got = rows["probe"]
    assert got["best_visible_reference"] == "answer-surface"
    for key in ("", "_ci_low", "_ci_high"):
        assert got[f"diff_best_visible_auc_euro_all{key}"] == pytest.approx(want[f"diff_auc_euro_all{key}"])
    assert "best_visible_reference" not in evaluate_predictions({"raw": preds["raw"], "platt": preds["platt"]}, y,
                                                                n_bootstrap=0)[0]


def test_run_config_groups_by_the_tasks_field_and_fetches_bfcl(tmp_path):
    from acute.pipeline.config import load_config
    from acute.tasks.bfcl_data import SHA256

    p = tmp_path / "c.toml"
    p.write_text('[tasks.fc]\ntask = "apigen"\ndata = "x.jsonl"\n[tasks.b]\ntask = "bfcl"\n'
                 '[tasks.q]\ntask = "triviaqa"\ndata = "t.jsonl"\n[tasks.r]\ntask = "apigen"\ndata = "x.jsonl"\n'
                 'group_by = "id"\n[models.m]\n', encoding="utf-8")
    cfg = load_config(p, data_root=tmp_path)
    by = {t.key: t for t in cfg.tasks}
    assert by["fc"].group_by == "toolset" and by["b"].group_by == "toolset"
    assert by["q"].group_by is None and by["r"].group_by == RECORD_IDS
    # BFCL needs no data: its pinned wheel (version and hash) is part of the collection's identity
    assert by["b"].data == () and SHA256 in by["b"].identity()["data_source"]
    assert "builtin_sha256" not in by["b"].identity()
