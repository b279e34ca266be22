"""Prefix probes: the prefix inputs against the store's own arrays, the log-prob statistics by
hand, the reply so far decoded by the store's own tokenizer, and the evaluation's rows on a tiny
collected store (one per checkpoint and row, the probe at a k beyond every answer equal to the
final one). The controls by hand: tests/evaluation/test_prefix_controls.py."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from acute.collect import collect
from acute.errors import InputError
from acute.evaluation.crossval import cv_folds
from acute.estimators.prefix_controls import logprob_stats, prefix_confidence, reply_so_far
from acute.evaluation.prefix import evaluate_prefixes, load_tokenizer, prefix_inputs
from acute.models import load_model
from acute.store import StoreWriter, open_store
from acute.tasks import get_task
from acute.testing import hash_label
from acute.store.generation import GenerationSettings


def test_logprob_stats_by_hand():
    lp = [np.array([-1.0, -2.0, -3.0, -0.5, -0.5, -4.0]), np.array([-0.2]), np.array([])]
    got = logprob_stats(lp, 6, window=4)
    # windows of 4: means -1.625, -1.5, -2.0
    assert got[0].tolist() == pytest.approx([-11 / 6, -2.0])
    assert got[1].tolist() == pytest.approx([-0.2, -0.2]) and got[2].tolist() == [0.0, 0.0]
    assert logprob_stats(lp, 2, window=4)[0].tolist() == pytest.approx([-1.5, -1.5])
    assert prefix_confidence(lp, 2).tolist() == pytest.approx([math.exp(-3.0), math.exp(-0.2), 1.0])


@pytest.fixture(scope="module")
def store(tiny_model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("prefix")
    model, tok = load_model(tiny_model_dir)
    path = root / "q.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for i in range(60):
            f.write(json.dumps({"id": f"q{i:03d}", "question": f"What is {i} plus {i + 1}?",
                                "answers": [str(2 * i + 1)]}) + "\n")
    task = get_task(path, shots=0)
    task.stop_strings = ()
    collect(model, tok, task, task.load(), root / "raw",
            GenerationSettings(batch_size=8, max_new_tokens=12, dtype="float32"), progress=False)
    raw = open_store(root / "raw")
    records = [dict(r, correct=hash_label(r["id"])) for r in raw.records]
    with StoreWriter(root / "mixed", dict(raw.manifest), dtype="float32") as w:
        w.add(records, raw.layer_means, raw.token_logprobs, last_prompt=raw.states("last-prompt"),
              last_answer=raw.states("last-answer"), checkpoints=(raw.checkpoint_tokens, raw.checkpoint_means))
    return open_store(root / "mixed")


def test_prefix_inputs_read_the_checkpoints(store):
    X = prefix_inputs(store, 8)
    np.testing.assert_array_equal(X["states@mean"], store.prefix_states(8))
    np.testing.assert_allclose(X["confidence"], [math.exp(float(np.sum(lp[:8], dtype=np.float64)))
                                                 for lp in store.token_logprobs])


def test_the_reply_so_far_is_decoded_by_the_stores_tokenizer(store, tiny_model_dir):
    tok = load_tokenizer(None, store)  # the manifest's: the tokenizer that generated the answers
    assert store.manifest["tokenizer"] == str(tiny_model_dir)
    for rec, lp in zip(store.records, store.token_logprobs):
        ids = rec["token_ids"]
        assert len(ids) == lp.size and tok.decode(ids, skip_special_tokens=True) == rec["generation"]
    for k in (1, 4, 11, 64):
        texts = reply_so_far(store.records, store.token_logprobs, k, tok)
        assert all(t == tok.decode(r["token_ids"][:k], skip_special_tokens=True) for t, r in zip(texts, store.records))
        assert all(r["generation"].startswith(t) for t, r in zip(texts, store.records))


def test_evaluation_rows(store):
    y = store.correct
    folds = cv_folds(store.ids, y, 3, 1, seed=0)
    result = evaluate_prefixes(store, folds, checkpoints=(4, 64), controls=("log-prob",), n_jobs=1,
                               probe_params={"n_estimators": 20})
    names = [(r["row"], r["k"]) for r in result.rows]
    assert names == [("question-only", 0), ("probe", 4), ("log-prob", 4), ("probe", 64), ("log-prob", 64),
                     ("final", None)]
    for p in result.predictions.values():
        assert p.shape == (1, len(store)) and np.all((p >= 0) & (p <= 1))
    lengths = store.n_tokens
    assert result.rows[1]["generating"] == pytest.approx(np.mean(lengths > 4))
    # beyond every answer's length the prefix is the answer: the probe at 64 is the final probe
    assert lengths.max() <= 12
    np.testing.assert_allclose(result.predictions[("probe", 64)], result.predictions[("final", None)])


def test_a_store_without_checkpoints_is_named(tmp_path):
    with StoreWriter(tmp_path / "s", {"model": "m", "task": "t"}, dtype="float32") as w:
        w.add([{"id": i, "correct": i % 2 == 0} for i in range(6)], np.zeros((6, 2, 2)), [np.array([-0.1])] * 6)
    with pytest.raises(InputError, match="no prefix checkpoints.*acute collect"):
        evaluate_prefixes(open_store(tmp_path / "s"), [], checkpoints=(4,))


def test_the_command_writes_the_table_and_figure(store, tmp_path, capsys):
    from acute.cli import main

    rc = main(["prefix", "--store", str(store.path), "--out", str(tmp_path / "p"), "--cv", "3",
               "--n-estimators", "10", "--n-jobs", "1", "--controls", "log-prob,text-so-far", "--quiet"])
    out = capsys.readouterr().out
    assert rc == 0 and "| probe | 4 |" in out and "| text-so-far | 64 |" in out and "prefix probes written to" in out
    for name in ("prefix.md", "prefix.csv", "prefix.json", "prefix.png"):
        assert (tmp_path / "p" / name).stat().st_size > 0
    doc = json.loads((tmp_path / "p" / "prefix.json").read_text())
    assert doc["checkpoints"] == [4, 8, 16, 32, 64] and len(doc["rows"]) == 17
    assert list(doc["uses"]) == ["question-only", "probe", "log-prob", "text-so-far", "final"]
    assert doc["params"]["controls"] == ["log-prob", "text-so-far"]
