"""The precheck (issue 30): the question-only probe exported beside the answer probe
(``acute export --precheck``), the prompt pass (``Scorer.precheck``: its states equal the
last-prompt states collection records), the two-stage gate (``generate(..., precheck=u0)``,
``acute score --precheck``) and every bad input refused by name.

The store is collected by ``acute.collect.collect`` from the tiny random Llama (hash labels),
so its records' prompts and last-prompt states are exactly what collection writes."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from acute.estimators.inputs import Inputs
from acute.cli import main
from acute.collect import collect
from acute.errors import InputError, ProbeFormatError
from acute.estimators import load_probe
from acute.evaluation.training import train_probe
from acute.extraction import generate_and_record, record_prompt_states
from acute.models import load_model
from acute.scoring import PrecheckResult, ScoredGeneration, Scorer
from acute.store import StoreWriter, open_store
from acute.tasks import get_task
from acute.store.generation import GenerationSettings

MAX_NEW = 4
N = 40
TOL = 1e-4  # scaled, as the teacher-forcing equality tests (tests/collect/test_forced.py)


def assert_states_close(got, want):
    """Equal shapes, float32, and within TOL relative to each layer's scale."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == np.float32
    scale = np.maximum(1.0, np.abs(want).max(axis=-1, keepdims=True))
    assert (np.abs(got - want) / scale).max() <= TOL


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    return load_model(tiny_model_dir)


@pytest.fixture(scope="module")
def collected(loaded, tmp_path_factory):
    """A store of N tiny-model answers (float32 states, hash labels: every third correct)."""
    model, tok = loaded
    root = tmp_path_factory.mktemp("precheck")
    with open(root / "q.jsonl", "w", encoding="utf-8") as f:
        for i in range(N):
            q = f"What is {i} plus {i + 1}?" + " Think." * (i % 3)
            f.write(json.dumps({"id": f"q{i:03d}", "question": q, "answers": [str(2 * i + 1)]}) + "\n")
    task = get_task(str(root / "q.jsonl"), shots=0)
    task.is_correct = lambda ex, generation: int(ex.id[1:]) % 3 == 0
    examples = task.load()
    collect(model, tok, task, examples, root / "store",
            GenerationSettings(batch_size=8, max_new_tokens=MAX_NEW, dtype="float32"), progress=False)
    return root, examples, open_store(root / "store")


@pytest.fixture(scope="module")
def trained(collected):
    _, _, store = collected
    return train_probe(store, view="pca10", n_estimators=5, precheck_estimator="question-only")


@pytest.fixture(scope="module")
def probe_dir(collected, trained):
    root, _, _ = collected
    return trained.save(root / "probe")


@pytest.fixture(scope="module")
def scorer(loaded, probe_dir):
    model, tok = loaded
    return Scorer(model, tok, load_probe(probe_dir), GenerationSettings(batch_size=8))


# ------------------------------------------------------------------ 1. the exported probe
def test_export_writes_the_question_only_probe_beside_the_answer_probe(probe_dir, trained, collected):
    _, _, store = collected
    assert sorted(p.name for p in probe_dir.iterdir()) == ["precheck", "probe.json", "probe.safetensors"]
    assert sorted(p.name for p in (probe_dir / "precheck").iterdir()) == ["probe.json", "probe.safetensors"]
    answer = json.loads((probe_dir / "probe.json").read_text())
    pre = json.loads((probe_dir / "precheck" / "probe.json").read_text())
    assert answer["precheck"]["path"] == "precheck" and answer["precheck"]["pooling"] == "last-prompt"
    assert answer["precheck"]["estimator"] == "question-only"
    assert pre["input"]["pooling"] == "last-prompt"  # which states it reads
    assert pre["append_confidence"] is False and pre["calibration"]["method"] == "platt"
    assert pre["training_summary"]["estimator"] == "question-only"
    assert pre["training_summary"]["generation"] == answer["training_summary"]["generation"]  # same store
    assert pre["training_summary"]["n_records"] == N and pre["model"] == answer["model"]


