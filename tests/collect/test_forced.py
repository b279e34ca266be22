"""Teacher-forced recording (acute.extraction.responses, collect_responses, rerecord_store,
Scorer.score_responses): for the tokens a model generated greedily, the layer means, token
log-probs and raw confidence equal what the recorder recorded while generating them."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from acute.estimators.inputs import Inputs
from acute.store import ModelIdentity
import acute.collect
from acute.cli import main
from acute.collect import collect, collect_responses, read_responses, rerecord_store
from acute.errors import InputError, ModelMismatchError, TaskDataError
from acute.extraction import generate_and_record, record_responses
from acute.models import format_prompt, load_model, model_fingerprint
from acute.estimators import ActivationProbe, load_probe
from acute.scoring import Scorer
from acute.store import open_store
from acute.tasks import get_task
from acute.testing import hash_label, make_tiny_model, make_tiny_tokenizer
from acute.store.generation import GenerationSettings

ARCHS = ["llama", "qwen2", "gemma3", "gpt2"]
SHARED = "Question: How many legs does a spider have? Answer: 8. "  # > 8 shared tokens
PROMPTS = ["What is the capital of France?", "Water is",
           "Question: How many legs does a spider have? Answer:", "Mars",
           SHARED + "Water is", SHARED + "Mars, Venus", SHARED + "The chemical symbol for gold"]
TOL = 1e-4


@pytest.fixture(scope="module")
def tok():
    return make_tiny_tokenizer()


_MODELS: dict = {}


def tiny(arch):
    # a larger init than the default makes greedy decoding emit varied tokens
    if arch not in _MODELS:
        _MODELS[arch] = make_tiny_model(arch, initializer_range=0.3)
    return _MODELS[arch]


def ids_of(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"]


_CLEAN: dict = {}


def clean(arch, tok):
    """The tiny model with the (tied) embedding rows of every token that is not printable ASCII
    re-tokenizing to itself set to zero, so that its greedy tokens are such tokens (their logit
    0 loses to the largest of ~160 random ones) and a one-token answer's text re-tokenizes to it."""
    if arch not in _CLEAN:
        import copy

        model = copy.deepcopy(tiny(arch))
        good = {t for t in range(model.config.vocab_size)
                if (s := tok.decode([t])) and s.isascii() and s.isprintable() and ids_of(tok, s) == [t]}
        with torch.no_grad():
            weight = model.get_output_embeddings().weight
            weight[[t for t in range(weight.shape[0]) if t not in good]] = 0.0
        _CLEAN[arch] = model
    return _CLEAN[arch]


def assert_same_record(forced, generated):
    """Equal tokens, finish reason and text; layer means, last-prompt and last-answer states
    within TOL relative to each layer's scale; log-probs within TOL; raw confidence within TOL
    relative."""
    np.testing.assert_array_equal(forced.token_ids, generated.token_ids)
    assert forced.finish_reason == generated.finish_reason
    assert forced.text == generated.text and forced.prompt_tokens == generated.prompt_tokens
    for name in ("layer_means", "last_prompt", "last_answer"):
        got, want = getattr(forced, name), getattr(generated, name)
        assert got.shape == want.shape and got.dtype == np.float32
        scale = np.maximum(1.0, np.abs(want).max(axis=-1, keepdims=True))
        err = np.abs(got - want) / scale
        assert err.max() <= TOL, f"{name}: max scaled error {err.max():.3g} > {TOL}"
    np.testing.assert_allclose(forced.token_logprobs, generated.token_logprobs, atol=TOL)
    assert forced.raw_confidence == pytest.approx(generated.raw_confidence, rel=TOL, abs=1e-12)


def greedy(model, tok, prompts, pool, eos_from_step):
    """Greedy generations whose EOS ids are the tokens some rows emit at ``eos_from_step``, so
    that rows finish at different steps (random tiny models never emit the real EOS)."""
    first = generate_and_record(model, tok, prompts, max_new_tokens=8, batch_size=3, pool=pool)
    eos = sorted({int(g.token_ids[eos_from_step]) for g in first[:3]})
    return generate_and_record(model, tok, prompts, max_new_tokens=8, batch_size=3, pool=pool,
                               eos_token_ids=eos, stop_strings=["!"]), eos


