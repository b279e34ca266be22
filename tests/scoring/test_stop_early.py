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
from acute.store.generation import GenerationSettings
from stop_probes import prefix_scores  # tests/stop_probes.py

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
    collect(model, tok, task, task.load(), root / "store",
            GenerationSettings(batch_size=8, max_new_tokens=MAX_NEW, dtype="float32"), progress=False)
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
    return Scorer(model, tok, probe, GenerationSettings(batch_size=8))


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


# ------------------------------------------------------------------ scoring
QUESTIONS = [f"What is {i} times {i + 2}?" + " Go." * (i % 4) for i in range(12)]


def _forced(probe, n: int = 300):
    """``probe`` with a checkpoint model whose calibration arrays certify the top of the grid
    (0.99): ``n`` trusted, right answers that no threshold below 1 stops."""
    import copy

    model = probe.stop_early
    out = copy.copy(probe)
    out.stop_early = StopEarlyModel(model.probes, np.ones((n, len(model.checkpoints))), np.ones(n, bool),
                                    np.ones(n, bool), model.details)
    return out


@pytest.fixture(scope="module")
def plain(loaded, scorer):
    """The questions generated without stopping, with the checkpoints the stop rule reads."""
    from acute.extraction import generate_and_record
    from acute.store.checkpoints import DEFAULT_CHECKPOINTS, parse_schedule

    model, tok = loaded
    g = scorer.generation
    return generate_and_record(model, tok, [scorer.format(q) for q in QUESTIONS], max_new_tokens=g.max_new_tokens,
                               stop_strings=g.stop_strings, checkpoints=parse_schedule(DEFAULT_CHECKPOINTS))


def test_a_threshold_forced_high_stops_every_row_at_the_first_checkpoint(loaded, probe, plain):
    model, tok = loaded
    forced = _forced(probe)
    assert forced.stop_early.rule(0.1).threshold == 0.99
    out = Scorer(model, tok, forced, GenerationSettings(batch_size=8)).generate(QUESTIONS, stop_early=0.1)
    for s, g in zip(out, plain):
        assert s.stopped_at == 4 and s.n_tokens == 4 and s.finish_reason == "stopped"
        assert s.decision == "abstain" and s.confidence is None and s.stop["checkpoint"] == 4
        assert s.stop["threshold"] == 0.99 and s.stop["epsilon"] == 0.1 and "after 4 tokens" in s.stop["reason"]
        assert list(s.recorded.token_ids) == list(g.token_ids[:4]) and g.text.startswith(s.recorded.text)
        d = s.to_dict()
        assert d["stopped_at"] == 4 and d["decision"] == "abstain" and d["stop"]["confidence"] < 0.99


def test_the_stopped_rows_are_exactly_those_first_stop_gives_on_the_same_scores(scorer, probe, plain):
    """At a threshold between the prefix scores, the scorer stops a row at the checkpoint
    first_stop finds on scores computed from the unstopped generation, and leaves every other
    answer as it was."""
    from acute.metrics.stopping import StopRule
    from acute.scoring import Gate

    model = probe.stop_early
    scores = prefix_scores(model, plain)
    t = float(np.nanmedian(scores))
    expected = first_stop(scores, t)
    assert (expected >= 0).any() and (expected < 0).any()
    gate = Gate(stop=StopRule(t, 0.1, DEFAULT_DELTA, 0, 0, 1.0))
    out = scorer.generate(QUESTIONS, gate=gate)
    for i, (s, g, j) in enumerate(zip(out, plain, expected)):
        if j < 0:
            assert s.stopped_at is None and s.answer == g.text.strip() and s.stop["threshold"] == t
            assert s.finish_reason == g.finish_reason and s.confidence is not None
        else:
            assert s.stopped_at == model.checkpoints[j] and s.finish_reason == "stopped" and not s.trust
            np.testing.assert_allclose(s.stop["confidence"], scores[i, j], atol=1e-6)


def test_stop_early_certifies_once_per_epsilon_on_the_saved_arrays(scorer, probe, monkeypatch):
    from acute.scoring.gate import parse_gates

    want = certify_stopping(probe.stop_early.scores, probe.stop_early.trusted, probe.stop_early.correct, 0.3,
                            DEFAULT_DELTA)
    gates = parse_gates(probe, 3, stop_early=0.3)
    assert gates[0].stop == want and gates[0] is gates[2]
    calls = []
    monkeypatch.setattr("acute.estimators.stop_early.certify_stopping", lambda *a: calls.append(a))
    assert parse_gates(probe, 2, stop_early=0.3)[0].stop == want and not calls  # cached per epsilon


def test_answers_without_a_stop_rule_are_unchanged(scorer, plain):
    out = scorer.generate(QUESTIONS[:3])
    for s, g in zip(out, plain):
        assert s.answer == g.text.strip() and "stop" not in s.to_dict() and "stopped_at" not in s.to_dict()


@pytest.mark.parametrize("bad", [0, 1, 1.5, -0.1, True, "0.1", float("nan")])
def test_a_stop_early_outside_0_1_is_refused_naming_it(scorer, bad):
    with pytest.raises(InputError, match=r"^stop_early must be a number in \(0, 1\)"):
        scorer.generate(QUESTIONS[0], stop_early=bad)


