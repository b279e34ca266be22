"""The service's seam to an engine that batches continuously (issue 44, item 4), without vLLM:
the batcher running several batches at once, the tokenizer they share, and
:class:`acute.engines.upstream.UpstreamEngine` against a stand-in for vLLM's OpenAI server (its
routes, and the pooled file acute's connector writes per request, named by the request).
tests/serving/test_vllm_serve.py runs the same against vLLM itself."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest
from servers import running  # tests/servers.py

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")

from fastapi import Request  # noqa: E402  (module level: FastAPI resolves the routes' annotations here)

from acute.estimators.inputs import Inputs
from acute.engines.upstream import RefusedByEngine, UpstreamEngine  # noqa: E402
from acute.errors import EngineError, InputError  # noqa: E402
from acute.serving import ServeSettings  # noqa: E402
from acute.serving.batcher import Batcher  # noqa: E402
from acute.serving.jobs import Job  # noqa: E402
from acute.serving.threads import LockedTokenizer, concurrent_scorer  # noqa: E402
from acute.store.generation import GenerationSettings  # noqa: E402

TIMEOUT = 30.0
L1, D = 3, 4  # layer outputs and width of the stand-in's states


def test_the_batcher_runs_batches_at_once_with_several_workers():
    """Two workers: a second batch starts while the first still runs (one worker: never)."""
    for workers, overlap in ((2, True), (1, False)):
        running_now, most, lock = [0], [0], threading.Lock()
        release = threading.Event()

        def run(jobs):
            with lock:
                running_now[0] += 1
                most[0] = max(most[0], running_now[0])
            release.wait(0.5 if workers == 1 else TIMEOUT)
            with lock:
                running_now[0] -= 1
            return [j.item for j in jobs]

        batcher = Batcher(run, max_batch=1, max_wait_s=0.0, workers=workers)
        jobs = [Job(item=i) for i in range(2)]
        batcher.submit(jobs)
        deadline = time.monotonic() + TIMEOUT
        while workers == 2 and most[0] < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        release.set()
        assert [j.future.result(TIMEOUT) for j in jobs] == [0, 1]
        batcher.close(TIMEOUT)
        assert (most[0] == 2) is overlap


def test_several_batches_need_an_engine():
    class Plain:
        engine = None

    with pytest.raises(InputError, match="concurrent_batches=4 needs an engine"):
        concurrent_scorer(Plain(), 4)
    assert concurrent_scorer(Plain(), 1).__class__ is Plain
    with pytest.raises(InputError, match="concurrent_batches"):
        ServeSettings(concurrent_batches=0)


def test_the_shared_tokenizer_runs_one_call_at_a_time():
    """Every call of the shared tokenizer, and of its methods, holds one lock; its attributes are
    the tokenizer's."""
    class Slow:
        eos_token_id = 7

        def __init__(self):
            self.inside, self.most = 0, 0

        def _enter(self):
            self.inside += 1
            self.most = max(self.most, self.inside)
            time.sleep(0.02)
            self.inside -= 1

        def __call__(self, text, **kw):
            self._enter()
            return {"input_ids": [len(text)]}

        def decode(self, ids, **kw):
            self._enter()
            return "x" * len(ids)

    slow = Slow()
    shared = LockedTokenizer(slow)
    threads = [threading.Thread(target=lambda i=i: (shared("ab" * i), shared.decode([1] * i))) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    assert slow.most == 1 and shared.eos_token_id == 7 and shared("abc") == {"input_ids": [3]}


# ------------------------------------------------------------------ a stand-in for vLLM's server
def _fake_vllm(folder, *, connector=True, key="k"):
    """vLLM's OpenAI server as far as acute uses it: /v1/models, /version and /v1/completions,
    answering ``n = max_tokens`` tokens (ids 10, 11, ...; log-prob -0.1 each) and writing the
    request's pooled file (sum = n x ones, last prompt = 2, tail = the last position, = 3) into
    ``folder`` under the name it gives; a prompt holding id 99 is refused with vLLM's 400."""
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse
    from safetensors.numpy import save_file

    app = FastAPI()
    seen = []

    def allowed(request):
        return request.headers.get("authorization") == f"Bearer {key}"

    @app.get("/v1/models")
    async def models(request: Request):
        if not allowed(request):
            return JSONResponse({"error": "Unauthorized"}, status_code=401)
        return {"object": "list", "data": [{"id": "m", "root": "/m", "max_model_len": 64}]}

    @app.get("/version")
    async def version():
        return {"version": "0.32.0"}

    @app.post("/v1/completions")
    async def completions(request: Request):
        body = await request.json()
        seen.append(body)
        if 99 in body["prompt"]:
            return JSONResponse({"error": {"message": "This model's maximum context length is 64",
                                           "type": "BadRequestError"}}, status_code=400)
        n = body["max_tokens"]
        name = body["kv_transfer_params"]["acute_pooled_name"]
        path = os.path.join(folder, name + ".safetensors")
        tail = np.full((1, L1, D), 3.0, dtype=np.float32)
        save_file({"sum": np.full((L1, D), float(n), dtype=np.float32), "count": np.array([n], dtype=np.int64),
                   "last_prompt": np.full((L1, D), 2.0, dtype=np.float32), "tail": tail}, path)
        params = {"acute_pooled_path": path} if connector else None
        return {"choices": [{"index": 0, "text": "", "token_ids": list(range(10, 10 + n)),
                             "logprobs": {"token_logprobs": [-0.1] * n}, "finish_reason": "length",
                             "stop_reason": None}], "kv_transfer_params": params}

    return app, seen


def test_the_upstream_engine_names_each_request_s_file_and_reads_it(tmp_path):
    app, seen = _fake_vllm(tmp_path)
    with running(app) as url, UpstreamEngine(url + "/v1", api_key="k") as engine:
        assert engine.info["states_shape"] == (L1, D) and engine.info["vllm_version"] == "0.32.0"
        assert engine.pooled_dir == str(tmp_path) and engine.model == "m" and engine.max_model_len == 64
        raw = engine.generate_ids([[1, 2], [3]], GenerationSettings(max_new_tokens=3, stop_strings=["\n"]),
                                  eos_token_ids=[2])
        assert [r["token_ids"] for r in raw] == [[10, 11, 12]] * 2
        assert all(os.path.exists(r["path"]) for r in raw)
        engine.discard([r["path"] for r in raw])  # files nobody will read
        assert not any(os.path.exists(r["path"]) for r in raw)
        body = seen[-1]  # greedy, the sampled token's log-prob, acute's stop strings and EOS ids
        assert (body["temperature"], body["logprobs"], body["stop"], body["stop_token_ids"]) == (0.0, 0, ["\n"], [2])
        names = [b["kv_transfer_params"]["acute_pooled_name"] for b in seen[-2:]]
        assert len(set(names)) == 2 and all(n.replace("-", "").isalnum() for n in names)

        class Tok:
            eos_token_id = 2

            def __call__(self, texts, add_special_tokens=False):
                return {"input_ids": [[1] * len(t) for t in texts]}

            def decode(self, ids, skip_special_tokens=True):
                return "ab"

        gens = engine.generate(Tok(), ["hey", "you"], GenerationSettings(max_new_tokens=3))
        g = gens[0]
        assert g.text == "ab" and g.finish_reason == "length" and g.prompt_tokens == 3
        np.testing.assert_allclose(g.layer_means, 1.0)  # sum 3 over 3 tokens
        np.testing.assert_allclose(g.last_prompt, 2.0)
        np.testing.assert_allclose(g.last_answer, 3.0)
        assert g.raw_confidence == pytest.approx(np.exp(-0.3))
        states, lengths = engine.prompt_states(Tok(), ["hey"])
        assert states.shape == (1, L1, D) and lengths == [3] and seen[-1]["max_tokens"] == 1
        with pytest.raises(InputError, match=r"prompts\[0\] has 70 tokens.*vLLM's context of 64"):
            engine.generate(Tok(), ["x" * 70], GenerationSettings(max_new_tokens=3), on_too_long="error")
        with pytest.raises(RefusedByEngine, match="answered 400: This model's maximum context length"):
            engine.generate_ids([[99]], GenerationSettings(max_new_tokens=2))
        assert not list(tmp_path.glob("*.safetensors"))  # every file read was removed


def test_the_upstream_engine_refuses_a_server_it_cannot_use(tmp_path):
    app, _ = _fake_vllm(tmp_path)
    with running(app) as url:
        with pytest.raises(EngineError, match="writes its pooled states to .* not to"):
            UpstreamEngine(url, api_key="k", pooled_dir=tmp_path / "elsewhere").__enter__()
        with pytest.raises(EngineError, match="answered 401"):
            UpstreamEngine(url, api_key="wrong").__enter__()
    app, _ = _fake_vllm(tmp_path, connector=False)
    with running(app) as url:
        with pytest.raises(EngineError, match="does not run acute's pooling connector.*acute vllm-args"):
            UpstreamEngine(url, api_key="k").__enter__()
    with pytest.raises(EngineError, match="cannot reach the vLLM server at http://127.0.0.1:9"):
        UpstreamEngine("http://127.0.0.1:9", timeout_s=5).__enter__()
    with pytest.raises(InputError, match="must start with http"):
        UpstreamEngine("127.0.0.1:8000")


def test_a_request_whose_caller_gives_up_is_cancelled(tmp_path):
    """The stop check's error ends the wait at once and is raised; the request is cancelled."""
    app, _ = _fake_vllm(tmp_path)
    gate = threading.Event()
    with running(app) as url, UpstreamEngine(url, api_key="k") as engine:
        original = engine._post

        async def slow(body, where):
            import asyncio

            while not gate.is_set():
                await asyncio.sleep(0.01)
            return await original(body, where)

        engine._post = slow

        def check():
            raise TimeoutError("the client left")

        started = time.monotonic()
        with engine.stopping(check), pytest.raises(TimeoutError, match="client left"):
            engine.generate_ids([[1]], GenerationSettings(max_new_tokens=2))
        assert time.monotonic() - started < 2.0
        gate.set()


# ------------------------------------------------------------------ acute serve's options
@pytest.mark.parametrize("argv, message", [
    (["--upstream", "http://127.0.0.1:1", "--engine", "vllm"], "leave out --engine"),
    (["--pooled-dir", "x"], "--pooled-dir and --upstream-api-key go with --upstream URL"),
    (["--engine", "vllm", "--pooled-dir", "x"], "--pooled-dir names the pooled folder of a vLLM server"),
    (["--upstream", "http://127.0.0.1:1", "--vllm-max-model-len", "64"], "sets the vLLM server acute starts"),
    (["--concurrent-batches", "4"], "--concurrent-batches needs vLLM"),
    (["--load-weights"], "--load-weights goes with vLLM"),
    (["--upstream", "http://127.0.0.1:1", "--device-map", "auto"], "--device and --device-map place nothing"),
])
def test_serve_refuses_engine_options_that_do_not_go_together(argv, message, tiny_model_dir, capsys):
    """Refused before anything is loaded."""
    from acute.cli import main

    assert main(["serve", "--model", str(tiny_model_dir), "--port", "0", *argv]) == 2
    assert message in capsys.readouterr().err


def test_serve_engine_vllm_checks_the_server_it_started(tmp_path, tiny_model, monkeypatch):
    """``--engine vllm``: the server acute starts (here a stand-in) is checked before serving: its
    states must have the shape of the model acute loaded."""
    import contextlib

    from acute.cli import build_parser
    from acute.cli.scoring import _serving_engine
    from acute.serving import ServeSettings

    app, _ = _fake_vllm(tmp_path)
    started = []

    @contextlib.contextmanager
    def fake_server(folder, **options):
        started.append(options)
        yield type("S", (), {"url": url, "api_key": "k", "pooled_dir": tmp_path})()

    monkeypatch.setattr("acute.cli.scoring.VllmServer", fake_server)  # the names `acute serve` calls
    monkeypatch.setattr("acute.cli.scoring.model_folder", lambda model: tmp_path)
    args = build_parser().parse_args(["serve", "--engine", "vllm", "--vllm-max-model-len", "64"])
    with running(app) as url:
        with pytest.raises(EngineError, match=r"states of shape \(3, 4\), not \(5, 64\).*another model"):
            with _serving_engine(args, tiny_model, ServeSettings(max_batch=4, concurrent_batches=2)):
                pass
    assert started == [{"dtype": "float32", "max_model_len": 64, "max_num_seqs": 8}]


def test_a_gate_without_weights_scores_as_one_with_them(tmp_path):
    """What ``acute serve --upstream`` loads by default (the model without its weights) scores
    through the engine exactly as the loaded model does; given responses, which need the
    weights, and scoring without an engine are refused by name."""
    from acute.estimators import ActivationProbe
    from acute.models import load_model
    from acute.scoring import Scorer
    from acute.testing import save_tiny_model

    folder = save_tiny_model(tmp_path / "m", num_hidden_layers=L1 - 1, hidden_size=D, intermediate_size=8,
                             num_attention_heads=1, num_key_value_heads=1)
    rng = np.random.default_rng(0)
    probe = ActivationProbe(view="cosine", n_estimators=5).fit(Inputs.of(rng.normal(size=(40, L1, D)), rng.uniform(size=40)), np.arange(40) % 2)
    pooled = tmp_path / "pooled"
    pooled.mkdir()
    app, _ = _fake_vllm(pooled)
    loaded, bare = load_model(folder), load_model(folder, weights=False)
    with running(app) as url, UpstreamEngine(url, api_key="k") as engine:
        three = GenerationSettings(max_new_tokens=3)
        want, got = (Scorer(*m, probe, three, task=None, engine=engine).generate(["Hi", "Yo"], risk=0.5)
                     for m in (loaded, bare))
        assert [g.to_dict() | {"latency_s": 0} for g in got] == [w.to_dict() | {"latency_s": 0} for w in want]
        gate = Scorer(*bare, probe, task=None, engine=engine)
        with pytest.raises(InputError, match="needs the model's weights.*--load-weights"):
            gate.score_responses(["Hi"], ["Hello"], risk=0.5)
        from acute.serving import create_app

        with running(create_app(gate, model_name="m", max_batch=2, max_wait_ms=5)) as gate_url:
            given = httpx.post(gate_url + "/v1/score", json={"prompt": "Hi", "response": "Hello", "risk": 0.5},
                               timeout=TIMEOUT)
            asked = httpx.post(gate_url + "/v1/score", json={"prompt": "Hi", "risk": 0.5, "max_new_tokens": 3},
                           timeout=TIMEOUT)
        assert given.status_code == 400 and "--load-weights" in given.json()["error"]["message"]
        assert asked.status_code == 200, asked.text
        assert asked.json()["decision"] in ("trust", "abstain")
    with pytest.raises(InputError, match="loaded without its weights.*through an engine"):
        Scorer(*bare, probe, task=None)
