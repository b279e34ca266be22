"""The two-stage gate over HTTP (issue 30): ``/v1/score`` and ``/v1/chat/completions`` take an
optional ``precheck`` threshold; a request it refuses is answered without generating (decision
"abstain", ``generated: false``, no completion tokens, usage counting the prompt only), every
answer equals ``Scorer.generate(..., precheck=u0)`` for that prompt alone, requests without
``precheck`` are answered exactly as before, and bad input is a 400 naming the field."""

from __future__ import annotations


import pytest
from servers import running  # tests/servers.py
from service import GENERATION, NAME, TIMEOUT  # tests/serving/service.py (the model: its conftest.py)

pytest.importorskip("fastapi")
uvicorn = pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from acute.estimators import load_probe  # noqa: E402
from acute.scoring import Scorer  # noqa: E402
from acute.serving import create_app  # noqa: E402

QUESTIONS = ["What is the capital of France?", "Who wrote Hamlet?", "2+2=", "Name a planet.",
             "How many legs does a spider have? Be brief.", "Gold is"]
#: the keys of a /v1/score answer decided by the risk rule, as before the precheck existed
SCORE_KEYS = {"id", "answer", "raw_confidence", "confidence", "decision", "risk", "rule", "threshold", "estimator",
              "model", "latency_ms", "n_tokens", "finish_reason"}
ACUTE_KEYS = {"confidence", "raw_confidence", "decision", "risk", "rule", "threshold", "estimator"}


@pytest.fixture(scope="module")
def probe_dirs(hash_probes, tmp_path_factory):
    """``(with a question-only probe, without one)``: the shared hash-label probes
    (tests/serving/conftest.py)."""
    answer, question, meta = hash_probes
    root = tmp_path_factory.mktemp("serve-precheck")
    exported = answer.export(training_summary={"generation": GENERATION, "task": None}, **meta)
    exported.precheck = question.export(training_summary={"generation": GENERATION}, **meta)
    answer.save(root / "plain", training_summary={"generation": GENERATION, "task": None}, **meta)
    return exported.save(root / "gated"), root / "plain"


@pytest.fixture(scope="module")
def scorer(loaded, probe_dirs):
    model, tok = loaded
    return Scorer(model, tok, load_probe(probe_dirs[0]))


@pytest.fixture(scope="module")
def served(scorer):
    with running(create_app(scorer, model_name=NAME, max_batch=8, max_wait_ms=20)) as url:
        yield (lambda path, body: httpx.post(url + path, json=body, timeout=TIMEOUT)), url


@pytest.fixture(scope="module")
def u0(scorer):
    """A threshold that lets some of QUESTIONS through and refuses the others."""
    pre = sorted(r.confidence for r in scorer.precheck(QUESTIONS))
    threshold = (pre[2] + pre[3]) / 2
    assert pre[0] < threshold < pre[-1]
    return threshold


def assert_like(got: dict, truth):
    """A served answer equals the scorer's own for that prompt alone."""
    assert got["answer"] == truth.answer and got["decision"] == truth.decision
    assert got["n_tokens"] == truth.n_tokens and got["generated"] is truth.generated
    assert got["precheck"]["decision"] == truth.precheck["decision"]
    assert got["precheck"]["confidence"] == pytest.approx(truth.precheck["confidence"], abs=1e-9)
    if truth.generated:
        assert got["confidence"] == pytest.approx(truth.confidence, abs=1e-6)
    else:
        assert got["confidence"] is None and got["raw_confidence"] is None


def test_v1_score_with_precheck_answers_as_the_scorer_does(served, scorer, u0):
    post, _ = served
    r = post("/v1/score", [{"prompt": q, "risk": 0.3, "precheck": u0} for q in QUESTIONS])
    assert r.status_code == 200, r.text
    got = r.json()
    truth = [scorer.generate(q, risk=0.3, precheck=u0) for q in QUESTIONS]
    assert {g["generated"] for g in got} == {True, False}
    for g, t in zip(got, truth):
        assert set(g) == SCORE_KEYS | {"generated", "precheck"}
        assert g["precheck"]["threshold"] == u0
        assert_like(g, t)
        if not t.generated:
            assert (g["answer"], g["n_tokens"], g["decision"]) == ("", 0, "abstain")


def test_requests_without_precheck_are_answered_as_before(served, scorer, u0):
    post, _ = served
    r = post("/v1/score", [{"prompt": QUESTIONS[0], "risk": 0.3},
                           {"prompt": QUESTIONS[0], "risk": 0.3, "precheck": 0.001}])
    plain, gated = r.json()
    assert set(plain) == SCORE_KEYS  # no new field
    truth = scorer.generate(QUESTIONS[0], risk=0.3)
    assert plain["answer"] == truth.answer and plain["confidence"] == pytest.approx(truth.confidence, abs=1e-6)
    assert gated["generated"] is True and gated["answer"] == plain["answer"]
    assert gated["confidence"] == pytest.approx(plain["confidence"], abs=1e-6)
    r = post("/v1/chat/completions", {"messages": [{"role": "user", "content": QUESTIONS[0]}]})
    assert set(r.json()["choices"][0]["acute"]) == ACUTE_KEYS


