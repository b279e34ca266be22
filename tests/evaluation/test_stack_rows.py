"""The stacks as rows of an evaluation: ``acute-all`` and ``visible-all`` with what the states add
(its difference recomputed from the predictions), groups reaching the stacks' inner folds, the
other rows unchanged, and the summary's columns with Holm's correction."""

from __future__ import annotations

import json

import numpy as np
import pytest

from acute import metrics
from acute.estimators.inputs import GROUPS
from acute.estimators.stacks import StackEstimator
from acute.evaluation import evaluate_store
from acute.report.runs import EvalRun
from acute.report.summary import SUMMARY_COLUMNS, summary_csv, summary_rows
from acute.store import StoreWriter, open_store

from smaller import small_searches  # tests/smaller.py: rows and what they read, not which strength a search picks
from test_visible_control import SMALL, structure

STACKS = ["acute-all", "visible-all"]


def write_store(path, n=160, seed=1):
    """A real store whose records carry a ``shelf`` (20 groups of 8); the last-prompt states, the
    reply's missing arguments and the raw confidence each carry part of the signal."""
    rng = np.random.default_rng(seed)
    t = rng.uniform(size=n)
    missing = rng.integers(0, 2, size=n)
    conf = rng.uniform(0.2, 0.9, size=n)
    y = rng.uniform(size=n) < (t + (1 - missing) + conf) / 3
    recs = [{"id": f"q{i}", "prompt": f"Question {i % 9}: call the tool", "generation": f"[call {i % 5}]",
             "answer": "x", "gold": ["x"], "correct": bool(y[i]), "parse_error": False, "finish_reason": "eos",
             "meta": {"category": f"c{i % 3}", "difficulty": "easy", "shelf": f"s{i // 8}",
                      **structure(1, 1, 2, 0, int(missing[i]), 0)}}
            for i in range(n)]
    lps = [np.full(4, np.log(c) / 4) for c in conf]
    mean = rng.normal(size=(n, 3, 12))
    mean[:, 1:, 1] += 1.5 * t[:, None]
    last = rng.normal(scale=0.3, size=(n, 3, 12))
    last[:, 1:, 0] += 2 * t[:, None]
    m = {"model": "tiny", "num_layers": 2, "hidden_size": 12, "task": "default",
         "generation": {"max_new_tokens": 8, "do_sample": False, "chat": False, "pool": "decoding"}}
    with StoreWriter(path, m, dtype="float32") as w:
        w.add(recs, mean, lps, last_prompt=last, last_answer=rng.normal(size=(n, 3, 12)))
    return open_store(path)


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    base = tmp_path_factory.mktemp("stacks")
    store = write_store(base / "store")
    folds_seen: list = []
    original = StackEstimator.inner_folds

    def spy(self, X, y):  # the inner folds each stack drew, with the groups it was given
        folds = original(self, X, y)
        folds_seen.append((X.get(GROUPS), folds))
        return folds

    with pytest.MonkeyPatch.context() as mp, small_searches(stacks=False):  # the stacks' 5 inner folds kept
        mp.setattr(StackEstimator, "inner_folds", spy)
        res = evaluate_store(store, out_dir=base / "eval", estimators=["raw", "platt"], cv=3, repeats=2,
                             n_bootstrap=200, probe_params=SMALL, progress=False, reliability=["raw"],
                             controls=STACKS, group_by="shelf")
    plain = evaluate_store(store, estimators=["raw", "platt"], cv=3, repeats=2, n_bootstrap=200,
                           probe_params=SMALL, progress=False, reliability=["raw"], controls=False, group_by="shelf")
    return base, store, res, plain, folds_seen