def test_numpy_scoring_equals_the_fitted_question_only_probe(probe_dir, trained, collected):
    _, _, store = collected
    probe = load_probe(probe_dir)
    states = np.asarray(store.states("last-prompt"), dtype=np.float32)
    X = Inputs.of(states, pooling="last-prompt")
    fitted = trained.precheck.predict_proba(X)[:, 1]
    np.testing.assert_allclose(probe.precheck.predict_proba(X)[:, 1], fitted, rtol=0, atol=1e-12)
    # no raw confidence exists before the answer: none is needed, and one given is not read
    with_raw = Inputs.of(states, np.asarray(store.raw_confidence), pooling="last-prompt")
    np.testing.assert_allclose(probe.precheck.predict_proba(with_raw)[:, 1], fitted, atol=1e-12)
    assert probe.precheck.precheck is None


def test_a_probe_exported_without_precheck_has_none_and_replaces_an_old_one(collected, tmp_path):
    _, _, store = collected
    with_pre = train_probe(store, view="pca10", n_estimators=3, precheck_estimator="question-only")
    with_pre.save(tmp_path / "p")
    train_probe(store, view="pca10", n_estimators=3).save(tmp_path / "p")  # replaces it whole
    assert load_probe(tmp_path / "p").precheck is None
    assert not (tmp_path / "p" / "precheck").exists()
    assert "precheck" not in json.loads((tmp_path / "p" / "probe.json").read_text())


def test_a_missing_or_foreign_question_only_probe_is_refused_on_load(collected, probe_dir, tmp_path):
    _, _, store = collected
    gone = tmp_path / "gone"
    shutil.copytree(probe_dir, gone)
    shutil.rmtree(gone / "precheck")
    with pytest.raises(ProbeFormatError, match="precheck"):
        load_probe(gone)
    foreign = tmp_path / "foreign"
    shutil.copytree(probe_dir, foreign)
    other = tmp_path / "other"
    train_probe(store, view="pca10", n_estimators=3, precheck_estimator="question-only", seed=1).save(other)
    shutil.rmtree(foreign / "precheck")
    shutil.copytree(other / "precheck", foreign / "precheck")
    with pytest.raises(ProbeFormatError, match="not exported with this answer probe"):
        load_probe(foreign)
    # a folder holding anything else is not overwritten
    (tmp_path / "busy" / "precheck").mkdir(parents=True)
    (tmp_path / "busy" / "precheck" / "notes.txt").write_text("x")
    with pytest.raises(InputError, match="not an acute probe directory"):
        train_probe(store, view="pca10", n_estimators=3, precheck_estimator="question-only").save(tmp_path / "busy")


def test_a_store_without_last_prompt_states_is_refused_with_the_rerecord_remedy(tmp_path):
    rng = np.random.default_rng(0)
    m = {"model": "tiny", "num_layers": 2, "hidden_size": 4, "task": "default",
         "generation": {"max_new_tokens": 4, "do_sample": False, "chat": False, "pool": "decoding"}}
    recs = [{"id": f"q{i}", "prompt": "Q?", "generation": "a", "answer": "a", "gold": ["a"],
             "correct": bool(i % 2), "finish_reason": "eos", "meta": {}} for i in range(20)]
    with StoreWriter(tmp_path / "old", m, dtype="float32") as w:  # the mean only, as stores before acute kept more
        w.add(recs, rng.normal(size=(20, 3, 4)), [np.array([-0.5])] * 20)
    with pytest.raises(InputError, match=r"precheck_estimator: .*last-prompt.*acute rerecord"):
        train_probe(open_store(tmp_path / "old"), view="pca10", n_estimators=3, precheck_estimator="question-only")
    code = main(["export", "--store", str(tmp_path / "old"), "--out", str(tmp_path / "p"), "--view", "pca10",
                 "--n-estimators", "3", "--with-precheck"])
    assert code == 2 and not (tmp_path / "p").exists()


