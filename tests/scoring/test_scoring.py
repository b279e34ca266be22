"""Live scoring (acute.scoring): the decision rule, batching, the model check and agreement of
the scorer's confidences with the probe applied to separately recorded activations."""

from __future__ import annotations


import numpy as np
import pytest

from acute.estimators.inputs import Inputs
from acute.extraction import generate_and_record
from acute.models import format_prompt, model_fingerprint
from acute.errors import ModelMismatchError
from acute.store import ModelIdentity
from acute.estimators import ActivationProbe, load_probe
from acute.scoring import ScoredGeneration, Scorer
from acute.scoring.gate import parse_gate, risk_rule
from acute.tasks import Example, get_task
from acute.testing import hash_label, make_tiny_model
from acute.store.generation import GenerationSettings

GENERATION = {"max_new_tokens": 5, "stop_strings": [], "pool": "decoding", "chat": False}
LIVE = ["What is the capital of France?", "Who wrote Hamlet? Answer:", "2+2=", "Name a planet."]




@pytest.fixture(scope="module")
def probe_dir(tiny_model, tiny_tokenizer, tmp_path_factory):
    """A pca10 probe fitted on tiny-Llama activations with hash labels, saved with the model's
    fingerprint and the generation settings of its 'training store'."""
    prompts = [f"Question: what is {i} times {i + 3}?" + " Be brief." * (i % 4) for i in range(40)]
    gens = generate_and_record(tiny_model, tiny_tokenizer, prompts,
                               max_new_tokens=GENERATION["max_new_tokens"])
    X = np.stack([g.layer_means for g in gens])
    raw = np.array([g.raw_confidence for g in gens])
    y = np.array([hash_label(p) for p in prompts], dtype=int)
    assert 0 < y.sum() < len(y)
    probe = ActivationProbe(view="pca10", n_estimators=10).fit(Inputs.of(X, raw), y)
    path = tmp_path_factory.mktemp("probe") / "probe"
    probe.save(path, identity=ModelIdentity(model="tiny-llama", model_fingerprint=model_fingerprint(tiny_model)),
               training_summary={"generation": GENERATION, "task": None})
    return path


@pytest.fixture(scope="module")
def scorer(tiny_model, tiny_tokenizer, probe_dir):
    return Scorer(tiny_model, tiny_tokenizer, load_probe(probe_dir))


# ------------------------------------------------------------------ the decision rule
def test_the_risk_rule_is_strictly_greater_than_risk():
    conf = np.array([0.0, 0.2, 0.5, 0.5000001, 0.7, 1.0])
    assert risk_rule(0.5).decide(conf).tolist() == [False, False, False, True, True, True]
    assert risk_rule(0.0).decide(conf).tolist() == [False, True, True, True, True, True]
    assert parse_gate(None, risk=1.0).decide(conf).tolist() == [False] * 6


@pytest.mark.parametrize("risk", [-0.1, 1.5, float("nan"), "high"])
def test_a_gate_rejects_bad_risk(risk):
    with pytest.raises(ValueError, match="risk"):
        parse_gate(None, risk=risk)


def test_scored_generation_dict():
    s = ScoredGeneration(question="q", prompt="<p>q", answer="a", raw_confidence=0.1,
                         confidence=0.8, risk=0.5, trust=True, n_tokens=2, finish_reason="eos")
    d = s.to_dict()
    assert d["decision"] == "trust" and "prompt" not in d and d["question"] == "q"
    assert s.to_dict(include_prompt=True)["prompt"] == "<p>q"


# ------------------------------------------------------------------ the scorer
def test_settings_come_from_the_probe(scorer):
    g = scorer.generation
    assert g.max_new_tokens == GENERATION["max_new_tokens"]
    assert g.chat is False and g.pool == "decoding" and g.stop_strings == ()


def test_confidence_equals_probe_on_separately_recorded_activations(scorer, tiny_model,
                                                                    tiny_tokenizer, probe_dir):
    scored = scorer.generate(LIVE, risk=0.5)
    texts = [format_prompt(tiny_tokenizer, q, chat=False) for q in LIVE]
    gens = generate_and_record(tiny_model, tiny_tokenizer, texts,
                               max_new_tokens=GENERATION["max_new_tokens"])
    X = np.stack([g.layer_means for g in gens])
    raw = np.array([g.raw_confidence for g in gens])
    expected = load_probe(probe_dir).predict_proba(Inputs.of(X, raw))[:, 1]
    np.testing.assert_array_equal([s.confidence for s in scored], expected)
    np.testing.assert_array_equal([s.raw_confidence for s in scored], raw)
    assert [s.answer for s in scored] == [g.text.strip() for g in gens]
    assert [s.n_tokens for s in scored] == [len(g.token_ids) for g in gens]
    assert all(s.n_tokens <= GENERATION["max_new_tokens"] for s in scored)
    assert [s.question for s in scored] == LIVE and [s.prompt for s in scored] == texts