def test_chat_completion_refused_before_generating(served):
    post, _ = served
    msgs = [{"role": "user", "content": QUESTIONS[1]}]
    plain = post("/v1/chat/completions", {"messages": msgs}).json()
    r = post("/v1/chat/completions", {"messages": msgs, "precheck": 0.999})
    assert r.status_code == 200, r.text
    body = r.json()
    choice = body["choices"][0]
    assert choice["message"]["content"] == "" and choice["finish_reason"] == "stop"
    a = choice["acute"]
    assert a["decision"] == "abstain" and a["generated"] is False and a["confidence"] is None
    assert a["precheck"]["decision"] == "abstain" and a["precheck"]["threshold"] == 0.999
    prompt = plain["usage"]["prompt_tokens"]
    assert body["usage"] == {"prompt_tokens": prompt, "completion_tokens": 0, "total_tokens": prompt}
    passed = post("/v1/chat/completions", {"messages": msgs, "precheck": 0.001}).json()
    assert passed["choices"][0]["message"]["content"] == plain["choices"][0]["message"]["content"]
    assert passed["choices"][0]["acute"]["generated"] is True and passed["usage"] == plain["usage"]


def test_streamed_chat_completion_refused_before_generating(served):
    _, url = served
    body = {"messages": [{"role": "user", "content": "Hi"}], "precheck": 0.999, "stream": True,
            "stream_options": {"include_usage": True}}
    import json

    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=TIMEOUT) as r:
        assert r.status_code == 200
        events = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert not any(c["choices"] and c["choices"][0]["delta"].get("content") for c in chunks)
    final = next(c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"])
    assert final["choices"][0]["acute"]["generated"] is False
    assert chunks[-1]["usage"]["completion_tokens"] == 0


def test_the_openai_client_sends_a_precheck(served):
    openai = pytest.importorskip("openai")
    _, url = served
    client = openai.OpenAI(base_url=url + "/v1", api_key="none")
    r = client.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "Hi"}],
                                       extra_body={"precheck": 0.999})
    a = r.choices[0].model_extra["acute"]
    assert a["generated"] is False and r.usage.completion_tokens == 0 and r.choices[0].message.content == ""


@pytest.mark.parametrize("path, body, param, message", [
    ("/v1/score", {"prompt": "Q?", "risk": 0.5, "precheck": 0}, "precheck", "precheck must be a number in (0, 1)"),
    ("/v1/score", {"prompt": "Q?", "risk": 0.5, "precheck": 1.0}, "precheck", "must be a number in (0, 1)"),
    ("/v1/score", {"prompt": "Q?", "risk": 0.5, "precheck": "0.2"}, "precheck", "got '0.2'"),
    ("/v1/score", [{"prompt": "Q?", "risk": 0.5}, {"prompt": "Q?", "risk": 0.5, "precheck": 2}],
     "[1].precheck", "[1].precheck must be a number in (0, 1)"),
    ("/v1/score", {"prompt": "Q?", "risk": 0.5, "precheck": 0.2, "response": "Paris"}, "precheck",
     "decides before generating"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Q?"}], "precheck": 1.5}, "precheck",
     "must be a number in (0, 1)"),
])
def test_bad_precheck_is_a_400_naming_the_field(served, path, body, param, message):
    post, _ = served
    r = post(path, body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and message in err["message"]


def test_a_server_without_a_question_only_probe_refuses_precheck(loaded, probe_dirs):
    model, tok = loaded
    app = create_app(Scorer(model, tok, load_probe(probe_dirs[1])), model_name=NAME)
    with running(app) as url:
        for path, body in (("/v1/score", {"prompt": "Q?", "risk": 0.5, "precheck": 0.2}),
                           ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Q?"}],
                                                     "precheck": 0.2})):
            r = httpx.post(url + path, json=body, timeout=TIMEOUT)
            assert r.status_code == 400, r.text
            err = r.json()["error"]
            assert err["param"] == "precheck" and err["code"] == "precheck_not_available"
            assert "acute export --store STORE --out PROBE --with-precheck" in err["message"]
        ok = httpx.post(url + "/v1/score", json={"prompt": "Q?", "risk": 0.5}, timeout=TIMEOUT)
        assert ok.status_code == 200 and set(ok.json()) == SCORE_KEYS
        assert httpx.get(url + "/v1/models", timeout=TIMEOUT).json()["data"][0]["precheck"] is None


def test_v1_models_says_requests_may_precheck(served):
    _, url = served
    model = httpx.get(url + "/v1/models", timeout=TIMEOUT).json()["data"][0]
    assert model["precheck"] == {"estimator": "question-only", "pooling": "last-prompt"}