def test_cli_export_with_precheck(collected, tmp_path, capsys):
    root, _, _ = collected
    code = main(["export", "--store", str(root / "store"), "--out", str(tmp_path / "p"), "--view", "pca10",
                 "--n-estimators", "3", "--with-precheck"])
    captured = capsys.readouterr()
    assert code == 0 and f"written to {tmp_path / 'p' / 'precheck'}" in captured.out
    assert "acute score --precheck" in captured.out and "deprecated" not in captured.err
    assert load_probe(tmp_path / "p").precheck.pooling == "last-prompt"
    code = main(["export", "--store", str(root / "store"), "--out", str(tmp_path / "q"), "--view", "pca10",
                 "--n-estimators", "3", "--with-precheck", "question-only-cosine"])
    out = capsys.readouterr().out
    assert code == 0 and "precheck (cosine view" in out
    assert json.loads((tmp_path / "q" / "probe.json").read_text())["precheck"]["estimator"] == "question-only-cosine"


def test_export_names_the_question_only_probe_with_with_precheck_only(collected, tmp_path, capsys):
    """On ``acute export`` the question-only probe is ``--with-precheck [ESTIMATOR]``; ``--precheck``
    (``acute score``'s threshold) is not an export option, and an unknown view is refused by name,
    both before anything is read."""
    root, _, _ = collected
    base = ["export", "--store", str(root / "store"), "--view", "pca10", "--n-estimators", "3"]
    with pytest.raises(SystemExit):
        main(base + ["--out", str(tmp_path / "p"), "--precheck", "question-only-cosine"])
    assert "unrecognized arguments: --precheck" in capsys.readouterr().err and not (tmp_path / "p").exists()
    with pytest.raises(SystemExit):
        main(base + ["--out", str(tmp_path / "r"), "--with-precheck", "question-only-magic"])
    assert "invalid choice: 'question-only-magic'" in capsys.readouterr().err and not (tmp_path / "r").exists()


# ------------------------------------------------------------------ 2. the prompt pass
def test_prompt_states_equal_the_last_prompt_states_collection_recorded(scorer, collected):
    """The scorer formats a question as collection did (the probe's task, rebuilt from its
    training summary) and its one prompt pass gives the states collection recorded."""
    _, examples, store = collected
    questions = [ex.question for ex in examples]
    assert [scorer.format(q) for q in questions] == [r["prompt"] for r in store.records]
    assert_states_close(scorer.prompt_states(questions), np.asarray(store.states("last-prompt")))
    one = scorer.prompt_states(questions[5])
    assert one.shape == (1, 5, 64)
    assert_states_close(one[0], np.asarray(store.states("last-prompt")[5]))


def test_prompt_states_of_messages_and_other_batchings_equal_generation(loaded):
    """Chat messages (the chat template), prompts sharing a long prefix (which generation runs
    from one KV cache) and batch sizes 1 and 3: the pass equals the recorder's last_prompt."""
    model, tok = loaded
    shared = "Question: How many legs does a spider have? Answer: 8. "
    texts = ["What is the capital of France?", shared + "Water is", shared + "Mars, Venus", "2+2="]
    gens = generate_and_record(model, tok, texts, max_new_tokens=3, batch_size=3)
    for batch in (1, 3, 16):
        got = record_prompt_states(model, tok, texts, batch_size=batch)
        assert [g.prompt_tokens for g in got] == [g.prompt_tokens for g in gens]
        assert_states_close(np.stack([g.last_prompt for g in got]), np.stack([g.last_prompt for g in gens]))
    from acute.estimators import make_estimator

    rng = np.random.default_rng(0)
    q = make_estimator("question-only", probe_params={"n_estimators": 3}).fit(
        Inputs.of(rng.normal(size=(20, 5, 64)).astype(np.float32), pooling="last-prompt"), np.arange(20) % 2)
    fitted = Scorer(model, tok, _answer_probe(rng), precheck_probe=q, task=None)
    msgs = [{"role": "user", "content": "Who wrote Hamlet?"}]
    prompt = fitted.format(msgs)
    assert prompt.endswith("<|im_start|>assistant\n")
    [g] = generate_and_record(model, tok, [prompt], max_new_tokens=2)
    assert_states_close(fitted.prompt_states(msgs)[0], g.last_prompt)


def _answer_probe(rng):
    from acute.estimators import ActivationProbe

    return ActivationProbe(view="cosine", n_estimators=3).fit(Inputs.of(rng.normal(size=(20, 5, 64)).astype(np.float32), rng.uniform(size=20)), np.arange(20) % 2)


