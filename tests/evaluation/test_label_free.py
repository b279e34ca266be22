"""Probes trained without gold labels: the binary targets by hand, the nested calibration draw,
the forest fitted on agreement only (changing the gold labels of uncalibrated records changes
nothing), the calibration against Platt scaling on the out-of-bag probabilities, and the command
that exports one that `acute score` uses like any other."""

from __future__ import annotations

import json

import numpy as np
import pytest

from acute.collect import collect
from acute.errors import InputError
from acute.estimators.calibration import PlattScaling
from acute.estimators.inputs import Inputs
from acute.evaluation.label_free import agreement_target, calibration_rows, train_label_free
from acute.models import load_model
from acute.store import StoreWriter, open_store
from acute.store.sampling import SamplingSettings
from acute.tasks import get_task
from acute.testing import hash_label
from acute.store.generation import GenerationSettings
from cli_run import run


def test_targets_and_calibration_rows_by_hand():
    A = np.array([[0.5, 0.7, 0.6], [0.4, 0.2, 0.1], [1.0, 0.0, 0.0], [0.0, 1.5, 1.2]])
    assert agreement_target(A, "consistency").tolist() == [1, 0, 1, 0]
    assert agreement_target(A, "semantic-entropy").tolist() == [0, 1, 1, 0]  # median 0.45
    rows = np.arange(10, 30)
    small, large = calibration_rows(rows, 5, 0), calibration_rows(rows, 12, 0)
    assert set(small) <= set(large) and len(large) == 12
    with pytest.raises(InputError, match="30 is more than the 20 labelled"):
        calibration_rows(rows, 30, 0)
    with pytest.raises(InputError, match="target must be one of"):
        agreement_target(A, "gold")


@pytest.fixture(scope="module")
def sampled(tiny_model_dir, tmp_path_factory):
    """A tiny model's store with 4 samples per question, labels and agreement from hashes of the id."""
    root = tmp_path_factory.mktemp("labelfree")
    model, tok = load_model(tiny_model_dir)
    path = root / "q.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for i in range(80):
            f.write(json.dumps({"id": f"q{i:03d}", "question": f"What is {i} plus {i + 1}?",
                                "answers": [str(2 * i + 1)]}) + "\n")
    task = get_task(path, shots=0)
    collect(model, tok, task, task.load(), root / "raw",
            GenerationSettings(batch_size=8, max_new_tokens=3, dtype="float32",
                               samples=SamplingSettings(4, temperature=0.25)),
            progress=False)
    raw = open_store(root / "raw")
    # a random tiny model's answers are noise: give each record an answer and samples that agree
    # with it as often as a hash of the id says (the forest has something of both classes to learn)
    records = []
    for r in raw.records:
        agree = int(hash_label(r["id"] + "a")) + int(hash_label(r["id"] + "b")) * 2
        samples = [dict(x, answer="paris" if j < agree else f"city {j}") for j, x in enumerate(r["samples"])]
        records.append(dict(r, correct=hash_label(r["id"]), answer="paris", samples=samples))
    with StoreWriter(root / "store", dict(raw.manifest), dtype="float32") as w:
        w.add(records, raw.layer_means, raw.token_logprobs, last_prompt=raw.states("last-prompt"),
              last_answer=raw.states("last-answer"), checkpoints=(raw.checkpoint_tokens, raw.checkpoint_means))
    return root, open_store(root / "store")


def test_the_forest_learns_agreement_and_only_the_calibration_reads_labels(sampled):
    _, store = sampled
    trained = train_label_free(store, "consistency", 20, seed=0, n_jobs=1, n_estimators=30)
    probe = trained.probe
    assert trained.training_summary["trained_without_gold_labels"] is True
    assert trained.training_summary["gold_labels_used"] == 20
    cal = calibration_rows(np.flatnonzero(store.labelled), 20, 0)
    y = np.asarray(store.correct).astype(int)
    want = PlattScaling(on="probability", smoothed_targets=True).fit(probe.oof_proba_[cal], y[cal])
    X = Inputs({"states@mean": np.asarray(store.layer_means, dtype=np.float32)})
    forest = probe.predict_proba(X, calibrated=False)[:, 1]
    np.testing.assert_allclose(probe.predict_proba(X)[:, 1], want.predict_proba(forest)[:, 1])
    # flipping the labels of records outside the calibration draw changes nothing
    flipped = [dict(r, correct=(not r["correct"]) if i not in set(cal) else r["correct"])
               for i, r in enumerate(store.records)]
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        with StoreWriter(tmp, dict(store.manifest), dtype="float32") as w:
            w.add(flipped, store.layer_means, store.token_logprobs, last_prompt=store.states("last-prompt"),
                  last_answer=store.states("last-answer"),
                  checkpoints=(store.checkpoint_tokens, store.checkpoint_means))
        other = train_label_free(open_store(tmp), "consistency", 20, seed=0, n_jobs=1, n_estimators=30)
        np.testing.assert_array_equal(other.probe.predict_proba(X), probe.predict_proba(X))


def test_the_command_exports_a_probe_score_uses(sampled, tiny_model_dir, tmp_path, capsys):
    root, store = sampled
    rc, out, _ = run(["train", "--store", root / "store", "--out", tmp_path / "p", "--target", "consistency",
                      "--calibration-labels", 20, "--test-fraction", 0, "--n-estimators", 20, "--n-jobs", 1], capsys)
    assert rc == 0 and "label-free (consistency, 20 calibration labels)" in out
    summary = json.loads((tmp_path / "p" / "probe.json").read_text())["training_summary"]
    assert summary["trained_without_gold_labels"] is True and summary["target"] == "consistency"
    rc, out, _ = run(["score", "What is 2 plus 3?", "--probe", tmp_path / "p", "--model", tiny_model_dir], capsys)
    assert rc == 0 and "confidence" in out
    rc, _, err = run(["train", "--store", root / "store", "--out", tmp_path / "q", "--target", "consistency"], capsys)
    assert rc == 2 and "needs --calibration-labels N" in err
    rc, _, err = run(["train", "--store", root / "store", "--out", tmp_path / "q", "--target", "consistency",
                      "--calibration-labels", 100000], capsys)
    assert rc == 2 and "more than the" in err
