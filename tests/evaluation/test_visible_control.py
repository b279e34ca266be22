"""The controls that read the reply or stack the question (issue 42): ``visible``, ``answer-surface``,
``answer-text`` and ``question+confidence`` (acute.estimators.visible, acute.estimators.registry), their
inputs (acute.evaluation.crossval.inputs_for) and how evaluate_store adds or leaves them out."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.special import logit

from acute.estimators.inputs import Inputs
from acute import metrics
from acute.errors import InputError
from acute.estimators import make_estimator
from acute.estimators.controls import CONTROL_USES, CONTROLS
from acute.estimators.inputs import CONFIDENCE, PROMPT_REPLY, QUESTION, VISIBLE
from acute.estimators.visible import (VISIBLE_COLUMNS, TextComponents, VisibleControl, reply_fields, reply_texts,
                                      surface_features, visible_column_names, visible_inputs)
from acute.evaluation import evaluate_store
from acute.evaluation.crossval import cross_val_predictions, cv_folds, fit_predict
from acute.store import StoreWriter, open_store
from acute.tasks.tool_calls import REPLY_FIELDS

from smaller import small_searches  # tests/smaller.py

SMALL = {"n_estimators": 40}
NEW = ("answer-surface", "answer-text", "visible", "question+confidence")


def structure(*values):
    return dict(zip(REPLY_FIELDS, values))


# ---------------------------------------------------------------- the inputs, by hand
def hand_records():
    return [
        {"id": "a", "prompt": "Where is Paris?", "generation": "Paris is in France", "finish_reason": "eos",
         "parse_error": False, "meta": {**structure(1, 1, 2, 0, 1, 0), "n_gold_calls": 7}},
        {"id": "b", "prompt": "Call f.", "generation": "", "finish_reason": "length", "parse_error": True,
         "meta": {**structure(0, 0, 0, 0, 0, 0), "n_gold_calls": 1}},
        {"id": "c", "prompt": "Call g.", "generation": "g()", "finish_reason": "stop",
         "meta": structure(2, 1, 3, 1, 0, 1)},  # no parse_error key: parsed
        {"id": "d", "prompt": "Call h.", "generation": "h()", "finish_reason": None, "parse_error": False,
         "meta": structure(1, 1, 0, 0, 0, 0)},
    ]


HAND_LOGPROBS = [np.array([-0.1, -0.5, -0.3]), np.array([]), np.array([-2.0]), np.array([-0.4, -0.2])]


def test_visible_inputs_by_hand():
    recs = hand_records()
    X = visible_inputs(recs, HAND_LOGPROBS)
    assert visible_column_names(reply_fields(recs)) == VISIBLE_COLUMNS + REPLY_FIELDS + ("question", "reply")
    assert X.shape == (4, len(VISIBLE_COLUMNS) + len(REPLY_FIELDS) + 2)
    num = X[:, :-2].astype(float)
    std_a = np.sqrt((0.2 ** 2 + 0.2 ** 2 + 0.0) / 3)  # population std of -0.1, -0.5, -0.3 around -0.3
    #                 mean  min   std    first last  tokens eos stop length parse | reply structure
    want = [[-0.3, -0.5, std_a, -0.1, -0.3, 3, 1, 0, 0, 0, 1, 1, 2, 0, 1, 0],
            [0.0, 0.0, 0.0, 0.0, 0.0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0],  # no token: stats 0 (raw confidence 1)
            [-2.0, -2.0, 0.0, -2.0, -2.0, 1, 0, 1, 0, 0, 2, 1, 3, 1, 0, 1],
            [-0.3, -0.4, 0.1, -0.4, -0.2, 2, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0]]  # no finish reason: no one-hot
    np.testing.assert_allclose(num, want, atol=1e-12)
    assert X[0, -2] == "Where is Paris?" and X[0, -1] == "Paris is in France"
    assert list(reply_texts(recs[:1])) == ["Where is Paris?\nParis is in France"]
    # the gold's call count is never a column: changing it changes nothing
    other = [dict(r, meta={**r["meta"], "n_gold_calls": 99}) for r in recs]
    np.testing.assert_array_equal(visible_inputs(other, HAND_LOGPROBS)[:, :-2].astype(float), num)


def test_reply_structure_only_when_every_record_has_it():
    recs = hand_records()
    del recs[2]["meta"]["reply_unknown_names"]
    assert reply_fields(recs) == ()
    X = visible_inputs(recs, HAND_LOGPROBS)
    assert X.shape[1] == len(VISIBLE_COLUMNS) + 2
    # named fields: a missing value is NaN (the benchmark's --answer-field)
    Y = visible_inputs(recs, HAND_LOGPROBS, fields=["reply_unknown_names"])
    np.testing.assert_array_equal(np.isnan(Y[:, len(VISIBLE_COLUMNS)].astype(float)), [False, False, True, False])


def test_visible_inputs_name_what_is_missing():
    recs = hand_records()
    with pytest.raises(InputError, match="no per-token log-probs"):
        visible_inputs(recs, None)
    with pytest.raises(InputError, match="3 token log-prob arrays for 4 records"):
        visible_inputs(recs, HAND_LOGPROBS[:3])
    recs[1]["prompt"] = None
    with pytest.raises(InputError, match=r"record 'b' has no prompt text"):
        visible_inputs(recs, HAND_LOGPROBS)
    recs[1]["prompt"], recs[3]["generation"] = "x", None
    with pytest.raises(InputError, match=r"record 'd' has no reply text"):
        reply_texts(recs)


def test_surface_features_by_hand():
    X = visible_inputs(hand_records(), HAND_LOGPROBS)
    got = surface_features(X, np.array([0.5, 0.2, 0.9, 0.7]))
    np.testing.assert_allclose(got[:2], [[0.0, -0.3, np.log(3), 0, 0],
                                         [np.log(0.25), 0.0, 0.0, 1, 1]], atol=1e-12)


# ---------------------------------------------------------------- the text columns
def test_the_svd_is_fitted_on_the_training_texts_only():
    train = ["alpha beta gamma", "beta gamma delta", "gamma delta alpha", "delta alpha beta"]
    comp = TextComponents(n_components=2).fit(train)
    assert set(comp.vectorizer_.get_feature_names_out()) <= {"alpha", "beta", "gamma", "delta", "alpha beta",
                                                               "beta gamma", "gamma delta", "delta alpha"}
    # a text of words the training texts never had contributes nothing
    np.testing.assert_array_equal(comp.transform(["omega sigma", "omega alpha"])[0], [0.0, 0.0])
    np.testing.assert_allclose(comp.transform(["omega alpha"]), comp.transform(["alpha"]))
    # an empty vocabulary gives no column rather than an error; a small one is not reduced
    assert TextComponents().fit(["", ""]).transform(["a b"]).shape == (1, 0)
    small = TextComponents(n_components=20).fit(["call f", "call g"] * 10)
    assert small.svd_ is None and small.transform(["call f"]).shape == (1, small.n_components_)


def test_question_and_reply_have_separate_vocabularies(tmp_path):
    rng = np.random.default_rng(0)
    n = 60
    words = ["paris", "rome", "oslo", "lima"]
    recs = [{"id": i, "prompt": f"where is {words[i % 4]} today", "generation": f"{words[(i // 4) % 4]} is here",
             "finish_reason": "eos", "parse_error": False, "meta": {}} for i in range(n)]
    lps = [np.log(rng.uniform(0.3, 1.0, size=3)) for _ in range(n)]
    y = np.arange(n) % 2
    X = visible_inputs(recs[:40], lps[:40])
    est = VisibleControl().fit(Inputs({VISIBLE: X, CONFIDENCE: rng.uniform(0.2, 0.9, 40)}), y[:40])
    columns = est.pipeline_.named_steps["columns"]
    q, r = columns.named_transformers_["question"], columns.named_transformers_["reply"]
    assert "paris" in q.vectorizer_.vocabulary_ and "paris" in r.vectorizer_.vocabulary_
    assert "today" in q.vectorizer_.vocabulary_ and "today" not in r.vectorizer_.vocabulary_
    assert "here" in r.vectorizer_.vocabulary_ and "here" not in q.vectorizer_.vocabulary_
    # the same word moved from the question to the reply lands in other columns
    Z = np.hstack([np.zeros((2, 1), dtype=object), visible_inputs(recs[:2], lps[:2])])
    Z[:, -2], Z[:, -1] = ["where is paris today", "where is rome today"], ["rome is here", "rome is here"]
    out = columns.transform(Z)
    qs, rs = columns.output_indices_["question"], columns.output_indices_["reply"]
    assert not np.allclose(out[0, qs], out[1, qs]) and np.allclose(out[0, rs], out[1, rs])
    Z[:, -2], Z[:, -1] = ["where is rome today"] * 2, ["paris is here", "rome is here"]
    out = columns.transform(Z)
    assert np.allclose(out[0, qs], out[1, qs]) and not np.allclose(out[0, rs], out[1, rs])
    # the scored records must have the training records' columns
    with pytest.raises(InputError, match="fitted on"):
        est.predict_proba(Inputs({VISIBLE: visible_inputs(recs[:2], lps[:2], fields=["n"]), CONFIDENCE: np.full(2, 0.5)}))


# ---------------------------------------------------------------- what visible learns
def synthetic(n=500, seed=0, by="structure"):
    """Records whose correctness is set by the reply's missing required arguments (``by="structure"``)
    or by the raw confidence alone (``by="confidence"``); the texts are noise either way."""
    rng = np.random.default_rng(seed)
    missing = rng.integers(0, 3, size=n)
    conf = rng.uniform(0.05, 0.95, size=n)
    p = np.where(missing == 0, 0.9, 0.1) if by == "structure" else conf
    y = (rng.uniform(size=n) < p).astype(np.int64)
    vocab = np.array([f"w{k}" for k in range(40)])
    recs = [{"id": f"r{i}", "prompt": "Question: " + " ".join(rng.choice(vocab, 6)),
             "generation": "[" + " ".join(rng.choice(vocab, 4)) + "]", "finish_reason": "eos",
             "parse_error": False,
             "meta": structure(int(rng.integers(1, 3)), 1, int(rng.integers(0, 4)), 0, int(missing[i]), 0)}
            for i in range(n)]
    sizes = rng.integers(2, 9, size=n)
    lps = [np.full(k, np.log(c) / k) for k, c in zip(sizes, conf)]  # raw confidence = conf
    return recs, lps, y, conf


def cross_validated(names, recs, lps, y, conf):
    inputs = Inputs({VISIBLE: visible_inputs(recs, lps), PROMPT_REPLY: reply_texts(recs),
                     QUESTION: np.array([r["prompt"] for r in recs], dtype=object), CONFIDENCE: conf})
    folds = cv_folds([r["id"] for r in recs], y, n_splits=5, n_repeats=1, seed=0)
    return {k: v[0] for k, v in cross_val_predictions(names, inputs, y, folds).items()}


def test_visible_reads_the_reply_structure_the_text_control_cannot_see():
    recs, lps, y, conf = synthetic(n=300, by="structure")
    p = cross_validated(["tfidf+platt", "visible", "answer-surface"], recs, lps, y, conf)
    auc = {k: metrics.auroc(v, y) for k, v in p.items()}
    assert auc["visible"] > 0.8 > 0.65 > auc["tfidf+platt"]
    assert metrics.auc_euro(p["visible"], y) > metrics.auc_euro(p["tfidf+platt"], y) + 0.1
    assert auc["answer-surface"] > 0.8  # its one-hots of the reply structure see it too


def test_visible_is_about_as_good_as_platt_when_only_the_confidence_matters():
    """Near Platt, not above it: boosting fits a smooth function of the confidence in steps (measured
    0.02-0.035 below Platt's auc-euro on 500 and 1,000 such records, seeds 1-3; the text columns are
    not the cause), a cost the flexible control pays where the confidence is all there is."""
    recs, lps, y, conf = synthetic(by="confidence", seed=1)
    p = cross_validated(["platt", "visible"], recs, lps, y, conf)
    assert metrics.auroc(p["visible"], y) > metrics.auroc(p["platt"], y) - 0.06
    assert metrics.auc_euro(p["visible"], y) > metrics.auc_euro(p["platt"], y) - 0.05
    assert metrics.auroc(p["visible"], y) > 0.7


def test_the_boosting_does_not_depend_on_the_threads():
    from threadpoolctl import threadpool_limits

    recs, lps, y, conf = synthetic(n=200, by="structure", seed=2)
    X = visible_inputs(recs, lps)
    est = VisibleControl().fit(Inputs({VISIBLE: X[:150], CONFIDENCE: conf[:150]}), y[:150])
    hgb = est.pipeline_.named_steps["boosting"]
    feats = est.pipeline_.named_steps["columns"].transform(
        np.hstack([logit(np.clip(conf[150:], 1e-6, 1 - 1e-6))[:, None].astype(object), X[150:]]))
    with threadpool_limits(2, user_api="openmp"):
        two = hgb.predict_proba(feats)[:, 1]
    np.testing.assert_array_equal(est.predict_proba(Inputs({VISIBLE: X[150:], CONFIDENCE: conf[150:]}))[:, 1], two)


# ---------------------------------------------------------------- question+confidence
def prompt_states(n=160, seed=0):
    rng = np.random.default_rng(seed)
    t = rng.uniform(size=n)
    conf = rng.uniform(0.1, 0.9, size=n)
    y = (rng.uniform(size=n) < 0.5 * t + 0.5 * conf).astype(np.int64)
    h = rng.normal(scale=0.3, size=(n, 4, 12)).astype(np.float32)
    h[:, 1:, 2] += 2.0 * t[:, None]
    return h, y, conf


def Q(states, conf=None):
    """The inputs of a probe over the prompt's last-token states (and the raw confidence)."""
    return Inputs.of(states, conf, pooling="last-prompt")