def test_precheck_returns_the_probability_and_the_decision(scorer, collected):
    _, examples, store = collected
    questions = [ex.question for ex in examples[:6]]
    results = scorer.precheck(questions, threshold=0.4)
    expected = scorer.precheck_probe.predict_proba(Inputs.of(scorer.prompt_states(questions),
                                                              pooling="last-prompt"))[:, 1]
    assert [r.confidence for r in results] == expected.tolist()
    assert all(isinstance(r, PrecheckResult) and r.threshold == 0.4 for r in results)
    assert [r.trust for r in results] == [c > 0.4 for c in expected]
    assert [r.decision for r in results] == ["trust" if c > 0.4 else "abstain" for c in expected]
    assert [r.prompt for r in results] == [r["prompt"] for r in store.records[:6]]
    one = scorer.precheck(questions[0])  # default threshold 0.5
    assert isinstance(one, PrecheckResult) and one.threshold == 0.5 and one.question == questions[0]
    assert set(one.to_dict()) == {"question", "confidence", "threshold", "trust", "prompt_tokens", "decision"}
    assert [r.threshold for r in scorer.precheck(questions[:2], threshold=[0.2, 0.9])] == [0.2, 0.9]
    assert scorer.precheck([]) == []


# ------------------------------------------------------------------ 3. the two-stage gate
def test_generate_with_precheck_answers_only_what_passes(scorer, collected):
    _, examples, _ = collected
    questions = [ex.question for ex in examples[:8]]
    pre = [r.confidence for r in scorer.precheck(questions)]
    u0 = float(np.median(pre))
    passed = [c > u0 for c in pre]
    assert 0 < sum(passed) < len(passed)
    plain = scorer.generate(questions, risk=0.3)
    gated = scorer.generate(questions, risk=0.3, precheck=u0)
    for s, p, c, ok in zip(gated, plain, pre, passed):
        assert s.precheck == {"confidence": c, "threshold": u0, "decision": "trust" if ok else "abstain"}
        assert s.generated is ok and s.question == p.question and s.prompt == p.prompt
        assert s.rule == "risk" and s.risk == 0.3 and s.threshold == 0.3
        if ok:  # decided on the answer by the answer probe, as without the precheck
            assert (s.answer, s.confidence, s.decision, s.n_tokens) == (p.answer, p.confidence, p.decision, p.n_tokens)
        else:
            assert (s.answer, s.raw_confidence, s.confidence, s.n_tokens) == ("", None, None, 0)
            assert s.decision == "abstain" and s.finish_reason == "precheck"
            assert s.to_dict()["generated"] is False
    # one threshold per prompt, None where there is none
    mixed = scorer.generate(questions[:2], risk=0.3, precheck=[None, 0.99])
    assert mixed[0].precheck is None and mixed[0].to_dict() == plain[0].to_dict()
    assert mixed[1].generated is False
    single = scorer.generate(questions[0], precheck=0.99)
    assert isinstance(single, ScoredGeneration) and not single.generated


def test_a_precheck_costs_no_second_prompt_pass(scorer, collected):
    """Issue 45 item 5: the precheck's forward pass is the generation's prefill. Counted with a
    hook on the model (prompt positions fed in forwards of more than one position): a gated call
    feeds exactly what generating without the precheck feeds (the same batches, a shared prefix
    once), the generation after its pass only single positions; prechecking and then generating
    separately feeds the prompts again."""
    _, examples, _ = collected
    questions = [ex.question for ex in examples[:6]]
    fed: list[int] = []

    def count(module, args, kwargs):
        ids = kwargs.get("input_ids")
        if ids is not None and ids.shape[1] > 1:
            fed.append(int(ids.shape[0] * ids.shape[1]))

    def positions(call) -> int:
        fed.clear()
        call()
        return sum(fed)

    handle = scorer.model.register_forward_pre_hook(count, with_kwargs=True)
    try:
        gated = positions(lambda: scorer.generate(questions, risk=0.3, precheck=1e-9))  # every prompt passes
        alone = positions(lambda: scorer.precheck(questions, threshold=1e-9))
        plain = positions(lambda: scorer.generate(questions, risk=0.3))
    finally:
        handle.remove()
    assert gated == plain > 0 and alone > 0  # separately: alone + plain