def test_a_probe_without_a_checkpoint_model_is_refused_saying_how_to_export_one(loaded, collected, tmp_path):
    model, tok = loaded
    _, store = collected
    plain = load_probe(train_probe(store, view="pca10", n_estimators=3).save(tmp_path / "plain"))
    with pytest.raises(InputError, match=r"stop_early: this probe has no checkpoint model.*--with-stop-early"):
        Scorer(model, tok, plain).generate(QUESTIONS[0], stop_early=0.1)


# ------------------------------------------------------------------ acute score
def test_acute_score_stop_early_prints_the_stop_and_jsonl_carries_it(probe_dir, tiny_model_dir, tmp_path, capsys):
    forced = _forced(load_probe(probe_dir))
    forced_dir = forced.save(tmp_path / "forced")
    base = ["score", "--probe", str(forced_dir), "--model", str(tiny_model_dir)]
    assert main(base + [QUESTIONS[0], "--stop-early", "0.1"]) == 0
    out = capsys.readouterr().out
    assert "decision:       abstain (stopped after 4 tokens" in out and "--stop-early 0.1" in out
    rows = tmp_path / "q.jsonl"
    rows.write_text("".join(json.dumps({"id": f"r{i}", "question": q}) + "\n" for i, q in enumerate(QUESTIONS[:2])))
    assert main(base + ["--jsonl", str(rows), "--stop-early", "0.1"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [x["stopped_at"] for x in lines] == [4, 4] and all(x["decision"] == "abstain" for x in lines)
    assert lines[0]["finish_reason"] == "stopped" and lines[0]["stop"]["threshold"] == 0.99


@pytest.mark.parametrize("argv, message", [
    (["--stop-early", "1.5"], "argument --stop-early: must be a number in (0, 1)"),
    (["--stop-early", "0"], "argument --stop-early: must be a number in (0, 1)"),
    (["--stop-early", "0.1", "--response", "Paris"], "--stop-early stops a generation while it is written"),
])
def test_acute_score_refuses_bad_stop_early_in_one_line(probe_dir, tiny_model_dir, capsys, argv, message):
    """Exit 2 with one line naming the option (argparse's own error line after its usage)."""
    try:
        rc = main(["score", "Who?", "--probe", str(probe_dir), "--model", str(tiny_model_dir)] + argv)
    except SystemExit as e:
        rc = e.code
    assert rc == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert message in last


def test_acute_score_with_a_probe_without_a_checkpoint_model_says_how_to_export_one(collected, tiny_model_dir,
                                                                                   tmp_path, capsys):
    _, store = collected
    plain = train_probe(store, view="pca10", n_estimators=3).save(tmp_path / "plain")
    assert main(["score", "Who?", "--probe", str(plain), "--model", str(tiny_model_dir), "--stop-early", "0.1"]) == 2
    err = capsys.readouterr().err
    assert "--stop-early: this probe has no checkpoint model" in err and "--with-stop-early" in err


def test_acute_export_with_stop_early(collected, tmp_path, capsys):
    root, _ = collected
    assert main(["export", "--store", str(root / "store"), "--out", str(tmp_path / "p"), "--view", "pca10",
                 "--n-estimators", "3", "--with-stop-early"]) == 0
    assert "stop-early: prefix probes at 4, 8 tokens" in capsys.readouterr().out
    assert load_probe(tmp_path / "p").stop_early.checkpoints == (4, 8)


def test_a_precheck_and_a_stop_rule_act_together(loaded, collected, tmp_path):
    """The prompts the precheck lets through generate from its pass and are stopped as without it."""
    model, tok = loaded
    _, store = collected
    both = train_probe(store, view="pca10", n_estimators=3, precheck_estimator="question-only", stop_early=True)
    forced = _forced(load_probe(both.save(tmp_path / "both")))
    out = Scorer(model, tok, forced, GenerationSettings(batch_size=8)).generate(QUESTIONS[:4], precheck=1e-6,
                                                                               stop_early=0.1)
    assert all(s.generated and s.precheck["decision"] == "trust" for s in out)
    assert [s.stopped_at for s in out] == [4] * 4 and all(s.decision == "abstain" for s in out)


def test_a_checkpoint_with_too_few_right_answers_for_the_probes_folds_gets_no_probe(collected, tmp_path):
    """4 right answers among those still generating are fewer than the default probe's stratified
    folds need: no checkpoint gets a probe, so the store is refused by name, never a fold error."""
    _, store = collected
    records = [dict(r, correct=i < 4) for i, r in enumerate(store.records)]
    with StoreWriter(tmp_path / "few", dict(store.manifest), dtype="float32") as w:
        w.add(records, store.layer_means, store.token_logprobs, last_prompt=store.states("last-prompt"),
              last_answer=store.states("last-answer"), checkpoints=(store.checkpoint_tokens, store.checkpoint_means))
    with pytest.raises(InputError, match=r"no checkpoint of .* still generating, with both labels"):
        train_probe(open_store(tmp_path / "few"), view="pca10", n_estimators=3, stop_early=True, max_error=None)
