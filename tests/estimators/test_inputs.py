"""acute.estimators.inputs: the one X of every estimator, its sources and its checks."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

from acute.errors import InputError
from acute.estimators import Inputs, make_estimator
from acute.estimators.inputs import CONFIDENCE, METADATA, QUESTION, VISIBLE, check_inputs, states_source
from acute.estimators.plan import FitPlan, shared_pieces, sources_of, store_inputs


def _states(n=40, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 4, 6)).astype(np.float32), rng.uniform(0.05, 0.95, n)


def test_sources_are_named_checked_once_and_taken_by_rows():
    h, c = _states()
    X = Inputs.of(h, c)
    assert X.sources == ("states@mean", "confidence") and len(X) == 40
    assert X["states@mean"] is h and "confidence" in X and QUESTION not in X
    part = X.take(np.array([3, 1]))
    np.testing.assert_array_equal(part["states@mean"], h[[3, 1]])
    np.testing.assert_array_equal(part[CONFIDENCE], c[[3, 1]])
    assert part["states@mean"].dtype == np.float32 and len(X.take(slice(0, 7))) == 7
    assert X.select([CONFIDENCE]).sources == (CONFIDENCE,)
    assert states_source("mean+last-answer") == "states@mean+last-answer"
    assert len(Inputs(n=5)) == 5


@pytest.mark.parametrize("source,row", [("states", 7), ("confidence", 11)])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_a_non_finite_value_is_refused_naming_the_source_and_the_record(source, row, bad):
    h, c = _states()
    h, c = h.copy(), c.copy()
    if source == "states":
        h[row, 2, 3] = bad
    else:
        c[row] = bad
    with pytest.raises(InputError, match=rf"{'the .states@mean. source' if source == 'states' else 'confidence:'}.*row {row}"):
        Inputs.of(h, c)


def test_bad_inputs_are_refused_with_what_to_do():
    h, c = _states()
    with pytest.raises(InputError, match="different numbers of records: states@mean 40, confidence 39"):
        Inputs.of(h, c[:39])
    with pytest.raises(InputError, match="unknown source 'text'"):
        Inputs({"text": ["a"] * 40})
    with pytest.raises(InputError, match="unknown pooling"):
        Inputs({"states@median": h})
    with pytest.raises(InputError, match="need n"):
        Inputs({})
    with pytest.raises(InputError, match=r"confidence.*\[0, 1\].*row 2"):
        Inputs.of(confidence=[0.1, 0.2, 1.5])


def test_a_missing_source_names_the_estimator_and_the_source():
    h, c = _states()
    y = np.arange(40) % 2
    for name, source in (("platt", "confidence"), ("acute-pca10", "confidence"),
                         ("question-only", "states@last-prompt"), ("platt+meta", "metadata"),
                         ("visible", "visible"), ("acute-cosine@last-answer", "states@last-answer")):
        est = make_estimator(name)
        assert source in est.sources
        given = Inputs.of(h) if source == "confidence" else Inputs.of(h, c)
        with pytest.raises(InputError, match=rf"{type(est).__name__}\(.*\) reads the '{source}' source, which these "
                                             r"inputs lack \(they hold: states@mean"):
            est.fit(given, y)
    with pytest.raises(InputError, match="got ndarray; build one with Inputs.of"):
        make_estimator("acute-pca10").fit(h, y)
    assert isinstance(check_inputs({CONFIDENCE: c}, make_estimator("platt")), Inputs)  # a mapping, checked
    with pytest.raises(InputError, match="confidence: contains NaN.*row 0"):
        check_inputs({CONFIDENCE: np.r_[np.nan, c[1:]]}, make_estimator("platt"))


def test_the_sources_estimators_declare():
    assert make_estimator("platt").sources == (CONFIDENCE,)
    assert make_estimator("constant").sources == ()
    assert make_estimator("acute-pca10-stacked").sources == ("states@mean", CONFIDENCE)
    assert make_estimator("question-only").sources == ("states@last-prompt",)
    assert make_estimator("question+confidence").sources == ("states@last-prompt", CONFIDENCE)
    assert make_estimator("platt+meta").sources == (METADATA, CONFIDENCE)
    assert make_estimator("tfidf+platt").sources == (QUESTION, CONFIDENCE)
    assert make_estimator("answer-text").sources == ("prompt+reply", CONFIDENCE)
    assert make_estimator("answer-surface").sources == (VISIBLE, CONFIDENCE)
    names = ["platt", "acute-cosine", "question-only", "platt+meta"]
    assert sources_of(make_estimator(n) for n in names) == (CONFIDENCE, "states@mean", "states@last-prompt",
                                                           METADATA)


def test_a_baseline_is_its_calibrator_over_the_confidence_source_with_weights():
    """platt with integer sample weights is scikit-learn's weighted logistic regression on the
    clipped logit, the same as the records repeated."""
    from scipy.special import logit

    h, c = _states(n=200, seed=3)
    y = (np.random.default_rng(3).random(200) < c).astype(int)
    w = np.random.default_rng(4).integers(1, 4, 200)
    est = make_estimator("platt").fit(Inputs.of(h, c), y, sample_weight=w)
    z = logit(np.clip(c, 1e-6, 1 - 1e-6))[:, None]
    ref = LogisticRegression(C=np.inf, tol=1e-10, max_iter=10_000).fit(z, y, sample_weight=w)
    np.testing.assert_allclose(est.predict_proba(Inputs.of(confidence=c)), ref.predict_proba(z), atol=1e-7)
    with pytest.raises(InputError, match="takes no sample_weight"):
        make_estimator("acute-cosine").fit(Inputs.of(h, c), y, sample_weight=w)


def test_a_plan_shares_what_the_inputs_keep_for_the_same_labels_only():
    h, c = _states(n=60, seed=5)
    y = (h[:, 2, 0] > 0).astype(int)
    X = Inputs.of(h, c)
    params = {"n_estimators": 6}
    plan = FitPlan(X, y)
    plain, stacked = (make_estimator(n, probe_params=params) for n in ("acute-cosine", "acute-cosine-stacked"))
    plan.declare(plain)
    plan.declare(stacked)
    assert plan.fit(plain).forest_ is plan.fit(stacked).forest_
    assert shared_pieces(X, y) is plan.pieces and shared_pieces(X, 1 - y) is not plan.pieces
    again = make_estimator("acute-cosine", probe_params=params).fit(X, 1 - y)  # other labels: its own forest
    assert again.forest_ is not plain.forest_


def test_store_inputs_computes_each_source_once_from_the_store():
    h, c = _states(n=10)

    class Store:
        ids = list(range(10))
        raw_confidence = c
        layer_means = h
        records = [{"id": i, "prompt": f"q{i}", "meta": {"kind": "a" if i % 2 else "b"}} for i in range(10)]

    X = store_inputs(Store(), [CONFIDENCE, "states@mean", QUESTION, METADATA, CONFIDENCE], metadata_fields=["kind"])
    assert X.sources == (CONFIDENCE, "states@mean", QUESTION, METADATA)
    assert X["states@mean"].dtype == np.float32 and X[QUESTION][3] == "q3" and X[METADATA][3, 0] == "a"