def test_without_precheck_every_answer_field_is_unchanged(scorer, collected):
    _, examples, _ = collected
    d = scorer.generate(examples[0].question, risk=0.5).to_dict()
    assert set(d) == {"question", "answer", "raw_confidence", "confidence", "risk", "trust", "n_tokens",
                      "finish_reason", "rule", "threshold", "decision"}


@pytest.mark.parametrize("bad", [0, 1, 0.0, 1.0, -0.2, 1.5, float("nan"), "0.3", True, [0.2]])
def test_a_precheck_threshold_outside_0_1_is_refused_by_name(scorer, bad):
    with pytest.raises(InputError, match=r"^precheck must be a number in \(0, 1\) \(answer only when|"
                                         r"^precheck has 1 values for 2 prompts"):
        scorer.generate(["a?", "b?"], precheck=bad)
    if not isinstance(bad, list):
        with pytest.raises(InputError, match=r"^threshold must be a number in \(0, 1\)"):
            scorer.precheck("a?", threshold=bad)


def test_a_prompt_too_long_is_refused_as_without_a_precheck(scorer):
    long = "Mars Venus " * 200  # > the tiny model's 256 positions
    with pytest.raises(InputError, match=r"prompts\[0\] has \d+ tokens, more than the context window of 256"):
        scorer.precheck(long)
    with pytest.raises(InputError) as plain:
        scorer.generate(["2+2=", long])
    with pytest.raises(InputError) as gated:
        scorer.generate(["2+2=", long], precheck=0.5)
    assert str(gated.value) == str(plain.value) and "prompts[1]" in str(plain.value)


def test_a_probe_without_a_question_only_probe_says_how_to_export_one(loaded, collected, tmp_path):
    model, tok = loaded
    _, _, store = collected
    train_probe(store, view="pca10", n_estimators=3).save(tmp_path / "p")
    s = Scorer(model, tok, load_probe(tmp_path / "p"))
    assert s.precheck_probe is None
    for call in (lambda: s.generate("a?", precheck=0.2), lambda: s.precheck("a?")):
        with pytest.raises(InputError, match=r"no question-only probe.*acute export --store STORE --out PROBE --with-precheck"):
            call()
    assert s.generate("a?", risk=0.5).precheck is None  # without a precheck nothing changes


def test_a_precheck_probe_that_reads_the_answer_is_refused(loaded, collected):
    model, tok = loaded
    _, _, store = collected
    answer = train_probe(store, view="pca10", n_estimators=3)
    with pytest.raises(ProbeFormatError, match="last-prompt"):
        Scorer(model, tok, answer.probe, precheck_probe=answer.probe)


