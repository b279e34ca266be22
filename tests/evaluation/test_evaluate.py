from __future__ import annotations

import csv
import hashlib
import json

import numpy as np
import pytest

from acute.estimators.inputs import Inputs
from acute import metrics
from acute.errors import InputError
from acute.metrics.selective import aurc
from acute.estimators.baselines import BASELINES
from acute.estimators import ESTIMATORS
from acute.estimators.registry import ACUTE_VARIANTS
from acute.evaluation import evaluate_predictions, evaluate_store, split_ids
from acute.evaluation.markdown import results_markdown

from smaller import small_searches  # tests/smaller.py

PAPER_ROWS = list(BASELINES + ACUTE_VARIANTS)  # the paper's twelve rows
# the controls a store without metadata, prompts or last-prompt states feeds: the constant and the two stacks
# (acute-all over acute-pca10 and the raw confidence, visible-all over the raw confidence)
FED = ["constant", "acute-all", "visible-all"]


# ---------------------------------------------------------------- a store-like object
class FakeStore:
    """In-memory stand-in with the attributes evaluate_store reads from acute.store.Store."""

    def __init__(self, ids, correct, raw_confidence, layer_means, manifest=None):
        self.ids = list(ids)
        self.correct = np.asarray(correct, dtype=bool)
        self.raw_confidence = np.asarray(raw_confidence, dtype=np.float64)
        self.layer_means = np.asarray(layer_means, dtype=np.float32)
        self.manifest = manifest or {"model": "synthetic", "task": "planted"}
        self.records = [{"id": i, "correct": bool(c), "raw_confidence": float(r)}
                        for i, c, r in zip(self.ids, self.correct, self.raw_confidence)]

    def __len__(self):
        return len(self.ids)

    def select(self, idx):
        idx = np.asarray(idx)
        if idx.dtype == bool:
            idx = np.flatnonzero(idx)
        return FakeStore([self.ids[i] for i in idx], self.correct[idx], self.raw_confidence[idx],
                         self.layer_means[idx], self.manifest)


PLANT_LAYER = 2  # in the "early" third (layers 1-2 of L = 6)


def planted_store(n=300, n_layers=7, d=24, seed=0, id_prefix="q"):
    """Correctness is carried by a direction written into the residual stream at PLANT_LAYER
    (and so present in every later layer); raw confidence is overconfident noise."""
    rng = np.random.default_rng(seed)
    t = rng.uniform(size=n)
    correct = rng.uniform(size=n) < 1.0 / (1.0 + np.exp(-12.0 * (t - 0.5)))
    v = np.zeros(d)
    v[3] = 1.0
    h = np.empty((n, n_layers, d))
    state = rng.normal(scale=0.3, size=(n, d))
    h[:, 0] = state
    for layer in range(1, n_layers):
        state = state + rng.normal(scale=0.1, size=(n, d))
        if layer == PLANT_LAYER:
            state = state + 3.0 * t[:, None] * v
        h[:, layer] = state
    raw = rng.uniform(0.6, 1.0, size=n)  # uninformative and overconfident
    return FakeStore([f"{id_prefix}{i}" for i in range(n)], correct, raw, h)


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    store = planted_store()
    out = tmp_path_factory.mktemp("eval")
    res = evaluate_store(store, out_dir=out, n_bootstrap=20, seed=0, reliability="best", test_fraction=0.3,
                         estimators=PAPER_ROWS,
                         probe_params={"n_estimators": 20, "search_n_estimators": 20}, progress=False)
    return store, out, res


# ---------------------------------------------------------------- split
def test_split_rule_is_sha256_of_seed_and_id():
    ids = [f"id{i}" for i in range(50)] + list(range(50))
    train, test = split_ids(ids, test_fraction=0.3, seed=7)
    expect = [int.from_bytes(hashlib.sha256(f"7:{i}".encode()).digest()[:8], "big") / 2**64 < 0.3
              for i in ids]
    np.testing.assert_array_equal(test, expect)
    np.testing.assert_array_equal(train, ~np.array(expect))


def test_split_deterministic_and_order_independent():
    ids = [f"rec-{i}" for i in range(400)]
    tr1, te1 = split_ids(ids, 0.3, seed=0)
    tr2, te2 = split_ids(ids, 0.3, seed=0)
    np.testing.assert_array_equal(te1, te2)
    perm = np.random.default_rng(1).permutation(len(ids))
    _, te_shuf = split_ids([ids[i] for i in perm], 0.3, seed=0)
    assert {ids[i] for i in perm[te_shuf]} == {i for i, t in zip(ids, te1) if t}
    # a record's side does not depend on which other records exist
    _, te_half = split_ids(ids[:200], 0.3, seed=0)
    np.testing.assert_array_equal(te_half, te1[:200])
    # another seed gives another split
    _, te_other = split_ids(ids, 0.3, seed=1)
    assert not np.array_equal(te_other, te1)


def test_split_proportion_is_stable():
    ids = [f"x{i}" for i in range(20_000)]
    for frac in (0.1, 0.3, 0.5):
        _, te = split_ids(ids, frac, seed=3)
        sd = np.sqrt(frac * (1 - frac) / len(ids))
        assert abs(te.mean() - frac) < 4 * sd
    tr, te = split_ids(ids[:10], 0.0)
    assert tr.all() and not te.any()