def test_question_plus_confidence_stacks_the_question_forest_out_of_bag():
    from sklearn.linear_model import LogisticRegression

    h, y, conf = prompt_states()
    tr, te = np.arange(120), np.arange(120, 160)
    question = make_estimator("question-only", probe_params=SMALL).fit(Q(h[tr]), y[tr])
    stacked = make_estimator("question+confidence", probe_params=SMALL).fit(Q(h[tr], conf[tr]), y[tr])
    # by another path: the question-only forest's out-of-bag P(correct) and logit(confidence), clipped as
    # acute-pca10-stacked clips them, in an unpenalised logistic regression
    oob = question.forest_.oob_decision_function_[:, 1]
    assert np.all(question.forest_.oob_decision_function_.sum(axis=1) > 0)  # every record out of bag somewhere

    def feats(p, c):
        return np.column_stack([logit(np.clip(p, 1e-3, 1 - 1e-3)), logit(np.clip(c, 1e-6, 1 - 1e-6))])

    lr = LogisticRegression(C=np.inf, tol=1e-12, max_iter=10_000).fit(feats(oob, conf[tr]), y[tr])
    forest_te = question.predict_proba(Q(h[te]), calibrated=False)[:, 1]
    want = lr.predict_proba(feats(forest_te, conf[te]))[:, 1]
    np.testing.assert_allclose(stacked.predict_proba(Q(h[te], conf[te]))[:, 1], want, atol=1e-6)
    # and it stacks the same trees question-only calibrates
    np.testing.assert_array_equal(stacked.predict_proba(Q(h[te], conf[te]), calibrated=False)[:, 1],
                                  forest_te)
    with pytest.raises(InputError, match="reads the 'confidence' source"):
        make_estimator("question+confidence", probe_params=SMALL).fit(Q(h[tr]), y[tr])


