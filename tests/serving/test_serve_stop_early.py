"""``acute serve --stop-early EPS`` over HTTP: a generation the checkpoint model stops is answered
as the scorer answers it alone (decision "abstain", ``stopped_at``, ``stop``), by the official
``openai`` client streamed or not, counted in ``/metrics``, recorded with its prefix by
``--record-to``; a client that leaves while its stop is pending stops the generation, nothing is
recorded and the server keeps serving; bad settings are refused at start by name.

The checkpoint model is the shared hash-label cosine probe (tests/serving/conftest.py) at 4
tokens, with calibration arrays that certify the top of the grid (0.99), so every answer still
being written at 4 tokens is stopped there."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest
from servers import running  # tests/servers.py
from service import GENERATION, NAME, QUESTIONS, TIMEOUT, post, wait_until  # tests/serving/service.py

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")

from acute.errors import InputError  # noqa: E402
from acute.estimators import load_probe  # noqa: E402
from acute.estimators.stop_early import StopEarlyModel  # noqa: E402
from acute.scoring import Scorer, parse_gate  # noqa: E402
from acute.serving import create_app  # noqa: E402
from acute.store import open_store  # noqa: E402

EPS = 0.1


@pytest.fixture(scope="module")
def probe_dir(loaded, hash_probes, tmp_path_factory):
    from acute.estimators import ActivationProbe
    from acute.estimators.inputs import Inputs
    from acute.extraction import generate_and_record
    from acute.testing import hash_label

    answer, _, meta = hash_probes
    model, tok = loaded
    prompts = [f"Question: what is {i} plus {i + 5}?" for i in range(24)]
    gens = generate_and_record(model, tok, prompts, max_new_tokens=GENERATION["max_new_tokens"])
    # Platt-calibrated, so its P(correct) stays inside (0, 1), below the certified 0.99
    fitted = ActivationProbe(view="cosine", n_estimators=5, calibration="platt").fit(
        Inputs.of(np.stack([g.layer_means for g in gens]), np.array([g.raw_confidence for g in gens])),
        np.array([hash_label(p) for p in prompts]))
    exported = answer.export(training_summary={"generation": GENERATION, "task": None}, **meta)
    prefix = fitted.export(training_summary={"generation": GENERATION, "checkpoint": 4}, **meta)
    n = 300
    exported.stop_early = StopEarlyModel({4: prefix}, np.ones((n, 1)), np.ones(n, bool), np.ones(n, bool),
                                         {"estimator": "acute-cosine"})
    return exported.save(tmp_path_factory.mktemp("serve-stop") / "probe")


@pytest.fixture(scope="module")
def scorer(loaded, probe_dir):
    model, tok = loaded
    return Scorer(model, tok, load_probe(probe_dir))


@pytest.fixture(scope="module")
def url(scorer):
    with running(create_app(scorer, model_name=NAME, max_batch=8, max_wait_ms=20,
                            default_gate=parse_gate(scorer.probe, stop_early=EPS))) as u:
        yield u


def test_v1_score_answers_a_stopped_generation_as_the_scorer_alone(url, scorer):
    r = post(url, "/v1/score", [{"prompt": q, "risk": 0.3} for q in QUESTIONS[:4]])
    assert r.status_code == 200, r.text
    for got, q in zip(r.json(), QUESTIONS[:4]):
        truth = scorer.generate(q, risk=0.3, stop_early=EPS)
        assert truth.stopped_at == 4 and got["stopped_at"] == 4 and got["decision"] == "abstain"
        assert got["answer"] == truth.answer and got["n_tokens"] == 4 and got["confidence"] is None
        assert got["stop"]["threshold"] == 0.99 and got["stop"]["epsilon"] == EPS and got["stop"]["checkpoint"] == 4
        assert got["stop"]["confidence"] == pytest.approx(truth.stop["confidence"], abs=1e-6)
    given = post(url, "/v1/score", {"prompt": QUESTIONS[0], "response": "Paris", "risk": 0.3}).json()
    assert "stopped_at" not in given and given["confidence"] is not None  # a given answer is not generated


def test_the_openai_client_gets_the_stop_streamed_or_not(url):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=url + "/v1", api_key="none")
    messages = [{"role": "user", "content": "Who wrote Hamlet?"}]
    r = client.chat.completions.create(model=NAME, messages=messages)
    acute = r.choices[0].model_extra["acute"]
    assert acute["decision"] == "abstain" and acute["stopped_at"] == 4 and acute["stop"]["threshold"] == 0.99
    assert r.usage.completion_tokens == 4 and r.choices[0].finish_reason == "stop"
    chunks = list(client.chat.completions.create(model=NAME, messages=messages, stream=True))
    last = chunks[-1].choices[0]
    assert last.finish_reason == "stop" and last.model_extra["acute"]["stopped_at"] == 4
    assert last.model_extra["acute"]["decision"] == "abstain"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == r.choices[0].message.content


def test_metrics_count_stops_and_the_tokens_generated_before_them(url):
    from prometheus_client import parser

    def scrape():
        text = httpx.get(url + "/metrics", timeout=TIMEOUT).text
        return {s.name: s.value for f in parser.text_string_to_metric_families(text) for s in f.samples
                if s.name.startswith("acute_stopped")}

    before = scrape()
    assert post(url, "/v1/score", [{"prompt": q, "risk": 0.5} for q in QUESTIONS[:3]]).status_code == 200
    after = scrape()
    assert after["acute_stopped_total"] - before.get("acute_stopped_total", 0) == 3
    assert after["acute_stopped_tokens_total"] - before.get("acute_stopped_tokens_total", 0) == 12


def test_record_to_keeps_a_stopped_answer_with_its_prefix(scorer, tmp_path):
    store = tmp_path / "served"
    with running(create_app(scorer, model_name=NAME, record_to=store,
                            default_gate=parse_gate(scorer.probe, stop_early=EPS))) as u:
        got = post(u, "/v1/score", {"prompt": QUESTIONS[1], "risk": 0.5}).json()
    [record] = open_store(store).records
    assert record["id"] == got["id"] and record["n_tokens"] == 4 and record["finish_reason"] == "stopped"
    assert record["answer"] == got["answer"] and record["meta"]["stopped_at"] == 4
    assert record["meta"]["decision"] == "abstain" and record["meta"]["stop"]["threshold"] == 0.99


def test_a_client_that_leaves_while_a_stop_is_pending_stops_the_generation(loaded, probe_dir, tmp_path,
                                                                          monkeypatch):
    """The checkpoint model holds the generation at its checkpoint until the client has left:
    the generation is stopped before its next step, nothing is recorded, the server serves on."""
    model, tok = loaded
    probe = load_probe(probe_dir)
    at_checkpoint, release = threading.Event(), threading.Event()
    confidence = probe.stop_early.confidence

    def held(k, means, conf):
        at_checkpoint.set()
        assert release.wait(TIMEOUT)
        return np.full(len(means), 0.999)  # above the threshold: not stopped here, generation goes on

    probe.stop_early.confidence = held
    from acute.serving.jobs import Job

    left, cancel = threading.Event(), Job.cancel

    def cancelled(job, error=None):
        cancel(job, error)
        left.set()

    monkeypatch.setattr(Job, "cancel", cancelled)
    store = tmp_path / "served"
    app = create_app(Scorer(model, tok, probe), model_name=NAME, record_to=store, max_wait_ms=0,
                     default_gate=parse_gate(probe, stop_early=EPS))
    with running(app) as u:
        import socket

        port = int(u.rsplit(":", 1)[1])
        body = json.dumps({"prompt": QUESTIONS[0], "risk": 0.5}).encode()
        with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as s:
            s.sendall(b"POST /v1/score HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
            assert at_checkpoint.wait(TIMEOUT)
        assert left.wait(TIMEOUT)  # the server saw the client leave: its job is abandoned
        release.set()
        wait_until(lambda: app.state.batcher.stats.stopped == 1, "the generation to stop")
        wait_until(lambda: app.state.batcher.running == 0, "the worker to be free")
        probe.stop_early.confidence = confidence
        again = post(u, "/v1/score", {"prompt": QUESTIONS[2], "risk": 0.5})
        assert again.status_code == 200 and again.json()["stopped_at"] == 4
    assert [r["id"] for r in open_store(store).records] == [again.json()["id"]]  # nothing half-way


def test_a_probe_without_a_checkpoint_model_is_refused_at_start(hash_probes, tmp_path, capsys):
    """``acute serve --stop-early`` refuses it before the model loads; so does ``parse_gate``, which
    makes the server's gate in Python."""
    from acute.cli import main

    answer, _, meta = hash_probes
    plain = answer.save(tmp_path / "plain", training_summary={"generation": GENERATION, "task": None}, **meta)
    assert main(["serve", "--probe", str(plain), "--model", "/nowhere", "--stop-early", str(EPS)]) == 2
    assert "--stop-early: this probe has no checkpoint model" in capsys.readouterr().err
    with pytest.raises(InputError, match=r"^stop_early: this probe has no checkpoint model.*--with-stop-early"):
        parse_gate(load_probe(plain), stop_early=EPS)
    with pytest.raises(InputError, match=r"^stop_early must be a number in \(0, 1\)"):
        parse_gate(load_probe(plain), stop_early=1.0)