def test_both_stacks_are_rows_with_what_the_states_add(evaluated):
    base, store, res, _, _ = evaluated
    assert [r["estimator"] for r in res.rows] == ["raw", "platt", *STACKS]
    a, v = res.row("acute-all"), res.row("visible-all")
    y = res.test_correct.astype(int)
    own = {n: np.mean([metrics.auc_euro(p, y) for p in res.cv_predictions[n]]) for n in STACKS}
    assert a["auc_euro_all"] == pytest.approx(own["acute-all"], abs=1e-12)
    assert a["states_add_auc_euro_all"] == pytest.approx(own["acute-all"] - own["visible-all"], abs=1e-12)
    assert a["states_add_ci_low"] <= a["states_add_auc_euro_all"] <= a["states_add_ci_high"]
    assert a["states_add_t_low"] <= a["states_add_t_mean"] <= a["states_add_t_high"]
    assert "states_add_auc_euro_all" not in v
    # every first level the store feeds (no sampled answers needed); visible-all has no states
    assert a["estimators_used"] == ["acute-pca10", "question-only", "visible", "answer-surface", "answer-text",
                                    "tfidf+platt", "platt+meta", "raw"]
    assert v["estimators_used"] == a["estimators_used"][2:]
    doc = json.loads((base / "eval" / "results.json").read_text())
    row = next(r for r in doc["results"] if r["estimator"] == "acute-all")
    assert row["states_add_auc_euro_all"] == pytest.approx(a["states_add_auc_euro_all"])
    assert doc["params"]["stack_left_out"] == {}


def test_the_groups_reach_the_inner_folds_and_none_is_split(evaluated):
    _, store, _, _, folds_seen = evaluated
    assert len(folds_seen) == 2 * 3 * 2  # two stacks, 3 folds x 2 repeats
    for groups, folds in folds_seen:
        assert groups is not None and len(folds) == 5
        for tr, te in folds:
            assert not set(groups[tr]) & set(groups[te])


def test_the_other_rows_are_unchanged(evaluated):
    _, _, res, plain, _ = evaluated
    for name in ("raw", "platt"):
        np.testing.assert_array_equal(res.cv_predictions[name], plain.cv_predictions[name])
        for key in ("auc_euro_all", "smece", "diff_auc_euro_all", "diff_auc_euro_all_ci_low", "auc_euro_all_ci_high"):
            assert res.row(name)[key] == plain.row(name)[key]


def test_a_store_without_metadata_fields_drops_platt_meta_from_both(tmp_path):
    store = write_store(tmp_path / "store", n=120)
    with small_searches():
        res = evaluate_store(store, estimators=["raw"], cv=3, repeats=1, n_bootstrap=0, probe_params=SMALL,
                             progress=False, reliability=["raw"], controls=STACKS, metadata_fields=[])
    for name in STACKS:
        assert "platt+meta" not in res.row(name)["estimators_used"]
    assert set(res.params["stack_left_out"]) == {"platt+meta"}


def test_the_summary_has_what_the_states_add_with_holm(evaluated):
    base, _, res, _, _ = evaluated
    results = json.loads((base / "eval" / "results.json").read_text())
    runs = [EvalRun(model=m, task="default", path=base / "eval", ids=list(res.test_ids), correct=res.test_correct,
                    predictions=res.predictions, results=results) for m in ("a", "b")]
    rows = summary_rows(runs, default="platt")
    a = res.row("acute-all")
    for r in rows:
        assert r["states_add"] == pytest.approx(a["states_add_auc_euro_all"])
        assert (r["states_add_ci_low"], r["states_add_ci_high"]) == pytest.approx((a["states_add_ci_low"],
                                                                                   a["states_add_ci_high"]))
        assert (r["states_add_t_low"], r["states_add_t_high"]) == pytest.approx((a["states_add_t_low"],
                                                                                 a["states_add_t_high"]))
        assert r["visible_all_auc_euro"] == pytest.approx(res.row("visible-all")["auc_euro_all"])
        p = max(a["states_add_t_p"], a["states_add_boot_p"])
        assert r["states_add_holm_significant"] == (p <= 0.05 / 2)  # two equal p-values: Holm = Bonferroni
    assert summary_csv(rows).splitlines()[0].split(",") == list(SUMMARY_COLUMNS)