def test_question_only_takes_the_forest_of_question_plus_confidence():
    h, y, conf = prompt_states(seed=1)
    tr, te = np.arange(120), np.arange(120, 160)
    seen = {}
    got = fit_predict(["question-only", "question+confidence"], Q(h[tr], conf[tr]), y[tr], Q(h[te], conf[te]),
                      probe_params=SMALL, on_fit=seen.__setitem__)
    assert seen["question-only"].forest_ is seen["question+confidence"].forest_
    own = make_estimator("question-only", probe_params=SMALL).fit(Q(h[tr]), y[tr])
    np.testing.assert_allclose(got["question-only"], own.predict_proba(Q(h[te]))[:, 1], rtol=0, atol=1e-12)


# ---------------------------------------------------------------- evaluate_store
def write_store(path, n=120, seed=0, prompts=True):
    """A real store: last-prompt states carry a third of the signal, the reply's missing arguments another,
    the raw confidence the rest."""
    rng = np.random.default_rng(seed)
    t = rng.uniform(size=n)
    missing = rng.integers(0, 2, size=n)
    conf = rng.uniform(0.2, 0.9, size=n)
    y = rng.uniform(size=n) < (t + (1 - missing) + conf) / 3
    recs = [{"id": f"q{i}", "prompt": f"Question {i % 9}: call the tool" if prompts else None,
             "generation": f"[call {i % 5}]", "answer": "x", "gold": ["x"], "correct": bool(y[i]),
             "parse_error": False, "finish_reason": "eos",
             "meta": {"category": f"c{i % 3}", "difficulty": "easy", **structure(1, 1, 2, 0, int(missing[i]), 0)}}
            for i in range(n)]
    lps = [np.full(4, np.log(c) / 4) for c in conf]
    mean = rng.normal(size=(n, 3, 12))
    last = rng.normal(scale=0.3, size=(n, 3, 12))
    last[:, 1:, 0] += 2 * t[:, None]
    m = {"model": "tiny", "num_layers": 2, "hidden_size": 12, "task": "default",
         "generation": {"max_new_tokens": 8, "do_sample": False, "chat": False, "pool": "decoding"}}
    with StoreWriter(path, m, dtype="float32") as w:
        w.add(recs, mean, lps, last_prompt=last, last_answer=rng.normal(size=(n, 3, 12)))
    return open_store(path)


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    base = tmp_path_factory.mktemp("visible")
    store = write_store(base / "store")
    with small_searches():  # which rows, what they read: not which strength a search picks
        res = evaluate_store(store, out_dir=base / "eval", estimators=["raw", "platt"], cv=3, repeats=1,
                             n_bootstrap=0, probe_params=SMALL, progress=False, reliability=["raw"])
    return base, res


