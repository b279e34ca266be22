"""Prefix checkpoints: the recorder's snapshots equal means over the first k generated tokens
computed from ``output_hidden_states`` (both pool modes, rows that stop at different lengths),
the last equals the final means, a collected store keeps them for every record and resumes, and
stores without them stay readable and say how to get them."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from acute.collect import collect
from acute.errors import CorruptStoreError, IncompatibleStoreError, InputError
from acute.extraction import generate_and_record
from acute.models import load_model
from acute.store import StoreWriter, open_store
from acute.store.checkpoints import DEFAULT_CHECKPOINTS, checkpoint_counts, parse_schedule, prefix_rows
from acute.store.generation import GenerationSettings
from acute.tasks import get_task

SCHEDULE = parse_schedule({"first": [2, 4, 8], "every": 5})


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    return load_model(tiny_model_dir)


def test_schedule_counts_by_hand():
    default = parse_schedule(DEFAULT_CHECKPOINTS)
    assert checkpoint_counts(3, default).tolist() == [3]
    assert checkpoint_counts(4, default).tolist() == [4]
    assert checkpoint_counts(5, default).tolist() == [4, 5]
    assert checkpoint_counts(64, default).tolist() == [4, 8, 16, 32, 64]
    assert checkpoint_counts(130, default).tolist() == [4, 8, 16, 32, 64, 96, 128, 130]
    assert checkpoint_counts(0, default).tolist() == []
    assert [k for k in range(1, 140) if k in default] == [4, 8, 16, 32, 64, 96, 128]
    assert checkpoint_counts(14, SCHEDULE).tolist() == [2, 4, 8, 13, 14]


@pytest.mark.parametrize("bad", [{"first": [4, 4], "every": 32}, {"first": [4], "every": 0},
                                 {"first": [0, 4], "every": 3}, {"every": 3}, [4, 8], {"first": [True], "every": 2}])
def test_bad_schedules_are_refused_naming_the_key(bad):
    with pytest.raises(InputError, match="checkpoints"):
        parse_schedule(bad)


def test_prefix_rows_reads_the_last_checkpoint_at_or_below_k():
    tokens = np.array([2, 4, 5, 2, 4, 8, 9, 1])  # records of 5, 9 and 1 tokens
    offsets = np.array([0, 3, 7, 8])
    assert prefix_rows(tokens, offsets, 4).tolist() == [1, 4, 7]
    assert prefix_rows(tokens, offsets, 7).tolist() == [2, 4, 7]
    assert prefix_rows(tokens, offsets, 100).tolist() == [2, 6, 7]
    with pytest.raises(InputError, match="no checkpoint at or below 1"):
        prefix_rows(tokens, offsets, 1)


def _reference(model, prompt_ids, answer_ids, pool):
    """Means over the first k answer tokens' pooled positions, from output_hidden_states."""
    full = torch.tensor([list(prompt_ids) + list(answer_ids)])
    with torch.no_grad():
        hidden = torch.stack(model(full, output_hidden_states=True).hidden_states, 2)[0].double().numpy()
    start = len(prompt_ids) - 1 if pool == "decoding" else len(prompt_ids)
    return lambda k: hidden[start:start + k].mean(0)


