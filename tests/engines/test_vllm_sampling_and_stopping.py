"""Samples and early stopping on the vLLM engine (issues 54 item 1 and 53 item 4).

Samples: drawn by the worker's plain vLLM engine, one seeded request per sample
(:mod:`acute.engines.vllm_sampling`): they do not depend on their batch, their log-probs are the
raw distribution's (equal to transformers' for the same tokens), and ``collect`` stores them with
``samples["engine"] == "vllm"`` in the manifest. Stopping early: the connector's live checkpoints
and the worker's aborts (:mod:`acute.engines.live`) give the transformers Scorer's decisions on
the same SmolLM2 model, probe and prompts. vLLM runs as in tests/engines/test_vllm_engine.py
(``$ACUTE_VLLM_PYTHON``, else ``$ACUTE_HOME/vllm-venv``, built once when missing); one engine
serves the module; its sampler starts on the first sample, so the sampling tests come last
(the two engines hold about 10 GB together).
"""

from __future__ import annotations

import os
from dataclasses import replace

import numpy as np
import pytest
import torch
from stop_probes import prefix_scores, stop_gate, stop_probe  # tests/stop_probes.py

from acute.engines.vllm import VllmEngine, model_folder
from acute.engines.vllm_sampling import sample_answers
from acute.errors import IncompatibleStoreError, InputError
from acute.store.generation import GenerationSettings
from acute.store.sampling import SamplingSettings

pytestmark = pytest.mark.slow

QUESTIONS = ["What is the capital of France?", "Who wrote Hamlet? Answer in one short sentence please.",
             "2+2=?", "Name a colour.", "Tell me a story about a cat.", "Is water wet?",
             "What is the largest planet?", "Which is bigger, 3 or 7?"]
SAMPLES = SamplingSettings(3, temperature=0.8, top_p=0.95, seed=1, engine="vllm")


@pytest.fixture(scope="module")
def engine(smollm2, vllm_python):
    for k, v in {"OMP_NUM_THREADS": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}.items():
        os.environ.setdefault(k, v)
    with VllmEngine(model_folder(smollm2[0]), python=vllm_python, max_model_len=1024, max_num_seqs=8) as eng:
        yield eng


@pytest.fixture(scope="module")
def prompts(smollm2):
    from acute.models import format_prompt

    return [format_prompt(smollm2[1], q) for q in QUESTIONS]


# ------------------------------------------------------------------ stopping early
@pytest.fixture(scope="module")
def probe(smollm2, tmp_path_factory):
    from acute.estimators import load_probe

    model, tok = smollm2
    return load_probe(stop_probe(model, tok, tmp_path_factory.mktemp("stop-probe") / "probe"))


def test_stop_early_decides_as_the_transformers_scorer(engine, smollm2, probe, prompts):
    """A stop threshold between the prefix scores of the questions' answers: the vLLM scorer
    stops the same answers at the same checkpoints as the transformers scorer, with the same
    prefix, prefix confidence and finish reason, and leaves the others as they were."""
    from acute.extraction import generate_and_record
    from acute.scoring import Scorer
    from acute.store.checkpoints import parse_schedule

    model, tok = smollm2
    hf = Scorer(model, tok, probe)
    plain = generate_and_record(model, tok, prompts, max_new_tokens=hf.generation.max_new_tokens,
                                checkpoints=parse_schedule({"first": list(probe.stop_early.checkpoints), "every": 100}))
    gate = stop_gate(prefix_scores(probe.stop_early, plain))
    want = hf.generate(QUESTIONS, gate=gate)
    got = Scorer(model, tok, probe, engine=engine).generate(QUESTIONS, gate=gate)
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


def test_a_connector_without_live_checkpoints_is_refused(engine, smollm2, probe, monkeypatch):
    from acute.scoring import Scorer

    model, tok = smollm2
    gate = stop_gate(np.array([[0.2, 0.3], [0.6, 0.8]]))
    monkeypatch.setattr(engine, "info", {**engine.info, "live_checkpoints": False})
    with pytest.raises(InputError, match=r"^stop_early: stopping early on vLLM needs .*live checkpoints"):
        Scorer(model, tok, probe, engine=engine).generate(QUESTIONS[0], gate=gate)


# ------------------------------------------------------------------ samples
def test_samples_depend_on_their_key_not_their_batch_and_log_probs_are_raw(engine, smollm2, prompts):
    """Three samples each of three prompts: the same samples when drawn with another batch, not
    one token repeated (vllm-cpu 0.32's speculative engine's defect), and their log-probs those
    of transformers' forward over the same tokens (raw distribution) within 2e-4."""
    model, tok = smollm2
    settings = GenerationSettings(max_new_tokens=16, samples=SAMPLES)
    drawn = sample_answers(engine, tok, prompts[:3], ["a", "b", "c"], settings, model=model)
    again = sample_answers(engine, tok, prompts[1:3], ["b", "c"], settings, model=model)
    assert [[s.token_ids.tolist() for s in row] for row in drawn[1:]] == \
        [[s.token_ids.tolist() for s in row] for row in again]
    texts = {s.text for row in drawn for s in row}
    assert len(texts) > 3  # samples differ, within and across prompts
    for row in drawn:
        for s in row:
            assert len(set(s.token_ids.tolist())) > 2 and s.finish_reason in ("eos", "length")
    worst = 0.0
    for prompt, row in zip(prompts, drawn):
        ids = tok(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"][0]
        for s in row:
            full = torch.cat([ids, torch.as_tensor(s.token_ids)])
            with torch.no_grad():
                logp = torch.log_softmax(model(full[None]).logits[0].float(), dim=-1)
            want = logp[len(ids) - 1:-1].gather(1, full[len(ids):, None])[:, 0].numpy()
            worst = max(worst, float(np.abs(want - s.token_logprobs).max()))
    assert worst < 2e-4, worst


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
