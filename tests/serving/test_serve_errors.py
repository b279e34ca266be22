"""Errors by origin: only what is raised while parsing a request (its body, fields and options, a
feedback id, its prompt checked against the model) is the client's 4xx naming the field; an
error raised inside scoring, the probe or the store, of acute's own input-error kind included,
is that request's 500, logged as one line with the request id that the answer's body and
``X-Request-Id`` header carry, and the server keeps serving."""

from __future__ import annotations

import copy
import logging
from types import SimpleNamespace

import numpy as np
import pytest
from servers import running  # tests/servers.py
from service import NAME, QUESTIONS, TIMEOUT, TOO_LONG  # tests/serving/service.py

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from acute.errors import InputError, StoreError  # noqa: E402
from acute.scoring import Scorer  # noqa: E402
from acute.serving import create_app  # noqa: E402
from acute.serving.errors import RequestError  # noqa: E402
from acute.serving.jobs import Job, score_jobs  # noqa: E402
from acute.store import LabelFile, StoreWriter, read_labels  # noqa: E402

SCORE = ("/v1/score", {"prompt": "Gold is", "risk": 0.5})
CHAT = ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Gold is"}]})


def post(url, path, body):
    return httpx.post(url + path, json=body, timeout=TIMEOUT)


def assert_server_error(answer, caplog, error_type: str) -> str:
    """``answer`` is a 500 whose body (OpenAI's error shape) and header give one request id, and
    the server logged exactly one error line naming it; returns the id."""
    assert answer.status_code == 500, answer.text
    rid = answer.headers["x-request-id"]
    err = answer.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["type"] == "server_error" and err["param"] is None and f"request id {rid}" in err["message"]
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR and rid in r.getMessage()]
    assert len(lines) == 1 and lines[0].startswith(f"request {rid} failed: {error_type}: "), lines
    return rid


class NaNStates:
    """The fixture probe, handed NaN states by scoring: its own check of its input refuses them
    (an ``InputError`` raised inside the probe) while ``on`` holds."""

    def __init__(self, probe):
        self._probe, self.on = probe, True

    def __getattr__(self, name):
        return getattr(self._probe, name)

    def predict_proba(self, X):
        from acute.estimators.inputs import Inputs, is_states_source

        if self.on:  # the inputs' own check refuses them, inside the probe's call
            X = Inputs({name: np.full_like(X[name], np.nan) if is_states_source(name) else X[name] for name in X})
        return self._probe.predict_proba(X)


@pytest.mark.parametrize("path, body", [SCORE, CHAT], ids=["score", "chat"])
def test_nan_states_inside_the_probe_are_a_500_never_a_400(loaded, probe, path, body, caplog):
    model, tok = loaded
    nan = NaNStates(probe)
    app = create_app(Scorer(model, tok, nan), model_name=NAME, max_wait_ms=0)
    with caplog.at_level(logging.ERROR, logger="acute.serving.app"), running(app) as url:
        failed = post(url, path, body)
        nan.on = False
        after = post(url, path, body)
    rid = assert_server_error(failed, caplog, "InputError")
    assert any("non-finite" in r.getMessage() for r in caplog.records)  # the probe's own check refused them
    assert after.status_code == 200 and after.headers["x-request-id"] != rid


@pytest.mark.parametrize("broken", ["commit", "label"])
def test_a_store_failing_during_feedback_is_a_500_and_the_next_request_is_served(
        loaded, probe, tmp_path, monkeypatch, caplog, broken):
    """The answer's shard failing to commit, or its label failing to append: a 500 with the
    request id, not the client's 400; the same feedback sent again, once the store works, is
    taken, and scoring goes on meanwhile."""
    model, tok = loaded
    store = tmp_path / "served"
    app = create_app(Scorer(model, tok, probe), model_name=NAME, record_to=store)
    target, name = (StoreWriter, "flush") if broken == "commit" else (LabelFile, "add")
    real = getattr(target, name)
    failing = {"on": False}

    def fail_or_run(self, *args, **kwargs):
        if failing["on"]:
            raise StoreError(f"{store}: the disk refused the write (made up by the test)")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(target, name, fail_or_run)
    with caplog.at_level(logging.ERROR, logger="acute.serving.app"), running(app) as url:
        answer = post(url, *SCORE)
        assert answer.status_code == 200, answer.text
        feedback = {"id": answer.json()["id"], "correct": True}
        failing["on"] = True
        failed = post(url, "/v1/feedback", feedback)
        assert post(url, *SCORE).status_code == 200  # the store's failure stops no scoring
        failing["on"] = False
        again = post(url, "/v1/feedback", feedback)
    assert_server_error(failed, caplog, "StoreError")
    assert again.status_code == 200, again.text
    assert read_labels(store) == {feedback["id"]: True}


# ------------------------------------------------ what the request itself asks stays the client's 4xx
@pytest.fixture(scope="module")
def small(loaded, probe):
    model, tok = loaded
    app = create_app(Scorer(model, tok, probe), model_name=NAME, max_batch=4, max_wait_ms=0,
                     max_request_bytes=8192)
    with running(app) as url:
        yield url


@pytest.mark.parametrize("path, body, status, param", [
    ("/v1/score", {"prompt": "Gold is", "risk": 1.5}, 400, "risk"),
    ("/v1/score", {"prompt": "Gold is", "response": TOO_LONG, "risk": 0.5}, 400, "response"),
    ("/v1/score", [{"prompt": "x", "risk": 0.5}, {"prompt": "Gold is", "response": TOO_LONG, "risk": 0.5}],
     400, "[1].response"),
    ("/v1/score", {"prompt": TOO_LONG, "risk": 0.5}, 400, "prompt"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "temperature": 1}, 400,
     "temperature"),
])
def test_the_requests_own_faults_are_4xx_naming_the_field(small, path, body, status, param, caplog):
    with caplog.at_level(logging.ERROR, logger="acute"):
        r = post(small, path, body)
        assert post(small, *SCORE).status_code == 200
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["param"] == param and err["type"] == "invalid_request_error"
    assert param.split(".")[-1] in err["message"]
    assert not [rec for rec in caplog.records if rec.levelno >= logging.ERROR]  # not the server's fault


def test_preparing_a_job_refuses_what_the_scorer_would_refuse_about_the_request(loaded, probe):
    """Checked against the model before anything runs, each as a :class:`RequestError` naming the
    field: a prompt beyond the engine's context (vLLM's ``max_model_len``), a given response to a
    gate without weights, a prompt of the other kind than the probe's training store."""
    model, tok = loaded
    scorer = Scorer(model, tok, probe)
    short_engine = copy.copy(scorer)
    short_engine.engine = SimpleNamespace(max_model_len=12)  # refused before it is asked anything
    [long] = score_jobs(short_engine, [Job(item="Gold is a metal that is " * 3)])
    assert isinstance(long, RequestError) and long.param == "prompt" and "max_model_len" in str(long)

    bare = copy.copy(scorer)
    bare.model = copy.deepcopy(model).to("meta")
    [given] = score_jobs(bare, [Job(item="Hi", response="Hello", param="[2].prompt")])
    assert isinstance(given, RequestError) and given.param == "[2].response" and "--load-weights" in str(given)

    class TrainedOnMessages(Scorer):
        def response_prompt(self, item, where="prompt"):
            raise InputError(f"{where}: this probe was trained on chat messages; got a prompt string")

    other = TrainedOnMessages(model, tok, probe)
    [kind] = score_jobs(other, [Job(item=QUESTIONS[0], response="Paris")])
    assert isinstance(kind, RequestError) and kind.param == "prompt" and "chat messages" in str(kind)
