"""The trust gate on vLLM (issue 44, item 4): ``acute serve --engine vllm`` and ``acute serve
--upstream URL`` answer as the transformers service does.

One vLLM OpenAI server with acute's pooling connector serves the whole module
(:class:`acute.engines.vllm_server.VllmServer`, what ``--engine vllm`` starts; a start costs about
a minute on two cores); the service generates through it (:class:`UpstreamEngine`, what both
options use) and is compared, request by request, with the transformers service on the same
SmolLM2 model and probe: the same answers, confidences within :data:`CONF_TOL`, the same decisions
by a risk level, by a certificate and by a precheck; the official ``openai`` client under 16
concurrent requests; streaming (the decision in the final chunk); a request the engine fails is
answered 502 alone; a request the engine abandons is aborted; ``acute serve --upstream`` as a
process, stopped by SIGTERM. vLLM runs as in tests/engines/test_vllm_engine.py (``$ACUTE_VLLM_PYTHON``,
else ``$ACUTE_HOME/vllm-venv``, built once).
"""

from __future__ import annotations

import hashlib
import os
import shlex
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from servers import running  # tests/servers.py

httpx = pytest.importorskip("httpx")
openai = pytest.importorskip("openai")
pytest.importorskip("fastapi")

from acute.estimators.inputs import Inputs
import acute  # noqa: E402
from acute.engines.upstream import UpstreamEngine  # noqa: E402
from acute.engines.vllm import model_folder  # noqa: E402
from acute.engines.vllm_server import VllmServer, server_args  # noqa: E402
from acute.errors import EngineError  # noqa: E402
from acute.estimators import ActivationProbe, load_probe, make_estimator  # noqa: E402
from acute.estimators.certificates import certificate_entry  # noqa: E402
from acute.extraction import generate_and_record  # noqa: E402
from acute.metrics.certify import METHODS, Certificate  # noqa: E402
from acute.models import format_prompt  # noqa: E402
from acute.scoring import Scorer  # noqa: E402
from acute.serving import create_app  # noqa: E402
from acute.store.generation import GenerationSettings  # noqa: E402

pytestmark = pytest.mark.slow

GENERATION = {"max_new_tokens": 12, "stop_strings": ["\n"], "pool": "decoding", "chat": True}
NAME = "smollm2-135m-instruct"
QUESTIONS = ["What is the capital of France?", "Who wrote Hamlet?", "2+2=?", "Name a colour.",
             "What is the largest planet?", "Tell me a story about a cat.", "Is water wet?",
             "Which is bigger, 3 or 7?"]
#: the measured difference of a confidence served through vLLM from the transformers service's
#: is below 1e-5 (float32 states equal to relative 2e-6, tests/engines/test_vllm_engine.py); a decision
#: is compared where its threshold is further than this from the confidence
CONF_TOL = 1e-3
TIMEOUT = 120.0
MAX_MODEL_LEN = 1024


@pytest.fixture(scope="module")
def vllm_server(smollm2, vllm_python):
    """vLLM's OpenAI server with acute's connector, as ``acute serve --engine vllm`` starts it."""
    for k, v in {"OMP_NUM_THREADS": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
                 "VLLM_CPU_KVCACHE_SPACE": "1"}.items():
        os.environ.setdefault(k, v)
    with VllmServer(model_folder(smollm2[0]), python=vllm_python, max_model_len=MAX_MODEL_LEN,
                    max_num_seqs=16, enforce_eager=True) as server:
        yield server


@pytest.fixture(scope="module")
def engine(vllm_server):
    with UpstreamEngine(vllm_server.url, api_key=vllm_server.api_key) as eng:
        yield eng


