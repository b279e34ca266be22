"""A stack exported as a whole gate: ``train_probe(store, "acute-all", max_error=..., precheck_estimator=...,
stop_early=True)`` (``acute export --estimator acute-all --max-error --with-precheck --with-stop-early``)
certifies the stack's threshold on its own out-of-fold predictions, fits the question-only probe
and the checkpoint model beside it, and the stack folder carries all three through a save and a
load.

The store is collected from the tiny random Llama (prefix checkpoints kept by default), then
relabelled from its own last-layer states so that the gate has a signal to certify."""

from __future__ import annotations

import json

import numpy as np
import pytest

from acute.collect import collect
from acute.estimators import load_probe
from acute.estimators.folds import stratified_folds
from acute.estimators.plan import store_inputs
from acute.estimators.registry import make_estimator
from acute.estimators.stack_file import ExportedStack
from acute.evaluation.choice import TrainedStack
from acute.evaluation.training import train_probe
from acute.metrics.certify import DEFAULT_DELTA, certify_threshold
from acute.models import load_model
from acute.store import StoreWriter, open_store
from acute.store.generation import GenerationSettings
from acute.tasks import get_task
from cli_run import run  # tests/cli_run.py
from smaller import small_searches  # tests/smaller.py

pytest.importorskip("skops.io")

N = 80
ALPHA = 0.25


@pytest.fixture(scope="module")
def store(tiny_model_dir, tmp_path_factory):
    """N tiny-model answers of 12 tokens, labelled right iff the first unit of their last layer's
    mean state is above its median (a signal the states carry, so a certificate can hold)."""
    root = tmp_path_factory.mktemp("stack-gate")
    model, tok = load_model(tiny_model_dir)
    with open(root / "q.jsonl", "w", encoding="utf-8") as f:
        for i in range(N):
            f.write(json.dumps({"id": f"q{i:03d}", "question": f"What is {i} plus {i + 1}?" + " Think." * (i % 3),
                                "answers": [str(2 * i + 1)]}) + "\n")
    task = get_task(str(root / "q.jsonl"), shots=0)
    task.stop_strings = ()
    collect(model, tok, task, task.load(), root / "raw",
            GenerationSettings(batch_size=8, max_new_tokens=12, dtype="float32"), progress=False)
    raw = open_store(root / "raw")
    unit = np.asarray(raw.layer_means, dtype=np.float64)[:, -1, 0]
    records = [dict(r, correct=bool(u > np.median(unit))) for r, u in zip(raw.records, unit)]
    with StoreWriter(root / "store", dict(raw.manifest), dtype="float32") as w:
        w.add(records, raw.layer_means, raw.token_logprobs, last_prompt=raw.states("last-prompt"),
              last_answer=raw.states("last-answer"), checkpoints=(raw.checkpoint_tokens, raw.checkpoint_means))
    return open_store(root / "store")


@pytest.fixture(scope="module")
def trained(store):
    with small_searches():
        return train_probe(store, "acute-all", n_estimators=10, max_error=ALPHA, precheck_estimator="question-only",
                           stop_early=True, scoring_setting="score")


def _oof_by_hand(store, trained) -> np.ndarray:
    """The stack's out-of-fold P(correct) on 5 stratified folds (seed 0, records one by one),
    refitted from its registry name on the sources its folder records."""
    y = np.asarray(store.correct).astype(np.int64)
    X = store_inputs(store, list(trained.exported.sources), ())
    out = np.full(y.size, np.nan)
    with small_searches():
        for tr, te in stratified_folds(y, 5, 0):
            est = make_estimator("acute-all", random_state=0, probe_params={"n_estimators": 10})
            out[te] = est.fit(X.take(tr), y[tr]).predict_proba(X.take(te))[:, 1]
    return out


def test_the_certificate_is_certified_on_the_stacks_own_out_of_fold_predictions(store, trained):
    assert isinstance(trained, TrainedStack) and trained.label == "acute-all"
    (entry,) = trained.certificates
    oof = _oof_by_hand(store, trained)
    expected = certify_threshold(oof, np.asarray(store.correct).astype(bool), ALPHA, DEFAULT_DELTA)
    assert entry["valid"] and expected.valid
    assert entry["threshold"] == pytest.approx(expected.threshold)
    assert entry["source"] == "out-of-fold" and entry["folds"]["estimator"] == "acute-all"
    # the checkpoint model's "would be trusted" is the same out-of-fold stack above 0.5
    np.testing.assert_array_equal(trained.stop_early.trusted, oof > 0.5)
    assert trained.confidence_reference["source"] == "out-of-fold"


def test_the_stack_folder_carries_certificate_precheck_and_checkpoint_model(store, trained, tmp_path):
    trained.save(tmp_path / "gate")
    man = json.loads((tmp_path / "gate" / "probe.json").read_text())
    assert man["kind"] == "stack" and man["precheck"]["path"] == "precheck" and man["stop_early"]["path"] == "stop-early"
    loaded = load_probe(tmp_path / "gate")
    assert isinstance(loaded, ExportedStack)
    assert [c["threshold"] for c in loaded.certificates] == [c["threshold"] for c in trained.certificates]
    X = trained.inputs(store)
    np.testing.assert_array_equal(loaded.predict_proba(X), trained.exported.estimator.predict_proba(X))
    Q = store_inputs(store, list(loaded.precheck.sources), ())
    np.testing.assert_allclose(loaded.precheck.predict_proba(Q), trained.precheck.predict_proba(Q), atol=1e-12)
    assert loaded.stop_early.checkpoints == trained.stop_early.checkpoints
    np.testing.assert_array_equal(loaded.stop_early.scores, trained.stop_early.scores)
    assert loaded.stop_early.rule(0.1).threshold == trained.stop_early.rule(0.1).threshold
    # saving again over the folder replaces it, nested folders included
    trained.save(tmp_path / "gate")
    assert load_probe(tmp_path / "gate").precheck is not None


def test_acute_export_writes_a_certified_stack_with_its_companions(store, tmp_path, capsys):
    with small_searches():
        rc, out, err = run(["export", "--store", store.path, "--estimator", "visible-all", "--for", "score",
                            "--max-error", ALPHA, "--with-precheck", "--with-stop-early", "--n-estimators", 5,
                            "--out", tmp_path / "v"], capsys)
    assert rc == 0, err
    loaded = load_probe(tmp_path / "v")
    assert loaded.name == "visible-all" and len(loaded.certificates) == 1
    assert loaded.precheck is not None and loaded.stop_early is not None
    assert "certif" in out


def test_a_stack_and_a_probe_replace_each_others_folder(store, trained, tmp_path):
    """``acute export --estimator auto`` may ship a stack where a probe was exported before, and
    the other way round: either replaces the other's folder, nested folders included."""
    probe = train_probe(store, view="pca10", n_estimators=3, precheck_estimator="question-only")
    probe.save(tmp_path / "gate")
    trained.save(tmp_path / "gate")
    assert isinstance(load_probe(tmp_path / "gate"), ExportedStack)
    assert not (tmp_path / "gate" / "probe.safetensors").exists()
    probe.save(tmp_path / "gate")
    assert not isinstance(load_probe(tmp_path / "gate"), ExportedStack)
    assert not (tmp_path / "gate" / "stack.skops").exists() and not (tmp_path / "gate" / "stop-early").exists()
