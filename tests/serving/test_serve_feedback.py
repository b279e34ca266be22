"""Feedback and retraining from served answers (issue 45 item 4): ``acute serve --record-to STORE``
writes every served answer to an ordinary store (its id the answer's id, its text, confidence and
pooled states equal to scoring that prompt alone), ``POST /v1/feedback`` labels them durably
(404 / 409 / 400 / 422 for what it refuses), nothing buffered is lost on SIGTERM, and
``acute export --store STORE`` trains on the labelled ones, leaving out the others. The labels
file itself (acute.store.labels): a torn tail ignored and removed, corruption refused."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from servers import running  # tests/servers.py
from service import GENERATION, NAME, TIMEOUT  # tests/serving/service.py (the model: its conftest.py)

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("prometheus_client")
httpx = pytest.importorskip("httpx")

from acute.estimators.inputs import Inputs
import acute  # noqa: E402
from acute.errors import CorruptStoreError, IncompatibleStoreError, InputError  # noqa: E402
from acute.estimators import ActivationProbe, load_probe  # noqa: E402
from acute.extraction import generate_and_record  # noqa: E402
from acute.scoring import Scorer  # noqa: E402
from acute.serving import create_app  # noqa: E402
from acute.serving.recording import probe_digest  # noqa: E402
from acute.store import LabelFile, StoreWriter, open_store, read_labels, verify_store  # noqa: E402
from acute.store.labels import LABELS  # noqa: E402

QUESTIONS = ["What is the capital of France?", "Who wrote Hamlet?", "2+2=", "Name a planet."]


def _probe(loaded, path: Path, seed: int) -> Path:
    """A cosine probe (5 trees) fitted on the tiny model's states with hash labels."""
    model, tok = loaded
    prompts = [f"Question: what is {i} times {i + 3}?" for i in range(30)]
    gens = generate_and_record(model, tok, prompts, max_new_tokens=GENERATION["max_new_tokens"])
    y = np.array([hashlib.sha256(p.encode()).digest()[0] % 2 for p in prompts])
    probe = ActivationProbe(view="cosine", n_estimators=5, random_state=seed).fit(Inputs.of(np.stack([g.layer_means for g in gens]), np.array([g.raw_confidence for g in gens])), y)
    probe.save(path, identity=replace(acute.ModelIdentity.from_model(model), model=NAME),
               training_summary={"generation": GENERATION, "task": None})
    return path


@pytest.fixture(scope="module")
def probe_dir(loaded, tmp_path_factory):
    return _probe(loaded, tmp_path_factory.mktemp("feedback") / "probe", seed=0)


def post(url, path, body):
    return httpx.post(url + path, json=body, timeout=TIMEOUT)