@pytest.mark.parametrize("risk", [0.0, 0.3, 0.55, 1.0])
def test_decision_follows_rule(scorer, risk):
    for s in scorer.generate(LIVE, risk=risk):
        assert s.trust == (s.confidence > risk)
        assert s.decision == ("trust" if s.confidence > risk else "abstain")
        assert s.risk == risk


def test_batch_equals_single(scorer):
    batch = scorer.generate(LIVE, risk=0.5)
    single = [scorer.generate(q, risk=0.5) for q in LIVE]
    assert all(isinstance(s, ScoredGeneration) for s in single)
    assert [s.answer for s in batch] == [s.answer for s in single]
    assert [s.confidence for s in batch] == [s.confidence for s in single]
    np.testing.assert_allclose([s.raw_confidence for s in batch],
                               [s.raw_confidence for s in single], rtol=1e-4)


def test_messages_and_empty_input(scorer):
    msgs = [{"role": "user", "content": "Who wrote Hamlet?"}]
    one = scorer.generate(msgs, risk=0.5)
    assert isinstance(one, ScoredGeneration) and one.question == "Who wrote Hamlet?"
    assert scorer.generate([], risk=0.5) == []
    with pytest.raises(ValueError, match="risk"):
        scorer.generate("x", risk=2.0)


def test_task_wraps_questions(tiny_model, tiny_tokenizer, probe_dir):
    task = get_task("default", shots=0)
    s = Scorer(tiny_model, tiny_tokenizer, load_probe(probe_dir), task=task)
    expected = task.prompt(tiny_tokenizer, Example(id="x", question="Who wrote Hamlet?", answers=[]),
                           chat=False)
    assert s.format("Who wrote Hamlet?") == expected
    assert expected == "Question: Who wrote Hamlet?\nAnswer:"  # the task's plain prompt


def test_task_auto_from_probe_settings(tiny_model, tiny_tokenizer, probe_dir, tmp_path):
    """A probe that records its training task (as `acute train/export` write it) makes the
    scorer ask questions with that task's prompt; no recorded task: asked as is."""
    assert Scorer(tiny_model, tiny_tokenizer, load_probe(probe_dir)).task is None
    probe = load_probe(probe_dir)
    settings = get_task("default", shots=0).settings()
    probe.manifest["training_summary"] = {"generation": GENERATION, "task_settings": settings}
    probe.training_summary = probe.manifest["training_summary"]
    s = Scorer(tiny_model, tiny_tokenizer, probe)
    assert s.task.name == "default" and s.task.shots == 0
    assert s.format("Who wrote Hamlet?") == "Question: Who wrote Hamlet?\nAnswer:"
    assert Scorer(tiny_model, tiny_tokenizer, probe, task=None).format("Hi") == "Hi"
    mc = get_task("mmlu").settings()
    probe.training_summary = {"generation": GENERATION, "task_settings": mc}
    assert Scorer(tiny_model, tiny_tokenizer, probe).task is None  # needs choices: not wrapped
    probe.training_summary = {"task_settings": {"name": str(tmp_path / "gone.jsonl")}}
    assert Scorer(tiny_model, tiny_tokenizer, probe).task is None
    with pytest.raises(ValueError, match="task must be"):
        Scorer(tiny_model, tiny_tokenizer, probe, task="default")


def test_fingerprint_rejects_other_model(tiny_tokenizer, probe_dir):
    qwen = make_tiny_model("qwen2")
    with pytest.raises(ModelMismatchError, match="architecture"):
        Scorer(qwen, tiny_tokenizer, load_probe(probe_dir))
    deeper = make_tiny_model("llama", num_hidden_layers=5)
    with pytest.raises(ModelMismatchError, match="num_layers"):
        Scorer(deeper, tiny_tokenizer, load_probe(probe_dir))


def test_fitted_probe_shape_check(tiny_model, tiny_tokenizer):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 5, 64)).astype(np.float32)  # tiny Llama: 4 layers + embeddings, d=64
    y = np.arange(30) % 2
    probe = ActivationProbe(view="cosine", n_estimators=5).fit(Inputs.of(X, rng.uniform(size=30)), y)
    s = Scorer(tiny_model, tiny_tokenizer, probe, GenerationSettings(max_new_tokens=3))
    out = s.generate(["Name a planet."], risk=0.5)
    assert len(out) == 1 and 0.0 <= out[0].confidence <= 1.0 and out[0].n_tokens <= 3
    wide = make_tiny_model("llama", hidden_size=32, intermediate_size=64)
    with pytest.raises(ModelMismatchError, match="layer outputs"):
        Scorer(wide, tiny_tokenizer, probe)
    with pytest.raises(ValueError, match="not fitted"):
        Scorer(tiny_model, tiny_tokenizer, ActivationProbe())
