"""Collection (acute.collect) on the tiny model: the store matches a direct recorder run, records
carry the labels, the summary adds up, and an interrupted collection resumes without loss or
duplication."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import acute.extraction
from acute.collect import collect
from acute.extraction import generate_and_record
from acute.models import load_model, model_fingerprint, model_name
from acute.store import open_store
from acute.tasks import get_task
from acute.store.generation import GenerationSettings

MAX_NEW = 4




@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    return load_model(tiny_model_dir)


def write_questions(path, n, long_ids=()):
    """A JSONL task file of ``n`` arithmetic questions; ids in ``long_ids`` get a very long text."""
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            q = f"What is {i} plus {i + 1}?" + (" Think." * 300 if i in long_ids else "")
            f.write(json.dumps({"id": f"q{i:03d}", "question": q, "answers": [str(2 * i + 1)]}) + "\n")
    return path


def qa_task(path):
    """Open QA over ``path`` without demonstrations: the tiny model's context is 256 tokens."""
    return get_task(path, shots=0)


def hash_rule(ex, generation):
    """Deterministic mixed labels (random tiny models answer everything wrong)."""
    return int(ex.id[1:]) % 3 == 0


def test_store_matches_direct_recorder_run(loaded, tiny_model_dir, tmp_path, monkeypatch):
    model, tok = loaded
    task = qa_task(write_questions(tmp_path / "q.jsonl", 12))
    monkeypatch.setattr(task, "is_correct", hash_rule)
    examples = task.load()
    summary = collect(model, tok, task, examples, tmp_path / "store",
                      GenerationSettings(batch_size=4, max_new_tokens=MAX_NEW, dtype="float32"),
                      progress=False)
    store = open_store(tmp_path / "store")

    prompts = [task.prompt(tok, ex) for ex in examples]
    direct = generate_and_record(model, tok, prompts, max_new_tokens=MAX_NEW, batch_size=4,
                                 stop_strings=task.stop_strings)
    L, d = model.config.num_hidden_layers, model.config.hidden_size
    assert store.layer_means.shape == (12, L + 1, d)
    np.testing.assert_array_equal(store.layer_means, np.stack([g.layer_means for g in direct]))
    assert store.ids == [ex.id for ex in examples]
    for rec, ex, prompt, g in zip(store.records, examples, prompts, direct):
        assert rec["prompt"] == prompt and rec["generation"] == g.text
        assert rec["gold"] == ex.answers == [str(2 * int(ex.id[1:]) + 1)]
        assert rec["correct"] is (int(ex.id[1:]) % 3 == 0)
        assert rec["n_tokens"] == len(g.token_ids) <= MAX_NEW
        assert rec["finish_reason"] == g.finish_reason
        assert math.isclose(rec["raw_confidence"], math.exp(float(np.sum(g.token_logprobs))),
                            rel_tol=1e-6)
    for lp, g in zip(store.token_logprobs, direct):
        np.testing.assert_array_equal(lp, g.token_logprobs)

    # summary numbers, computed independently
    assert (summary.records, summary.new_records, summary.resumed) == (12, 12, 0)
    assert summary.accuracy == pytest.approx(4 / 12)  # ids 0, 3, 6, 9
    assert summary.mean_raw_confidence == pytest.approx(np.mean([g.raw_confidence for g in direct]))
    assert summary.skipped_too_long == 0
    assert summary.unparseable == sum(task.extract(ex, g.text) is None for ex, g in zip(examples, direct))
    assert summary.seconds_per_record > 0
    assert "records:             12 (12 new, 0 resumed)" in summary.lines()

    m = store.manifest
    # the model is named once, where it is loaded (an existing path made absolute)
    assert m["model"] == model_name(model) == str(tiny_model_dir.resolve())
    assert m["model_fingerprint"] == model_fingerprint(model)
    assert m["generation"] == {"do_sample": False, "max_new_tokens": MAX_NEW, "stop_strings": ["\n"],
                               "pool": "decoding", "chat": True}
    assert m["task"] == task.name and m["dtype"] == "float32" and m["status"] == "complete"

    again = collect(model, tok, task, examples, tmp_path / "store",
                    GenerationSettings(batch_size=4, max_new_tokens=MAX_NEW, dtype="float32"),
                    progress=False)
    assert (again.records, again.new_records, again.resumed) == (12, 0, 12)
    assert math.isnan(again.seconds_per_record)


