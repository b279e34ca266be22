"""Sampled answers beside the greedy one: the sampler's distribution against a hand computation,
near-zero temperature reproduces greedy decoding, a sample does not depend on its batch, log-probs
are the raw distribution's (teacher forcing), and a store collected with samples holds them,
resumes after a kill and refuses other sampling settings."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import torch

import acute.collect
from acute.collect import collect
from acute.errors import IncompatibleStoreError, InputError
from acute.extraction import generate_and_record
from acute.extraction.sampling import next_token_distribution, sample_answers
from acute.models import load_model
from acute.store import open_store
from acute.store.generation import GenerationSettings
from acute.store.sampling import SamplingSettings, parse_sampling
from acute.tasks import get_task

PROMPTS = ["What is 1 plus 2?", "Name a colour.", "x y z"]


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    return load_model(tiny_model_dir)


def test_nucleus_by_hand():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    np.testing.assert_allclose(next_token_distribution(logits, 1.0, 1.0)[0], [0.5, 0.3, 0.15, 0.05])
    # top-p 0.7: 0.5 alone is below 0.7, 0.5 + 0.3 reaches it: keep two, renormalise
    np.testing.assert_allclose(next_token_distribution(logits, 1.0, 0.7)[0], [0.625, 0.375, 0, 0])
    np.testing.assert_allclose(next_token_distribution(logits, 1.0, 0.4)[0], [1, 0, 0, 0])
    hot = np.array([0.5, 0.3, 0.15, 0.05]) ** 0.5
    np.testing.assert_allclose(next_token_distribution(logits, 2.0, 1.0)[0], hot / hot.sum())


@pytest.mark.parametrize("bad, match", [({"k": 1}, "at least two"), ({"k": 4, "temperature": 0}, "greedy"),
                                        ({"k": 4, "top_p": 0}, "top_p"), ({"k": 4, "top_p": 1.5}, "top_p"),
                                        ({"k": 4, "beam": 2}, "mapping with 'k'"), ({"k": True}, ">= 2")])
def test_bad_settings_are_refused_saying_why(bad, match):
    with pytest.raises(InputError, match=match):
        parse_sampling(bad)


def test_near_zero_temperature_is_greedy_decoding(loaded):
    model, tok = loaded
    greedy = generate_and_record(model, tok, PROMPTS, max_new_tokens=10)
    drawn = sample_answers(model, tok, PROMPTS, ["a", "b", "c"],
                           GenerationSettings(max_new_tokens=10, batch_size=2,
                                              samples=SamplingSettings(3, temperature=1e-6)))
    for g, samples in zip(greedy, drawn):
        for s in samples:
            assert s.token_ids.tolist() == g.token_ids.tolist()
            assert s.text == g.text and s.finish_reason == g.finish_reason
            np.testing.assert_allclose(s.token_logprobs, g.token_logprobs, atol=1e-5)


def test_a_sample_depends_on_its_key_not_its_batch(loaded):
    model, tok = loaded
    settings = SamplingSettings(4, temperature=1.5, top_p=0.9, seed=3)
    together = sample_answers(model, tok, PROMPTS, ["a", "b", "c"],
                              GenerationSettings(max_new_tokens=12, batch_size=3, samples=settings))
    alone = sample_answers(model, tok, PROMPTS[1:2], ["b"],
                           GenerationSettings(max_new_tokens=12, batch_size=1, samples=settings))
    assert [s.token_ids.tolist() for s in together[1]] == [s.token_ids.tolist() for s in alone[0]]
    texts = {tuple(s.token_ids.tolist()) for s in together[1]}
    assert len(texts) > 1, "hot samples of a random model should differ"
    other = sample_answers(model, tok, PROMPTS[1:2], ["other"], GenerationSettings(max_new_tokens=12, samples=settings))
    assert [s.token_ids.tolist() for s in other[0]] != [s.token_ids.tolist() for s in alone[0]]


def test_sample_logprobs_are_the_raw_distributions(loaded):
    model, tok = loaded
    (samples,) = sample_answers(model, tok, PROMPTS[:1], ["a"],
                                GenerationSettings(max_new_tokens=8, samples=SamplingSettings(2, temperature=2.0)))
    prompt = tok(PROMPTS[0], add_special_tokens=False)["input_ids"]
    for s in samples:
        full = torch.tensor([prompt + s.token_ids.tolist()])
        with torch.no_grad():
            logp = torch.log_softmax(model(full).logits[0].float(), -1)
        want = [logp[len(prompt) - 1 + t, tok_id].item() for t, tok_id in enumerate(s.token_ids.tolist())]
        np.testing.assert_allclose(s.token_logprobs, want, atol=1e-5)


def _task(path, n):
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            f.write(json.dumps({"id": f"q{i:03d}", "question": f"What is {i} plus {i + 1}?",
                                "answers": [str(2 * i + 1)]}) + "\n")
    return get_task(path, shots=0)


def test_a_store_with_samples_resumes_after_a_kill_and_refuses_other_settings(loaded, tmp_path, monkeypatch):
    model, tok = loaded
    task = _task(tmp_path / "q.jsonl", 8)
    examples = task.load()
    settings = SamplingSettings(3, temperature=1.2)
    plain = GenerationSettings(batch_size=2, max_new_tokens=6, dtype="float32")
    kw = dict(progress=False, shard_size=2)
    calls = {"n": 0}
    real = acute.collect.generated._draw_samples

    def dies_on_the_third_chunk(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(acute.collect.generated, "_draw_samples", dies_on_the_third_chunk)
    with pytest.raises(KeyboardInterrupt):
        collect(model, tok, task, examples, tmp_path / "store", replace(plain, samples=settings), **kw)
    assert len(open_store(tmp_path / "store")) == 4  # two shards of two committed
    monkeypatch.setattr(acute.collect.generated, "_draw_samples", real)
    summary = collect(model, tok, task, examples, tmp_path / "store", replace(plain, samples=settings), **kw)
    assert (summary.new_records, summary.resumed) == (4, 4)
    store = open_store(tmp_path / "store")
    assert store.manifest["generation"]["samples"] == settings.to_json()
    prompts = {ex.id: task.prompt(tok, ex) for ex in examples}
    fresh = sample_answers(model, tok, list(prompts.values()), list(prompts),
                           GenerationSettings(max_new_tokens=6, stop_strings=task.stop_strings, samples=settings))
    by_id = dict(zip(prompts, fresh))
    for rec in store.records:
        assert len(rec["samples"]) == 3
        for stored, sample in zip(rec["samples"], by_id[rec["id"]]):
            assert stored["token_ids"] == sample.token_ids.tolist() and stored["text"] == sample.text
            np.testing.assert_allclose(stored["token_logprobs"], sample.token_logprobs, rtol=1e-6)
            ex = next(e for e in examples if e.id == rec["id"])
            assert stored["correct"] == task.is_correct(ex, sample.text)
        assert rec["cost"]["sample_tokens"] == sum(len(s["token_ids"]) for s in rec["samples"])
        assert rec["cost"]["greedy_seconds"] > 0 and rec["cost"]["sample_seconds"] > 0
    with pytest.raises(IncompatibleStoreError, match="samples"):
        collect(model, tok, task, examples, tmp_path / "store",
                replace(plain, samples=SamplingSettings(3, temperature=0.7)), **kw)
    with pytest.raises(IncompatibleStoreError, match="samples"):
        collect(model, tok, task, examples, tmp_path / "store", plain, **kw)


def test_collecting_with_samples_shows_the_samples_progress(loaded, tmp_path, capsys):
    """A chunk's samples take longer than its greedy pass: they have their own bar, which counts
    every record (with the greedy bar) by the end."""
    model, tok = loaded
    task = _task(tmp_path / "q.jsonl", 5)
    plain = GenerationSettings(batch_size=2, max_new_tokens=4, dtype="float32")
    collect(model, tok, task, task.load(), tmp_path / "store", replace(plain, samples=SamplingSettings(2)),
            progress=True, shard_size=4)
    lines = capsys.readouterr().err.replace("\r", "\n").splitlines()
    for bar in ("collect q.jsonl:", "sample q.jsonl (2 each):"):
        counts = [int(line.split("|")[2].split("/")[0]) for line in lines if line.startswith(bar)]
        assert counts and counts == sorted(counts) and counts[-1] == 5, (bar, lines)