@pytest.mark.parametrize("pool", ["decoding", "generated"])
def test_snapshots_equal_means_over_the_first_k_tokens(loaded, pool):
    model, tok = loaded
    prompts = ["What is 1 plus 2?", "Name a colour.", "x", "Count: one two three four five six"]
    free = generate_and_record(model, tok, prompts, max_new_tokens=24, batch_size=4, eos_token_ids=[])
    # an "EOS" the random model emits at different steps, so rows of one batch stop apart
    tokens = free[0].token_ids.tolist()
    eos = tokens[len(tokens) // 2]
    gens = generate_and_record(model, tok, prompts, max_new_tokens=24, batch_size=4, pool=pool,
                               eos_token_ids=[eos], checkpoints=SCHEDULE)
    lengths = {len(g.token_ids) for g in gens}
    assert len(lengths) > 1, "the rows should stop at different lengths"
    for prompt, g in zip(prompts, gens):
        assert g.checkpoint_tokens.tolist() == checkpoint_counts(len(g.token_ids), SCHEDULE).tolist()
        np.testing.assert_array_equal(g.checkpoint_means[-1], g.layer_means)
        ref = _reference(model, tok(prompt, add_special_tokens=False)["input_ids"], g.token_ids, pool)
        for k, mean in zip(g.checkpoint_tokens, g.checkpoint_means):
            np.testing.assert_allclose(mean, ref(int(k)), atol=2e-5)


def test_without_a_schedule_nothing_is_kept(loaded):
    model, tok = loaded
    (g,) = generate_and_record(model, tok, ["hi"], max_new_tokens=6)
    assert g.checkpoint_tokens is None and g.checkpoint_means is None


def _questions(path, n):
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            f.write(json.dumps({"id": f"q{i:03d}", "question": f"What is {i} plus {i + 1}?",
                                "answers": [str(2 * i + 1)]}) + "\n")
    return get_task(path, shots=0)


def test_a_collected_store_keeps_them_for_every_record_and_resumes(loaded, tmp_path, monkeypatch):
    model, tok = loaded
    task = _questions(tmp_path / "q.jsonl", 10)
    task.stop_strings = ()  # long answers: several checkpoints per record
    examples = task.load()
    kw = dict(generation=GenerationSettings(batch_size=4, max_new_tokens=40, dtype="float32"), progress=False,
              shard_size=4)
    collect(model, tok, task, examples[:6], tmp_path / "store", **kw)
    collect(model, tok, task, examples, tmp_path / "store", **kw)  # resumed: 4 more
    store = open_store(tmp_path / "store")
    assert len(store) == 10 and store.checkpoints == parse_schedule(DEFAULT_CHECKPOINTS)
    assert store.manifest["checkpoints"] == DEFAULT_CHECKPOINTS
    prompts = [task.prompt(tok, ex) for ex in examples]
    direct = generate_and_record(model, tok, prompts, max_new_tokens=40, batch_size=4,
                                 checkpoints=store.checkpoints)
    by_id = dict(zip([ex.id for ex in examples], direct))
    for rid, tokens, n in zip(store.ids, store.checkpoint_tokens, store.n_tokens):
        assert tokens.tolist() == checkpoint_counts(int(n), store.checkpoints).tolist()
        np.testing.assert_array_equal(tokens, by_id[rid].checkpoint_tokens)
    np.testing.assert_array_equal(store.prefix_states(10 ** 6), store.layer_means)
    from acute.store import verify_store
    report = verify_store(tmp_path / "store")
    assert report["checkpoints"] == DEFAULT_CHECKPOINTS and report["samples"] is None and not report["problems"]
    for means, rid in zip(store.checkpoint_means, store.ids):
        np.testing.assert_allclose(means, by_id[rid].checkpoint_means, atol=1e-5)
    view = store.select([7, 2])
    for k in (4, 8, 16, 33):
        got = view.prefix_states(k)
        for row, rid in enumerate(view.ids):
            g = by_id[rid]
            j = int(np.searchsorted(g.checkpoint_tokens, k, side="right")) - 1
            np.testing.assert_allclose(got[row], g.checkpoint_means[j], atol=1e-6)

    # resuming with another schedule is refused, naming both
    import acute.collect.generated
    from acute.store.checkpoints import Schedule

    monkeypatch.setattr(acute.collect.generated, "DEFAULT_CHECKPOINTS", Schedule((4, 8), 16).to_json())
    with pytest.raises(IncompatibleStoreError, match="prefix checkpoints"):
        collect(model, tok, task, examples, tmp_path / "store", **kw)


def _manifest(**extra):
    return {"model": "m", "model_fingerprint": {"num_layers": 1, "hidden_size": 2}, "task": "t", **extra}


def test_a_store_without_them_reads_and_names_the_remedy(tmp_path):
    with StoreWriter(tmp_path / "s", _manifest(), dtype="float32") as w:
        w.add([{"id": 0, "correct": True}], np.zeros((1, 2, 2)), [np.array([-0.1, -0.2])])
    store = open_store(tmp_path / "s")
    assert store.checkpoints is None and len(store) == 1
    with pytest.raises(InputError, match="no prefix checkpoints.*acute collect"):
        store.prefix_states(4)
    # resuming it with a schedule goes on without (a store keeps them for all records or none)
    with StoreWriter(tmp_path / "s", _manifest(checkpoints=DEFAULT_CHECKPOINTS), dtype="float32") as w:
        assert w.checkpoints is None
        with pytest.raises(InputError, match="keeps no prefix checkpoints"):
            w.add([{"id": 1, "correct": True}], np.zeros((1, 2, 2)), [np.array([-0.1])],
                  checkpoints=([np.array([1])], [np.zeros((1, 2, 2))]))


def test_the_writer_checks_each_records_checkpoints(tmp_path):
    with StoreWriter(tmp_path / "s", _manifest(checkpoints={"first": [2], "every": 2}), dtype="float32") as w:
        lp = [np.full(5, -0.1)]
        with pytest.raises(InputError, match="come without"):
            w.add([{"id": 0}], np.zeros((1, 2, 2)), lp)
        with pytest.raises(InputError, match=r"record 0: checkpoints at \[2, 5\].*give \[2, 4, 5\]"):
            w.add([{"id": 0}], np.zeros((1, 2, 2)), lp, checkpoints=([np.array([2, 5])], [np.zeros((2, 2, 2))]))
        bad = np.zeros((3, 2, 2))
        bad[1, 0, 0] = np.nan
        with pytest.raises(InputError, match="non-finite.*record 0"):
            w.add([{"id": 0}], np.zeros((1, 2, 2)), lp, checkpoints=([np.array([2, 4, 5])], [bad]))
        means = np.arange(12, dtype=float).reshape(3, 2, 2)
        w.add([{"id": 0}], np.zeros((1, 2, 2)), lp, checkpoints=([np.array([2, 4, 5])], [means]))
    store = open_store(tmp_path / "s")
    np.testing.assert_array_equal(store.prefix_states(3)[0], means[0])
    np.testing.assert_array_equal(store.prefix_states(4)[0], means[1])
    np.testing.assert_array_equal(store.prefix_states(9)[0], means[2])


def test_a_shard_whose_checkpoints_lie_is_corrupt(tmp_path):
    from safetensors.numpy import load_file, save_file

    with StoreWriter(tmp_path / "s", _manifest(checkpoints={"first": [2], "every": 2}), dtype="float32") as w:
        w.add([{"id": 0}], np.zeros((1, 2, 2)), [np.full(3, -0.1)],
              checkpoints=([np.array([2, 3])], [np.zeros((2, 2, 2))]))
    (shard,) = (tmp_path / "s").glob("shard-*.safetensors")
    tensors = load_file(str(shard))
    tensors["checkpoint_tokens"] = np.array([2, 4], dtype=np.int64)
    save_file(tensors, str(shard))  # no checksum metadata: only the structure is checked
    with pytest.raises(CorruptStoreError, match="record 0 has checkpoints at \\[2, 4\\].*3 tokens"):
        open_store(tmp_path / "s")


def test_a_checkpoint_callback_stops_rows_there(loaded):
    """Rows stopped at k = 4 end with 4 tokens and the finish reason "stopped"; their states are
    the unstopped run's checkpoint at 4, the callback saw that run's prefix confidence, the
    other rows run on unchanged, and the stopped rows leave the batch at once: every decode step
    after the stop is a forward pass of the two rows left (counted by a hook on the model)."""
    model, tok = loaded
    prompts = ["What is 1 plus 2?", "Name a colour.", "x", "Count: one two three four"]
    full = generate_and_record(model, tok, prompts, max_new_tokens=16, batch_size=4, eos_token_ids=[],
                               checkpoints=SCHEDULE)
    seen = []

    def stop_odd_at_4(k, rows, means, confidence):
        seen.append((k, rows.tolist(), confidence.copy(), means.copy()))
        return (rows % 2 == 1) & (k == 4)

    rows_per_step = []
    hook = model.register_forward_pre_hook(lambda m, args, kw: rows_per_step.append(kw["input_ids"].shape),
                                           with_kwargs=True)
    try:
        gens = generate_and_record(model, tok, prompts, max_new_tokens=16, batch_size=4, eos_token_ids=[],
                                   checkpoints=SCHEDULE, on_checkpoint=stop_odd_at_4)
    finally:
        hook.remove()
    # tokens 2-4 decoded for all four rows, tokens 5-16 for the two that were not stopped
    assert [b for b, n in rows_per_step if n == 1] == [4] * 3 + [2] * 12
    k, rows, confidence, means = seen[1]
    assert k == 4 and sorted(rows) == [0, 1, 2, 3]
    for r, c, m in zip(rows, confidence, means):
        assert c == pytest.approx(np.exp(np.sum(full[r].token_logprobs[:4], dtype=np.float64)), rel=1e-5)
        np.testing.assert_allclose(m, full[r].checkpoint_means[1], atol=1e-6)
    assert all(sorted(r) == [0, 2] for kk, r, _, _ in seen[2:])  # stopped rows are never asked again
    for i, (g, f) in enumerate(zip(gens, full)):
        if i % 2:
            assert g.finish_reason == "stopped" and g.token_ids.tolist() == f.token_ids[:4].tolist()
            np.testing.assert_allclose(g.layer_means, f.checkpoint_means[1], atol=1e-6)
        else:
            assert g.finish_reason == f.finish_reason and g.token_ids.tolist() == f.token_ids.tolist()