def test_split_bad_input():
    with pytest.raises(ValueError, match="test_fraction"):
        split_ids(["a", "b"], 1.0)
    with pytest.raises(ValueError, match="test_fraction"):
        split_ids(["a", "b"], -0.1)
    with pytest.raises(ValueError, match="unique"):
        split_ids(["a", "b", "a"], 0.3)


# ---------------------------------------------------------------- evaluate_predictions
def test_evaluate_predictions_matches_metrics():
    rng = np.random.default_rng(2)
    y = rng.uniform(size=200) < 0.6
    good = np.clip(0.6 + 0.3 * (y - 0.5) + rng.normal(scale=0.1, size=200), 0, 1)
    bad = rng.uniform(size=200)
    rows = evaluate_predictions({"good": good, "bad": bad}, y, n_bootstrap=30, seed=4)
    assert [r["estimator"] for r in rows] == ["good", "bad"]
    for r, c in zip(rows, (good, bad)):
        assert r["n"] == 200 and r["accuracy"] == pytest.approx(y.mean())
        assert r["smece"] == pytest.approx(metrics.smece(c, y))
        assert r["brier"] == pytest.approx(metrics.brier(c, y))
        assert r["auroc"] == pytest.approx(metrics.auroc(c, y))
        for band in ("low", "med", "high", "all"):
            assert r[f"auc_euro_{band}"] == pytest.approx(metrics.auc_euro(c, y, band=band))
        # smECE: the percentile interval of the resampled values shifted by their bias (mean -
        # estimate), computed here by a plain loop over the same resamples
        draws = np.array([metrics.smece(c[i], y[i]) for i in metrics.bootstrap_indices(200, 30, 4)])
        shifted = draws - (draws.mean() - metrics.smece(c, y))
        assert (r["smece_ci_low"], r["smece_ci_high"]) == pytest.approx(tuple(np.percentile(shifted, [2.5, 97.5])))
        assert r["smece_ci_low"] <= r["smece"] <= r["smece_ci_high"]
        iv = metrics.bootstrap(metrics.auroc, c, y, n=30, seed=4)
        assert (r["auroc_ci_low"], r["auroc_ci_high"]) == pytest.approx((iv.low, iv.high))
        for key in ("smece", "auc_euro_all", "brier", "auroc"):
            assert r[f"{key}_ci_low"] <= r[f"{key}_ci_high"]
    assert rows[0]["auroc"] > 0.9 > rows[1]["auroc"]


def test_evaluate_predictions_edge_cases():
    y = np.array([1, 1, 1, 1])
    (row,) = evaluate_predictions({"c": np.array([0.9, 0.8, 0.7, 0.6])}, y, n_bootstrap=0)
    assert np.isnan(row["auroc"]) and "smece_ci_low" not in row
    assert row["brier"] == pytest.approx(np.mean((np.array([0.9, 0.8, 0.7, 0.6]) - 1) ** 2))
    with pytest.raises(ValueError, match="'c'.*entries"):
        evaluate_predictions({"c": np.array([0.5, 0.5])}, y)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        evaluate_predictions({"c": np.array([0.5, 0.5, 2.0, 0.1])}, y)
    with pytest.raises(ValueError, match="empty"):
        evaluate_predictions({}, y)