@pytest.fixture(scope="module")
def probe_dir(smollm2, tmp_path_factory):
    """An answer probe (cosine, 5 trees) and a question-only precheck probe fitted on SmolLM2's
    transformers records with hash labels; a certificate at max_error 0.1 (made by hand, its
    threshold set by ``certified``)."""
    model, tok = smollm2
    questions = [f"What is {i} plus {i + 3}?" + " Answer briefly." * (i % 2) for i in range(24)]
    gens = generate_and_record(model, tok, [format_prompt(tok, q) for q in questions], max_new_tokens=8,
                               stop_strings=["\n"])
    y = np.array([hashlib.sha256(q.encode()).digest()[0] % 2 for q in questions])
    answer = ActivationProbe(view="cosine", n_estimators=5).fit(
        Inputs.of(np.stack([g.layer_means for g in gens]), np.array([g.raw_confidence for g in gens])), y)
    question = make_estimator("question-only", probe_params={"n_estimators": 5}).fit(
        Inputs.of(np.stack([g.last_prompt for g in gens]), pooling="last-prompt"), y)
    meta = {"identity": replace(acute.ModelIdentity.from_model(model), model=NAME)}
    exported = answer.export(training_summary={"generation": GENERATION, "task": None}, **meta)
    exported.precheck = question.export(training_summary={"generation": GENERATION}, **meta)
    return exported.save(tmp_path_factory.mktemp("vllm-serve") / "probe")


def _certified(probe_dir, threshold: float, out: Path) -> Path:
    """``probe_dir`` with a hand-made certificate at max_error 0.1 whose threshold is ``threshold``."""
    common = dict(method=METHODS["binomial"], fwer="bonferroni_holm", delta=0.1, n_thresholds=100)
    cert = Certificate(threshold=threshold, alpha=0.1, n_calibration=500, calibration_coverage=0.4,
                       calibration_precision=0.93, p_value=1e-4, valid=True, reason="made by hand", **common)
    probe = load_probe(probe_dir)
    probe.manifest = {**probe.manifest, "certificates": [certificate_entry(
        cert, backend="binomial", source="out-of-fold", folds={"n_splits": 5, "seed": 0})]}
    return probe.save(out)


def _on_vllm(probe):
    """``probe`` recording vLLM as its validity domain's engine (as ``acute recertify`` on a vLLM
    store would): a certificate made on transformers is refused under vLLM, one made on vLLM
    decides there (where probes record no domain yet, ``probe`` itself)."""
    if not hasattr(probe, "with_domain"):
        return probe
    for p in (probe, probe.precheck):
        if p is not None:
            p.with_domain({**(p.domain or {}), "engine": "vllm", "engine_version": "0.32.0"})
    return probe


def _between(values, tol=CONF_TOL) -> float:
    """A threshold between two of ``values`` (sorted, distinct by more than 2 tol), away from all."""
    v = np.unique(np.round(np.asarray(values, dtype=float), 6))
    gaps = [(b - a, (a + b) / 2) for a, b in zip(v[:-1], v[1:]) if b - a > 2 * tol]
    assert gaps, values
    return max(gaps)[1]


@pytest.fixture(scope="module")
def services(smollm2, probe_dir, engine, tmp_path_factory):
    """``(transformers URL, vLLM URL, vLLM app, confidences)``: the same probe (with a certificate
    whose threshold lies between the questions' confidences; its domain the engine's) served by
    the transformers recorder and by vLLM, four batches at once."""
    model, tok = smollm2
    conf = [s.confidence for s in Scorer(model, tok, load_probe(probe_dir)).generate(QUESTIONS, risk=0.5)]
    certified = _certified(probe_dir, _between(conf), tmp_path_factory.mktemp("certified") / "probe")
    hf_app = create_app(Scorer(model, tok, load_probe(certified)), model_name=NAME, max_batch=8, max_wait_ms=20)
    vllm_app = create_app(Scorer(model, tok, _on_vllm(load_probe(certified)), engine=engine), model_name=NAME,
                          max_batch=8, max_wait_ms=20, concurrent_batches=4)
    with running(hf_app, TIMEOUT) as hf_url, running(vllm_app, TIMEOUT) as vllm_url:
        yield hf_url, vllm_url, vllm_app, conf


def _post(url, path, body):
    return httpx.post(url + path, json=body, timeout=TIMEOUT)


def _same(got: dict, want: dict, threshold: float | None = None):
    assert got["answer"] == want["answer"] and got["n_tokens"] == want["n_tokens"]
    assert got["finish_reason"] == want["finish_reason"]
    if want["confidence"] is None:
        assert got["confidence"] is None
    else:
        assert abs(got["confidence"] - want["confidence"]) < CONF_TOL
        assert got["raw_confidence"] == pytest.approx(want["raw_confidence"], rel=1e-3)
    if threshold is not None and want["confidence"] is not None:
        assert abs(want["confidence"] - threshold) > CONF_TOL  # a decision the tolerance cannot flip
    assert (got["decision"], got["rule"], got["threshold"]) == (want["decision"], want["rule"], want["threshold"])