# ------------------------------------------------------------------ equality with generation
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("pool", ["decoding", "generated"])
def test_generated_tokens_record_as_the_recorder_recorded_them(arch, pool, tok):
    model = tiny(arch)
    gens, eos = greedy(model, tok, PROMPTS, pool, eos_from_step=2)
    assert {g.finish_reason for g in gens} >= {"eos", "length"}
    for reuse_prefix in (False, True):
        forced = record_responses(model, tok, PROMPTS, [g.token_ids for g in gens], pool=pool,
                                  batch_size=4, eos_token_ids=eos, stop_strings=["!"],
                                  reuse_prefix=reuse_prefix)
        for f, g in zip(forced, gens):
            assert_same_record(f, g)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("pool", ["decoding", "generated"])
def test_text_with_the_most_likely_eos_appended_records_as_generated(arch, pool, tok):
    """Answers that ended with EOS (one of several EOS ids), given as their text without the
    EOS (as an engine returns them): the text re-tokenizes to the generated tokens and the EOS
    appended is the one greedy decoding chose."""
    model = clean(arch, tok)
    gens, eos = greedy(model, tok, PROMPTS, pool, eos_from_step=1)
    texts = {i: tok.decode(g.token_ids[:-1].tolist()) for i, g in enumerate(gens) if g.finish_reason == "eos"}
    rows = [i for i, text in texts.items() if ids_of(tok, text) == gens[i].token_ids[:-1].tolist()]
    assert len(rows) >= 3 and len({int(gens[i].token_ids[-1]) for i in rows}) >= 2
    forced = record_responses(model, tok, [PROMPTS[i] for i in rows], [texts[i] for i in rows],
                              pool=pool, batch_size=2, eos_token_ids=eos)
    for f, i in zip(forced, rows):
        assert_same_record(f, gens[i])


def reference_logprobs(model, tok, prompt, token_ids):
    """log_softmax of one unpadded forward over prompt + tokens at each token's position."""
    p = ids_of(tok, prompt)
    with torch.no_grad():
        logits = model(torch.tensor([p + list(token_ids)])).logits[0].double()
    return torch.log_softmax(logits[len(p) - 1:], -1).numpy()  # row j predicts token j


def test_the_appended_eos_is_the_most_likely_one(tok):
    model = tiny("llama")
    eos = [5, 17, 40, 101]
    responses = ["Paris", "The capital", "8", "Au and H2O"]
    forced = record_responses(model, tok, PROMPTS[:4], responses, eos_token_ids=eos)
    for prompt, text, f in zip(PROMPTS[:4], responses, forced):
        ids = ids_of(tok, text)
        lp = reference_logprobs(model, tok, prompt, ids)
        assert int(f.token_ids[-1]) == eos[int(np.argmax(lp[len(ids), eos]))]
        assert f.token_ids[:-1].tolist() == ids and f.finish_reason == "eos"
        want = [lp[j, t] for j, t in enumerate(f.token_ids)]
        np.testing.assert_allclose(f.token_logprobs, want, atol=TOL)
    # nothing is appended after an EOS, nor to token ids, nor with append_eos=False
    again = record_responses(model, tok, PROMPTS[:4], [f.token_ids for f in forced], eos_token_ids=eos)
    assert [a.token_ids.tolist() for a in again] == [f.token_ids.tolist() for f in forced]
    plain = record_responses(model, tok, PROMPTS[:1], ["Paris"], eos_token_ids=eos, append_eos=False)[0]
    assert plain.token_ids.tolist() == ids_of(tok, "Paris") and plain.finish_reason == "length"