N_RESUME = 70  # more than one collection chunk (64 records at batch size 1)


def test_resume_after_interruption_loses_and_duplicates_nothing(loaded, tmp_path, monkeypatch):
    model, tok = loaded
    task = qa_task(write_questions(tmp_path / "q.jsonl", N_RESUME))
    examples = task.load()
    kw = dict(generation=GenerationSettings(batch_size=1, max_new_tokens=MAX_NEW, dtype="float32"),
              shard_size=5, progress=False)
    reference = collect(model, tok, task, examples, tmp_path / "ref", **kw)
    assert reference.records == N_RESUME

    real = acute.extraction.generate_with
    calls = []

    def fail_on_second_chunk(*args, **kwargs):
        calls.append(len(args[2]))
        if len(calls) == 2:
            raise RuntimeError("simulated crash")
        return real(*args, **kwargs)

    monkeypatch.setattr(acute.extraction, "generate_with", fail_on_second_chunk)
    with pytest.raises(RuntimeError, match="simulated crash"):
        collect(model, tok, task, examples, tmp_path / "store", **kw)
    monkeypatch.setattr(acute.extraction, "generate_with", real)

    partial = open_store(tmp_path / "store")
    first_chunk = calls[0]
    assert 0 < len(partial) < N_RESUME
    assert len(partial) == (first_chunk // 5) * 5  # only full shards were committed
    assert partial.manifest["status"] == "interrupted"

    resumed = collect(model, tok, task, examples, tmp_path / "store", **kw)
    assert resumed.resumed == len(partial) and resumed.new_records == N_RESUME - len(partial)
    store, ref = open_store(tmp_path / "store"), open_store(tmp_path / "ref")
    assert len(store) == N_RESUME and len(set(store.ids)) == N_RESUME
    assert sorted(store.ids) == sorted(ref.ids)
    order = [ref.ids.index(i) for i in store.ids]
    # batches are grouped differently after the resume: equal up to float rounding of padding
    np.testing.assert_allclose(store.layer_means, ref.layer_means[order], rtol=1e-4, atol=1e-6)
    assert [r["generation"] for r in store.records] == [ref.records[i]["generation"] for i in order]


def test_a_kill_loses_at_most_the_shard_being_filled(loaded, tmp_path, monkeypatch):
    """Shards smaller than a generation chunk: every shard is committed as soon as its records
    exist, so a crash after 3 shards' worth of generations leaves those 24 records on disk."""
    model, tok = loaded
    task = qa_task(write_questions(tmp_path / "q.jsonl", 40))
    real = acute.extraction.generate_with
    calls = []

    def fail_on_fourth_chunk(*args, **kwargs):
        calls.append(len(args[2]))
        if len(calls) == 4:
            raise RuntimeError("simulated kill")
        return real(*args, **kwargs)

    monkeypatch.setattr(acute.extraction, "generate_with", fail_on_fourth_chunk)
    with pytest.raises(RuntimeError, match="simulated kill"):
        collect(model, tok, task, task.load(), tmp_path / "store",
                GenerationSettings(batch_size=2, max_new_tokens=MAX_NEW, dtype="float32"), shard_size=8,
                progress=False)
    assert calls == [8, 8, 8, 8]  # each chunk fills exactly one shard (not 64 records at once)
    assert len(open_store(tmp_path / "store")) == 24


def test_length_windows_sorts_each_window_longest_first():
    from acute.collect.loop import length_windows

    lengths = [3, 9, 1, 9, 5, 2, 8]
    # windows [0..2] [3..5] [6]: by length, longest first, ties in input order
    assert length_windows(lengths, 3) == [1, 0, 2, 3, 4, 5, 6]
    assert length_windows(lengths, 100) == [1, 3, 6, 4, 0, 5, 2]
    assert length_windows([], 4) == []
    with pytest.raises(ValueError, match="window"):
        length_windows(lengths, 0)


def test_small_shards_are_filled_in_length_order_across_shards(loaded, tmp_path, monkeypatch):
    """Shards of 2 with a 64-record chunk: the records are generated longest prompt first across
    shards (little padding in each batch), and the store holds the same records, answers and
    labels as one collected in a single shard."""
    model, tok = loaded
    path = tmp_path / "q.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for i, n in enumerate([1, 6, 2, 9, 3, 7]):
            f.write(json.dumps({"id": f"q{i}", "question": "Count: " + "one " * n, "answers": ["x"]}) + "\n")
    task = qa_task(path)
    monkeypatch.setattr(task, "is_correct", hash_rule)
    kw = dict(generation=GenerationSettings(batch_size=2, max_new_tokens=MAX_NEW, dtype="float32"), progress=False)
    collect(model, tok, task, task.load(), tmp_path / "small", shard_size=2, **kw)
    collect(model, tok, task, task.load(), tmp_path / "one", shard_size=256, **kw)
    small, one = open_store(tmp_path / "small"), open_store(tmp_path / "one")
    assert [str(i) for i in small.ids] == ["q3", "q5", "q1", "q4", "q2", "q0"]
    by_id = {str(i): k for k, i in enumerate(one.ids)}
    order = [by_id[str(i)] for i in small.ids]
    assert [r["generation"] for r in small.records] == [one.records[k]["generation"] for k in order]
    np.testing.assert_array_equal(small.correct, one.correct[order])


def test_resume_refuses_other_generation_settings(loaded, tmp_path):
    model, tok = loaded
    task = qa_task(write_questions(tmp_path / "q.jsonl", 3))
    collect(model, tok, task, task.load(), tmp_path / "s", GenerationSettings(max_new_tokens=MAX_NEW),
            progress=False)
    with pytest.raises(ValueError, match="generation"):
        collect(model, tok, task, task.load(), tmp_path / "s", GenerationSettings(max_new_tokens=MAX_NEW + 1),
                progress=False)


def test_empty_dataset_errors(loaded, tmp_path):
    model, tok = loaded
    (tmp_path / "empty.jsonl").write_text("\n")
    task = qa_task(tmp_path / "empty.jsonl")
    with pytest.raises(ValueError, match="empty"):
        collect(model, tok, task, task.load(), tmp_path / "s", progress=False)
    assert not (tmp_path / "s").exists()


def test_malformed_line_names_file_and_line(tmp_path):
    path = write_questions(tmp_path / "bad.jsonl", 3)
    lines = path.read_text().splitlines()
    lines.insert(1, '{"id": "x", "question": ')
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=rf"{path.name}:2"):
        get_task(path).load()


def test_too_long_prompt_is_skipped_and_counted(loaded, tmp_path):
    model, tok = loaded
    task = qa_task(write_questions(tmp_path / "q.jsonl", 5, long_ids={2}))
    examples = task.load()
    assert len(tok(task.prompt(tok, examples[2]), add_special_tokens=False)["input_ids"]) > 256
    summary = collect(model, tok, task, examples, tmp_path / "s", GenerationSettings(max_new_tokens=MAX_NEW),
                      progress=False)
    assert summary.skipped_too_long == 1 and summary.records == 4
    assert open_store(tmp_path / "s").ids == ["q000", "q001", "q003", "q004"]
    with pytest.raises(ValueError, match="context window"):
        collect(model, tok, task, examples, tmp_path / "s2", GenerationSettings(max_new_tokens=MAX_NEW),
                on_too_long="error", progress=False)