def test_v1_score_decides_as_the_transformers_service(services):
    """Risk levels, the certificate and the precheck: every answer and decision equals the
    transformers service's; the decisions are not all alike."""
    hf, vllm, _, conf = services
    risk = _between(conf)
    bodies = [{"prompt": q, "risk": risk} for q in QUESTIONS]
    got, want = _post(vllm, "/v1/score", bodies), _post(hf, "/v1/score", bodies)
    assert got.status_code == want.status_code == 200, got.text
    for g, w in zip(got.json(), want.json()):
        _same(g, w, risk)
    assert {w["decision"] for w in want.json()} == {"trust", "abstain"}

    bodies = [{"prompt": q, "max_error": 0.1} for q in QUESTIONS]
    got, want = _post(vllm, "/v1/score", bodies), _post(hf, "/v1/score", bodies)
    assert got.status_code == 200, got.text
    for g, w in zip(got.json(), want.json()):
        assert g["rule"] == "certificate" and g["certificate"] == w["certificate"]
        _same(g, w, w["threshold"])

    pre = [w["precheck"]["confidence"] for w in _post(hf, "/v1/score", [
        {"prompt": q, "risk": 0.5, "precheck": 0.01} for q in QUESTIONS]).json()]
    u0 = _between(pre)
    bodies = [{"prompt": q, "risk": risk, "precheck": u0} for q in QUESTIONS]
    got, want = _post(vllm, "/v1/score", bodies), _post(hf, "/v1/score", bodies)
    assert got.status_code == 200, got.text
    for g, w in zip(got.json(), want.json()):
        assert g["generated"] is w["generated"] and g["precheck"]["decision"] == w["precheck"]["decision"]
        assert abs(g["precheck"]["confidence"] - w["precheck"]["confidence"]) < CONF_TOL
        _same(g, w, risk)
    assert {w["generated"] for w in want.json()} == {True, False}


def test_openai_client_under_16_concurrent_requests(services):
    """The official client, 16 chat completions at once: each the transformers service's answer
    and decision, with the acute object; the batcher ran them in more than one batch."""
    hf, vllm, app, conf = services
    risk = _between(conf)
    client = openai.OpenAI(base_url=vllm + "/v1", api_key="unused", timeout=TIMEOUT, max_retries=0)
    messages = [[{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}] for i in range(16)]
    before = app.state.batcher.stats.to_dict()["batches"]

    def ask(m):
        return client.chat.completions.create(model=NAME, messages=m, extra_body={"risk": risk})

    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(ask, messages))
    want = {q: r for q, r in zip(QUESTIONS, _post(hf, "/v1/score", [{"messages": [
        {"role": "user", "content": q}], "risk": risk} for q in QUESTIONS]).json())}
    for m, a in zip(messages, answers):
        w, acute_obj = want[m[0]["content"]], a.choices[0].model_extra["acute"]
        assert a.choices[0].message.content == w["answer"]
        assert abs(acute_obj["confidence"] - w["confidence"]) < CONF_TOL
        assert acute_obj["decision"] == w["decision"] and acute_obj["risk"] == risk
        assert a.usage.completion_tokens == w["n_tokens"]
    assert app.state.batcher.stats.to_dict()["batches"] - before >= 2


def test_streaming_sends_the_decision_in_the_final_chunk(services):
    hf, vllm, _, conf = services
    client = openai.OpenAI(base_url=vllm + "/v1", api_key="unused", timeout=TIMEOUT, max_retries=0)
    messages = [{"role": "user", "content": QUESTIONS[0]}]
    stream = client.chat.completions.create(model=NAME, messages=messages, stream=True,
                                            stream_options={"include_usage": True}, extra_body={"risk": 0.5})
    chunks = list(stream)
    with_choices = [c for c in chunks if c.choices]
    final = with_choices[-1].choices[0]
    assert final.finish_reason in ("stop", "length") and all(c.choices[0].finish_reason is None
                                                               for c in with_choices[:-1])
    want = _post(hf, "/v1/chat/completions", {"messages": messages, "risk": 0.5}).json()["choices"][0]
    assert "".join(c.choices[0].delta.content or "" for c in with_choices) == want["message"]["content"]
    assert final.model_extra["acute"]["decision"] == want["acute"]["decision"]
    assert abs(final.model_extra["acute"]["confidence"] - want["acute"]["confidence"]) < CONF_TOL
    assert chunks[-1].usage.completion_tokens == chunks[-1].usage.total_tokens - chunks[-1].usage.prompt_tokens > 0


