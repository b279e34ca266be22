"""The control rows (acute.estimators.controls), the comparison statistics (acute.metrics.intervals) and how
evaluate_store adds, skips and groups them."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats

from acute.estimators.inputs import CONFIDENCE, METADATA, QUESTION, Inputs
from acute import metrics
from acute.estimators.controls import (ConstantEstimator, MetadataPlatt, TextPlatt, metadata_matrix,
                            within_group_auroc)
from acute.evaluation.crossval import cv_folds
from acute.errors import InputError
from acute.evaluation import evaluate_predictions, evaluate_store
from smaller import small_searches  # tests/smaller.py
from acute.metrics.intervals import (bias_shifted_interval, bootstrap_p_value, corrected_t_test, fold_differences,
                             holm)


# ---------------------------------------------------------------- synthetic data
def category_data(n=400, seed=0):
    """Correctness is set by the category alone (A: 90% right, B: 10%); the raw confidence is noise."""
    rng = np.random.default_rng(seed)
    cat = rng.choice(["A", "B"], size=n)
    y = rng.uniform(size=n) < np.where(cat == "A", 0.9, 0.1)
    conf = rng.uniform(0.2, 0.9, size=n)
    return cat, y, conf


class StoreWithRecords:
    """The attributes evaluate_store reads, with records (metadata, prompts) and last-prompt states."""

    def __init__(self, n=240, seed=0, with_meta=True, poolings=("mean", "last-prompt", "last-answer"), task="default"):
        rng = np.random.default_rng(seed)
        cat, y, conf = category_data(n, seed)
        self.ids = [f"q{i}" for i in range(n)]
        self.correct = y
        self.raw_confidence = conf
        # the prompt's last-token states carry the category; the answer's mean states are noise
        d, layers = 12, 4
        self.layer_means = rng.normal(size=(n, layers, d)).astype(np.float32)
        self.last_prompt = rng.normal(size=(n, layers, d)).astype(np.float32)
        self.last_prompt[:, :, 0] += np.where(cat == "A", 2.0, -2.0)[:, None]
        self.poolings = tuple(poolings)
        self.manifest = {"model": "synthetic", "task": task}
        words = {"A": "capital city of", "B": "square root of"}
        self.records = [{"id": i, "correct": bool(c), "raw_confidence": float(r),
                         "prompt": f"Question {k}: what is the {words[g]} thing {k}?",
                         "meta": ({"category": g, "difficulty": "easy" if k % 2 else "hard"} if with_meta else {})}
                        for k, (i, c, r, g) in enumerate(zip(self.ids, y, conf, cat))]

    def __len__(self):
        return len(self.ids)

    def states(self, pooling):
        return {"mean": self.layer_means, "last-prompt": self.last_prompt}[pooling]


# ---------------------------------------------------------------- estimators
def test_constant_predicts_the_training_base_rate():
    y = np.array([1, 0, 0, 1, 1])
    p = ConstantEstimator().fit(Inputs(n=len(y)), y).predict_proba(Inputs.of(confidence=np.full(3, 0.4)))
    np.testing.assert_allclose(p, [[0.4, 0.6]] * 3)


def test_metadata_platt_learns_the_category_and_ignores_unseen_values():
    cat, y, conf = category_data()
    meta = np.column_stack([cat])
    est = MetadataPlatt().fit(Inputs({METADATA: meta, CONFIDENCE: conf}), y)
    p = est.predict_proba(Inputs({METADATA: meta, CONFIDENCE: conf}))[:, 1]
    assert metrics.auroc(p, y) > 0.85 > metrics.auroc(conf, y) + 0.2
    # an unseen category has all-zero one-hots: only the confidence term and the intercept remain
    unseen = est.predict_proba(Inputs({METADATA: np.array([["Z"], ["Z"]], dtype=object), CONFIDENCE: np.array([0.3, 0.7])}))[:, 1]
    coef, b = est.model_.coef_[0], est.model_.intercept_[0]
    want = 1 / (1 + np.exp(-(coef[0] * np.log(np.array([0.3, 0.7]) / (1 - np.array([0.3, 0.7]))) + b)))
    np.testing.assert_allclose(unseen, want, rtol=1e-9)


def test_text_control_reads_the_question_words():
    cat, y, conf = category_data()
    texts = [f"what is the {'capital city of' if c == 'A' else 'square root of'} item" for c in cat]
    p = TextPlatt().fit(Inputs({QUESTION: texts, CONFIDENCE: conf}), y).predict_proba(Inputs({QUESTION: texts, CONFIDENCE: conf}))[:, 1]
    assert metrics.auroc(p, y) > 0.85
    with pytest.raises(InputError, match="not a string"):
        TextPlatt().fit(Inputs({QUESTION: [1] * len(y), CONFIDENCE: conf}), y)


def test_metadata_matrix_names_the_field_and_the_record():
    recs = [{"id": "a", "meta": {"subject": "x"}}, {"id": "b", "meta": {}}]
    with pytest.raises(InputError, match=r"record 'b' has no metadata field 'subject'"):
        metadata_matrix(recs, ["subject"])
    assert metadata_matrix(recs[:1], ["subject"]).tolist() == [["x"]]


def test_within_group_auroc_by_hand():
    # group g1: confidences 0.9 (right), 0.2 (wrong), 0.6 (wrong) -> AUROC 1.0 (2 pairs, both ordered)
    # group g2: 0.3 (right), 0.5 (wrong), 0.4 (right), 0.1 (wrong) -> pairs (right > wrong):
    #   0.3>0.5 no, 0.3>0.1 yes, 0.4>0.5 no, 0.4>0.1 yes -> 2/4 = 0.5
    # group g3: one class -> left out
    conf = np.array([0.9, 0.2, 0.6, 0.3, 0.5, 0.4, 0.1, 0.7, 0.8])
    y = np.array([1, 0, 0, 1, 0, 1, 0, 1, 1])
    g = ["g1"] * 3 + ["g2"] * 4 + ["g3"] * 2
    value, skipped = within_group_auroc(conf, y, g)
    assert value == pytest.approx((3 * 1.0 + 4 * 0.5) / 7)
    assert skipped == ["g3"]


# ---------------------------------------------------------------- statistics
def test_corrected_t_test_matches_the_formula():
    d = np.array([0.01, 0.03, -0.005, 0.02, 0.015, 0.0, 0.025, 0.01, 0.005, 0.02])
    ratio = 0.25  # 5-fold: n_test / n_train
    t = corrected_t_test(d, ratio)
    se = math.sqrt((1 / 10 + ratio) * np.var(d, ddof=1))
    q = stats.t.ppf(0.975, 9)
    assert t.mean == pytest.approx(d.mean())
    assert (t.low, t.high) == pytest.approx((d.mean() - q * se, d.mean() + q * se))
    assert t.p_value == pytest.approx(2 * stats.t.sf(d.mean() / se, 9))
    # the correction widens the naive interval (se of the mean alone)
    naive = stats.t.ppf(0.975, 9) * math.sqrt(np.var(d, ddof=1) / 10)
    assert t.high - t.mean > naive
    assert math.isnan(corrected_t_test(np.array([0.1]), ratio).mean)


def test_holm_by_hand():
    # sorted: 0.01 <= 0.05/3 rejected; 0.03 > 0.05/2 stops: 0.04 is not rejected either
    assert holm([0.01, 0.04, 0.03]) == [True, False, False]
    assert holm([0.01, 0.02, 0.04]) == [True, True, True]  # 0.01<=.0167, 0.02<=.025, 0.04<=.05
    assert holm([float("nan"), 0.04]) == [False, True]     # NaN is not in the family


def test_bias_shifted_interval_and_bootstrap_p_value():
    draws = np.array([0.021, 0.022, 0.023, 0.024, 0.025, 0.026, 0.027])  # all above the estimate
    low, high = bias_shifted_interval(0.018, draws, alpha=0.0)  # alpha 0: min and max
    assert (low, high) == pytest.approx((0.018 - 0.003, 0.018 + 0.003))
    assert np.percentile(draws, 2.5) > 0.018  # the plain percentile interval excludes it
    assert bootstrap_p_value(np.array([-1.0, 1.0, 2.0, 3.0])) == pytest.approx(2 * 2 / 5)
    assert bootstrap_p_value(np.array([1.0, 2.0, 3.0])) == pytest.approx(2 * 1 / 4)


def test_fold_differences_per_fold():
    y = np.array([1, 0, 1, 0, 1, 0])
    a = np.array([[0.9, 0.1, 0.8, 0.2, 0.7, 0.3]])
    b = np.full((1, 6), 0.5)
    folds = [[(np.array([3, 4, 5]), np.array([0, 1, 2])), (np.array([0, 1, 2]), np.array([3, 4, 5]))]]
    d = fold_differences(metrics.brier, a, b, y, folds)
    want = [metrics.brier(a[0, :3], y[:3]) - 0.25, metrics.brier(a[0, 3:], y[3:]) - 0.25]
    np.testing.assert_allclose(d, want)


def test_group_folds_keep_each_value_on_one_side():
    cat, y, _ = category_data(200)
    sub = np.array([f"s{i % 7}" for i in range(200)])
    for rep in cv_folds([f"q{i}" for i in range(200)], y, n_splits=3, n_repeats=2, groups=sub):
        for tr, te in rep:
            assert not set(sub[tr]) & set(sub[te])
    with pytest.raises(InputError, match="distinct values of 'x'"):
        cv_folds([str(i) for i in range(200)], y, n_splits=3, groups=["a"] * 100 + ["b"] * 100,
                 group_name="values of 'x'")


def test_evaluate_predictions_skill_and_t_interval():
    rng = np.random.default_rng(0)
    y = rng.uniform(size=300) < 0.5
    good = np.clip(0.5 + 0.35 * (y - 0.5) + rng.normal(scale=0.1, size=300), 0.01, 0.99)
    rows = evaluate_predictions({"platt": np.full(300, 0.5), "constant": np.full(300, y.mean()), "good": good},
                                y, n_bootstrap=50, seed=0,
                                folds=cv_folds([str(i) for i in range(300)], y, n_splits=5, n_repeats=1))
    by = {r["estimator"]: r for r in rows}
    c = by["constant"]["auc_euro_all"]
    assert by["good"]["skill"] == pytest.approx((by["good"]["auc_euro_all"] - c) / (1 - c))
    assert by["constant"]["skill"] == pytest.approx(0.0)
    g = by["good"]
    assert g["reference"] == "platt"
    assert g["diff_auc_euro_all_t_low"] <= g["diff_auc_euro_all"] <= g["diff_auc_euro_all_t_high"]
    assert g["diff_auc_euro_all_t_low"] > 0 and g["diff_auc_euro_all_t_p"] < 0.05


# ---------------------------------------------------------------- evaluate_store
SMALL = {"n_estimators": 10, "search_n_estimators": 10}


@pytest.fixture(scope="module")
def with_controls(tmp_path_factory):
    store = StoreWithRecords()
    out = tmp_path_factory.mktemp("controls")
    with small_searches():  # the searches at full size: the unit tests above
        res = evaluate_store(store, out_dir=out, estimators=["raw", "platt", "acute-pca10-stacked"], cv=3,
                             repeats=2, n_bootstrap=30, probe_params=SMALL, progress=False, reliability=["raw"])
    return store, out, res


def test_every_control_row_with_what_it_uses(with_controls):
    _, out, res = with_controls
    names = [r["estimator"] for r in res.rows]
    assert names == ["raw", "platt", "acute-pca10-stacked", "constant", "platt+meta", "tfidf+platt",
                     "question-only", "question+confidence", "acute-all", "visible-all"]
    # no replies, no token log-probs: no reply controls, and the stacks do without them
    assert res.row("acute-all")["estimators_used"] == ["acute-pca10", "question-only", "tfidf+platt", "platt+meta", "raw"]
    uses = {r["estimator"]: r["uses"] for r in res.rows}
    assert uses["platt+meta"] == "confidence + metadata" and "no answer" in uses["question-only"]
    by = {r["estimator"]: r for r in res.rows}
    # the category sets correctness: every control that knows it beats the confidence-only rows
    for name in ("platt+meta", "tfidf+platt", "question-only"):
        assert by[name]["auroc"] > 0.8 > by["platt"]["auroc"]
    assert by["raw"]["meta_reference"] in ("platt+meta", "tfidf+platt")
    assert by["raw"]["within_group_auroc"] < 0.7  # the confidence is noise inside each category
    doc = json.loads((out / "results.json").read_text())
    assert doc["params"]["metadata_fields"] == ["category", "difficulty"]
    assert doc["params"]["within_group"] == {"field": "category", "n_groups": 2}
    md = (out / "results.md").read_text()
    assert "| uses |" in md and "skill" in md and "within-group AUROC" in md


def test_controls_the_store_cannot_feed_are_left_out_with_the_reason(tmp_path):
    store = StoreWithRecords(n=120, with_meta=False, poolings=("mean",))
    with small_searches():  # which rows are left out and why
        res = evaluate_store(store, out_dir=tmp_path, estimators=["raw", "platt"], cv=3, repeats=1,
                             n_bootstrap=0, progress=False)
    assert [r["estimator"] for r in res.rows] == ["raw", "platt", "constant", "tfidf+platt", "acute-all", "visible-all"]
    assert res.row("visible-all")["estimators_used"] == ["tfidf+platt", "raw"]  # what the store feeds
    assert set(res.params["stack_left_out"]) == {"question-only", "platt+meta", "visible", "answer-surface",
                                                 "answer-text"}
    skipped = json.loads((tmp_path / "results.json").read_text())["skipped"]
    assert "has no metadata field 'category'" in skipped["platt+meta"] and "record 'q0'" in skipped["platt+meta"]
    assert "acute rerecord" in skipped["question-only"]
    assert "platt+meta" in (tmp_path / "results.md").read_text()  # the reader sees why


def test_group_by_keeps_categories_apart_and_names_a_missing_field(tmp_path):
    store = StoreWithRecords(n=120)
    res = evaluate_store(store, out_dir=tmp_path / "a", estimators=["raw", "platt"], cv=2, repeats=1,
                         n_bootstrap=0, progress=False, group_by="category", controls=["platt+meta"])
    folds = json.loads((tmp_path / "a" / "folds.json").read_text())["fold"][0]
    cats = [r["meta"]["category"] for r in store.records]
    assert all(len({f for f, c in zip(folds, cats) if c == g}) == 1 for g in set(cats))
    assert res.split["group_by"] == "category"
    store.records[5]["meta"].pop("difficulty")
    with pytest.raises(InputError, match=r"record 'q5' has no metadata field 'difficulty'"):
        evaluate_store(store, out_dir=tmp_path / "b", estimators=["raw"], cv=2, repeats=1, n_bootstrap=0,
                       progress=False, group_by="difficulty", controls=False)


def test_a_killed_evaluation_resumes_fold_by_fold(tmp_path, monkeypatch):
    """The fold cache: a rerun reads every finished fold instead of refitting it, and its
    predictions equal the uncached run's."""
    import acute.evaluation.crossval as cv

    store = StoreWithRecords(n=90)
    kw = dict(estimators=["raw", "platt", "acute-pca10-stacked"], cv=3, repeats=2, n_bootstrap=0,
              probe_params=SMALL, progress=False, reliability=["raw"], controls=["constant"])
    plain = evaluate_store(store, out_dir=tmp_path / "a", **kw)
    fits = []
    real = cv.fit_predict
    monkeypatch.setattr(cv, "fit_predict", lambda *a, **k: fits.append(1) or real(*a, **k))
    first = evaluate_store(store, out_dir=tmp_path / "b", fold_cache=tmp_path / "cache", **kw)
    assert len(fits) == 6 and len(list((tmp_path / "cache").glob("*.npz"))) == 6
    for p in sorted((tmp_path / "cache").glob("r1-*.npz")):  # as if killed during repeat 1
        p.unlink()
    again = evaluate_store(store, out_dir=tmp_path / "c", fold_cache=tmp_path / "cache", **kw)
    assert len(fits) == 6 + 3  # repeat 0 read from the cache, repeat 1 refitted
    for res in (first, again):
        for name, p in plain.cv_predictions.items():
            np.testing.assert_array_equal(res.cv_predictions[name], p)