def test_acute_score_precheck(probe_dir, tiny_model_dir, collected, capsys, tmp_path):
    _, examples, _ = collected
    q = examples[0].question
    base = ["score", q, "--probe", str(probe_dir), "--model", str(tiny_model_dir)]
    assert main(base + ["--precheck", "0.999"]) == 0
    out = capsys.readouterr().out
    assert "abstained without generating" in out and "answer:         (not generated)" in out
    assert "decision:       abstain (refused by the precheck" in out
    assert main(base + ["--precheck", "0.001"]) == 0
    out = capsys.readouterr().out
    assert "> 0.001 (question-only P(correct)): answered" in out and "confidence:" in out
    rows = tmp_path / "q.jsonl"
    rows.write_text("".join(json.dumps({"id": ex.id, "question": ex.question}) + "\n" for ex in examples[:3]))
    assert main(["score", "--jsonl", str(rows), "--probe", str(probe_dir), "--model", str(tiny_model_dir),
                 "--precheck", "0.999"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["generated"] for r in lines] == [False] * 3 and all(r["n_tokens"] == 0 for r in lines)


@pytest.mark.parametrize("extra, message", [
    (["--precheck", "1.5"], "argument --precheck: must be a number in (0, 1) (answer only when the question-only "
                            "probe's P(correct) exceeds it), got 1.5"),
    (["--precheck", "0"], "argument --precheck: must be a number in (0, 1)"),
    (["--precheck", "0.2", "--response", "Paris"], "--precheck decides before generating"),
])
def test_acute_score_refuses_bad_precheck_input(probe_dir, capsys, extra, message):
    try:
        rc = main(["score", "Who?", "--probe", str(probe_dir), *extra])
    except SystemExit as e:  # argparse refuses a level out of range while parsing
        rc = e.code
    assert rc == 2 and message in capsys.readouterr().err


def test_acute_score_precheck_without_a_question_only_probe(collected, capsys, tmp_path):
    _, _, store = collected
    train_probe(store, view="pca10", n_estimators=3).save(tmp_path / "p")
    assert main(["score", "Who?", "--probe", str(tmp_path / "p"), "--precheck", "0.2"]) == 2
    err = capsys.readouterr().err
    assert "--precheck" in err and f"acute export --store STORE --out {tmp_path / 'p'} --with-precheck" in err


# ------------------------------------------------------------------ 5. the benchmark
def _signal_store(path, n=150, seed=0):
    """``n`` records whose last-prompt states and raw confidence carry the label; 1-8 tokens."""
    from scipy.special import expit

    rng = np.random.default_rng(seed)
    y = rng.uniform(size=n) < 0.5
    sign = (2 * y - 1)[:, None]
    lm, lp, la = (rng.normal(size=(n, 4, 12)) for _ in range(3))
    lm[:, :, 0] += sign
    lp[:, :, 1] += 1.5 * sign
    raw = expit((2 * y - 1) + rng.normal(size=n))
    lengths = rng.integers(1, 9, size=n)
    logprobs = [np.full(k, np.log(r) / k) for k, r in zip(lengths, raw)]
    m = {"model": "tiny", "num_layers": 3, "hidden_size": 12, "task": "default",
         "generation": {"max_new_tokens": 8, "do_sample": False, "chat": False, "pool": "decoding"}}
    recs = [{"id": f"q{i}", "prompt": f"Q{i}?", "generation": "a", "answer": "a", "gold": ["a"],
             "correct": bool(y[i]), "finish_reason": "eos", "meta": {}} for i in range(n)]
    with StoreWriter(path, m, dtype="float32") as w:
        w.add(recs, lm, logprobs, last_prompt=lp, last_answer=la)
    return open_store(path), lengths


def _bench():
    import runpy
    from pathlib import Path

    return runpy.run_path(str(Path(__file__).resolve().parents[2] / "benchmarks" / "precheck.py"))


def test_the_benchmark_cost_model_and_policy():
    bench = _bench()
    answer = np.array([[0.9, 0.2, 0.7]])
    np.testing.assert_array_equal(bench["two_stage"](answer, np.array([[0.5, 0.1, 0.3]]), 0.3),
                                  [[0.9, 0.0, 0.0]])  # > u0 answers; <= u0 abstains
    n_tokens = np.array([4.0, 2.0, 6.0])  # generating: 4 + 2 + 6 = 12 steps with a prompt pass of 1
    skipped = np.array([False, True, True])
    # two-stage: 3 prechecks + the first record's 4 = 7 of 12
    assert bench["saved_fraction"](skipped, n_tokens, 1.0) == pytest.approx(1 - 7 / 12)
    # a prompt pass of 3 steps: generating costs 6 + 4 + 8 = 18, two-stage 9 + 6 = 15
    assert bench["saved_fraction"](skipped, n_tokens, 3.0) == pytest.approx(1 - 15 / 18)


def test_the_benchmark_on_a_tiny_store(tmp_path, capsys):
    store, lengths = _signal_store(tmp_path / "s")
    out = tmp_path / "precheck.md"
    _bench()["main"](["--store", str(tmp_path / "s"), "--thresholds", "0.001,0.5,0.999", "--cv", "3",
                      "--n-estimators", "5", "--n-bootstrap", "20", "--out", str(out)])
    text = out.read_text()
    assert text in capsys.readouterr().out  # printed too
    assert "## tiny, task default" in text and "150 records" in text
    for name in ("acute-pca10-stacked", "question-only", "platt"):
        assert f"| {name} |" in text
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in text.splitlines() if line.startswith("| 0.")}
    assert set(rows) == {"0.001", "0.5", "0.999"}
    assert rows["0.001"][1].startswith("+0.0000") and rows["0.001"][2] == "0.0%"  # nothing skipped
    assert rows["0.999"][2] == "100.0%"  # everything skipped: only the prompt passes are paid
    assert rows["0.999"][4] == f"{1 - lengths.size / lengths.sum():+.1%}"
    assert 0 < float(rows["0.5"][2].rstrip("%")) < 100
    assert "estimated from the recorded token counts" in text


