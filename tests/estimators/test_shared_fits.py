"""Shared fits within one evaluation (issue 28) and forests on every core.

Every estimator's predictions in a shared ``fit_predict`` / ``cross_val_predictions`` equal its
own fit, made here estimator by estimator (an independent path); the forests, layer searches and
out-of-fold forests do not depend on ``n_jobs``.
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.base import clone

from acute.errors import InputError
from acute.estimators import ESTIMATORS, make_estimator
from acute.estimators.controls import CONTROLS
from acute.estimators.inputs import (CONFIDENCE, METADATA, PROMPT_REPLY, QUESTION, VISIBLE, Inputs,
                                     states_source)
from acute.estimators.probe_file import forest_arrays
from acute.estimators.probes import ActivationProbe
from acute.estimators.plan import FitPlan
from acute.estimators.registry import AutoEstimator
from acute.estimators.visible import reply_texts, visible_inputs
from acute.evaluation import crossval
from acute.evaluation.crossval import cross_val_predictions, cv_folds, fit_predict

from smaller import small_searches  # tests/smaller.py

# the 5-fold stacking (oof="cv"), whose fold forests the estimators share; OOB below: the default
SMALL = {"n_estimators": 8, "search_n_estimators": 6, "oof": "cv"}
OOB = {"n_estimators": 40, "search_n_estimators": 6}
POOLED = ["acute-cosine@last-answer", "acute-cosine-stacked@last-answer"]


MEAN = states_source("mean")


def planted(n=90, n_out=5, d=24, seed=3):
    """Correctness written into layer 2 onwards (mean and last-answer states), an uninformative
    raw confidence, and the metadata, texts and visible array the controls read: ``(ids, y,
    conf, X)`` with ``X`` the inputs holding every source."""
    rng = np.random.default_rng(seed)
    t = rng.uniform(size=n)
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-10 * (t - 0.5)))).astype(np.int64)
    sources = {}
    for k, spec in enumerate(("mean", "last-prompt", "last-answer")):
        h = rng.normal(scale=0.3, size=(n, n_out, d))
        h[:, 2:, 3 + k] += 2.0 * t[:, None]
        sources[states_source(spec)] = h.astype(np.float32)
    conf = rng.uniform(0.5, 1.0, size=n)
    sources[CONFIDENCE] = conf
    cats = np.array(["a", "b", "c"])[rng.integers(0, 3, size=n)]
    sources[METADATA] = np.stack([cats, np.where(t > 0.5, "hard", "easy")], axis=1).astype(object)
    sources[QUESTION] = np.array([f"question {i} about {c}" for i, c in enumerate(cats)], dtype=object)
    recs = [{"id": i, "prompt": q, "generation": f"answer {c}", "finish_reason": "eos", "meta": {}}
            for i, (q, c) in enumerate(zip(sources[QUESTION], cats))]
    sources[VISIBLE] = visible_inputs(recs, [np.log(c) / 2 * np.ones(2) for c in conf])
    sources[PROMPT_REPLY] = reply_texts(recs)
    agree = np.clip(t + rng.normal(scale=0.2, size=n), 0, 1)  # consistency, entropies
    sources["agreement"] = np.column_stack([agree, 1 - agree, (1 - agree) / 2])
    return [f"q{i}" for i in range(n)], y, conf, Inputs(sources)


def own_fit(name, X_tr, y_tr, X_te, params=SMALL, **kw):
    """``name`` fitted alone on inputs of its own sources (nothing shared with anyone)."""
    est = make_estimator(name, random_state=0, probe_params=params, **kw)
    est.fit(X_tr.select(est.sources), y_tr)
    return np.clip(est.predict_proba(X_te.select(est.sources))[:, 1], 0.0, 1.0)


#: own fits already made in this process, by estimator settings and fold: an estimator that
#: ``probe_params`` do not change (a baseline, a control, ``visible-all``) is the same estimator in
#: both parametrisations of the test below, so its own fit (a deterministic function of its
#: settings and records) is made once; the shared cross-validation still runs everything each time
OWN_FITS: dict[tuple, np.ndarray] = {}


def settings(value):
    """Every setting of an estimator (its class and parameters, nested ones included) as a string."""
    if hasattr(value, "get_params"):
        return f"{type(value).__qualname__}({settings(value.get_params(deep=False))})"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {settings(v)}" for k, v in sorted(value.items())) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(settings(v) for v in value) + "]"
    return repr(value)


def own_fit_once(name, params, tr, te, X, y):
    from acute.estimators import controls

    key = (name, settings(make_estimator(name, random_state=0, probe_params=params)), tr.tobytes(), te.tobytes(),
           repr(controls._CS), controls._INNER_CV)
    if key not in OWN_FITS:
        OWN_FITS[key] = own_fit(name, X.take(tr), y[tr], X.take(te), params=params)
    return OWN_FITS[key]


NAMES = list(ESTIMATORS) + list(CONTROLS) + POOLED


@pytest.mark.parametrize("params", [SMALL, OOB], ids=["5-fold stacking", "out-of-bag stacking"])
def test_every_estimator_equals_its_own_fit_in_a_shared_cross_validation(params):
    ids, y, conf, X = planted()
    folds = cv_folds(ids, y, n_splits=3, n_repeats=1, seed=0)
    seen: dict[str, list] = {}
    with small_searches():  # two computations of the same predictions: a smaller search in both
        got = cross_val_predictions(NAMES, X, y, folds, random_state=0, probe_params=params,
                                    on_fit=lambda n, e: seen.setdefault(n, []).append(e))
        for name in NAMES:
            want = np.full(y.size, np.nan)
            for tr, te in folds[0]:
                tr, te = np.sort(tr), np.sort(te)
                want[te] = own_fit_once(name, params, tr, te, X, y)
            np.testing.assert_allclose(got[name][0], want, rtol=0, atol=1e-12, err_msg=name)
    # the fits were shared: plain views read their stacked twin's forest, auto its candidates
    for k in range(3):
        for view in ("acute-cosine", "acute-pca10", "acute-pca20", "acute-cosine@last-answer"):
            twin = view.replace("@", "-stacked@") if "@" in view else f"{view}-stacked"
            assert seen[view][k].forest_ is seen[twin][k].forest_, view
        auto = seen["auto"][k]
        assert auto.estimator_ is seen[auto.chosen_][k]
    searched = [(seen[v][k].layer_ == seen[f"{v}-stacked"][k].layer_,
                 seen[v][k].forest_ is seen[f"{v}-stacked"][k].forest_)
                for v in ("acute-early", "acute-mid", "acute-late") for k in range(3)]
    assert all(same == shared for same, shared in searched)  # shared exactly when the layers agree
    assert any(shared for _, shared in searched)


def test_fit_predict_shares_fits_in_a_held_out_split_too(monkeypatch):
    """Fewer forests are fitted than estimator by estimator, with the same predictions."""
    from sklearn.ensemble import RandomForestClassifier

    ids, y, conf, X = planted(n=80, seed=8)
    mean = X.select([MEAN, CONFIDENCE])
    names = ["platt", "acute-cosine", "acute-pca10", "acute-mid", "acute-cosine-stacked",
             "acute-pca10-stacked", "acute-mid-stacked", "auto"]
    fits = []
    real = RandomForestClassifier.fit
    monkeypatch.setattr(RandomForestClassifier, "fit", lambda self, *a, **k: fits.append(1) or real(self, *a, **k))
    tr, te = np.arange(60), np.arange(60, 80)
    got = fit_predict(names, mean.take(tr), y[:60], mean.take(te), probe_params=SMALL)
    shared = len(fits)
    fits.clear()
    for name in names:
        want = own_fit(name, mean.take(tr), y[:60], mean.take(te))
        np.testing.assert_allclose(got[name], want, rtol=0, atol=1e-12, err_msg=name)
    # not refitted: the plain cosine and pca10 forests (2), mid's final forest (1: its third has one
    # layer, so both searches pick it), auto's 2 x 5 out-of-fold forests and its refit (11)
    assert shared == len(fits) - 14


def test_the_fold_cache_keeps_working_with_shared_fits(tmp_path, monkeypatch):
    ids, y, conf, X = planted(n=60, seed=4)
    X = X.select([MEAN, CONFIDENCE])
    names = ["raw", "platt", "acute-pca10", "acute-pca10-stacked", "acute-cosine", "acute-cosine-stacked", "auto"]
    folds = cv_folds(ids, y, n_splits=3, n_repeats=1, seed=1)
    kw = dict(random_state=1, probe_params=SMALL, cache_key="planted")
    first = cross_val_predictions(names, X, y, folds, cache_dir=tmp_path, **kw)
    assert len(list(tmp_path.glob("r0-f*.npz"))) == 3
    monkeypatch.setattr(crossval, "fit_predict", lambda *a, **k: pytest.fail("a cached fold was refitted"))
    again = cross_val_predictions(names, X, y, folds, cache_dir=tmp_path, **kw)
    for name in names:
        np.testing.assert_array_equal(again[name], first[name])
    monkeypatch.undo()
    fresh = cross_val_predictions(names, X, y, folds, random_state=1, probe_params=SMALL)
    for name in names:
        np.testing.assert_array_equal(fresh[name], first[name])


def test_auto_alone_takes_its_stacked_refit_from_the_comparison():
    """AutoEstimator(refit=stacked) hands its out-of-fold forests to the refit: the same probe as
    fitted on its own (what the export ships)."""
    _, y, conf, X = planted(n=70, seed=6)
    X = X.select([MEAN, CONFIDENCE])
    auto = AutoEstimator(refit="acute-pca10-stacked", probe_params=SMALL).fit(X.take(slice(None)), y)
    alone = make_estimator("acute-pca10-stacked", probe_params=SMALL).fit(X.take(slice(None)), y)
    np.testing.assert_allclose(auto.estimator_.oof_proba_, alone.oof_proba_, rtol=0, atol=1e-12)
    np.testing.assert_allclose(auto.predict_proba(X), alone.predict_proba(X), rtol=0, atol=1e-12)
    # planned beside the stacked probe, auto takes that fit and scores as it does alone
    shared = planned([make_estimator("acute-pca10-stacked", probe_params=SMALL), AutoEstimator(probe_params=SMALL)],
                     X.take(slice(None)), y)[1]
    plain = AutoEstimator(probe_params=SMALL).fit(X.take(slice(None)), y)
    assert shared.scores_ == plain.scores_ and shared.chosen_ == plain.chosen_
    # a probe fitted with other settings is not shared
    other, auto = planned([make_estimator("acute-pca10-stacked", probe_params={**SMALL, "n_estimators": 9}),
                           AutoEstimator(refit="acute-pca10-stacked", probe_params=SMALL)], X.take(slice(None)), y)
    assert auto.estimator_ is not other
    np.testing.assert_allclose(auto.predict_proba(X), alone.predict_proba(X), rtol=0, atol=1e-12)


def planned(estimators, X, y):
    """The estimators fitted by one FitPlan on the inputs ``X`` (declared first, then fitted)."""
    plan = FitPlan(X, y)
    for est in estimators:
        plan.declare(est)
    return [plan.fit(est) for est in estimators]


def test_pieces_are_shared_only_by_the_same_settings_records_and_seed():
    """A plan shares a forest between probes whose settings, input and seed fit the same one, and
    no other; every probe equals its own fit either way."""
    _, y, conf, X = planted(n=60, seed=2)
    X = X.select([MEAN, CONFIDENCE])

    def check(a, b, other_records=False):
        """Whether ``a`` and ``b`` read one forest when planned on inputs ``X`` (``b`` on a copy of
        them, another set of records, with ``other_records``)."""
        x_a = X.take(slice(None))
        x_b = X.take(slice(None)) if other_records else x_a
        plan_a, plan_b = FitPlan(x_a, y), FitPlan(x_b, y)
        plan_a.declare(a)
        plan_b.declare(b)
        fa, fb = plan_a.fit(a), plan_b.fit(b)
        for est in (fa, fb):
            if est.random_state is None:  # not reproducible, alone or not
                continue
            alone = clone(est).fit(X.take(slice(None)), y)
            np.testing.assert_array_equal(est.predict_proba(X), alone.predict_proba(X))
        return fa.forest_ is fb.forest_

    stacked = make_estimator("acute-cosine-stacked", probe_params=SMALL)
    assert check(make_estimator("acute-cosine", probe_params=SMALL), stacked)
    assert not check(make_estimator("acute-cosine", probe_params={**SMALL, "n_estimators": 5}), clone(stacked))
    assert not check(make_estimator("acute-pca10", probe_params=SMALL), clone(stacked))
    assert not check(make_estimator("acute-cosine", probe_params=SMALL), clone(stacked), other_records=True)
    unseeded = ActivationProbe(view="cosine", n_estimators=8, random_state=None)
    assert not check(unseeded, clone(unseeded))


def test_every_estimator_fit_is_scikit_learns_over_one_inputs_object():
    """Sharing is the planner's (acute.estimators.plan): every estimator's fit is scikit-learn's
    ``fit(X, y, sample_weight=None)``, ``predict_proba(X)``, and it declares its sources."""
    import inspect

    from acute.estimators.inputs import AGREEMENT, RECORD_SOURCES, is_states_source
    from acute.estimators.registry import QUESTION_ONLY_ESTIMATORS

    for name in NAMES + list(QUESTION_ONLY_ESTIMATORS):
        est = make_estimator(name)
        assert list(inspect.signature(est.fit).parameters) == ["X", "y", "sample_weight"], name
        assert list(inspect.signature(est.predict_proba).parameters)[0] == "X", name
        assert all(s in (CONFIDENCE, AGREEMENT) or s in RECORD_SOURCES or is_states_source(s)
                   for s in est.sources), name
        assert not hasattr(est, "fit_with"), name


def test_one_out_of_fold_routine_in_the_package():
    """Folds are drawn in acute.estimators.folds only (the logistic controls' GridSearchCV keeps
    its own inner folds), beside the one out-of-fold routine every fold loop goes through."""
    import re
    from pathlib import Path

    root = Path(crossval.__file__).resolve().parents[1]
    drawn = {str(p.relative_to(root)) for p in root.rglob("*.py") if re.search(r"(?<![`\w])\w*KFold\(", p.read_text())}
    assert drawn == {"estimators/folds.py", "estimators/controls.py"}
    assert "GridSearchCV" in (root / "estimators" / "controls.py").read_text()


# ------------------------------------------------------------------ all cores, same numbers
def test_forests_use_every_core_by_default():
    assert ActivationProbe().n_jobs == -1
    assert make_estimator("acute-mid").n_jobs == -1
    assert make_estimator("acute-mid")._featurizer().n_jobs == -1
    assert make_estimator("auto")._make("acute-cosine").n_jobs == -1
    assert make_estimator("acute-mid", n_jobs=1).n_jobs == 1  # acute run's configured n_jobs is kept


@pytest.mark.parametrize("name", ["acute-pca10-stacked", "acute-mid-stacked", "question-only"])
def test_fits_do_not_depend_on_n_jobs(name):
    """The same trees, layer search scores and out-of-fold forests on one thread or two."""
    _, y, conf, X = planted(n=80, seed=5)
    kw = {"n_estimators": 16, "search_n_estimators": 16}
    one = make_estimator(name, n_jobs=1, probe_params=kw).fit(X.take(slice(None)), y)
    two = make_estimator(name, n_jobs=2, probe_params=kw).fit(X.take(slice(None)), y)
    a, b = forest_arrays(one.forest_), forest_arrays(two.forest_)
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    np.testing.assert_array_equal(one.oof_proba_, two.oof_proba_)
    assert one.cv_scores_ == two.cv_scores_
    np.testing.assert_array_equal(one.predict_proba(X), two.predict_proba(X))


def test_cross_validation_does_not_depend_on_n_jobs():
    ids, y, conf, X = planted(n=70, seed=9)
    names = ["platt", "acute-mid", "acute-mid-stacked", "acute-cosine", "acute-cosine-stacked", "auto"]
    folds = cv_folds(ids, y, n_splits=3, n_repeats=1, seed=0)
    one = cross_val_predictions(names, X, y, folds, n_jobs=1, probe_params=SMALL)
    every = cross_val_predictions(names, X, y, folds, n_jobs=-1, probe_params=SMALL)
    for name in names:
        np.testing.assert_array_equal(one[name], every[name], err_msg=name)


def test_timings_name_every_fitted_estimator():
    ids, y, conf, X = planted(n=60, seed=1)
    names = ["raw", "platt", "acute-cosine", "acute-cosine-stacked"]
    seconds: dict[str, float] = {}
    fit_predict(names, X.take(np.arange(40)), y[:40], X.take(np.arange(40, 60)), probe_params=SMALL, timings=seconds)
    assert set(seconds) == set(names) and all(s >= 0 for s in seconds.values())


# ------------------------------------------------------------------ the learning curve
class ArrayStore:
    """The attributes evaluate_store reads from a store, over arrays."""

    def __init__(self, ids, y, conf, mean):
        self.ids, self.correct, self.raw_confidence, self.layer_means = list(ids), y.astype(bool), conf, mean
        self.manifest = {"model": "synthetic", "task": "planted"}
        self.records = [{"id": i} for i in ids]

    def __len__(self):
        return len(self.ids)


def test_the_learning_curve_reads_the_evaluation_it_extends(caplog):
    from acute.estimators.baselines import BASELINES
    from acute.evaluation import evaluate_store
    from acute.evaluation.learning_curve import learning_curve

    ids, y, conf, X = planted(n=60, seed=7)
    mean = X[MEAN]
    res = evaluate_store(ArrayStore(ids, y, conf, mean), estimators=list(BASELINES) + ["acute-pca10-stacked"],
                         controls=False, cv=3, repeats=1, n_bootstrap=0, probe_params=SMALL, progress=False)
    folds = cv_folds(ids, y, n_splits=3, n_repeats=2, seed=0)
    pool = min(tr.size for rep in folds for tr, _ in rep)
    whole = sum(tr.size == pool for tr, _ in folds[0])
    assert whole >= 1
    kw = dict(estimators=["acute-pca10-stacked"], sizes=[20, pool], n_splits=3, repeats=2, seed=0,
              probe_params=SMALL, n_bootstrap=10)
    fresh = learning_curve(X, y, ids, **kw)
    reused = learning_curve(X, y, ids, evaluation=res, **kw)
    assert fresh.n_reused == 0 and reused.n_reused == whole * (len(BASELINES) + 1)
    for name in fresh.values:
        for metric in ("auc_euro_all", "smece"):
            np.testing.assert_allclose(reused.values[name][metric], fresh.values[name][metric], rtol=0, atol=1e-12)
    assert reused.to_markdown() == fresh.to_markdown()
    assert len(reused.fit_seconds) == 2
    other = learning_curve(X, y, ids, evaluation=res, **{**kw, "seed": 1})
    assert other.n_reused == 0 and "not used" in caplog.text


def test_out_of_bag_stacking_shares_one_forest_per_view(monkeypatch):
    """Out-of-bag stacking (the default): every estimator equals its own fit; each view's stacked probe, plain
    probe and auto's comparison read one forest (auto's held-out probabilities are the stacked
    probe's out-of-bag ones), and the question-only control fits one forest, not six."""
    from sklearn.ensemble import RandomForestClassifier

    ids, y, conf, X = planted(n=90, seed=5)
    names = ["platt", "acute-pca10", "acute-cosine", "acute-pca10-stacked", "acute-cosine-stacked", "auto",
             "question-only"]
    tr, te = np.arange(60), np.arange(60, 90)
    fits = []
    real = RandomForestClassifier.fit
    monkeypatch.setattr(RandomForestClassifier, "fit", lambda self, *a, **k: fits.append(1) or real(self, *a, **k))
    seen = {}
    got = fit_predict(names, X.take(tr), y[tr], X.take(te), probe_params=OOB, on_fit=seen.__setitem__)
    assert len(fits) == 3  # pca10, cosine, question-only
    assert seen["auto"].estimator_ is seen[seen["auto"].chosen_]
    for name in names:
        want = own_fit(name, X.take(tr), y[tr], X.take(te), params=OOB)
        np.testing.assert_allclose(got[name], want, rtol=0, atol=1e-12, err_msg=name)
    auto = seen["auto"]
    np.testing.assert_allclose(auto.oof_["acute-pca10"], seen["acute-pca10-stacked"].oof_proba_, rtol=0, atol=0)


def test_auto_alone_with_out_of_bag_stacking_fits_one_forest_per_view(monkeypatch):
    """Standalone auto (what acute train runs) under out-of-bag stacking: each view's forest is
    fitted once, for its stacked probe, and serves the comparison and a plain or stacked refit;
    the refit equals the probe fitted on its own."""
    from sklearn.ensemble import RandomForestClassifier

    _, y, conf, X = planted(n=70, seed=6)
    fits = []
    real = RandomForestClassifier.fit
    monkeypatch.setattr(RandomForestClassifier, "fit", lambda self, *a, **k: fits.append(1) or real(self, *a, **k))
    for refit in ("acute-pca10", "acute-pca10-stacked"):
        fits.clear()
        auto = AutoEstimator(candidates=("acute-pca10", "acute-pca10-stacked"), refit=refit,
                             probe_params=OOB).fit(X.take(slice(None)), y)
        assert len(fits) == 1, refit
        alone = make_estimator(refit, probe_params=OOB).fit(X.take(slice(None)), y)
        np.testing.assert_allclose(auto.predict_proba(X), alone.predict_proba(X), rtol=0, atol=1e-12)