def test_served_answers_become_records_and_feedback_labels_them(loaded, probe_dir, tmp_path):
    model, tok = loaded
    probe = load_probe(probe_dir)
    scorer = Scorer(model, tok, probe)
    store = tmp_path / "served"
    app = create_app(scorer, model_name=NAME, record_to=store, record_shard_size=3)
    with running(app) as url:
        scored = post(url, "/v1/score", [{"prompt": q, "risk": 0.5} for q in QUESTIONS]).json()
        chat = post(url, "/v1/chat/completions", {"model": NAME, "messages": [{"role": "user", "content": "Hi"}]}).json()
        given = post(url, "/v1/score", {"prompt": QUESTIONS[0], "response": "Paris", "risk": 0.5}).json()
        ids = [a["id"] for a in scored] + [chat["id"]]
        assert len(set(ids)) == 5 and chat["id"].startswith("chatcmpl-")
        assert len(open_store(store)) == 3  # one shard committed, two answers buffered
        # feedback on a buffered answer commits it first: the label never names a lost record
        assert post(url, "/v1/feedback", {"id": ids[3], "correct": True}).json() == {
            "object": "feedback", "id": ids[3], "correct": True}
        assert post(url, "/v1/feedback", {"id": ids[0], "correct": False}).status_code == 200
        assert len(open_store(store)) == 5 and read_labels(store) == {ids[3]: True, ids[0]: False}
        refusals = {
            404: [{"id": "chatcmpl-never", "correct": True}, {"id": given["id"], "correct": True}],
            409: [{"id": ids[0], "correct": True}],
            400: [[ids[1]], {"id": ids[1]}, {"id": 7, "correct": True}, {"id": ids[1], "correct": True, "x": 1}],
            422: [{"id": ids[1], "correct": "yes"}, {"id": ids[1], "correct": 1}],
        }
        for status, bodies in refusals.items():
            for body in bodies:
                r = post(url, "/v1/feedback", body)
                assert r.status_code == status, (body, r.text)
                assert r.json()["error"]["message"]
        assert "chatcmpl-never" in post(url, "/v1/feedback", refusals[404][0]).json()["error"]["message"]
    # the app's shutdown committed the rest and marked the store complete
    got = open_store(store)
    assert got.ids == ids and got.manifest["status"] == "complete"
    assert got.manifest["served"]["estimator"] == "acute-cosine" and verify_store(store)["num_labels"] == 2
    assert list(got.labelled) == [True, False, False, True, False]
    assert list(got.select(got.labelled).correct) == [False, True]
    for rec, answer in zip(got.records, scored):
        assert rec["answer"] == answer["answer"] and rec["correct"] in (None, True, False)
        assert rec["meta"]["confidence"] == answer["confidence"] and rec["meta"]["decision"] == answer["decision"]
        assert rec["meta"]["endpoint"] == "/v1/score"
    assert got.records[4]["meta"]["question"] == "Hi" and got.records[4]["answer"] == chat["choices"][0]["message"]["content"]
    # the pooled states are those of generating that prompt alone
    [alone] = generate_and_record(model, tok, [scorer.format(QUESTIONS[1])], max_new_tokens=6)
    assert got.records[1]["prompt"] == scorer.format(QUESTIONS[1])
    for pooling, want in (("mean", alone.layer_means), ("last-prompt", alone.last_prompt),
                          ("last-answer", alone.last_answer)):
        np.testing.assert_allclose(got.states(pooling)[1].astype(np.float32), want, rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(got.raw_confidence[1], alone.raw_confidence, rtol=1e-4)
    assert got.records[1]["token_ids"] == [int(t) for t in alone.token_ids]


def test_an_answer_that_cannot_be_recorded_is_served_and_counted(loaded, probe_dir, tmp_path, caplog):
    model, tok = loaded
    app = create_app(Scorer(model, tok, load_probe(probe_dir)), model_name=NAME, record_to=tmp_path / "s")

    def full_disk(answers):
        raise OSError(28, "No space left on device")

    app.state.recorder.record = full_disk
    with caplog.at_level(logging.ERROR, logger="acute.serving.app"), running(app) as url:
        r = post(url, "/v1/score", {"prompt": QUESTIONS[0], "risk": 0.5})
        assert r.status_code == 200 and r.json()["answer"] is not None
        assert post(url, "/v1/feedback", {"id": r.json()["id"], "correct": True}).status_code == 404
        metrics = httpx.get(url + "/metrics", timeout=TIMEOUT).text
    assert "acute_record_errors_total 1.0" in metrics and "acute_recorded_answers_total 0.0" in metrics
    assert any("No space left" in m.getMessage() for m in caplog.records)  # logged with its request id


def test_without_record_to_feedback_is_404_naming_the_option(loaded, probe_dir):
    model, tok = loaded
    with running(create_app(Scorer(model, tok, load_probe(probe_dir)), model_name=NAME)) as url:
        r = post(url, "/v1/feedback", {"id": "chatcmpl-x", "correct": True})
    assert r.status_code == 404 and "--record-to" in r.json()["error"]["message"]


def test_a_store_of_another_probe_or_not_of_served_answers_is_refused(loaded, probe_dir, tmp_path):
    model, tok = loaded
    store = tmp_path / "served"
    create_app(Scorer(model, tok, load_probe(probe_dir)), record_to=store).state.recorder.close()
    create_app(Scorer(model, tok, load_probe(probe_dir)), record_to=store).state.recorder.close()  # resumes
    other = _probe(loaded, tmp_path / "other", seed=1)
    with pytest.raises(IncompatibleStoreError, match="probe_sha256") as e:
        create_app(Scorer(model, tok, load_probe(other)), record_to=store)
    assert probe_digest(load_probe(other)) in str(e.value) and probe_digest(load_probe(probe_dir)) in str(e.value)
    collection = tmp_path / "collection"
    StoreWriter(collection, {"model": NAME}).close()
    with pytest.raises(InputError, match="not recorded by `acute serve`"):
        create_app(Scorer(model, tok, load_probe(probe_dir)), record_to=collection)
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text("x")
    with pytest.raises(InputError, match="not an empty folder"):
        create_app(Scorer(model, tok, load_probe(probe_dir)), record_to=tmp_path / "notes")


def _unlabelled_store(path: Path, ids) -> Path:
    rng = np.random.default_rng(0)
    with StoreWriter(path, {"model": NAME}) as w:
        w.add([{"id": i, "correct": None} for i in ids], rng.normal(size=(len(ids), 3, 4)),
              [np.array([-0.1])] * len(ids))
    return path


def test_labels_file_tail_cut_by_a_crash_and_corruption(tmp_path):
    store = _unlabelled_store(tmp_path / "s", ["a", "b", "c"])
    labels = LabelFile(store)
    labels.add("a", True)
    with pytest.raises(InputError, match="already labelled"):
        labels.add("a", False)
    with open(store / LABELS, "ab") as f:
        f.write(b'{"id": "b", "corr')  # a crash mid-line
    assert read_labels(store) == {"a": True}
    assert list(open_store(store).labelled) == [True, False, False]
    LabelFile(store).add("b", False)  # the next writer drops the cut line first
    assert read_labels(store) == {"a": True, "b": False}
    assert list(open_store(store).select([0, 1]).correct) == [True, False]
    text = (store / LABELS).read_text()
    for bad, message in ((text + '{"id": "zz", "correct": true}\n', "does not hold"),
                         (text + '{"id": "a", "correct": false}\n', "a second label"),
                         (text + '{"id": "c", "correct": "yes"}\n', ":3: expected")):
        (store / LABELS).write_text(bad)
        with pytest.raises(CorruptStoreError, match=message):
            open_store(store)


# ------------------------------------------------------------------ the command line
def _env():
    env = {k: v for k, v in os.environ.items() if k != "ACUTE_API_KEY"}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(Path(__file__).resolve().parents[2]), HF_HUB_OFFLINE="1")
    return env