# ---------------------------------------------------------------- evaluate_store
def test_evaluate_store_writes_every_output(evaluated):
    _, out, res = evaluated
    for name in ("results.md", "results.csv", "results.json", "predictions.csv", "split.json",
                 "euro_curves.png"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    best = json.loads((out / "results.json").read_text())["best"]
    assert best["acute"] in ACUTE_VARIANTS and best["baseline"] in ESTIMATORS
    plotted = {p.name for p in out.glob("reliability_*.png")}
    assert plotted == {f"reliability_{n}.png" for n in ("raw", best["acute"], best["baseline"])}
    assert not list(out.glob(".partial-*"))
    md = (out / "results.md").read_text()
    main, selective = md.split("## Selective prediction")
    table = [ln for ln in main.splitlines() if ln.startswith("| ")]
    assert len(table) == 1 + 12 + 3  # header + one row per estimator + the controls fed
    sel = [ln for ln in selective.splitlines() if ln.startswith("| ")]
    assert len(sel) == len(table) and "AURC" in sel[0] and "coverage at 10% error" in sel[0]
    assert (out / "risk_coverage.png").read_bytes()[:4] == b"\x89PNG"
    assert "smECE" in table[0] and "AUROC" in table[0]
    assert any(ln.startswith("| raw |") for ln in table)
    assert "[" in table[1]  # intervals shown
    with open(out / "results.csv", newline="") as f:
        assert [r["estimator"] for r in csv.DictReader(f)] == PAPER_ROWS + FED


def test_evaluate_store_values_in_range(evaluated):
    _, _, res = evaluated
    # the controls this store can feed follow (no metadata, prompts or last-prompt states: FED)
    assert [r["estimator"] for r in res.rows] == PAPER_ROWS + FED
    acc = {r["accuracy"] for r in res.rows}
    assert len(acc) == 1 and acc.pop() == pytest.approx(res.test_correct.mean())
    for r in res.rows:
        for key in ("smece", "auc_euro_low", "auc_euro_med", "auc_euro_high", "auc_euro_all",
                    "brier", "auroc", "aurc", "e_aurc", "coverage_05", "coverage_10"):
            assert 0.0 <= r[key] <= 1.0, (r["estimator"], key)
        # (a percentile interval need not contain the estimate: resampling inflates smECE)
        for key in ("smece", "auc_euro_all", "brier", "auroc", "aurc", "e_aurc", "coverage_05", "coverage_10"):
            assert 0.0 <= r[f"{key}_ci_low"] <= r[f"{key}_ci_high"] <= 1.0, (r["estimator"], key)
        # the selective columns are those of acute.metrics.selective on the out-of-fold predictions
        assert r["aurc"] == pytest.approx(aurc(res.predictions[r["estimator"]], res.test_correct), abs=1e-12)
        for key in ("aurc", "coverage_05", "coverage_10"):  # paired to the reference, like auc-euro
            assert r[f"diff_{key}_ci_low"] <= r[f"diff_{key}"] + 1e-12 or r[f"diff_{key}_ci_high"] >= r[f"diff_{key}"]
    for name in ("acute-early", "acute-mid", "acute-late"):
        assert isinstance(res.row(name)["layer"], int)
    assert res.row("acute-early")["layer"] == PLANT_LAYER  # layer 1 carries no signal
    assert res.row("raw")["layer"] is None


def test_acute_beats_raw_on_planted_signal(evaluated):
    _, _, res = evaluated
    raw = res.row("raw")
    for name in ACUTE_VARIANTS:
        row = res.row(name)
        assert row["auc_euro_all"] > raw["auc_euro_all"] + 0.05, name
        assert row["auroc"] > 0.8, name
    assert res.row("acute-mid")["smece"] < raw["smece"]


def test_results_json_equals_recomputation_from_predictions(evaluated):
    store, out, res = evaluated
    doc = json.loads((out / "results.json").read_text())
    assert doc["complete"] is True
    split = doc["split"]
    train_mask, test_mask = split_ids(store.ids, 0.3, seed=0)
    assert (split["seed"], split["test_fraction"]) == (0, 0.3)
    assert (split["n_train"], split["n_test"]) == (int(train_mask.sum()), int(test_mask.sum()))
    test_ids = [i for i, t in zip(store.ids, test_mask) if t]
    assert split["test_ids_sha256"] == hashlib.sha256("\n".join(sorted(test_ids)).encode()).hexdigest()
    assert json.loads((out / "split.json").read_text())["test"] == test_ids

    with open(out / "predictions.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["id"] for r in rows] == test_ids
    y = np.array([int(r["correct"]) for r in rows])
    np.testing.assert_array_equal(y, store.correct[test_mask])
    by_name = {r["estimator"]: r for r in doc["results"]}
    assert list(by_name) == PAPER_ROWS + FED
    for name in PAPER_ROWS + FED:
        c = np.array([float(r[name]) for r in rows])
        got = by_name[name]
        assert got["smece"] == pytest.approx(metrics.smece(c, y), abs=1e-12)
        assert got["brier"] == pytest.approx(metrics.brier(c, y), abs=1e-12)
        assert got["auroc"] == pytest.approx(metrics.auroc(c, y), abs=1e-12)
        for band in ("low", "med", "high", "all"):
            assert got[f"auc_euro_{band}"] == pytest.approx(metrics.auc_euro(c, y, band=band), abs=1e-12)
        iv = metrics.bootstrap(lambda a, b: metrics.auc_euro(a, b, band="all"), c, y, n=20, seed=0)
        assert (got["auc_euro_all_ci_low"], got["auc_euro_all_ci_high"]) == pytest.approx((iv.low, iv.high))


def test_raw_row_is_the_raw_confidence(evaluated):
    store, _, res = evaluated
    _, test_mask = split_ids(store.ids, 0.3, seed=0)
    np.testing.assert_array_equal(res.predictions["raw"], store.raw_confidence[test_mask])


def test_test_store_mode_and_subset(tmp_path, caplog):
    train = planted_store(n=120, seed=1, id_prefix="a")
    test = planted_store(n=60, seed=2, id_prefix="b")
    caplog.set_level("INFO", logger="acute")
    res = evaluate_store(train, test_store=test, out_dir=tmp_path, estimators=["raw", "platt", "isotonic"],
                         n_bootstrap=0, progress=False)
    assert res.split["mode"] == "test_store"
    assert (res.split["n_train"], res.split["n_test"]) == (120, 60)
    assert res.test_ids == test.ids
    assert [r["estimator"] for r in res.rows] == ["raw", "platt", "isotonic", *FED]
    assert str(tmp_path.resolve()) in caplog.text
    assert {p.name for p in tmp_path.glob("reliability_*.png")} == {
        f"reliability_{n}.png" for n in ["raw", "platt", "isotonic", *FED]}
    md = (tmp_path / "results.md").read_text()
    assert "[" not in md.split("\n\n", 1)[1]  # no intervals without bootstrap


def test_bad_stores_raise_clear_errors(tmp_path):
    s = planted_store(n=60)
    single = FakeStore(s.ids, np.ones(60, bool), s.raw_confidence, s.layer_means)
    with pytest.raises(ValueError, match="single class"):
        evaluate_store(single, out_dir=tmp_path, n_bootstrap=0, progress=False, test_fraction=0.3)
    with pytest.raises(ValueError, match="60 correct and 0 wrong.*at least 5 of each class"):
        evaluate_store(single, out_dir=tmp_path, n_bootstrap=0, progress=False)
    with pytest.raises(ValueError, match="test split is empty"):
        evaluate_store(s, out_dir=tmp_path, test_fraction=0.0, n_bootstrap=0, progress=False)
    tiny = FakeStore(["u", "v"], [True, False], [0.5, 0.6], s.layer_means[:2])
    with pytest.raises(ValueError, match="fewer than"):
        evaluate_store(tiny, test_store=s, out_dir=tmp_path, n_bootstrap=0, progress=False,
                       estimators=["raw", "acute-pca10"])
    few_wrong = FakeStore(s.ids, np.arange(60) >= 2, s.raw_confidence, s.layer_means)
    with pytest.raises(ValueError, match="at least 3 correct and 3 wrong"):
        evaluate_store(few_wrong, test_store=s, out_dir=tmp_path, n_bootstrap=0, progress=False,
                       estimators=["acute-mid"])
    other = FakeStore(s.ids, s.correct, s.raw_confidence, s.layer_means[:, :, :8])
    with pytest.raises(ValueError, match="test_store"):
        evaluate_store(s, test_store=other, out_dir=tmp_path, n_bootstrap=0, progress=False,
                       estimators=["acute-cosine"])
    with pytest.raises(ValueError, match="unknown estimator"):
        evaluate_store(s, out_dir=tmp_path, estimators=["temperature"], progress=False)
    assert not (tmp_path / "results.json").exists()


def test_crash_leaves_no_results_json(tmp_path, monkeypatch):
    import acute.evaluation.plots

    def boom(*a, **k):
        raise RuntimeError("disk full")

    monkeypatch.setattr(acute.evaluation.plots, "euro_curves", boom)
    with pytest.raises(RuntimeError, match="disk full"), small_searches():  # the default controls, smaller
        evaluate_store(planted_store(n=80), out_dir=tmp_path, estimators=["raw", "hre"], cv=2, repeats=1,
                       n_bootstrap=0, progress=False)
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- cross-validation (default mode)
CV_NAMES = ["raw", "platt", "acute-cosine", "acute-cosine-stacked"]
SMALL = {"n_estimators": 15, "search_n_estimators": 10}


@pytest.fixture(scope="module")
def cross_validated(tmp_path_factory):
    store = planted_store(n=120, seed=3)
    out = tmp_path_factory.mktemp("cv")
    res = evaluate_store(store, out_dir=out, estimators=CV_NAMES, cv=3, repeats=2, n_bootstrap=40,
                         probe_params=SMALL, progress=False)
    return store, out, res


def _read_predictions(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    return rows


def test_cv_scores_every_record_out_of_fold_in_every_repeat(cross_validated):
    from acute.estimators.calibration import make_calibrator
    from acute.estimators import ActivationProbe

    store, out, res = cross_validated
    assert res.split["mode"] == "cv" and (res.split["n_splits"], res.split["n_repeats"]) == (3, 2)
    folds = json.loads((out / "folds.json").read_text())
    assert folds["ids"] == store.ids and len(folds["fold"]) == 2
    files = [out / "predictions.csv", out / "predictions-repeat1.csv"]
    y = store.correct.astype(int)
    for r, path in enumerate(files):
        rows = _read_predictions(path)
        assert [row["id"] for row in rows] == store.ids
        fold = np.array(folds["fold"][r])
        assert sorted(set(fold)) == [0, 1, 2]
        np.testing.assert_array_equal([float(row["raw"]) for row in rows], store.raw_confidence)
        for k in range(3):  # refit by hand on the other folds and predict this one
            tr, te = np.flatnonzero(fold != k), np.flatnonzero(fold == k)
            assert abs(y[tr].mean() - y[te].mean()) < 0.15  # stratified
            platt = make_calibrator("platt").fit(store.raw_confidence[tr], y[tr])
            np.testing.assert_allclose([float(rows[i]["platt"]) for i in te],
                                       platt.predict_proba(store.raw_confidence[te])[:, 1], atol=1e-12)
            probe = ActivationProbe(view="cosine", random_state=0, **SMALL).fit(Inputs.of(store.layer_means[tr], store.raw_confidence[tr]), y[tr])
            np.testing.assert_allclose([float(rows[i]["acute-cosine"]) for i in te],
                                       probe.predict_proba(Inputs.of(store.layer_means[te], store.raw_confidence[te]))[:, 1],
                                       atol=1e-12)
        np.testing.assert_allclose(res.cv_predictions["platt"][r], [float(row["platt"]) for row in rows])
    assert not np.array_equal(folds["fold"][0], folds["fold"][1])  # a repeat reshuffles


def test_cv_rows_are_means_over_repeats_with_paired_differences(cross_validated):
    store, out, res = cross_validated
    y = store.correct.astype(int)
    preds = res.cv_predictions
    by_name = {r["estimator"]: r for r in json.loads((out / "results.json").read_text())["results"]}
    for name in CV_NAMES:
        assert by_name[name]["smece"] == pytest.approx(np.mean([metrics.smece(p, y) for p in preds[name]]))
        assert by_name[name]["auc_euro_all"] == pytest.approx(np.mean([metrics.auc_euro(p, y) for p in preds[name]]))
    ref = by_name["raw"]["reference"]
    assert ref == max(["raw", "platt"], key=lambda n: by_name[n]["auc_euro_all"])
    idx = metrics.bootstrap_indices(y.size, 40, seed=0)

    def stat(name, i):
        return np.mean([metrics.auc_euro(p[i], y[i]) for p in preds[name]])

    for name in CV_NAMES:
        row = by_name[name]
        assert row["diff_auc_euro_all"] == pytest.approx(row["auc_euro_all"] - by_name[ref]["auc_euro_all"])
        d = np.array([stat(name, i) - stat(ref, i) for i in idx])
        lo, hi = np.percentile(d, [2.5, 97.5])
        assert (row["diff_auc_euro_all_ci_low"], row["diff_auc_euro_all_ci_high"]) == pytest.approx((lo, hi))
    assert by_name[ref]["diff_auc_euro_all"] == 0.0
    # the planted signal lies in the hidden states, not in the raw confidence
    assert by_name["acute-cosine-stacked"]["diff_auc_euro_all_ci_low"] > 0
    md = (out / "results.md").read_text()
    assert f"Δ auc-euro all vs {ref}" in md and "(reference)" in md and "3-fold stratified x 2 repeats" in md


def test_cv_folds_group_duplicate_ids():
    from acute.evaluation.crossval import cv_folds

    rng = np.random.default_rng(0)
    ids = [f"q{i // 2}" for i in range(80)]  # every id twice
    y = rng.random(80) < 0.5
    for rep in cv_folds(ids, y, n_splits=4, n_repeats=2, seed=1):
        seen = set()
        for tr, te in rep:
            test_ids = {ids[i] for i in te}
            assert not test_ids & {ids[i] for i in tr}
            assert not test_ids & seen
            seen |= test_ids
        assert len(seen) == 40


def test_cv_needs_enough_records_of_each_class(tmp_path):
    s = planted_store(n=60)
    three_wrong = FakeStore(s.ids, np.arange(60) >= 3, s.raw_confidence, s.layer_means)
    with pytest.raises(ValueError, match="57 correct and 3 wrong.*5-fold.*at least 5 of each class"):
        evaluate_store(three_wrong, out_dir=tmp_path, estimators=["raw"], progress=False)
    nine_wrong = FakeStore(s.ids, np.arange(60) >= 9, s.raw_confidence, s.layer_means)
    # 2 outer folds leave 4 or 5 wrong records per training fold; the stacked probe's own 5-fold
    # cross-validation needs 5 of each class in every training fold
    with pytest.raises(ValueError, match="acute-pca10-stacked run stratified 5-fold.*at least 5 correct and 5 wrong"):
        evaluate_store(nine_wrong, out_dir=tmp_path, estimators=["acute-pca10-stacked"], cv=2, progress=False)
    assert not (tmp_path / "results.json").exists()


def test_evaluate_predictions_paired_difference_by_hand():
    rng = np.random.default_rng(5)
    y = rng.random(150) < 0.4
    platt = np.clip(0.4 + 0.2 * (y - 0.5) + rng.normal(scale=0.2, size=150), 0, 1)
    probe = np.clip(0.4 + 0.4 * (y - 0.5) + rng.normal(scale=0.15, size=150), 0, 1)
    rows = evaluate_predictions({"platt": platt, "probe": probe}, y, n_bootstrap=25, seed=2)
    assert all(r["reference"] == "platt" for r in rows)
    idx = metrics.bootstrap_indices(150, 25, seed=2)
    d = [metrics.smece(probe[i], y[i]) - metrics.smece(platt[i], y[i]) for i in idx]
    assert rows[1]["diff_smece"] == pytest.approx(metrics.smece(probe, y) - metrics.smece(platt, y))
    assert (rows[1]["diff_smece_ci_low"], rows[1]["diff_smece_ci_high"]) == pytest.approx(
        tuple(np.percentile(d, [2.5, 97.5])))
    # without a baseline among the rows there is nothing to compare with
    assert "reference" not in evaluate_predictions({"probe": probe}, y, n_bootstrap=0)[0]
    with pytest.raises(ValueError, match="reference 'beta'"):
        evaluate_predictions({"probe": probe}, y, reference="beta")
    table = results_markdown(rows)
    assert "Δ auc-euro all vs platt" in table.splitlines()[0]


def test_plain_rows_equal_their_own_fit_when_read_off_the_stacked_probe():
    """cosine: the plain row is the stacked probe's forest; mid: fitted on its own (its layer search
    uses 3 folds, the stacked probe's 5)."""
    from acute.evaluation.crossval import fit_predict
    from acute.estimators import make_estimator

    s = planted_store(n=90, seed=5)
    y = s.correct.astype(int)
    X = s.layer_means.astype(np.float32)
    got = fit_predict(["acute-cosine", "acute-cosine-stacked", "acute-mid", "acute-mid-stacked"],
                      Inputs.of(X[:60], s.raw_confidence[:60]), y[:60], Inputs.of(X[60:], s.raw_confidence[60:]),
                      probe_params=SMALL)
    for name in ("acute-cosine", "acute-mid"):
        ref = make_estimator(name, probe_params=SMALL).fit(Inputs.of(X[:60], s.raw_confidence[:60]), y[:60])
        np.testing.assert_allclose(got[name], ref.predict_proba(Inputs.of(X[60:], s.raw_confidence[60:]))[:, 1], atol=1e-12)


def test_parseable_only_benchmark_recomputes_the_table_on_parsed_answers(tmp_path):
    """benchmarks/parseable_only.py: the evaluation's out-of-fold predictions of every repeat,
    restricted to the records whose answer parsed, give the table evaluate_predictions gives on
    that subset (computed here directly)."""
    import runpy
    from pathlib import Path

    from acute.store import StoreWriter

    rng = np.random.default_rng(0)
    n = 60
    y = rng.uniform(size=n) < 0.6
    failed = np.arange(n) % 10 == 0  # unparsed: labelled wrong
    y[failed] = False
    recs = [{"id": f"q{i}", "prompt": "Q?", "generation": "x", "answer": "x", "gold": ["A"], "correct": bool(y[i]),
             "parse_error": "no option named" if failed[i] else None, "finish_reason": "eos", "meta": {}}
            for i in range(n)]
    m = {"model": "tiny", "num_layers": 2, "hidden_size": 4, "task": "default",
         "generation": {"max_new_tokens": 4, "do_sample": False, "chat": False, "pool": "decoding"}}
    with StoreWriter(tmp_path / "s", m, dtype="float32") as w:
        w.add(recs, rng.normal(size=(n, 3, 4)), [np.array([-0.5])] * n)
    preds = {"raw": rng.uniform(size=(2, n)), "platt": rng.uniform(size=(2, n))}
    ev = tmp_path / "eval"
    ev.mkdir()
    for r, name in enumerate(["predictions.csv", "predictions-repeat1.csv"]):
        with open(ev / name, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["id", "correct", "raw", "platt"])
            for i in rng.permutation(n):  # any record order
                w.writerow([f"q{i}", int(y[i]), preds["raw"][r, i], preds["platt"][r, i]])
    bench = runpy.run_path(str(Path(__file__).resolve().parents[2] / "benchmarks" / "parseable_only.py"))
    text = bench["section"](ev, tmp_path / "s", 50)
    keep = ~failed
    want = {r["estimator"]: r for r in evaluate_predictions({k: v[:, keep] for k, v in preds.items()}, y[keep],
                                                            n_bootstrap=50)}
    assert "54 of 60 answers parsed" in text and "6 of the 6 unparsed are labelled wrong" in text
    for name in ("raw", "platt"):
        line = next(ln for ln in text.splitlines() if ln.startswith(f"| {name} |"))
        assert f"| {want[name]['auc_euro_all']:.4f} |" in line


def test_answer_controls_benchmark_fits_reply_controls_on_the_evaluations_folds(tmp_path):
    """benchmarks/answer_controls.py (acute's answer-surface and answer-text controls, whose
    features tests/evaluation/test_visible_control.py checks by hand): folds.json (ids in any order) read
    back as the folds cv_folds made; a reply surface that decides correctness (short replies are
    right) gives answer-surface an AUROC near 1 while the evaluation's rows stay at chance, and it
    is above the default with both intervals."""
    import runpy
    from pathlib import Path

    from acute.evaluation import read_folds
    from acute.evaluation.crossval import cv_folds
    from acute.store import StoreWriter

    bench = runpy.run_path(str(Path(__file__).resolve().parents[2] / "benchmarks" / "answer_controls.py"))

    rng = np.random.default_rng(1)
    n = 80
    tokens = rng.integers(1, 40, size=n)
    y = tokens < 20
    ids = [f"q{i}" for i in range(n)]
    recs = [{"id": ids[i], "prompt": "Call a tool.", "generation": "[]", "answer": "[]", "gold": ["[]"],
             "correct": bool(y[i]), "parse_error": None, "finish_reason": "eos", "meta": {"n_calls": int(i % 3)}}
            for i in range(n)]
    logprobs = [np.full(t, np.log(rng.uniform(0.2, 0.8)) / t) for t in tokens]  # raw: uninformative
    m = {"model": "tiny", "num_layers": 2, "hidden_size": 4, "task": "default",
         "generation": {"max_new_tokens": 40, "do_sample": False, "chat": False, "pool": "decoding"}}
    with StoreWriter(tmp_path / "s", m, dtype="float32") as w:
        w.add(recs, rng.normal(size=(n, 3, 4)), logprobs)
    folds = cv_folds(ids, y, n_splits=4, n_repeats=2, seed=0)
    ev = tmp_path / "eval"
    ev.mkdir()
    preds = {name: rng.uniform(size=(2, n)) for name in ("platt", "acute-pca10-stacked", "tfidf+platt")}
    for r, name in enumerate(["predictions.csv", "predictions-repeat1.csv"]):
        with open(ev / name, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["id", "correct", *preds])
            for i in range(n):
                w.writerow([ids[i], int(y[i]), *(p[r, i] for p in preds.values())])
    order = rng.permutation(n)  # folds.json may list the records in another order
    fold_of = []
    for rep in folds:
        f = np.empty(n, dtype=int)
        for k, (_, te) in enumerate(rep):
            f[te] = k
        fold_of.append(f[order].tolist())
    (ev / "folds.json").write_text(json.dumps({"mode": "cv", "seed": 0, "n_splits": 4, "n_repeats": 2,
                                               "ids": [ids[i] for i in order], "fold": fold_of}))
    back = read_folds(ev, ids)
    for rep, want in zip(back, folds):
        for (tr, te), (tr0, te0) in zip(rep, want):
            np.testing.assert_array_equal(te, np.sort(te0))
            np.testing.assert_array_equal(tr, np.sort(tr0))
    with pytest.raises(InputError, match="folds.json: its records"):
        read_folds(ev, ids[1:])
    with pytest.raises(InputError, match="not a cross-validated"):
        read_folds(tmp_path, ids)

    text = bench["section"](ev, tmp_path / "s", ["n_calls"], 30)
    cells = [[c.strip() for c in ln.strip("|").split("|")] for ln in text.splitlines() if ln.startswith("| ")]
    rows = {c[0]: c for c in cells}
    assert rows["answer-surface"][4] == "(reference)" and rows["answer-text"][5] == "(reference)"
    assert float(rows["answer-surface"][3]) > 0.95 and float(rows["acute-pca10-stacked"][3]) < 0.75
    _, high = (float(v) for v in rows["acute-pca10-stacked"][4].split("[")[1].split("]")[0].split(", "))
    assert high < 0  # the default (random here) loses to the surface that decides correctness
    assert set(rows) >= {"platt", "acute-pca10-stacked", "tfidf+platt", "answer-text"}
    with pytest.raises(InputError, match="q0"):
        bench["section"](ev, _store_without(tmp_path, recs[1:], logprobs[1:], m), [], 30)
    with pytest.raises(InputError, match="n_bootstrap"):
        bench["section"](ev, tmp_path / "s", [], 0)


def test_apigen_errors_benchmark_kinds_and_auroc_per_kind(tmp_path):
    """benchmarks/apigen_errors.py: the error kinds of hand-made replies, first rule that applies;
    each row's AUROC is the mean over repeats of scikit-learn's on the correct replies and that
    kind's (the reference library, used only here)."""
    import runpy
    from pathlib import Path

    from sklearn.metrics import roc_auc_score

    from acute.store import StoreWriter

    bench = runpy.run_path(str(Path(__file__).resolve().parents[2] / "benchmarks" / "apigen_errors.py"))
    kind = bench["error_kind"]
    gold = [{"name": "f", "arguments": {"x": 1}}, {"name": "g", "arguments": {}}]
    assert kind(None, gold) == "unparsed"
    assert kind(gold[:1], gold) == "number of calls"
    assert kind([{"name": "h", "arguments": {"x": 1}}, gold[1]], gold) == "tool"
    assert kind([gold[1], {"name": "f", "arguments": {"y": 1}}], gold) == "arguments named"
    assert kind([gold[1], {"name": "f", "arguments": {"x": 2}}], gold) == "argument values"

    rng = np.random.default_rng(2)
    n = 60
    calls = json.dumps(gold)
    replies = [calls, None, json.dumps(gold[:1]), json.dumps([gold[1], {"name": "f", "arguments": {"x": 2}}])]
    recs = [{"id": f"r{i}", "prompt": "p", "generation": "g", "answer": replies[i % 4], "gold": [calls],
             "correct": i % 4 == 0, "parse_error": "not a list" if i % 4 == 1 else None, "finish_reason": "eos",
             "meta": {}} for i in range(n)]
    m = {"model": "tiny", "num_layers": 2, "hidden_size": 4, "task": "apigen",
         "generation": {"max_new_tokens": 4, "do_sample": False, "chat": False, "pool": "decoding"}}
    with StoreWriter(tmp_path / "s", m, dtype="float32") as w:
        w.add(recs, rng.normal(size=(n, 3, 4)), [np.array([-0.5])] * n)
    y = np.array([r["correct"] for r in recs])
    preds = {name: rng.uniform(size=(2, n)) + 0.3 * y for name in ("tfidf+platt", "acute-pca10-stacked")}
    ev = tmp_path / "eval"
    ev.mkdir()
    for r, name in enumerate(["predictions.csv", "predictions-repeat1.csv"]):
        with open(ev / name, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["id", "correct", *preds])
            for i in range(n):
                w.writerow([f"r{i}", int(y[i]), *(p[r, i] for p in preds.values())])
    text = bench["section"](ev, tmp_path / "s", list(preds), 50)
    cells = {c[0]: c for c in ([v.strip() for v in ln.strip("|").split("|")] for ln in text.splitlines()
                               if ln.startswith("| "))}
    for row, members in (("all wrong", ~y), ("unparsed", np.arange(n) % 4 == 1),
                         ("number of calls", np.arange(n) % 4 == 2), ("argument values", np.arange(n) % 4 == 3)):
        sub = members | y
        assert cells[row][1] == str(int(members.sum()))
        for j, name in enumerate(preds):
            want = np.mean([roc_auc_score(y[sub], preds[name][r, sub]) for r in range(2)])
            assert cells[row][2 + j] == f"{want:.3f}"
    assert cells["tool"][1] == "0" and cells["(correct)"][1] == "15"
    with pytest.raises(InputError, match="at least two"):
        bench["section"](ev, tmp_path / "s", ["raw"], 50)


def _store_without(tmp_path, recs, logprobs, m):
    from acute.store import StoreWriter

    with StoreWriter(tmp_path / "fewer", m, dtype="float32") as w:
        w.add(recs, np.zeros((len(recs), 3, 4)), logprobs)
    return tmp_path / "fewer"


def test_the_default_table_and_all():
    """No names: the baselines, the two forests without a layer search plain and stacked, auto;
    'all' (or ['all']): every estimator of the registry, in its order; names are kept as given."""
    from acute.estimators.baselines import BASELINES
    from acute.estimators.registry import ESTIMATORS
    from acute.evaluation.settings import estimator_names

    assert estimator_names(None) == list(BASELINES) + ["acute-pca10", "acute-cosine", "acute-pca10-stacked",
                                                       "acute-cosine-stacked", "auto"]
    assert estimator_names("all") == estimator_names(["all"]) == list(ESTIMATORS) and "acute-mid" in ESTIMATORS
    assert estimator_names(["platt", "acute-mid"]) == ["platt", "acute-mid"]
    with pytest.raises(ValueError, match="duplicates"):
        estimator_names(["platt", "platt"])


def test_read_predictions_gives_back_what_the_evaluation_wrote(cross_validated, tmp_path):
    """Every repeat's out-of-fold predictions, in the written record order, equal the result's
    arrays; a missing folder, another repeat's records or an unknown column name the file."""
    import shutil

    from acute.evaluation import read_predictions

    store, out, res = cross_validated
    ids, y, preds = read_predictions(out)
    assert ids == list(store.ids) and y.tolist() == store.correct.astype(int).tolist()
    assert list(preds) == list(res.cv_predictions)
    for name, arr in res.cv_predictions.items():
        np.testing.assert_array_equal(preds[name], arr)
    assert list(read_predictions(out, ["platt"])[2]) == ["platt"]
    with pytest.raises(ValueError, match="is not an evaluation folder"):
        read_predictions(tmp_path / "nothing")
    with pytest.raises(ValueError, match="no column for"):
        read_predictions(out, ["temperature"])
    bad = tmp_path / "bad"
    shutil.copytree(out, bad)
    lines = (bad / "predictions-repeat1.csv").read_text().splitlines()
    (bad / "predictions-repeat1.csv").write_text("\n".join(lines[:-1]) + "\n")
    with pytest.raises(ValueError, match="predictions-repeat1.csv: its records are not those of"):
        read_predictions(bad)


def test_coverage_at_10pct_error_stands_beside_its_certified_counterpart():
    """With folds, each row carries the coverage certificates fitted on the other folds give
    (acute.metrics.certify.cross_certified, checked there): computed here fold by fold with
    certify_threshold, averaged over repeats; the hindsight coverage_10 is at least as large on
    well-ranked confidences. The selective table shows it beside coverage at 10% error."""
    from scipy.special import expit

    from acute.evaluation.markdown import selective_markdown
    from acute.metrics.certify import certify_threshold

    rng = np.random.default_rng(7)
    n = 600
    conf = expit(2.5 * rng.normal(size=n) + 1.0)
    y = (rng.uniform(size=n) < conf).astype(int)
    preds = np.stack([conf, np.clip(conf + rng.normal(0, 0.02, n), 0, 1)])
    folds = [[(np.setdiff1d(np.arange(n), te), te) for te in np.array_split(rng.permutation(n), 5)]
             for _ in range(2)]
    (row,) = evaluate_predictions({"good": preds}, y, n_bootstrap=0, folds=folds)
    covered, trusted_all, valid = [], [], []
    for c, rep in zip(preds, folds):
        trusted = np.zeros(n, bool)
        for tr, te in rep:
            cert = certify_threshold(c[tr], y[tr], 0.1, 0.1)
            valid.append(cert.valid)
            trusted[te] = cert.valid and c[te] >= cert.threshold
        covered.append(trusted.mean())
        trusted_all.append(trusted)
    t = np.concatenate(trusted_all)
    assert row["certified_coverage_10"] == pytest.approx(np.mean(covered))
    assert row["certified_error_10"] == pytest.approx(1 - np.tile(y, 2)[t].mean())
    assert row["certified_folds_10"] == pytest.approx(np.mean(valid)) and 0 < np.mean(valid) < 1
    assert 0 < row["certified_coverage_10"] <= row["coverage_10"]
    table = selective_markdown([row])
    assert "certified coverage at 10% error" in table.splitlines()[0]
    assert (f"| **{row['coverage_10']:.3f}** | {row['certified_coverage_10']:.3f} "
            f"({row['certified_error_10']:.3f}; {np.mean(valid):.2f}) |") in table
    # no folds (a held-out split): no certified columns, no such column
    (plain,) = evaluate_predictions({"good": conf}, y, n_bootstrap=0)
    assert "certified_coverage_10" not in plain
    assert "certified coverage" not in selective_markdown([plain])