class _FailingFor:
    """``engine`` whose generation fails for prompts holding ``word`` (a request vLLM loses)."""

    def __init__(self, engine, word: str):
        self.engine, self.word = engine, word

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def generate(self, tokenizer, prompts, settings, **options):
        if any(self.word in p for p in prompts):
            raise EngineError("prompts[0]: vLLM's pooled states never arrived (made up by the test)")
        return self.engine.generate(tokenizer, prompts, settings, **options)


def test_a_request_the_engine_fails_fails_alone(smollm2, probe_dir, engine):
    """In one batch with good requests, the one the engine fails gets a 502 naming the cause; the
    others are answered; a prompt longer than vLLM's context but not the model's is the client's
    400; the server keeps serving."""
    model, tok = smollm2
    app = create_app(Scorer(model, tok, load_probe(probe_dir), engine=_FailingFor(engine, "POISON")),
                     model_name=NAME, max_batch=8, max_wait_ms=200, concurrent_batches=2)
    prompts = QUESTIONS[:3] + ["POISON " + QUESTIONS[3]]
    with running(app, TIMEOUT) as url:
        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(lambda p: _post(url, "/v1/score", {"prompt": p, "risk": 0.5}), prompts))
        assert [a.status_code for a in answers] == [200, 200, 200, 502], [a.text for a in answers]
        error = answers[-1].json()["error"]
        assert error["code"] == "engine_error" and "never arrived" in error["message"]
        long = _post(url, "/v1/score", {"prompt": "Mars Venus " * 600, "risk": 0.5})
        assert long.status_code == 400 and "max_model_len" in long.json()["error"]["message"], long.text
        assert _post(url, "/v1/score", {"prompt": QUESTIONS[0], "risk": 0.5}).status_code == 200


def test_an_abandoned_request_is_aborted_and_its_file_removed(smollm2, engine):
    """A caller's stop check cancels its requests at once; vLLM aborts them (the pooled file of
    the 900-token request holds far fewer positions) and the file does not stay behind."""
    from safetensors.numpy import load_file

    _, tok = smollm2
    ids = tok(format_prompt(tok, "Tell me a very long story about a cat."), add_special_tokens=False)["input_ids"]
    folder = Path(engine.pooled_dir)
    before = set(folder.iterdir())
    deadline = time.monotonic() + 1.0

    def check():
        if time.monotonic() > deadline:
            raise TimeoutError("given up")

    started = time.monotonic()
    with engine.stopping(check), pytest.raises(TimeoutError):
        engine.generate_ids([ids], GenerationSettings(max_new_tokens=900))
    # 900 tokens take minutes here; the bound leaves room for a loaded machine (6.4 s seen under load)
    assert time.monotonic() - started < 30.0
    wait = time.monotonic() + 30
    while not (new := [p for p in set(folder.iterdir()) - before if p.suffix == ".safetensors"]):
        assert time.monotonic() < wait, "vLLM wrote no file for the aborted request"
        time.sleep(0.1)
    assert int(load_file(str(new[0]))["count"][0]) < 300  # aborted, not run to 900 tokens
    engine.prompt_states(tok, ["Hi"])  # a later call removes it (and reads its own)
    assert not [p for p in set(folder.iterdir()) - before if p.suffix == ".safetensors"]