def test_cli_records_until_sigterm_and_export_trains_on_the_feedback(tiny_model_dir, probe_dir, tmp_path, caplog):
    from acute.cli import main

    store = tmp_path / "served"
    cmd = [sys.executable, "-m", "acute", "serve", "--model", str(tiny_model_dir), "--probe", str(probe_dir),
           "--port", "0", "--max-wait-ms", "5", "--record-to", str(store), "--record-flush", "3600"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    try:
        line, deadline = "", time.monotonic() + TIMEOUT
        while "serving" not in line:
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
            line = proc.stdout.readline()
        url = line.split(" at ")[1].split("/v1")[0]
        prompts = [f"Question: what is {i} plus {2 * i}?" for i in range(12)]
        answers = post(url, "/v1/score", [{"prompt": p, "risk": 0.5} for p in prompts]).json()
        truth = [i % 3 != 0 for i in range(10)]  # the first 10 labelled, both ways
        for a, correct in zip(answers, truth):
            assert post(url, "/v1/feedback", {"id": a["id"], "correct": correct}).status_code == 200
        late = [post(url, "/v1/score", {"prompt": f"And {i}?", "risk": 0.5}).json()["id"] for i in range(2)]
        assert len(open_store(store)) == 12  # the two late answers are still buffered
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(TIMEOUT) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(TIMEOUT)
    got = open_store(store)
    assert got.ids == [a["id"] for a in answers] + late and got.manifest["status"] == "complete"
    assert "recording every served answer" in proc.stdout.read()  # the operator is told
    out = tmp_path / "retrained"
    with caplog.at_level(logging.WARNING, logger="acute.cli.common"):
        rc = main(["export", "--store", str(store), "--estimator", "acute-cosine", "--n-estimators", "5",
                   "--out", str(out)])
    assert rc == 0
    assert any("4 of its 14 records have no label" in r.getMessage() for r in caplog.records)
    summary = json.loads((out / "probe.json").read_text())["training_summary"]
    assert summary["n_train"] == 10 and summary["accuracy_train"] == pytest.approx(np.mean(truth))
    assert summary["generation"]["max_new_tokens"] == GENERATION["max_new_tokens"]
    retrained = load_probe(out)
    assert retrained.predict_proba(Inputs.of(got.layer_means[:2].astype(np.float32), got.raw_confidence[:2])).shape == (2, 2)
