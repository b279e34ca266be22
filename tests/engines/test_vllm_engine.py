"""The vLLM engine gives the transformers recorder's records (issue 44, item 3).

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

from acute.engines.vllm import VllmEngine, model_folder
from acute.errors import EngineError
from acute.store.generation import GenerationSettings

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
    (tmp_path / "config.json").write_text('{"model_type": "not-a-model", "num_hidden_layers": 2}')
    with pytest.raises(EngineError, match=f"vLLM failed loading {tmp_path}"):
        with VllmEngine(tmp_path, python=vllm_python):
            pass