def test_a_text_is_recorded_as_its_canonical_tokens(tok):
    """A greedy answer made of non-canonical tokens re-tokenizes to other tokens: the text path
    records those (other positions, another raw confidence); the ids path is exact."""
    model = tiny("llama")
    gens = generate_and_record(model, tok, PROMPTS, max_new_tokens=6, eos_token_ids=[])
    changed = [i for i, g in enumerate(gens) if ids_of(tok, g.text) != g.token_ids.tolist()]
    assert changed, "the random tiny model should emit a non-canonical token sequence"
    i = changed[0]
    by_text = record_responses(model, tok, [PROMPTS[i]], [gens[i].text], append_eos=False)[0]
    by_ids = record_responses(model, tok, [PROMPTS[i]], [gens[i].token_ids])[0]
    assert by_text.token_ids.tolist() == ids_of(tok, gens[i].text)
    assert by_text.text == by_ids.text == gens[i].text
    assert_same_record(by_ids, gens[i])
    assert not np.allclose(by_text.layer_means, gens[i].layer_means, atol=1e-3)


def test_results_in_input_order_whatever_the_batches(tok):
    model = tiny("qwen2")
    responses = [f"answer {i}" + " more" * (i % 3) for i in range(len(PROMPTS))]
    one = [record_responses(model, tok, [p], [r])[0] for p, r in zip(PROMPTS, responses)]
    for batch_size in (2, 7):
        many = record_responses(model, tok, PROMPTS, responses, batch_size=batch_size)
        for a, b in zip(many, one):
            assert_same_record(a, b)


def test_batches_are_closed_before_padding_exceeds_the_bound():
    from acute.extraction.batching import MAX_PADDING, split_batches

    rng = np.random.default_rng(0)
    length = rng.integers(20, 400, size=200).tolist()
    order = sorted(range(200), key=lambda i: -length[i])
    batches = split_batches(order, length, 16)
    assert [i for b in batches for i in b] == order
    for b in batches:
        assert 1 <= len(b) <= 16
        assert len(b) * length[b[0]] <= (1 + MAX_PADDING) * sum(length[i] for i in b)
    assert split_batches(list(range(40)), [100] * 40, 16) == [list(range(16)), list(range(16, 32)), list(range(32, 40))]


def test_bad_inputs_and_too_long(tok):
    model = tiny("llama")  # context window 256
    with pytest.raises(InputError, match=r"responses\[1\] is empty"):
        record_responses(model, tok, PROMPTS[:2], ["a", ""], append_eos=False)
    assert record_responses(model, tok, PROMPTS[:1], [""])[0].token_ids.size == 1  # only the EOS
    with pytest.raises(InputError, match=r"prompts\[0\] is empty"):
        record_responses(model, tok, [""], ["a"])
    with pytest.raises(InputError, match="differ in length"):
        record_responses(model, tok, PROMPTS[:2], ["a"])
    with pytest.raises(InputError, match=r"responses\[0\] must be a str or a 1-D array"):
        record_responses(model, tok, PROMPTS[:1], [1.5])
    with pytest.raises(InputError, match="pool"):
        record_responses(model, tok, PROMPTS[:1], ["a"], pool="mean")
    long = "Paris " * 300
    with pytest.warns(UserWarning, match=r"prompts\[1\] \+ responses\[1\] has \d+ tokens"):
        out = record_responses(model, tok, PROMPTS[:2], ["a", long])
    assert out[1] is None and out[0] is not None
    with pytest.raises(InputError, match=r"responses\[1\] has \d+ tokens, more than the context window of 256"):
        record_responses(model, tok, PROMPTS[:2], ["a", long], on_too_long="error")


# ------------------------------------------------------------------ collect --responses
@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    return load_model(tiny_model_dir)


