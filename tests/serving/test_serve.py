"""The trust-gate service (acute.serving, `acute serve`): every answer checked against the Scorer's
own result for the same prompt, batching, bad input, the queue limit, the API key and shutdown.

A real uvicorn server runs on a free loopback port in a background thread (and once as a
`python -m acute serve` subprocess); clients are the official `openai` package and httpx.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from servers import running  # tests/servers.py

fastapi = pytest.importorskip("fastapi")
uvicorn = pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")
openai = pytest.importorskip("openai")

from acute.errors import InputError  # noqa: E402
from acute.scoring import Scorer  # noqa: E402
from acute.scoring.gate import Gate, risk_rule  # noqa: E402
from acute.serving import create_app  # noqa: E402
from acute.serving.batcher import Batcher  # noqa: E402
from acute.serving.errors import ServerBusyError  # noqa: E402
from acute.serving.jobs import Job, score_jobs  # noqa: E402
from acute.serving.settings import check_bind  # noqa: E402

from service import (  # noqa: E402  (tests/serving/service.py)
    GENERATION, NAME, QUESTIONS, TIMEOUT, TOO_LONG, GatedScorer, alone, assert_same, post, wait_until,
)


# ------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def server(loaded, probe):
    model, tok = loaded
    app = create_app(Scorer(model, tok, probe), model_name=NAME, max_batch=8, max_wait_ms=20,
                     max_request_bytes=4096)
    with running(app) as url:
        yield app, url


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server[1]}/v1", api_key="unused", max_retries=0, timeout=TIMEOUT)


# ------------------------------------------------------------------ /v1/score
@pytest.mark.parametrize("risk", [0.05, 0.5, 0.95])
def test_score_equals_scorer_alone(server, loaded, probe, risk):
    app, url = server
    r = post(url, "/v1/score", {"prompt": QUESTIONS[0], "risk": risk})
    assert r.status_code == 200, r.text
    got = r.json()
    assert_same(got, alone(loaded, probe, QUESTIONS[0], risk))
    assert got["model"] == NAME and got["estimator"] == "acute-cosine" and got["latency_ms"] > 0
    assert got["decision"] == ("trust" if got["confidence"] > risk else "abstain")


def test_score_messages_and_max_new_tokens(server, loaded, probe):
    _, url = server
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": QUESTIONS[1]}]
    r = post(url, "/v1/score", {"messages": msgs, "risk": 0.4, "max_new_tokens": 3})
    assert r.status_code == 200, r.text
    truth = alone(loaded, probe, msgs, 0.4, max_new_tokens=3)
    assert_same(r.json(), truth)
    assert r.json()["n_tokens"] == truth.n_tokens <= 3


def test_score_a_response_produced_elsewhere(server, loaded, probe):
    """An answer from another engine is scored as given (teacher forcing), like Scorer.score_responses."""
    _, url = server
    model, tok = loaded
    body = [{"prompt": QUESTIONS[0], "response": "Paris", "risk": 0.3},
            {"prompt": QUESTIONS[1], "risk": 0.3},  # generated, in the same body
            {"prompt": QUESTIONS[1], "response": "forty two", "risk": 0.6}]
    r = post(url, "/v1/score", body)
    assert r.status_code == 200, r.text
    got = r.json()
    given = Scorer(model, tok, probe).score_responses([QUESTIONS[0], QUESTIONS[1]], ["Paris", "forty two"], risk=0.3)
    for g, truth, risk in ((got[0], given[0], 0.3), (got[2], given[1], 0.6)):
        assert g["answer"] == truth.answer
        assert abs(g["confidence"] - truth.confidence) <= 1e-6
        np.testing.assert_allclose(g["raw_confidence"], truth.raw_confidence, rtol=1e-4)
        assert g["risk"] == risk and g["decision"] == ("trust" if truth.confidence > risk else "abstain")
    assert_same(got[1], alone(loaded, probe, QUESTIONS[1], 0.3))
    r = post(url, "/v1/score", {"prompt": QUESTIONS[0], "response": "  ", "risk": 0.3})
    assert r.status_code == 400 and r.json()["error"]["param"] == "response"


def test_list_body_is_batched_by_settings_equal_to_alone(server, loaded, probe):
    """A list of requests (mixed max_new_tokens and risks) is taken as one batch per generation
    setting (3 + 2), and each answer equals scoring that prompt alone."""
    app, url = server
    stats = app.state.batcher.stats
    before = dict(stats.sizes)
    body = [{"prompt": q, "risk": 0.1 + 0.15 * i} for i, q in enumerate(QUESTIONS[:5])]
    body[1]["max_new_tokens"] = 2
    body[3]["max_new_tokens"] = 2
    r = post(url, "/v1/score", body)
    assert r.status_code == 200, r.text
    out = r.json()
    assert isinstance(out, list) and len(out) == 5
    for req, got in zip(body, out):
        extra = {"max_new_tokens": req["max_new_tokens"]} if "max_new_tokens" in req else {}
        assert_same(got, alone(loaded, probe, req["prompt"], req["risk"], **extra))
    assert stats.sizes[3] == before.get(3, 0) + 1 and stats.sizes[2] == before.get(2, 0) + 1


def test_concurrent_requests_are_batched_and_equal_alone(loaded, probe):
    """While the worker is busy, concurrent requests queue up and run as one batch whose answers
    equal those of each prompt scored alone."""
    model, tok = loaded
    scorer = GatedScorer(model, tok, probe)
    app = create_app(scorer, model_name=NAME, max_batch=8, max_wait_ms=50)
    batcher = app.state.batcher
    with running(app) as url, ThreadPoolExecutor(8) as pool:
        first = pool.submit(post, url, "/v1/score", {"prompt": "Gold is", "risk": 0.5})
        assert scorer.entered.wait(TIMEOUT)
        reqs = [{"prompt": q, "risk": 0.3} for q in QUESTIONS[:6]]
        futures = [pool.submit(post, url, "/v1/score", r) for r in reqs]
        wait_until(lambda: batcher.depth == 6, "6 queued requests")
        scorer.gate.set()
        answers = [f.result(TIMEOUT) for f in futures]
        assert first.result(TIMEOUT).status_code == 200
    assert batcher.stats.sizes == {1: 1, 6: 1} and batcher.stats.largest == 6
    for req, r in zip(reqs, answers):
        assert r.status_code == 200, r.text
        assert_same(r.json(), alone(loaded, probe, req["prompt"], req["risk"]))


def test_unpaced_concurrency_batches(server, loaded, probe):
    """Sixteen clients at once (no gate): several requests share batches, none is lost."""
    app, url = server
    stats = app.state.batcher.stats
    sizes = stats.sizes.copy()
    reqs = [{"prompt": QUESTIONS[i % len(QUESTIONS)], "risk": 0.5} for i in range(16)]
    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda r: post(url, "/v1/score", r), reqs))
    assert [r.status_code for r in answers] == [200] * 16
    new = stats.sizes - sizes  # the batches these requests made, by size
    assert sum(k * v for k, v in new.items()) == 16 and max(new) > 1 and sum(new.values()) < 16
    truth = {q: alone(loaded, probe, q, 0.5) for q in QUESTIONS}
    for req, r in zip(reqs, answers):
        assert_same(r.json(), truth[req["prompt"]])


# ------------------------------------------------------------------ OpenAI compatibility
def test_openai_client_chat(client, loaded, probe):
    msgs = [{"role": "user", "content": QUESTIONS[2]}]
    resp = client.chat.completions.create(model=NAME, messages=msgs, max_tokens=4, stop=["zz"],
                                          temperature=0, n=1, top_p=1, seed=7, user="u-1",
                                          metadata={"k": "v"}, extra_body={"risk": 0.2})
    truth = alone(loaded, probe, msgs, 0.2, max_new_tokens=4, stop_strings=["zz"])
    choice = resp.choices[0]
    assert resp.object == "chat.completion" and resp.model == NAME and resp.id.startswith("chatcmpl-")
    assert choice.message.role == "assistant"
    assert choice.finish_reason == ("length" if truth.finish_reason == "length" else "stop")
    acute_obj = choice.model_extra["acute"]
    assert_same({"answer": choice.message.content, **acute_obj}, truth)
    model, tok = loaded
    n_prompt = len(tok(Scorer(model, tok, probe).format(msgs), add_special_tokens=False)["input_ids"])
    assert resp.usage.prompt_tokens == n_prompt and resp.usage.completion_tokens == truth.n_tokens
    assert resp.usage.total_tokens == n_prompt + truth.n_tokens


def test_openai_client_default_risk_and_parts(client, loaded, probe):
    msgs = [{"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Name a "}, {"type": "text", "text": "planet."}]}]
    resp = client.chat.completions.create(model=NAME, messages=msgs)
    truth = alone(loaded, probe, [{"role": "system", "content": "Be brief."},
                                  {"role": "user", "content": "Name a planet."}], 0.5)
    assert_same({"answer": resp.choices[0].message.content, **resp.choices[0].model_extra["acute"]}, truth)


def test_openai_client_streaming(client, loaded, probe):
    msgs = [{"role": "user", "content": QUESTIONS[3]}]
    stream = client.chat.completions.create(model=NAME, messages=msgs, stream=True,
                                            stream_options={"include_usage": True},
                                            extra_body={"risk": 0.6})
    chunks = list(stream)
    truth = alone(loaded, probe, msgs, 0.6)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    with_choices = [c for c in chunks if c.choices]
    last = with_choices[-1].choices[0]
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert with_choices[0].choices[0].delta.role == "assistant"
    assert last.finish_reason in ("stop", "length")
    assert all(c.choices[0].finish_reason is None for c in with_choices[:-1])
    assert all("acute" not in (c.choices[0].model_extra or {}) for c in with_choices[:-1])
    assert_same({"answer": text, **last.model_extra["acute"]}, truth)
    assert chunks[-1].usage.completion_tokens == truth.n_tokens and not chunks[-1].choices


def test_stream_ends_with_done(server):
    _, url = server
    body = {"model": NAME, "messages": [{"role": "user", "content": "Hi"}], "stream": True}
    r = post(url, "/v1/chat/completions", body)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = [e for e in r.text.split("\n\n") if e]
    assert events[-1] == "data: [DONE]" and all(e.startswith("data: ") for e in events)
    assert "acute" in json.loads(events[-2][6:])["choices"][0]


def test_models_and_healthz(client, server, probe):
    models = client.models.list().data
    assert [m.id for m in models] == [NAME]
    extra = models[0].model_extra
    assert extra["estimator"] == "acute-cosine"
    assert extra["fingerprint"] == probe.model_fingerprint
    assert extra["training_summary"]["generation"] == GENERATION
    h = httpx.get(server[1] + "/healthz", timeout=TIMEOUT)
    assert h.status_code == 200 and h.json()["status"] == "ok" and h.json()["model"] == NAME


# ------------------------------------------------------------------ bad input
CHAT = {"model": NAME, "messages": [{"role": "user", "content": "Hi"}]}
BAD = [
    # (path, body (bytes: sent as is), status, param)
    ("/v1/score", b'{"prompt": "x", "risk": ', 400, None),
    ("/v1/score", b'{"prompt": "x", "risk": NaN}', 400, None),
    ("/v1/score", b"", 400, None),
    ("/v1/score", {"prompt": "x"}, 400, "risk"),
    ("/v1/score", {"prompt": "x", "risk": "0.5"}, 400, "risk"),
    ("/v1/score", {"prompt": "x", "risk": -0.1}, 400, "risk"),
    ("/v1/score", {"prompt": "x", "risk": [0.5]}, 400, "risk"),
    ("/v1/score", {"prompt": "x", "risk": 1.5}, 400, "risk"),
    ("/v1/score", {"prompt": "x", "risk": True}, 400, "risk"),
    ("/v1/score", {"prompt": 42, "risk": 0.5}, 400, "prompt"),
    ("/v1/score", {"prompt": "   ", "risk": 0.5}, 400, "prompt"),
    ("/v1/score", {"risk": 0.5}, 400, "prompt"),
    ("/v1/score", {"prompt": "x", "messages": [{"role": "user", "content": "x"}], "risk": 0.5}, 400, "prompt"),
    ("/v1/score", {"prompt": TOO_LONG, "risk": 0.5}, 400, "prompt"),
    ("/v1/score", {"prompt": "x" * 5000, "risk": 0.5}, 413, None),
    ("/v1/score", {"prompt": "x", "risk": 0.5, "max_new_tokens": 0}, 400, "max_new_tokens"),
    ("/v1/score", {"prompt": "x", "risk": 0.5, "temperature": 0}, 400, "temperature"),
    ("/v1/score", [{"prompt": "x", "risk": 0.5}, {"prompt": "y", "risk": 2}], 400, "[1].risk"),
    ("/v1/score", [], 400, None),
    ("/v1/score", "just a string", 400, None),
    ("/v1/score", {"messages": [], "risk": 0.5}, 400, "messages"),
    ("/v1/chat/completions", b"not json", 400, None),
    ("/v1/chat/completions", [CHAT], 400, None),
    ("/v1/chat/completions", {"model": NAME}, 400, "messages"),
    ("/v1/chat/completions", {**CHAT, "messages": "Hi"}, 400, "messages"),
    ("/v1/chat/completions", {**CHAT, "messages": [{"role": "tool", "content": "x"}]}, 400, "messages[0].role"),
    ("/v1/chat/completions", {**CHAT, "messages": [{"role": "user"}]}, 400, "messages[0].content"),
    ("/v1/chat/completions", {**CHAT, "messages": [{"role": "user", "content": 3}]}, 400, "messages[0].content"),
    ("/v1/chat/completions", {**CHAT, "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "http://x"}}]}]}, 400, "messages[0].content[0]"),
    ("/v1/chat/completions", {**CHAT, "messages": [{"role": "user", "content": "", "color": 1}]}, 400,
     "messages[0].color"),
    ("/v1/chat/completions", {**CHAT, "messages": [{"role": "user", "content": "  "}]}, 400, "messages"),
    ("/v1/chat/completions", {**CHAT, "messages": [{"role": "user", "content": TOO_LONG}]}, 400, "messages"),
    ("/v1/chat/completions", {**CHAT, "foo": 1}, 400, "foo"),
    ("/v1/chat/completions", {**CHAT, "model": "gpt-4o"}, 404, "model"),
    ("/v1/chat/completions", {**CHAT, "risk": 1.01}, 400, "risk"),
    ("/v1/chat/completions", {**CHAT, "n": 2}, 400, "n"),
    ("/v1/chat/completions", {**CHAT, "temperature": 0.7}, 400, "temperature"),
    ("/v1/chat/completions", {**CHAT, "temperature": "hot"}, 400, "temperature"),
    ("/v1/chat/completions", {**CHAT, "top_p": 0.9}, 400, "top_p"),
    ("/v1/chat/completions", {**CHAT, "presence_penalty": 0.5}, 400, "presence_penalty"),
    ("/v1/chat/completions", {**CHAT, "frequency_penalty": -1}, 400, "frequency_penalty"),
    ("/v1/chat/completions", {**CHAT, "logit_bias": {"50": 5}}, 400, "logit_bias"),
    ("/v1/chat/completions", {**CHAT, "logprobs": True}, 400, "logprobs"),
    ("/v1/chat/completions", {**CHAT, "top_logprobs": 3}, 400, "top_logprobs"),
    ("/v1/chat/completions", {**CHAT, "tools": [{"type": "function", "function": {"name": "f"}}]}, 400, "tools"),
    ("/v1/chat/completions", {**CHAT, "tool_choice": "auto"}, 400, "tool_choice"),
    ("/v1/chat/completions", {**CHAT, "response_format": {"type": "json_object"}}, 400, "response_format"),
    ("/v1/chat/completions", {**CHAT, "stop": ["a", "b", "c", "d", "e"]}, 400, "stop"),
    ("/v1/chat/completions", {**CHAT, "stop": 5}, 400, "stop"),
    ("/v1/chat/completions", {**CHAT, "max_tokens": 0}, 400, "max_tokens"),
    ("/v1/chat/completions", {**CHAT, "stream": "yes"}, 400, "stream"),
    ("/v1/chat/completions", {**CHAT, "stream_options": {"include_usage": True, "x": 1}}, 400,
     "stream_options.x"),
]


@pytest.mark.parametrize("path,body,status,param", BAD, ids=[f"{i}-{b[0][4:]}-{b[3]}" for i, b in enumerate(BAD)])
def test_bad_input_is_a_json_error_naming_the_field(server, path, body, status, param):
    _, url = server
    r = post(url, path, content=body) if isinstance(body, bytes) else post(url, path, body)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["param"] == param and err["message"] and err["type"] == "invalid_request_error"
    if param is not None:
        assert param.split(".")[0].split("[")[0] in err["message"] or param in err["message"]


def test_server_keeps_serving_after_bad_input(server, loaded, probe):
    _, url = server
    for path, body, _, _ in BAD[:5] + BAD[-5:]:
        post(url, path, content=body) if isinstance(body, bytes) else post(url, path, body)
    r = post(url, "/v1/score", {"prompt": QUESTIONS[4], "risk": 0.5})
    assert r.status_code == 200
    assert_same(r.json(), alone(loaded, probe, QUESTIONS[4], 0.5))


def test_accepted_fields_that_do_not_change_the_answer(server, loaded, probe):
    _, url = server
    body = {**CHAT, "user": "u", "seed": 3, "metadata": {"a": "b"}, "store": False, "n": 1,
            "temperature": 0, "top_p": 1, "presence_penalty": 0, "frequency_penalty": 0,
            "logprobs": False, "tool_choice": "none", "response_format": {"type": "text"},
            "stream_options": {"include_usage": False}, "max_completion_tokens": 5, "stop": "zz"}
    r = post(url, "/v1/chat/completions", body)
    assert r.status_code == 200, r.text
    truth = alone(loaded, probe, CHAT["messages"], 0.5, max_new_tokens=5, stop_strings=["zz"])
    choice = r.json()["choices"][0]
    assert_same({"answer": choice["message"]["content"], **choice["acute"]}, truth)


def test_unknown_route_and_method(server):
    _, url = server
    r = httpx.get(url + "/v1/nothing", timeout=TIMEOUT)
    assert r.status_code == 404 and "error" in r.json()
    r = httpx.get(url + "/v1/score", timeout=TIMEOUT)
    assert r.status_code == 405 and "error" in r.json()


# ------------------------------------------------------------------ queue, disconnects
def test_full_queue_is_503_with_retry_after(loaded, probe):
    model, tok = loaded
    scorer = GatedScorer(model, tok, probe)
    app = create_app(scorer, model_name=NAME, max_batch=1, max_queue=2, max_wait_ms=0)
    batcher = app.state.batcher
    prompts = QUESTIONS[:3]
    with running(app) as url, ThreadPoolExecutor(4) as pool:
        held = pool.submit(post, url, "/v1/score", {"prompt": prompts[0], "risk": 0.5})
        assert scorer.entered.wait(TIMEOUT)
        queued = [pool.submit(post, url, "/v1/score", {"prompt": p, "risk": 0.5}) for p in prompts[1:]]
        wait_until(lambda: batcher.depth == 2, "a full queue")
        r = post(url, "/v1/score", {"prompt": "Gold is", "risk": 0.5})
        assert r.status_code == 503 and r.headers["retry-after"] == "1"
        assert r.json()["error"]["type"] == "server_error"
        scorer.gate.set()
        answers = [held.result(TIMEOUT)] + [f.result(TIMEOUT) for f in queued]
        again = post(url, "/v1/score", {"prompt": "Gold is", "risk": 0.5})
    assert again.status_code == 200
    for p, r in zip(prompts, answers):
        assert r.status_code == 200
        assert_same(r.json(), alone(loaded, probe, p, 0.5))


def test_client_that_disconnects_does_not_block_the_batch(loaded, probe):
    model, tok = loaded
    scorer = GatedScorer(model, tok, probe)
    app = create_app(scorer, model_name=NAME, max_batch=4, max_wait_ms=0)
    batcher = app.state.batcher
    with running(app) as url, ThreadPoolExecutor(2) as pool:
        held = pool.submit(post, url, "/v1/score", {"prompt": "Gold is", "risk": 0.5})
        assert scorer.entered.wait(TIMEOUT)
        port = int(url.rsplit(":", 1)[1])
        body = json.dumps({"prompt": "Name a planet.", "risk": 0.5}).encode()
        with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as s:
            s.sendall(b"POST /v1/score HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
            wait_until(lambda: batcher.depth == 1, "the request of the leaving client")
        wait_until(lambda: batcher.depth == 0, "the leaving client's request to be dropped")
        scorer.gate.set()
        assert held.result(TIMEOUT).status_code == 200
        r = post(url, "/v1/score", {"prompt": QUESTIONS[0], "risk": 0.5})
    assert r.status_code == 200
    assert_same(r.json(), alone(loaded, probe, QUESTIONS[0], 0.5))
    assert batcher.stats.requests == 2 and batcher.stats.cancelled == 1


# ------------------------------------------------------------------ API key, binding
def test_api_key(loaded, probe, monkeypatch):
    import acute.serving.security as serve_mod

    calls = []
    real = serve_mod.hmac.compare_digest
    monkeypatch.setattr(serve_mod.hmac, "compare_digest", lambda a, b: calls.append(1) or real(a, b))
    model, tok = loaded
    app = create_app(Scorer(model, tok, probe), model_name=NAME, api_key="s3cret-key")
    with running(app) as url:
        body = {"prompt": "Gold is", "risk": 0.5}
        assert post(url, "/v1/score", body).status_code == 401
        wrong = post(url, "/v1/score", body, headers={"Authorization": "Bearer s3cret-kez"})
        assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "invalid_api_key"
        assert post(url, "/v1/score", body, headers={"Authorization": "Basic s3cret-key"}).status_code == 401
        assert httpx.get(url + "/v1/models", timeout=TIMEOUT).status_code == 401
        assert httpx.get(url + "/healthz", timeout=TIMEOUT).status_code == 200
        ok = post(url, "/v1/score", body, headers={"Authorization": "Bearer s3cret-key"})
        assert ok.status_code == 200
        assert_same(ok.json(), alone(loaded, probe, "Gold is", 0.5))
        good = openai.OpenAI(base_url=f"{url}/v1", api_key="s3cret-key", max_retries=0, timeout=TIMEOUT)
        assert good.chat.completions.create(model=NAME, messages=CHAT["messages"]).choices[0].message
        bad = openai.OpenAI(base_url=f"{url}/v1", api_key="nope", max_retries=0, timeout=TIMEOUT)
        with pytest.raises(openai.AuthenticationError):
            bad.chat.completions.create(model=NAME, messages=CHAT["messages"])
    assert len(calls) >= 4


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost", "127.0.0.2"])
def test_loopback_needs_no_key(host):
    check_bind(host, None, False)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.5", "example.org"])
def test_remote_host_needs_a_key_or_allow_remote(host):
    with pytest.raises(InputError, match="--allow-remote"):
        check_bind(host, None, False)
    check_bind(host, "key", False)
    check_bind(host, None, True)


# ------------------------------------------------------------------ the batcher alone
def test_batcher_limits_batches_isolates_errors_and_drains():
    seen = []

    def run(jobs):
        seen.append([j.item for j in jobs])
        return [ValueError(f"bad {j.item}") if j.item == 3 else j.item * 10 for j in jobs]

    b = Batcher(run, max_batch=4, max_wait_s=0.0, max_queue=20)
    jobs = [Job(item=i) for i in range(10)]
    b.submit(jobs)  # the worker starts now and may take the first job alone
    b.close(TIMEOUT)
    assert [j for batch in seen for j in batch] == list(range(10))
    assert max(len(batch) for batch in seen) <= 4 and b.stats.requests == 10
    assert [j.future.result(0) for j in jobs if j.item != 3] == [i * 10 for i in range(10) if i != 3]
    with pytest.raises(ValueError, match="bad 3"):
        jobs[3].future.result(0)
    with pytest.raises(ServerBusyError, match="shutting down"):
        b.submit([Job(item=0)])
    small = Batcher(run, max_queue=2)
    with pytest.raises(ServerBusyError, match="queue is full"):
        small.submit([Job(item=i) for i in range(3)])


def test_score_jobs_groups_settings_and_isolates_a_bad_prompt(loaded, probe):
    model, tok = loaded
    scorer = Scorer(model, tok, probe)
    jobs = [Job(item=QUESTIONS[0], gate=Gate(risk_rule(0.3))), Job(item=TOO_LONG),
            Job(item=QUESTIONS[1], gate=Gate(risk_rule(0.7)), max_new_tokens=2),
            Job(item=QUESTIONS[2], stop=("a",))]
    out = score_jobs(scorer, jobs)
    assert isinstance(out[1], InputError) and "context window" in str(out[1])
    settings = [{}, None, {"max_new_tokens": 2}, {"stop_strings": ["a"]}]
    for job, res, extra in zip(jobs, out, settings):
        if extra is None:
            continue
        truth = alone(loaded, probe, job.item, job.gate.rule.risk, **extra)
        assert_same({"answer": res.scored.answer, "confidence": res.scored.confidence,
                     "raw_confidence": res.scored.raw_confidence, "decision": res.scored.decision,
                     "risk": res.scored.risk}, truth)
    assert scorer.generation.max_new_tokens == GENERATION["max_new_tokens"] and scorer.generation.stop_strings == ()


# ------------------------------------------------------------------ the command line
def _env():
    env = {k: v for k, v in os.environ.items() if k != "ACUTE_API_KEY"}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(Path(__file__).resolve().parents[2]),
               HF_HUB_OFFLINE="1")
    return env


def test_cli_serve_answers_and_sigterm_exits_0(tiny_model_dir, probe_dir, loaded, probe):
    cmd = [sys.executable, "-m", "acute", "serve", "--model", str(tiny_model_dir), "--probe",
           str(probe_dir), "--port", "0", "--max-wait-ms", "5"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    try:
        line = ""
        deadline = time.monotonic() + TIMEOUT
        while "serving" not in line:  # the first line says where it serves
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
            line = proc.stdout.readline()
        url = line.split(" at ")[1].split("/v1")[0]
        name = Path(tiny_model_dir).name
        assert httpx.get(url + "/healthz", timeout=TIMEOUT).json()["model"] == name
        r = post(url, "/v1/score", {"prompt": QUESTIONS[0], "risk": 0.5})
        assert_same(r.json(), alone(loaded, probe, QUESTIONS[0], 0.5))
        # a request in flight when SIGTERM arrives is still answered
        many = [{"prompt": f"{q} Answer {i}.", "risk": 0.5, "max_new_tokens": 24}  # the limit: 4 x 6
                for i, q in enumerate((QUESTIONS * 3)[:16])]  # --max-batch items at most
        with ThreadPoolExecutor(1) as pool:
            inflight = pool.submit(post, url, "/v1/score", many)
            health = lambda: httpx.get(url + "/healthz", timeout=TIMEOUT).json()  # noqa: E731
            wait_until(lambda: inflight.done() or health()["running"] > 0, "the batch to start")
            proc.send_signal(signal.SIGTERM)
            answer = inflight.result(TIMEOUT)
        assert answer.status_code == 200 and len(answer.json()) == len(many)
        assert proc.wait(TIMEOUT) == 0
        with pytest.raises(httpx.ConnectError):
            httpx.get(url + "/healthz", timeout=5)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(TIMEOUT)
    stdout = proc.stdout.read()
    assert "stopped" in stdout


def test_cli_refuses_remote_host_without_key(tmp_path):
    cmd = [sys.executable, "-m", "acute", "serve", "--host", "0.0.0.0", "--probe", str(tmp_path / "none")]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=TIMEOUT)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("acute: error:") and "--allow-remote" in lines[0]


def test_cli_without_the_extra_says_what_to_install(monkeypatch, capsys):
    from acute import cli

    monkeypatch.setitem(sys.modules, "fastapi", None)  # import fastapi -> ImportError
    assert cli.main(["serve", "--port", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pip install 'acute[serve]'" in err[0]


def test_benchmark_counts_answers_and_batches(server):
    """benchmarks/serve_load.py's client loop against the test server: every request answered
    and counted, batch sizes read from /healthz, a report with the ratio line."""
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "serve_load.py"
    spec = importlib.util.spec_from_file_location("bench_serve_load", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    _, url = server
    prompts = bench.questions(6)
    results = [bench.run_level(url, prompts, c, max_new_tokens=3, time_limit=TIMEOUT) for c in (1, 6)]
    for r in results:
        assert (r["sent"], r["ok"], r["failed"], r["lost"], r["unsent"]) == (6, 6, 0, 0, 0)
        assert sum(k * v for k, v in r["sizes"].items()) == 6 and r["rps"] > 0
    assert results[0]["sizes"] == {1: 6}
    args = bench.argparse.Namespace(model=NAME, probe="p", max_batch=8, max_wait_ms=20, requests=6,
                                    max_new_tokens=3, threads=1)
    text = bench.report(args, [], results, "x", (0.0, 0.0))
    assert "6 clients:" in text and "Requests failed or lost: 0." in text