def test_stop_early_through_vllms_server_decides_as_the_transformers_scorer(smollm2, engine, tmp_path_factory):
    """``acute serve --upstream --stop-early``'s path: each completion streamed, read at the
    connector's live checkpoints and closed at a stop; the same stops, prefixes and decisions as
    the transformers scorer (tests/engines/test_vllm_engine.py has the offline engine)."""
    from stop_probes import gate_between, stop_probe  # tests/stop_probes.py

    model, tok = smollm2
    assert engine.live_checkpoints
    probe = load_probe(stop_probe(model, tok, tmp_path_factory.mktemp("stop-probe") / "probe"))
    hf = Scorer(model, tok, probe)
    gate = gate_between(model, tok, probe, [hf.format(q) for q in QUESTIONS], hf.generation.max_new_tokens)
    want = hf.generate(QUESTIONS, gate=gate)
    got = Scorer(model, tok, probe, engine=engine).generate(QUESTIONS, gate=gate)
    assert {w.stopped_at is None for w in want} == {True, False}
    for g, w in zip(got, want):
        assert (g.stopped_at, g.finish_reason, g.decision, g.answer) == (w.stopped_at, w.finish_reason, w.decision,
                                                                         w.answer)
        if w.stopped_at is not None:
            assert g.stop["confidence"] == pytest.approx(w.stop["confidence"], abs=1e-4)
    time.sleep(1.0)
    engine.discard([])  # sweeps the files of stopped requests written after their stop
    assert not [p for p in os.listdir(engine.pooled_dir) if ".k" in p]


def test_the_connector_writes_only_inside_its_folder(vllm_server):
    """A request naming its file with a path (``../``) gets the connector's default name, in its
    folder: no client of vLLM can make it write elsewhere."""
    body = {"prompt": [1, 2, 3], "max_tokens": 2, "temperature": 0,
            "kv_transfer_params": {"acute_pooled_name": "../escaped"}}
    answer = httpx.post(vllm_server.url + "/v1/completions", json=body, timeout=TIMEOUT,
                        headers={"Authorization": f"Bearer {vllm_server.api_key}"})
    assert answer.status_code == 200, answer.text
    path = Path(answer.json()["kv_transfer_params"]["acute_pooled_path"])
    assert path.parent == Path(vllm_server.pooled_dir) and "escaped" not in path.name
    wait = time.monotonic() + 30
    while not path.exists():
        assert time.monotonic() < wait
        time.sleep(0.1)
    path.unlink()
    assert not (Path(vllm_server.pooled_dir).parent / "escaped.safetensors").exists()


def test_acute_serve_upstream_process(smollm2, probe_dir, vllm_server, services):
    """``acute serve --upstream URL`` as a process, holding no copy of the weights (the default):
    answers a chat completion as the service does, refuses a given response by naming
    --load-weights, stops on SIGTERM with status 0."""
    hf, _, _, _ = services
    env = {**os.environ, "VLLM_API_KEY": vllm_server.api_key, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "acute", "serve", "--upstream", vllm_server.url,
                             "--probe", str(probe_dir), "--model", NAME, "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("serving "):
                break
        url = next((w for w in lines[-1].split() if w.startswith("http://")), None) if lines else None
        assert url, "".join(lines)
        messages = [{"role": "user", "content": QUESTIONS[1]}]
        got = httpx.post(url + "/chat/completions", json={"messages": messages, "risk": 0.5}, timeout=TIMEOUT)
        want = _post(hf, "/v1/chat/completions", {"messages": messages, "risk": 0.5})
        assert got.status_code == 200, got.text
        g, w = got.json()["choices"][0], want.json()["choices"][0]
        assert g["message"]["content"] == w["message"]["content"] and g["acute"]["decision"] == w["acute"]["decision"]
        given = httpx.post(url + "/score", json={"prompt": QUESTIONS[1], "response": "Shakespeare.", "risk": 0.5},
                           timeout=TIMEOUT)
        assert given.status_code == 400 and "--load-weights" in given.text, given.text
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=TIMEOUT)
        assert proc.returncode == 0 and "stopped" in out, out
        assert "the gate holds no copy of the weights" in "".join(lines) + out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_vllm_args_prints_the_command_acute_serve_runs(smollm2, tmp_path, capsys):
    """``acute vllm-args`` prints the server command of :func:`server_args` (the one the module's
    server runs), a shell line that parses back to it."""
    from acute.cli import main

    folder = model_folder(smollm2[0])
    assert main(["vllm-args", "--model", str(folder), "--pooled-dir", str(tmp_path), "--port", "8123"]) == 0
    out = capsys.readouterr().out.splitlines()
    line = next(x for x in out if " -m vllm.entrypoints.openai.api_server " in x)
    argv = shlex.split(line.split(" && ", 1)[1])
    start = argv.index("-m")
    assert argv[start:] == server_args(folder, tmp_path.resolve(), port=8123)
    assert any(x.startswith("acute serve --upstream http://127.0.0.1:8123") for x in out)
