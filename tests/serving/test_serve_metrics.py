"""``GET /metrics`` (issue 45 item 3): scraped with prometheus_client's own parser, every count
checked against what the test sent and what the answers said (statuses, decisions by rule,
precheck refusals, tokens, the confidence histogram), the drift gauge against scipy's two-sample
KS statistic, two apps in one process kept apart, the API key, and a probe without a reference."""

from __future__ import annotations

import math

import numpy as np
import pytest
from servers import running  # tests/servers.py
from service import GENERATION, NAME, TIMEOUT  # tests/serving/service.py (the model: its conftest.py)

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")
parser = pytest.importorskip("prometheus_client.parser")

from acute.estimators import load_probe  # noqa: E402
from acute.metrics.drift import confidence_reference  # noqa: E402
from acute.scoring import Scorer  # noqa: E402
from acute.serving import create_app  # noqa: E402

QUESTIONS = ["What is the capital of France?", "Who wrote Hamlet?", "2+2=", "Name a planet.",
             "How many legs does a spider have? Be brief.", "Gold is"]
WINDOW = 4


@pytest.fixture(scope="module")
def calibration():
    """The confidences the reference is made from (what the drift gauge is compared with)."""
    return np.random.default_rng(0).beta(2, 5, 300)


@pytest.fixture(scope="module")
def probe_dirs(hash_probes, calibration, tmp_path_factory):
    """``(with a reference and a question-only probe, without either)``: the shared hash-label
    probes (tests/serving/conftest.py)."""
    answer, question, meta = hash_probes
    root = tmp_path_factory.mktemp("serve-metrics")
    exported = answer.export(training_summary={"generation": GENERATION, "task": None},
                             confidence_reference=confidence_reference(calibration, "out-of-fold"), **meta)
    exported.precheck = question.export(training_summary={"generation": GENERATION}, **meta)
    answer.save(root / "plain", training_summary={"generation": GENERATION, "task": None}, **meta)
    return exported.save(root / "full"), root / "plain"


def scrape(url: str, **kwargs) -> dict:
    """``{(sample name, sorted labels): value}`` of ``/metrics``, parsed by prometheus_client."""
    r = httpx.get(url + "/metrics", timeout=TIMEOUT, **kwargs)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in parser.text_string_to_metric_families(r.text) for s in family.samples}


def value(samples: dict, name: str, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_metrics_count_what_was_served(loaded, probe_dirs, calibration):
    from scipy.stats import ks_2samp

    model, tok = loaded
    scorer = Scorer(model, tok, load_probe(probe_dirs[0]))
    pre = sorted(r.confidence for r in scorer.precheck(QUESTIONS))
    u0 = (pre[2] + pre[3]) / 2  # lets half of QUESTIONS through
    app = create_app(scorer, model_name=NAME, max_batch=8, max_wait_ms=5, drift_window=WINDOW)
    with running(app) as url:
        post = lambda path, body: httpx.post(url + path, json=body, timeout=TIMEOUT)  # noqa: E731
        answers = [post("/v1/score", {"prompt": q, "risk": risk}).json()
                   for q in QUESTIONS[:3] for risk in (0.01, 0.99)]  # trusted and not
        answers += post("/v1/score", [{"prompt": q, "risk": 0.5, "precheck": u0} for q in QUESTIONS]).json()
        chat = post("/v1/chat/completions", {"model": NAME, "messages": [{"role": "user", "content": "Hi"}]})
        answers.append({**chat.json()["choices"][0]["acute"], "n_tokens": chat.json()["usage"]["completion_tokens"]})
        assert post("/v1/score", {"prompt": "x", "risk": 2}).status_code == 400
        assert httpx.get(url + "/nowhere", timeout=TIMEOUT).status_code == 404
        m = scrape(url)
    assert value(m, "acute_requests_total", endpoint="/v1/score", status="200") == 7
    assert value(m, "acute_requests_total", endpoint="/v1/score", status="400") == 1
    assert value(m, "acute_request_errors_total", endpoint="/v1/score", status="400") == 1
    assert value(m, "acute_request_errors_total", endpoint="/v1/score", status="200") == 0
    assert value(m, "acute_requests_total", endpoint="/v1/chat/completions", status="200") == 1
    assert value(m, "acute_requests_total", endpoint="other", status="404") == 1  # never the path itself
    assert value(m, "acute_request_duration_seconds_count", endpoint="/v1/score") == 8
    for decision in ("trust", "abstain"):
        want = sum(a["decision"] == decision for a in answers)
        assert want and value(m, "acute_decisions_total", rule="risk", decision=decision) == want
    refused = sum(a.get("generated") is False for a in answers)
    assert refused == 3 and value(m, "acute_prechecks_total", outcome="refuse") == refused
    assert value(m, "acute_prechecks_total", outcome="pass") == len(QUESTIONS) - refused
    assert value(m, "acute_generated_tokens_total") == sum(a["n_tokens"] for a in answers)
    prompt_tokens = sum(len(tok(scorer.format(q), add_special_tokens=False)["input_ids"])
                        for q in QUESTIONS[:3] for _ in range(2))
    prompt_tokens += sum(len(tok(scorer.format(q), add_special_tokens=False)["input_ids"]) for q in QUESTIONS)
    prompt_tokens += chat.json()["usage"]["prompt_tokens"]
    assert value(m, "acute_prompt_tokens_total") == prompt_tokens
    conf = [a["confidence"] for a in answers if a["confidence"] is not None]
    assert value(m, "acute_confidence_count") == len(conf)
    assert value(m, "acute_confidence_sum") == pytest.approx(sum(conf))
    assert value(m, "acute_confidence_bucket", le="0.5") == sum(c <= 0.5 for c in conf)
    n = len(answers) - refused  # one queue wait, generation and scoring time per scored answer
    assert value(m, "acute_queue_wait_seconds_count") == len(answers)
    assert value(m, "acute_generation_seconds_count") == value(m, "acute_scoring_seconds_count") == n
    # the last WINDOW confidences in the order they were scored: the precheck list, then the chat
    window = conf[-WINDOW:]
    assert abs(value(m, "acute_confidence_drift") - ks_2samp(calibration, window).statistic) <= 0.01 + 1e-9
    assert value(m, "acute_confidence_drift_available") == 1
    assert value(m, "acute_confidence_drift_threshold") == 0.2
    assert value(m, "acute_queue_depth") == 0


def test_two_apps_keep_their_own_metrics_and_the_key_guards_them(loaded, probe_dirs):
    model, tok = loaded
    scorer = Scorer(model, tok, load_probe(probe_dirs[1]))
    first = create_app(scorer, model_name=NAME)
    second = create_app(scorer, model_name=NAME, api_key="k")  # a second registry: no clash
    with running(first) as a, running(second) as b:
        assert httpx.post(a + "/v1/score", json={"prompt": "Hi", "risk": 0.5}, timeout=TIMEOUT).status_code == 200
        m = scrape(a)
        assert value(m, "acute_requests_total", endpoint="/v1/score", status="200") == 1
        assert value(m, "acute_confidence_drift_available") == 0  # a probe without a reference
        assert math.isnan(value(m, "acute_confidence_drift"))
        refused = httpx.get(b + "/metrics", timeout=TIMEOUT)
        assert refused.status_code == 401 and refused.json()["error"]["message"]
        m = scrape(b, headers={"Authorization": "Bearer k"})
        assert value(m, "acute_requests_total", endpoint="/v1/score", status="200") == 0
        assert value(m, "acute_requests_total", endpoint="/metrics", status="401") == 1