def test_the_new_control_rows_with_what_they_use(evaluated):
    base, res = evaluated
    names = [r["estimator"] for r in res.rows]
    sampled = ("consistency", "semantic-entropy")  # this store has no sampled answers
    assert names == ["raw", "platt", *[c for c in CONTROLS if c not in sampled]]
    uses = {r["estimator"]: r["uses"] for r in res.rows}
    for name in NEW:
        assert uses[name] == CONTROL_USES[name]
    assert "reply structure" in uses["visible"] and "no states" in uses["visible"]
    assert "confidence" in uses["question+confidence"] and "no answer states" in uses["question+confidence"]
    doc = json.loads((base / "eval" / "results.json").read_text())
    assert set(NEW) <= set(doc["params"]["controls"]) and set(doc["skipped"]) == set(sampled)
    assert all("acute collect --samples K" in why for why in doc["skipped"].values())
    by = {r["estimator"]: r for r in res.rows}
    assert by["question+confidence"]["auroc"] > by["question-only"]["auroc"]  # it has the confidence too
    assert "| visible |" in (base / "eval" / "results.md").read_text()


def test_a_store_without_log_probs_or_prompts_leaves_the_rows_out_with_the_reason(tmp_path):
    no_prompts = write_store(tmp_path / "np", prompts=False)
    res = evaluate_store(no_prompts, out_dir=tmp_path / "a", estimators=["raw", "platt"], cv=3, repeats=1,
                         n_bootstrap=0, progress=False, reliability=["raw"],
                         controls=["answer-surface", "answer-text", "visible"])
    assert [r["estimator"] for r in res.rows] == ["raw", "platt"]
    skipped = json.loads((tmp_path / "a" / "results.json").read_text())["skipped"]
    assert set(skipped) == {"answer-surface", "answer-text", "visible"}
    assert all("record 'q0' has no prompt text" in why for why in skipped.values())

    class NoLogprobs:  # a store-like object without per-token log-probs
        def __init__(self, store):
            self.ids, self.correct, self.raw_confidence = store.ids, store.correct, store.raw_confidence
            self.layer_means, self.records, self.manifest = store.layer_means, store.records, store.manifest
            self.poolings = ("mean",)

        def __len__(self):
            return len(self.ids)

    store = NoLogprobs(write_store(tmp_path / "s"))
    with small_searches():  # which rows are left out and why
        res = evaluate_store(store, out_dir=tmp_path / "b", estimators=["raw", "platt"], cv=3, repeats=1,
                             n_bootstrap=0, progress=False, reliability=["raw"])
    names = [r["estimator"] for r in res.rows]
    assert "answer-text" in names and "visible" not in names and "answer-surface" not in names
    skipped = json.loads((tmp_path / "b" / "results.json").read_text())["skipped"]
    assert "no per-token log-probs" in skipped["visible"] and "no per-token log-probs" in skipped["answer-surface"]
    assert "acute rerecord" in skipped["question+confidence"]