def write_rows(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def response_rows(tok, n=12):
    rows = []
    for i in range(n):
        question = f"What is {i} plus {i + 1}?"
        row = {"id": f"r{i:02d}", "response": f"It is {2 * i + 1}." if i % 4 else str(2 * i + 1),
               "label": hash_label(i), "answers": [str(2 * i + 1)]}
        if i % 3 == 0:
            row["messages"] = [{"role": "system", "content": "Answer briefly."},
                               {"role": "user", "content": question}]
        else:
            row["prompt"] = format_prompt(tok, question)
        rows.append(row)
    return rows


def test_collect_responses_writes_the_forced_records(loaded, tmp_path):
    model, tok = loaded
    rows = response_rows(tok)
    path = write_rows(tmp_path / "logs.jsonl", rows)
    summary = collect_responses(model, tok, path, tmp_path / "store",
                                GenerationSettings(batch_size=4, dtype="float32"), shard_size=5,
                                progress=False)
    store = open_store(tmp_path / "store")
    prompts = [r["prompt"] if "prompt" in r else format_prompt(tok, r["messages"]) for r in rows]
    direct = record_responses(model, tok, prompts, [r["response"] for r in rows], batch_size=3)
    assert store.ids == [r["id"] for r in rows]
    np.testing.assert_allclose(store.layer_means, np.stack([g.layer_means for g in direct]),
                               atol=1e-5)
    for rec, row, prompt, g, lp in zip(store.records, rows, prompts, direct, store.token_logprobs):
        assert rec["prompt"] == prompt and rec["generation"] == row["response"]
        assert rec["correct"] is row["label"] and rec["task"] is None
        assert rec["token_ids"] == g.token_ids.tolist() and rec["finish_reason"] == "eos"
        np.testing.assert_allclose(lp, g.token_logprobs, atol=1e-5)
        assert math.isclose(rec["raw_confidence"], g.raw_confidence, rel_tol=1e-4)
    assert store.correct.tolist() == [hash_label(i) for i in range(12)]
    m = store.manifest
    assert m["responses"] == {"file": str(path.resolve()), "labels": "label field",
                              "prompt_format": "mixed"}
    assert m["generation"]["teacher_forced"] is True and m["generation"]["pool"] == "decoding"
    assert m["model_fingerprint"] == model_fingerprint(model) and m["task"] is None
    assert (summary.records, summary.new_records, summary.resumed) == (12, 12, 0)
    assert summary.accuracy == pytest.approx(np.mean([hash_label(i) for i in range(12)]))
    again = collect_responses(model, tok, path, tmp_path / "store", GenerationSettings(dtype="float32"),
                              shard_size=5, progress=False)
    assert (again.records, again.new_records, again.resumed) == (12, 0, 12)


def test_labels_from_a_task(loaded, tmp_path):
    model, tok = loaded
    rows = response_rows(tok, 6)
    for r in rows[::2]:
        del r["label"]
    path = write_rows(tmp_path / "logs.jsonl", rows)
    task = get_task("triviaqa")
    collect_responses(model, tok, path, tmp_path / "store", GenerationSettings(dtype="float32"), task=task,
                      progress=False)
    store = open_store(tmp_path / "store")
    assert store.manifest["responses"]["labels"] == "task triviaqa"
    want = [task.is_correct(_example(r), r["response"]) for r in rows]
    assert store.correct.tolist() == want and any(want)
    assert [rec["meta"].get("label_field") for rec in store.records] == [r.get("label") for r in rows]


def _example(row):
    from acute.tasks import Example

    return Example(id=row["id"], question="", answers=row["answers"])


@pytest.mark.parametrize("row,message", [
    ({"id": "b", "prompt": "p", "response": "r", "label": "yes"},
     r":2: id 'b': 'label' must be true or false, got 'yes'"),
    ({"id": "b", "prompt": "p", "response": "r", "label": 1}, r":2: id 'b': 'label' must be true or false"),
    ({"id": "a", "prompt": "p", "response": "r", "label": True}, r":2: duplicate id 'a' \(first on line 1\)"),
    ({"id": "b", "prompt": "p", "response": "r"}, r":2: id 'b' has no 'label'"),
    ({"id": "b", "response": "r", "label": True}, r":2: id 'b' needs exactly one of 'prompt'"),
    ({"id": "b", "prompt": "p", "label": True}, r":2: id 'b' needs a 'response' string"),
    ({"prompt": "p", "response": "r", "label": True}, r":2: needs an 'id'"),
    ({"id": "b", "messages": [{"role": "bot", "content": "x"}], "response": "r", "label": True},
     r":2: id 'b': 'messages'"),
    ({"id": "b", "prompt": "p", "response": "r", "label": True, "answers": 3}, r":2: 'answers' must be"),
])
def test_bad_rows_name_file_and_line_and_write_nothing(loaded, tmp_path, row, message):
    model, tok = loaded
    path = write_rows(tmp_path / "bad.jsonl", [{"id": "a", "prompt": "p", "response": "r", "label": True}, row])
    with pytest.raises(TaskDataError, match="bad.jsonl" + message):
        collect_responses(model, tok, path, tmp_path / "store", progress=False)
    assert not (tmp_path / "store").exists()


def test_a_task_needs_answers(tmp_path):
    path = write_rows(tmp_path / "r.jsonl", [{"id": 1, "prompt": "p", "response": "r", "label": True}])
    with pytest.raises(TaskDataError, match=r"r.jsonl:1: id 1 has no 'answers' for task 'triviaqa'"):
        read_responses(path, task=get_task("triviaqa"))


def test_empty_and_too_long_responses_are_skipped_or_fail_by_flag(loaded, tmp_path):
    model, tok = loaded
    rows = response_rows(tok, 4)
    rows[1]["response"] = "  "
    rows[2]["response"] = "Paris " * 300
    path = write_rows(tmp_path / "r.jsonl", rows)
    with pytest.raises(InputError, match=r"r.jsonl:2: id 'r01': the response is empty"):
        collect_responses(model, tok, path, tmp_path / "failed",
                          on_bad_response="error", progress=False)
    assert not (tmp_path / "failed").exists()
    rows[1]["response"] = "3"
    with pytest.raises(InputError, match=r"r.jsonl:3: id 'r02': prompt \+ response have \d+ tokens"):
        collect_responses(model, tok, write_rows(path, rows), tmp_path / "failed",
                          on_bad_response="error", progress=False)
    rows[1]["response"] = ""
    summary = collect_responses(model, tok, write_rows(path, rows), tmp_path / "store",
                                progress=False)
    assert (summary.records, summary.skipped_empty, summary.skipped_too_long) == (2, 1, 1)
    assert "skipped (empty):     1" in summary.lines()
    assert open_store(tmp_path / "store").ids == ["r00", "r03"]


# ------------------------------------------------------------------ rerecord
def qa_task(tmp_path, n):
    path = tmp_path / "q.jsonl"
    write_rows(path, [{"id": f"q{i:02d}", "question": f"What is {i} plus {i + 1}?",
                       "answers": [str(2 * i + 1)]} for i in range(n)])
    return get_task(path, shots=0)


def test_rerecord_gives_another_pooling_of_the_same_generations(loaded, tmp_path):
    model, tok = loaded
    task = qa_task(tmp_path, 10)
    examples = task.load()
    collect(model, tok, task, examples, tmp_path / "store",
            GenerationSettings(batch_size=4, max_new_tokens=5, dtype="float32"), progress=False)
    source = open_store(tmp_path / "store")
    summary = rerecord_store(model, tok, tmp_path / "store", tmp_path / "gen", pool="generated",
                             batch_size=3, progress=False)
    out = open_store(tmp_path / "gen")
    prompts = [task.prompt(tok, ex) for ex in examples]
    direct = generate_and_record(model, tok, prompts, max_new_tokens=5, batch_size=4,
                                 stop_strings=task.stop_strings, pool="generated")
    assert out.ids == source.ids and out.correct.tolist() == source.correct.tolist()
    assert [r["generation"] for r in out.records] == [r["generation"] for r in source.records]
    np.testing.assert_allclose(out.layer_means, np.stack([g.layer_means for g in direct]), atol=1e-5)
    np.testing.assert_allclose(out.raw_confidence, source.raw_confidence, rtol=1e-4)
    assert out.manifest["generation"]["pool"] == "generated" and out.dtype == np.float32
    assert out.manifest["rerecorded_from"]["pool"] == "decoding"
    assert (summary.records, summary.retokenized) == (10, 0)
    same = rerecord_store(model, tok, tmp_path / "store", tmp_path / "same", progress=False)
    np.testing.assert_allclose(open_store(tmp_path / "same").layer_means, source.layer_means, atol=1e-5)
    assert same.new_records == 10
    with pytest.raises(InputError, match="is the store being re-recorded"):
        rerecord_store(model, tok, tmp_path / "store", tmp_path / "store")
    with pytest.raises(ModelMismatchError, match="fingerprint"):
        rerecord_store(make_tiny_model("qwen2"), tok, tmp_path / "store", tmp_path / "other")
    assert not (tmp_path / "other").exists()


def test_rerecord_without_token_ids_counts_retokenized_records(tok, tmp_path, monkeypatch):
    model = tiny("llama")  # emits byte tokens that do not re-tokenize to themselves
    real = acute.collect.records._record

    def without_ids(*args, **kwargs):
        rec = real(*args, **kwargs)
        del rec["token_ids"]  # as stores written before token ids were recorded
        return rec

    monkeypatch.setattr(acute.collect.records, "_record", without_ids)
    task = qa_task(tmp_path, 10)
    collect(model, tok, task, task.load(), tmp_path / "old",
            GenerationSettings(max_new_tokens=5, dtype="float32"), progress=False)
    monkeypatch.undo()
    prompts = [task.prompt(tok, ex) for ex in task.load()]
    direct = generate_and_record(model, tok, prompts, max_new_tokens=5, stop_strings=task.stop_strings)
    ends = {"eos": lambda g: ids_of(tok, g.text) == g.token_ids[:-1].tolist(),
            "stop": lambda g: ids_of(tok, g.text + "\n") == g.token_ids.tolist(),
            "length": lambda g: ids_of(tok, g.text) == g.token_ids.tolist()}
    want = sum(not ends[g.finish_reason](g) for g in direct)
    summary = rerecord_store(model, tok, tmp_path / "old", tmp_path / "new", progress=False)
    assert summary.retokenized == want > 0
    out = open_store(tmp_path / "new")
    for rec, g, means in zip(out.records, direct, out.layer_means):
        if ends[g.finish_reason](g):
            assert rec["token_ids"] == g.token_ids.tolist()
            np.testing.assert_allclose(means, g.layer_means, atol=1e-5)


# ------------------------------------------------------------------ scoring given responses
@pytest.fixture(scope="module")
def responses_probe(loaded, tmp_path_factory):
    """A probe fitted on a responses store (hash labels) of 'prompt' rows, saved with the
    store's collection settings."""
    model, tok = loaded
    root = tmp_path_factory.mktemp("rprobe")
    rows = [{"id": i, "prompt": format_prompt(tok, f"Name {i} things."), "response": f"{i} things",
             "label": hash_label(i)} for i in range(30)]
    collect_responses(model, tok, write_rows(root / "logs.jsonl", rows), root / "store",
                      GenerationSettings(dtype="float32"), progress=False)
    store = open_store(root / "store")
    probe = ActivationProbe(view="pca10", n_estimators=10).fit(Inputs.of(np.asarray(store.layer_means), store.raw_confidence), store.correct)
    probe.save(root / "probe", identity=ModelIdentity(model="tiny", model_fingerprint=model_fingerprint(model)),
               training_summary=acute.collect.collection_settings(store.manifest))
    return root / "probe"


def test_score_responses_is_the_probe_on_the_forced_record(loaded, responses_probe):
    model, tok = loaded
    probe = load_probe(responses_probe)
    scorer = Scorer(model, tok, probe)
    prompts = [format_prompt(tok, q) for q in ("Who wrote Hamlet?", "Name a planet.", "2+2=")]
    answers = ["Shakespeare", " Mars", "4"]
    scored = scorer.score_responses(prompts, answers, risk=0.4)
    gens = record_responses(model, tok, prompts, answers)
    conf = probe.predict_proba(Inputs.of(np.stack([g.layer_means for g in gens]), np.array([g.raw_confidence for g in gens])))[:, 1]
    for s, g, c, p, a in zip(scored, gens, conf, prompts, answers):
        assert s.prompt == p and s.answer == a.strip() and s.n_tokens == len(g.token_ids)
        assert s.raw_confidence == pytest.approx(g.raw_confidence, rel=1e-6)
        assert s.confidence == pytest.approx(c) and s.decision == ("trust" if c > 0.4 else "abstain")
    one = scorer.score_response(prompts[1], answers[1], risk=0.4)
    assert one.confidence == pytest.approx(scored[1].confidence, abs=1e-6)
    with pytest.raises(InputError, match=r"prompts\[0\]: this probe was trained on formatted prompt "
                                         r"strings \('prompt' label field rows of .*logs.jsonl\); got chat messages"):
        scorer.score_response([{"role": "user", "content": "Hi"}], "Hello")
    with pytest.raises(InputError, match=r"responses\[0\] must be a non-empty string"):
        scorer.score_response(prompts[0], " ")
    with pytest.raises(InputError, match="risk"):
        scorer.score_response(prompts[0], "x", risk=2)


def test_score_responses_refuses_another_prompt_format(loaded, tiny_model, tiny_tokenizer):
    model, tok = loaded
    X = np.random.default_rng(0).normal(size=(30, 5, 64)).astype(np.float32)
    y = np.arange(30) % 2
    messages = {"generation": {"chat": True, "pool": "decoding"},
                "responses": {"file": "logs.jsonl", "labels": "label field", "prompt_format": "messages"}}
    probe = ActivationProbe(view="pca10", n_estimators=5).fit(Inputs.of(X, np.full(30, 0.5)), y)
    probe.training_summary_ = messages
    scorer = Scorer(model, tok, probe)
    with pytest.raises(InputError, match=r"trained on chat messages \('messages' label field rows of "
                                         r"logs.jsonl.*got a prompt string"):
        scorer.score_response("What?", "That.")
    assert scorer.score_response([{"role": "user", "content": "What?"}], "That.").n_tokens >= 2
    plain = Scorer(model, tok, probe, GenerationSettings(chat=False))
    with pytest.raises(InputError, match=r"formatted otherwise .*'prompt_format'\['chat'\]: this probe True, "
                                         r"this scorer False\); score with chat=True"):
        plain.score_response([{"role": "user", "content": "What?"}], "That.")


# ------------------------------------------------------------------ command line
def cli(argv):
    return main([str(a) for a in argv])


def test_cli_collect_responses_score_and_rerecord(tiny_model_dir, tmp_path, capsys):
    model, tok = load_model(tiny_model_dir)
    rows = [{"id": i, "prompt": format_prompt(tok, f"Name {i} things."), "response": f"{i} things",
             "label": hash_label(i)} for i in range(24)]
    logs = write_rows(tmp_path / "logs.jsonl", rows)
    store = tmp_path / "store"
    assert cli(["collect", "--model", tiny_model_dir, "--responses", logs, "--out", store,
                 "--quiet", "--dtype", "float32"]) == 0
    out = capsys.readouterr().out
    assert "records:             24 (24 new, 0 resumed)" in out
    assert open_store(store).manifest["responses"]["labels"] == "label field"
    probe = tmp_path / "probe"
    assert cli(["export", "--store", store, "--view", "pca10", "--n-estimators", "10", "--out", probe]) == 0
    capsys.readouterr()
    assert load_probe(probe).training_summary["responses"]["prompt_format"] == "prompt"

    prompt = format_prompt(tok, "Name 3 things.")
    assert cli(["score", prompt, "--response", "3 things", "--probe", probe]) == 0
    text = capsys.readouterr().out
    assert "answer:         3 things" in text and "decision:" in text
    scorer = Scorer(model, tok, load_probe(probe))
    s = scorer.score_response(prompt, "3 things")
    assert f"confidence:     {s.confidence:.3f}" in text

    jsonl = write_rows(tmp_path / "score.jsonl", [{"id": "a", "prompt": prompt, "response": "3 things"},
                                                  {"id": "b", "prompt": prompt}])
    assert cli(["score", "--jsonl", jsonl, "--probe", probe, "--max-new-tokens", "3"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["id"] for r in lines] == ["a", "b"]
    assert lines[0]["confidence"] == pytest.approx(s.confidence) and lines[0]["answer"] == "3 things"
    assert lines[1]["n_tokens"] <= 3

    assert cli(["rerecord", store, "--out", tmp_path / "gen", "--pool", "generated", "--quiet"]) == 0
    assert "records:             24 (24 new, 0 resumed)" in capsys.readouterr().out
    gen = open_store(tmp_path / "gen")
    assert gen.ids == list(range(24)) and gen.manifest["generation"]["pool"] == "generated"
    assert gen.manifest["responses"] == open_store(store).manifest["responses"]

    rc = cli(["score", "--jsonl", jsonl, "--response", "x", "--probe", probe])
    assert rc == 2 and "in --jsonl rows give each its 'response' field" in capsys.readouterr().err
    rc = cli(["collect", "--model", tiny_model_dir, "--responses", logs, "--data", "x", "--out", tmp_path / "z"])
    assert rc == 2 and "--data cannot be used with --responses" in capsys.readouterr().err
    bad = write_rows(tmp_path / "bad.jsonl", rows[:1] + [{"id": 0, "prompt": "p", "response": "r", "label": False}])
    rc = cli(["collect", "--model", tiny_model_dir, "--responses", bad, "--out", tmp_path / "z"])
    assert rc == 2 and "bad.jsonl:2: duplicate id 0" in capsys.readouterr().err
    assert not (tmp_path / "z").exists()


# ------------------------------------------------------------------ real model
@pytest.mark.slow
def test_smollm2_forced_equals_generated(smollm2):
    model, tokenizer = smollm2
    questions = ["What is the capital of France?", "How many legs does a spider have?",
                 "Name a planet of the solar system that has rings.", "What is 2 + 2?"]
    prompts = [format_prompt(tokenizer, q) for q in questions]
    for pool in ("decoding", "generated"):
        gens = generate_and_record(model, tokenizer, prompts, max_new_tokens=24, batch_size=4, pool=pool)
        by_ids = record_responses(model, tokenizer, prompts, [g.token_ids for g in gens], pool=pool)
        finished = [i for i, g in enumerate(gens) if g.finish_reason == "eos"]
        assert finished, "SmolLM2 should finish some short answers with EOS"
        by_text = record_responses(model, tokenizer, [prompts[i] for i in finished],
                                   [gens[i].text for i in finished], pool=pool)
        for f, g in zip(by_ids, gens):
            assert_same_record(f, g)
        for f, i in zip(by_text, finished):
            assert_same_record(f, gens[i])  # SmolLM2's greedy answers re-tokenize to themselves


def test_forced_throughput_benchmark_times_the_bare_model():
    """benchmarks/forced_throughput.py's row on a tiny model: the recording paths and the bare
    forward pass / bare generate it divides by (ratios are positive numbers)."""
    import runpy
    from pathlib import Path

    from acute.testing import make_tiny_model, make_tiny_tokenizer

    bench = runpy.run_path(str(Path(__file__).resolve().parents[2] / "benchmarks" / "forced_throughput.py"),
                           run_name="bench")
    row, note, ratio = bench["measure"](make_tiny_model(max_position_embeddings=2048), make_tiny_tokenizer(),
                                        "default", None, 4, 2, 1)
    assert row[0] == "default" and row[1] == 4 and ratio > 0
    assert float(row[7]) > 0 and float(row[8]) > 0  # forced / bare forward, generate / bare generate
    assert bench["length_batches"]([[1, 2, 3], [1], [1, 2]], 2) == [[1, 2], [0]]
