"""The sampling-consistency controls: the agreement source from stored samples by the task's
equivalence, Platt scaling against scikit-learn's own logistic regression, the rows in an
evaluation of a store with samples (with their cost) and the reason they are left out of one
without."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

from acute.errors import InputError
from acute.estimators.agreement import AgreementPlatt, agreement_matrix, sampling_cost
from acute.estimators.inputs import Inputs
from acute.evaluation import evaluate_store
from acute.store import StoreWriter, open_store
from acute.tasks import get_task


def _records(n, rng):
    """MMLU-like records: a greedy letter and 4 sampled letters; the more samples agree, the
    likelier the answer is right."""
    out = []
    for i in range(n):
        agree = int(rng.integers(0, 5))
        greedy = "A"
        samples = [{"answer": "A" if j < agree else "BCD"[j % 3], "token_ids": [1, 2],
                    "token_logprobs": [-0.1, -0.2]} for j in range(4)]
        correct = bool(rng.uniform() < 0.15 + 0.2 * agree)
        out.append({"id": f"r{i}", "answer": greedy, "correct": correct, "samples": samples, "n_tokens": 2,
                    "prompt": "Q?", "generation": "A"})
    return out


def test_agreement_source_and_platt_against_sklearn():
    rng = np.random.default_rng(0)
    records = _records(200, rng)
    task = get_task("mmlu")
    A = agreement_matrix(records, task)
    assert A[:, 0].tolist() == [sum(s["answer"] == "A" for s in r["samples"]) / 4 for r in records]
    y = np.array([r["correct"] for r in records])
    X = Inputs({"agreement": A})
    got = AgreementPlatt("consistency").fit(X, y).predict_proba(X)[:, 1]
    want = LogisticRegression(C=1e4, max_iter=1000).fit(A[:, :1], y).predict_proba(A[:, :1])[:, 1]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    got = AgreementPlatt("semantic-entropy").fit(X, y).predict_proba(X)[:, 1]
    want = LogisticRegression(C=1e4, max_iter=1000).fit(-A[:, 1:2], y).predict_proba(-A[:, 1:2])[:, 1]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert sampling_cost(records) == pytest.approx(5.0)  # 2 greedy + 4 x 2 sampled tokens, over 2
    # the ratio of totals, not a mean of ratios: (1 + 9 + 9 + 9) / (1 + 9), where the per-record
    # ratios 10 and 2 would average 6
    short, long = ({"n_tokens": n, "samples": [{"token_ids": [0] * k} for k in (4, 5)]} for n in (1, 9))
    assert sampling_cost([short, long, {"n_tokens": 3}]) == pytest.approx(2.8)
    with pytest.raises(InputError, match="record 'x' has no sampled answers.*--samples"):
        agreement_matrix([{"id": "x", "answer": "A"}], task)
    with pytest.raises(InputError, match="non-finite value in row 1"):
        Inputs({"agreement": [[0.5, 0.1, 0.1], [np.nan, 0, 0]]})


def _store(path, records, with_samples=True):
    manifest = {"model": "m", "task": "mmlu", "model_fingerprint": {"num_layers": 1, "hidden_size": 4},
                "generation": {"samples": {"k": 4, "temperature": 1.0, "top_p": 1.0, "seed": 0}}}
    rng = np.random.default_rng(1)
    with StoreWriter(path, manifest, dtype="float32") as w:
        recs = [r if with_samples else {k: v for k, v in r.items() if k != "samples"} for r in records]
        w.add(recs, rng.normal(size=(len(records), 2, 4)), [np.array([-0.1, -0.2])] * len(records))
    return open_store(path)


def test_rows_of_an_evaluation_with_samples_and_left_out_without(tmp_path):
    records = _records(120, np.random.default_rng(2))
    store = _store(tmp_path / "s", records)
    result = evaluate_store(store, cv=3, repeats=1, n_bootstrap=0, estimators=["raw", "platt"],
                            controls=["consistency", "semantic-entropy"], progress=False)
    names = [r["estimator"] for r in result.rows]
    assert "consistency" in names and "semantic-entropy" in names
    assert result.params["sampling_cost_tokens"] == pytest.approx(5.0)
    assert result.params["samples"]["k"] == 4
    row = next(r for r in result.rows if r["estimator"] == "consistency")
    assert row["auroc"] > 0.6  # agreement predicts correctness in these records
    plain = _store(tmp_path / "p", records, with_samples=False)
    result = evaluate_store(plain, cv=3, repeats=1, n_bootstrap=0, estimators=["raw", "platt"],
                            controls=["consistency"], progress=False)
    assert "consistency" not in [r["estimator"] for r in result.rows]
    assert "acute collect --samples K" in result.skipped["consistency"]