def test_the_benchmark_refuses_a_store_without_last_prompt_states(tmp_path):
    rng = np.random.default_rng(0)
    m = {"model": "tiny", "num_layers": 2, "hidden_size": 4, "task": "default",
         "generation": {"max_new_tokens": 4, "do_sample": False, "chat": False, "pool": "decoding"}}
    recs = [{"id": f"q{i}", "prompt": "Q?", "generation": "a", "answer": "a", "gold": ["a"],
             "correct": bool(i % 2), "finish_reason": "eos", "meta": {}} for i in range(20)]
    with StoreWriter(tmp_path / "old", m, dtype="float32") as w:
        w.add(recs, rng.normal(size=(20, 3, 4)), [np.array([-0.5])] * 20)
    with pytest.raises(InputError, match="acute rerecord"):
        _bench()["main"](["--store", str(tmp_path / "old"), "--out", str(tmp_path / "x.md")])
    with pytest.raises(SystemExit):
        _bench()["main"](["--store", str(tmp_path / "old"), "--thresholds", "0.2,1.5"])


def test_the_benchmark_reads_an_evaluation_and_equals_its_own_fits(tmp_path):
    """--evaluation reads the out-of-fold predictions an evaluation wrote; on the same folds,
    seed and forests they are what the benchmark fits itself, so both tables are equal."""
    from acute.evaluation import evaluate_store, write_evaluation

    store, _ = _signal_store(tmp_path / "s")
    names = ["acute-pca10-stacked", "question-only", "platt"]
    res = evaluate_store(store, estimators=names, cv=3, repeats=2, seed=0, n_bootstrap=0, controls=(),
                         probe_params={"n_estimators": 5}, progress=False)
    write_evaluation(res, tmp_path / "eval")
    args = ["--store", str(tmp_path / "s"), "--thresholds", "0.3,0.6", "--cv", "3", "--repeats", "2",
            "--n-estimators", "5", "--n-bootstrap", "20"]
    _bench()["main"](args + ["--out", str(tmp_path / "fit.md")])
    _bench()["main"](args + ["--evaluation", str(tmp_path / "eval"), "--out", str(tmp_path / "read.md")])

    def table(path):
        return [ln for ln in path.read_text().splitlines() if ln.startswith("| ")]

    assert table(tmp_path / "fit.md") == table(tmp_path / "read.md")
    assert "nothing fitted here" in (tmp_path / "read.md").read_text()


@pytest.mark.parametrize("name,view", [("question-only-cosine", "cosine"), ("question-only-mid", "mean")])
def test_a_question_only_probe_of_another_view(collected, tmp_path, name, view):
    """Every view is offered for the precheck: exported, named in probe.json, scored in numpy
    as fitted; an unknown name is refused listing the known ones."""
    _, _, store = collected
    trained = train_probe(store, view="pca10", n_estimators=3, precheck_estimator=name)
    assert trained.precheck.view == view and trained.precheck.append_confidence is False
    trained.save(tmp_path / "p")
    answer = json.loads((tmp_path / "p" / "probe.json").read_text())
    pre = json.loads((tmp_path / "p" / "precheck" / "probe.json").read_text())
    assert answer["precheck"]["estimator"] == name and pre["training_summary"]["estimator"] == name
    assert pre["input"]["pooling"] == "last-prompt" and pre["view"] == view
    X = Inputs.of(np.asarray(store.states("last-prompt"), dtype=np.float32), pooling="last-prompt")
    np.testing.assert_allclose(load_probe(tmp_path / "p").precheck.predict_proba(X)[:, 1],
                               trained.precheck.predict_proba(X)[:, 1], rtol=0, atol=1e-12)
    for bad in ("question-only-magic", True, "acute-pca10"):  # a boolean is not an estimator's name
        with pytest.raises(InputError, match=r"precheck_estimator must be None or .*question-only-cosine"):
            train_probe(store, view="pca10", n_estimators=3, precheck_estimator=bad)
