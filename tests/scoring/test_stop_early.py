"""Stopping a generation the gate will not trust: the checkpoint model exported beside the answer
probe (``acute export --with-stop-early``, ``train_probe(stop_early=True)``), its round trip,
``Scorer.generate(..., stop_early=EPS)`` (the rows it stops are exactly those
``certify_stopping`` / ``first_stop`` give on the same scores) and ``acute score --stop-early``,
with every bad input refused by name.

The store is collected by ``acute.collect.collect`` from the tiny random Llama (prefix
checkpoints kept by default; hash labels, so both classes occur), with answers of
:data:`MAX_NEW` tokens, so the checkpoints 4 and 8 are fitted and 16, 32, 64 are not."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from acute.cli import main
from acute.collect import collect
from acute.errors import InputError, ProbeFormatError
from acute.estimators import load_probe
from acute.estimators.stop_early import StopEarlyModel
from acute.evaluation.prefix import prefix_inputs
from acute.evaluation.training import train_probe
from acute.metrics.certify import DEFAULT_DELTA
from acute.metrics.stopping import certify_stopping, first_stop
from acute.models import load_model
from acute.scoring import Scorer
from acute.store import StoreWriter, open_store
from acute.tasks import get_task
from acute.testing import hash_label

MAX_NEW = 12
N = 48


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    return load_model(tiny_model_dir)


@pytest.fixture(scope="module")
def collected(loaded, tmp_path_factory):
    """``(root, store)``: N tiny-model answers of up to MAX_NEW tokens with hash labels."""
    model, tok = loaded
    root = tmp_path_factory.mktemp("stop-early")
    with open(root / "q.jsonl", "w", encoding="utf-8") as f:
        for i in range(N):
            f.write(json.dumps({"id": f"q{i:03d}", "question": f"What is {i} plus {i + 1}?" + " Think." * (i % 3),
                                "answers": [str(2 * i + 1)]}) + "\n")
    task = get_task(str(root / "q.jsonl"), shots=0)
    task.is_correct = lambda ex, generation: hash_label(ex.id)
    task.stop_strings = ()  # answers of up to MAX_NEW tokens (the tiny model rarely ends one)
    collect(model, tok, task, task.load(), root / "store", model_name="tiny", batch_size=8,
            max_new_tokens=MAX_NEW, dtype="float32", progress=False)
    return root, open_store(root / "store")


@pytest.fixture(scope="module")
def trained(collected):
    _, store = collected
    return train_probe(store, view="pca10", n_estimators=5, stop_early=True)


@pytest.fixture(scope="module")
def probe_dir(collected, trained):
    root, _ = collected
    return trained.save(root / "probe")


@pytest.fixture(scope="module")
def probe(probe_dir):
    return load_probe(probe_dir)


@pytest.fixture(scope="module")
def scorer(loaded, probe):
    model, tok = loaded
    return Scorer(model, tok, probe, batch_size=8)


# ------------------------------------------------------------------ export
def test_export_writes_a_probe_per_checkpoint_and_the_calibration_arrays(probe_dir, trained, collected):
    _, store = collected
    assert sorted(p.name for p in probe_dir.iterdir()) == ["probe.json", "probe.safetensors", "stop-early"]
    assert sorted(p.name for p in (probe_dir / "stop-early").iterdir()) == ["calibration.safetensors", "k4", "k8"]
    entry = json.loads((probe_dir / "probe.json").read_text())["stop_early"]
    assert entry["path"] == "stop-early" and entry["checkpoints"] == [4, 8]
    assert entry["estimator"] == "acute-pca10-stacked" and entry["calibration"]["n"] == N
    assert "out-of-fold P(correct) > 0.5" in entry["trusted"] and entry["source"] == "out-of-fold"
    k8 = json.loads((probe_dir / "stop-early" / "k8" / "probe.json").read_text())
    assert k8["training_summary"]["checkpoint"] == 8 and k8["input"].get("pooling", "mean") == "mean"
    model = trained.stop_early
    n_tokens = np.asarray(store.n_tokens)
    # NaN exactly where the answer had ended by the checkpoint (never asked there)
    assert np.array_equal(np.isnan(model.scores), n_tokens[:, None] <= np.array([4, 8])[None, :])
    assert np.array_equal(model.correct, np.asarray(store.correct).astype(bool))


def test_the_calibration_arrays_are_out_of_fold_and_trusted_is_the_answer_probes(trained, collected):
    """``trusted`` is the answer probe's out-of-fold P(correct) > 0.5 (the certificate's
    cross-fitting), and a prefix probe's scores of its own training rows differ from the saved
    out-of-fold ones (they were not fitted on them)."""
    from acute.evaluation.certification import calibration_confidence

    _, store = collected
    conf, _, _ = calibration_confidence(trained, store)
    assert np.array_equal(trained.stop_early.trusted, conf > 0.5)
    X = prefix_inputs(store, 4)
    live = ~np.isnan(trained.stop_early.scores[:, 0])
    in_sample = trained.stop_early.probes[4].predict_proba(X.take(np.flatnonzero(live)))[:, 1]
    assert not np.allclose(in_sample, trained.stop_early.scores[live, 0])


def test_the_exported_model_loads_back_and_scores_as_fitted(probe, trained, collected):
    _, store = collected
    loaded = probe.stop_early
    assert isinstance(loaded, StopEarlyModel) and loaded.checkpoints == (4, 8)
    np.testing.assert_array_equal(loaded.scores, trained.stop_early.scores)
    np.testing.assert_array_equal(loaded.trusted, trained.stop_early.trusted)
    for k in (4, 8):
        X = prefix_inputs(store, k)
        want = trained.stop_early.probes[k].predict_proba(X)[:, 1]
        got = loaded.confidence(k, X["states@mean"], X["confidence"])
        np.testing.assert_allclose(got, want, atol=1e-12)
    assert loaded.rule(0.2) == certify_stopping(loaded.scores, loaded.trusted, loaded.correct, 0.2, DEFAULT_DELTA)


def test_a_probe_without_a_checkpoint_model_loads_and_scores_as_before(collected, probe_dir, tmp_path):
    """An export without --with-stop-early (as every probe before it) has no ``stop_early`` and
    the same answer probe; exporting over a folder with a checkpoint model replaces it."""
    _, store = collected
    plain = train_probe(store, view="pca10", n_estimators=5)
    assert plain.stop_early is None
    copy = tmp_path / "p"
    shutil.copytree(probe_dir, copy)
    plain.save(copy)
    assert sorted(p.name for p in copy.iterdir()) == ["probe.json", "probe.safetensors"]
    again = load_probe(copy)
    assert again.stop_early is None and "stop_early" not in again.manifest
    X = prefix_inputs(store, 4)
    np.testing.assert_array_equal(again.arrays["trees.value"], load_probe(probe_dir).arrays["trees.value"])


def test_a_tampered_checkpoint_model_is_refused_by_name(probe_dir, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(probe_dir, bad)
    with open(bad / "stop-early" / "calibration.safetensors", "ab") as f:
        f.write(b"x")
    with pytest.raises(ProbeFormatError, match=r"calibration.safetensors: missing, or its sha256"):
        load_probe(bad)
    shutil.rmtree(bad)
    shutil.copytree(probe_dir, bad)
    shutil.rmtree(bad / "stop-early" / "k8")
    with pytest.raises(ProbeFormatError, match=r"names a prefix probe in .*k8.*--with-stop-early"):
        load_probe(bad)


def test_a_store_without_checkpoints_is_refused_naming_it_and_acute_collect(collected, tmp_path):
    _, store = collected
    old = tmp_path / "old"
    manifest = {k: v for k, v in store.manifest.items() if k != "checkpoints"}
    with StoreWriter(old, manifest, dtype=store.manifest["dtype"]) as w:
        w.add(store.records, store.layer_means, store.token_logprobs, last_prompt=store.states("last-prompt"),
              last_answer=store.states("last-answer"))
    with pytest.raises(InputError, match=r"old.*acute collect"):
        train_probe(open_store(old), view="pca10", n_estimators=3, stop_early=True)
