"""Deciding by a certified threshold wherever acute decides: ``Scorer`` (``max_error=``),
``acute score --max-error``, ``/v1/score`` and ``/v1/chat/completions`` (a ``max_error`` field
next to ``risk``), and ``acute serve --max-error``; every answer names its rule and threshold.

The probe carries a hand-made certificate at max_error 0.1 whose threshold T is exactly the
confidence of one of the test questions, so the rules are checked by hand: that question is
trusted under the certificate (confidence >= T) and not at risk level T (confidence > T). It
also carries an invalid certificate at 0.05 and none at 0.2."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace

import numpy as np
import pytest
from cli_run import run  # tests/cli_run.py
from servers import running  # tests/servers.py

from acute.estimators.inputs import Inputs
import acute
from acute.errors import InputError
from acute.estimators import ActivationProbe, load_probe
from acute.estimators.certificates import certificate_entry
from acute.extraction import generate_and_record
from acute.metrics.certify import METHODS, Certificate
from acute.scoring import Scorer, parse_gate

GENERATION = {"max_new_tokens": 5, "stop_strings": [], "pool": "decoding", "chat": False}
QUESTIONS = ["What is the capital of France?", "Who wrote Hamlet?", "2+2=", "Name a planet.",
             "Gold is", "Water is H2O. Mars is"]
NAME = "tiny-llama"
TIMEOUT = 60.0


def _certificates(threshold: float) -> list[dict]:
    common = dict(method=METHODS["binomial"], fwer="bonferroni_holm", delta=0.1, n_thresholds=100)
    valid = Certificate(threshold=threshold, alpha=0.1, n_calibration=500, calibration_coverage=0.4,
                        calibration_precision=0.93, p_value=1e-4, valid=True,
                        reason="made by hand for the test", **common)
    invalid = Certificate(threshold=None, alpha=0.05, n_calibration=500, calibration_coverage=None,
                          calibration_precision=None, p_value=None, valid=False, n_needed=1800,
                          reason="no threshold passed (made by hand)", **common)
    return [certificate_entry(valid, backend="binomial", source="out-of-fold",
                              folds={"n_splits": 5, "seed": 0}),
            certificate_entry(invalid, backend="binomial", source="calibration-store",
                              calibration_store="/private/path/store")]


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    return acute.load_model(tiny_model_dir)


@pytest.fixture(scope="module")
def setup(loaded, tmp_path_factory):
    """(probe dir with certificates, probe dir without, T, the questions' confidences)."""
    model, tok = loaded
    prompts = [f"Question: what is {i} times {i + 3}?" + " Be brief." * (i % 3) for i in range(30)]
    gens = generate_and_record(model, tok, prompts, max_new_tokens=GENERATION["max_new_tokens"])
    X = np.stack([g.layer_means for g in gens])
    raw = np.array([g.raw_confidence for g in gens])
    y = np.array([hashlib.sha256(p.encode()).digest()[0] % 2 for p in prompts])
    fitted = ActivationProbe(view="cosine", n_estimators=5).fit(Inputs.of(X, raw), y)
    root = tmp_path_factory.mktemp("certified")
    kw = dict(identity=replace(acute.ModelIdentity.from_model(model), model=NAME),
              training_summary={"generation": GENERATION, "task": None})
    fitted.save(root / "plain", **kw)
    conf = np.array([Scorer(model, tok, load_probe(root / "plain")).generate(q, risk=0.5).confidence
                     for q in QUESTIONS])
    distinct = np.unique(conf)
    assert distinct.size >= 3, conf  # the hand check needs answers on both sides of T
    T = float(distinct[distinct.size // 2])
    fitted.save(root / "certified", certificates=_certificates(T), **kw)
    return root / "certified", root / "plain", T, conf


@pytest.fixture(scope="module")
def scorer(loaded, setup):
    model, tok = loaded
    return Scorer(model, tok, load_probe(setup[0]))


# ------------------------------------------------------------------------------ Scorer
def test_the_scorer_decides_by_the_certificate_and_says_so(scorer, setup):
    _, _, T, conf = setup
    got = [scorer.generate(q, max_error=0.1) for q in QUESTIONS]
    np.testing.assert_array_equal([s.confidence for s in got], conf)
    assert [s.trust for s in got] == [bool(c >= T) for c in conf]
    at_t = int(np.flatnonzero(conf == T)[0])
    assert got[at_t].trust and not scorer.generate(QUESTIONS[at_t], risk=T).trust  # >= vs >
    s = got[at_t]
    assert (s.rule, s.threshold, s.risk, s.max_error) == ("certificate", T, None, 0.1)
    assert s.certificate == {"alpha": 0.1, "delta": 0.1, "n_calibration": 500, "calibration_coverage": 0.4,
                             "calibration_precision": 0.93, "fwer": "bonferroni_holm",
                             "backend": "binomial", "source": "out-of-fold"}
    d = s.to_dict()
    assert d["rule"] == "certificate" and d["threshold"] == T and d["certificate"]["n_calibration"] == 500
    assert d["decision"] == "trust" and d["risk"] is None and d["max_error"] == 0.1


def test_the_risk_rule_is_unchanged_and_names_itself(scorer, setup):
    _, _, _, conf = setup
    got = scorer.generate(QUESTIONS, risk=0.4)
    assert [s.trust for s in got] == [bool(c > 0.4) for c in conf]
    d = got[0].to_dict()
    assert d["risk"] == 0.4 and d["rule"] == "risk" and d["threshold"] == 0.4
    assert "certificate" not in d and "max_error" not in d
    assert scorer.generate(QUESTIONS[0]).risk == 0.5  # no rule named: risk 0.5, as before


def test_rules_per_prompt_and_for_given_responses(scorer, setup):
    _, _, T, _ = setup
    got = scorer.generate(QUESTIONS[:3], risk=[0.2, None, 0.9], max_error=[None, 0.1, None])
    assert [s.rule for s in got] == ["risk", "certificate", "risk"]
    assert [s.threshold for s in got] == [0.2, T, 0.9]
    given = scorer.score_responses(QUESTIONS[:2], ["Paris", "Shakespeare"], max_error=0.1)
    assert all(s.rule == "certificate" and s.trust == (s.confidence >= T) for s in given)
    one = scorer.score_response(QUESTIONS[0], "Paris", max_error=0.1)
    assert one.confidence == given[0].confidence and one.threshold == T


@pytest.mark.parametrize("kw, message", [
    ({"max_error": 0.05}, r"max_error=0.05: this probe's certificate at max_error=0.05, delta=0.1 is "
                          r"invalid.*no threshold passed \(made by hand\).*about 1800 calibration records"),
    ({"max_error": 0.2}, r"max_error=0.2: this probe carries no certificate for that max_error "
                         r"\(it carries 0.1, 0.05 \(invalid\)\).*acute export --max-error 0.2"),
    ({"max_error": 0.1, "risk": 0.3}, "give risk .* or max_error .*, not both"),
    ({"max_error": 1.0}, r"^max_error must be a number in \(0, 1\) \(the error rate allowed among trusted answers\), got 1.0$"),
    ({"max_error": [0.1, 0.2]}, r"max_error\[1\]=0.2: this probe carries no certificate"),
    ({"risk": [0.1, 1.5]}, r"risk\[1\] must be a number in \[0, 1\]"),
])
def test_bad_rules_are_refused_by_name(scorer, kw, message):
    with pytest.raises(InputError, match=message):
        scorer.generate(QUESTIONS[:2], **kw)


def test_a_probe_without_certificates_refuses_max_error(loaded, setup):
    model, tok = loaded
    plain = Scorer(model, tok, load_probe(setup[1]))
    with pytest.raises(InputError, match="carries no certificate for that max_error \\(it carries none\\)"):
        plain.generate(QUESTIONS[0], max_error=0.1)


# ------------------------------------------------------------------------------ acute score
def test_acute_score_decides_by_the_certificate(setup, tiny_model_dir, capsys, tmp_path):
    probe_dir, _, T, conf = setup
    at_t = int(np.flatnonzero(conf == T)[0])
    base = ["score", "--probe", probe_dir, "--model", tiny_model_dir, "--task", "none"]
    rc, out, err = run([*base, QUESTIONS[at_t], "--max-error", 0.1], capsys)
    assert rc == 0, err
    fields = {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in out.strip().splitlines())}
    assert fields["decision"].startswith(f"trust (certified threshold {T:g}: trust iff confidence >= {T:g}")
    assert "at most 0.1 of trusted answers wrong with probability 0.9, from 500 calibration records" in out
    rc, out, _ = run([*base, QUESTIONS[at_t], "--risk", T], capsys)
    assert rc == 0 and f"abstain (risk level {T})" in out
    path = tmp_path / "q.jsonl"
    path.write_text("\n".join(json.dumps({"prompt": q}) for q in QUESTIONS) + "\n")
    rc, out, _ = run([*base, "--jsonl", path, "--max-error", 0.1], capsys)
    rows = [json.loads(line) for line in out.splitlines()]
    assert rc == 0 and [r["decision"] == "trust" for r in rows] == [bool(c >= T) for c in conf]
    assert all(r["rule"] == "certificate" and r["threshold"] == T and r["certificate"]["delta"] == 0.1
               for r in rows)


@pytest.mark.parametrize("extra, message", [
    (["--max-error", 0.2], "--max-error=0.2: this probe carries no certificate"),
    (["--max-error", 0.05], "--max-error=0.05: this probe's certificate at max_error=0.05, delta=0.1 is invalid"),
    (["--max-error", 0.1, "--risk", 0.3], "give --risk (a risk level) or --max-error"),
    (["--max-error", 0], "argument --max-error: must be a number in (0, 1) (the error rate allowed among trusted answers), got 0.0"),
])
def test_acute_score_refuses_a_certificate_it_cannot_use(setup, capsys, extra, message):
    rc, _, err = run(["score", "Q?", "--probe", setup[0], "--model", "/nowhere", *extra], capsys)
    assert rc == 2 and message in err and "Traceback" not in err  # before the model is loaded


# ------------------------------------------------------------------------------ the service


@pytest.fixture(scope="module")
def served(loaded, setup):
    pytest.importorskip("fastapi")
    httpx = pytest.importorskip("httpx")
    from acute.serving import create_app

    model, tok = loaded
    app = create_app(Scorer(model, tok, load_probe(setup[0])), model_name=NAME, max_batch=8)
    with running(app) as url:
        yield lambda path, body: httpx.post(url + path, json=body, timeout=TIMEOUT), url


def test_v1_score_decides_by_max_error_and_names_the_rule(served, setup):
    post, _ = served
    _, _, T, conf = setup
    at_t = int(np.flatnonzero(conf == T)[0])
    r = post("/v1/score", {"prompt": QUESTIONS[at_t], "max_error": 0.1})
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["decision"] == "trust" and got["confidence"] == pytest.approx(T, abs=1e-6)
    assert (got["rule"], got["threshold"], got["risk"], got["max_error"]) == ("certificate", T, None, 0.1)
    assert got["certificate"]["alpha"] == 0.1 and got["certificate"]["delta"] == 0.1
    assert got["certificate"]["n_calibration"] == 500
    r = post("/v1/score", {"prompt": QUESTIONS[at_t], "risk": T})
    risk = r.json()
    assert r.status_code == 200 and risk["decision"] == "abstain"
    assert (risk["rule"], risk["threshold"], risk["risk"]) == ("risk", T, T)
    assert "certificate" not in risk and "max_error" not in risk
    r = post("/v1/score", [{"prompt": q, "max_error": 0.1} if i % 2 else {"prompt": q, "risk": 0.3}
                           for i, q in enumerate(QUESTIONS)])
    assert r.status_code == 200, r.text
    for i, (g, c) in enumerate(zip(r.json(), conf)):
        assert g["rule"] == ("certificate" if i % 2 else "risk")
        assert g["decision"] == ("trust" if (c >= T if i % 2 else c > 0.3) else "abstain")


@pytest.mark.parametrize("body, param, message", [
    ({"prompt": "Q?", "max_error": 0.2}, "max_error", "carries no certificate for that max_error"),
    ({"prompt": "Q?", "max_error": 0.05}, "max_error", "is invalid: no threshold could be certified"),
    ({"prompt": "Q?", "max_error": 0.1, "risk": 0.5}, "max_error", "not both"),
    ({"prompt": "Q?"}, "risk", "risk is required"),
    ({"prompt": "Q?", "max_error": 1.0}, "max_error", "max_error"),
    ([{"prompt": "Q?", "risk": 0.5}, {"prompt": "Q?", "max_error": 0.2}], "[1].max_error",
     "[1].max_error=0.2: this probe carries no certificate"),
])
def test_v1_score_refuses_a_certificate_the_probe_does_not_carry(served, body, param, message):
    post, _ = served
    r = post("/v1/score", body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and message in err["message"]
    assert "/private/path" not in err["message"]


def test_chat_completions_take_max_error(served, setup):
    post, _ = served
    _, _, T, conf = setup
    msgs = [{"role": "user", "content": QUESTIONS[0]}]
    r = post("/v1/chat/completions", {"messages": msgs, "max_error": 0.1})
    assert r.status_code == 200, r.text
    acute_obj = r.json()["choices"][0]["acute"]
    assert acute_obj["rule"] == "certificate" and acute_obj["threshold"] == T
    assert acute_obj["certificate"]["n_calibration"] == 500 and acute_obj["risk"] is None
    assert acute_obj["decision"] == ("trust" if acute_obj["confidence"] >= T else "abstain")
    r = post("/v1/chat/completions", {"messages": msgs})  # the server's default: risk 0.5
    assert r.json()["choices"][0]["acute"]["rule"] == "risk" and r.json()["choices"][0]["acute"]["risk"] == 0.5
    r = post("/v1/chat/completions", {"messages": msgs, "max_error": 0.2})
    assert r.status_code == 400 and r.json()["error"]["param"] == "max_error"
    r = post("/v1/chat/completions", {"messages": msgs, "max_error": 0.1, "risk": 0.2})
    assert r.status_code == 400 and r.json()["error"]["param"] == "max_error"


def test_v1_models_lists_the_certificates_without_paths(served):
    import httpx

    _, url = served
    model = httpx.get(url + "/v1/models", timeout=TIMEOUT).json()["data"][0]
    certs = {c["alpha"]: c for c in model["certificates"]}
    assert certs[0.1]["valid"] and certs[0.1]["threshold"] is not None and not certs[0.05]["valid"]
    assert certs[0.05]["source"] == "calibration-store" and "/private/path" not in json.dumps(model)


def test_a_server_default_max_error(loaded, setup):
    pytest.importorskip("fastapi")
    import httpx

    from acute.serving import create_app

    model, tok = loaded
    scorer = Scorer(model, tok, load_probe(setup[0]))
    with pytest.raises(InputError, match=r"^max_error=0.2: this probe carries no"):
        parse_gate(scorer.probe, max_error=0.2)
    app = create_app(scorer, model_name=NAME, default_gate=parse_gate(scorer.probe, max_error=0.1))
    with running(app) as url:
        r = httpx.post(url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "Hi"}]},
                       timeout=TIMEOUT)
        assert r.status_code == 200 and r.json()["choices"][0]["acute"]["rule"] == "certificate"
        r = httpx.post(url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "Hi"}],
                                                           "risk": 0.3}, timeout=TIMEOUT)
        assert r.json()["choices"][0]["acute"]["rule"] == "risk"


def test_acute_serve_refuses_a_default_max_error_the_probe_lacks(setup, capsys):
    pytest.importorskip("fastapi")
    rc, _, err = run(["serve", "--probe", setup[0], "--model", "/nowhere", "--max-error", 0.2], capsys)
    assert rc == 2 and "--max-error=0.2: this probe carries no certificate" in err
    rc, _, err = run(["serve", "--probe", setup[0], "--max-error", 0.1, "--risk", 0.3], capsys)
    assert rc == 2 and "not both" in err