def test_stop_early_on_a_vllm_connector_without_live_checkpoints_is_refused_saying_why():
    """A vLLM engine whose connector writes no live checkpoints (an older acute beside vLLM) is
    refused by name, pointing at ``acute vllm-args``; transformers and a connector with them are not."""
    from acute.engines.live import stop_early_refusal
    from acute.engines.pooled import PooledEngine

    old = PooledEngine()
    assert "writes none" in stop_early_refusal(old) and "acute vllm-args" in stop_early_refusal(old)
    new = PooledEngine()
    new.live_checkpoints = True
    assert stop_early_refusal(new) is None and stop_early_refusal(None) is None


def test_a_real_model_behind_acute_serve_stops_some_answers_for_the_openai_client(smollm2, tmp_path):
    """SmolLM2-135M-Instruct behind the service with a probe whose checkpoint model stops some of
    these answers and not others (tests/stop_probes.py): the official client, streamed and not,
    gets each answer as the scorer alone decides it, the stopped ones abstained with ``stopped_at``."""
    openai = pytest.importorskip("openai")
    from stop_probes import gate_between, stop_probe  # tests/stop_probes.py

    model, tok = smollm2
    probe = load_probe(stop_probe(model, tok, tmp_path / "probe"))
    scorer = Scorer(model, tok, probe)
    gate = gate_between(model, tok, probe, [scorer.format(q) for q in QUESTIONS], scorer.generation.max_new_tokens)
    want = [scorer.generate(q, gate=gate) for q in QUESTIONS]  # one at a time, as the client asks
    assert {w.stopped_at is None for w in want} == {True, False}
    with running(create_app(scorer, model_name=NAME, max_batch=8, max_wait_ms=20, default_gate=gate)) as u:
        client = openai.OpenAI(base_url=u + "/v1", api_key="none")
        for q, w in zip(QUESTIONS, want):
            messages = [{"role": "user", "content": q}]
            r = client.chat.completions.create(model=NAME, messages=messages)
            got = r.choices[0].model_extra["acute"]
            assert (got.get("stopped_at"), got["decision"]) == (w.stopped_at, w.decision), q
            assert r.choices[0].message.content == w.answer
            chunks = list(client.chat.completions.create(model=NAME, messages=messages, stream=True))
            last = chunks[-1].choices[0].model_extra["acute"]
            assert (last.get("stopped_at"), last["decision"]) == (w.stopped_at, w.decision), q
            assert "".join(c.choices[0].delta.content or "" for c in chunks) == w.answer
