"""The validity domain of a probe (issue 45 item 2): probe.json records the engine, its version,
the model dtype and quantisation, the pooling and the prompt format its states came from; scoring
under another setting warns once and refuses the certificate; ``acute recertify`` re-certifies
it on records of the new setting; an engine or dtype change is a change of domain, not another
model (acute.store.identity)."""

from __future__ import annotations

import copy
import hashlib
import json
import logging
from dataclasses import replace

import numpy as np
import pytest
import torch

from acute.estimators.inputs import Inputs
import acute
from acute.cli import main
from acute.errors import IncompatibleStoreError, InputError, ModelMismatchError
from acute.estimators import ActivationProbe, load_probe
from acute.estimators.calibration import StackedCalibration
from acute.estimators.certificates import certificate_entry
from acute.estimators.probe_file import forest_proba
from acute.metrics.certify import certify_threshold
from acute.metrics.drift import confidence_reference
from acute.store import StoreWriter, open_store
from acute.store.identity import DOMAIN_FIELDS, ModelIdentity, diff, domain_change
from acute.store.generation import GenerationSettings

L, D, N = 3, 8, 240
FP = {"architecture": "LlamaForCausalLM", "model_type": "llama", "num_layers": L, "hidden_size": D,
      "vocab_size": 320}
GEN = {"do_sample": False, "max_new_tokens": 4, "stop_strings": ["\n"], "pool": "decoding", "chat": True}
F32 = {"model": "tiny", "model_fingerprint": FP, "tokenizer": "tiny", "task": "default",
       "model_weights": {"sha256": "f32", "bf16_sha256": "same-bf16"}, "model_dtype": "float32",
       "quantization": "none", "engine": "transformers", "engine_version": "5.0 (torch 2.9)",
       "task_settings": {"name": "default"}, "generation": GEN, "num_layers": L, "hidden_size": D}
BF16 = {**F32, "model_weights": {"sha256": "b16", "bf16_sha256": "same-bf16"}, "model_dtype": "bfloat16"}


# ---------------------------------------------------------------------------------- identity
def test_a_store_names_its_setting_and_a_change_of_it_is_a_domain_change():
    a, b = ModelIdentity.from_manifest(F32), ModelIdentity.from_manifest(BF16)
    assert {k: getattr(a, k) for k in DOMAIN_FIELDS} == {
        "engine": "transformers", "engine_version": "5.0 (torch 2.9)", "model_dtype": "float32",
        "quantization": "none", "pooling": {"states": None, "positions": "decoding"},
        "prompt_format": {"chat": True, "prompts": "generated answers"}}
    found = domain_change(a, b, ("the probe's domain", "this scorer"))
    assert found.fields == ("model_dtype",)
    assert str(found) == ("'model_dtype' differs ('model_dtype': the probe's domain 'float32', "
                          "this scorer 'bfloat16')")
    vllm = ModelIdentity.from_manifest({**F32, "engine": "vllm", "engine_version": "0.11.0"})
    assert domain_change(a, vllm).fields == ("engine", "engine_version")
    # what one side does not know is not a change (a probe written before the field)
    assert not domain_change(a, replace(b, model_dtype=None, engine_version=None))


def test_weights_across_dtypes_compare_by_their_bfloat16_digest():
    a, b = ModelIdentity.from_manifest(F32), ModelIdentity.from_manifest(BF16)
    assert diff(a, b, fields=("model_weights",)).fields == ("model_weights",)  # strict by default
    assert not diff(a, b, fields=("model_weights",), across_dtypes=True)
    other = ModelIdentity.from_manifest({**BF16, "model_weights": {"sha256": "x", "bf16_sha256": "other-bf16"}})
    found = diff(a, other, ("the probe", "the store"), fields=("model_weights",), across_dtypes=True)
    assert "'model_weights'['bf16_sha256']: the probe 'same-bf16', the store 'other-bf16'" in str(found)
    # in one dtype the exact bytes decide (a fine-tune below bfloat16's resolution is another model)
    close = ModelIdentity.from_manifest({**F32, "model_weights": {"sha256": "f32-tuned", "bf16_sha256": "same-bf16"}})
    assert diff(a, close, fields=("model_weights",), across_dtypes=True).fields == ("model_weights",)


def test_one_checkpoint_in_float32_and_bfloat16_shares_the_bfloat16_digest(tiny_model):
    from acute.models import model_setting, weights_digest

    half = copy.deepcopy(tiny_model).to(torch.bfloat16)
    a, b = weights_digest(tiny_model), weights_digest(half)
    assert a["sha256"] != b["sha256"] and a["bf16_sha256"] == b["bf16_sha256"] == b["sha256"]
    assert ModelIdentity.from_model(half).model_weights["bf16_sha256"] == b["bf16_sha256"]
    assert model_setting(tiny_model) == {"model_dtype": "float32", "quantization": "none"}
    assert model_setting(half)["model_dtype"] == "bfloat16"


# ------------------------------------------------------------------------------- collection
class _FakeVllm:
    """A started engine as collect takes one (generate and info), generating with transformers."""

    info = {"vllm_version": "0.0-test"}

    def generate(self, tokenizer, prompts, settings, model=None, **options):
        from acute.extraction import generate_with

        return generate_with(model, tokenizer, prompts, settings, **options)


def test_a_collection_records_its_engine_version_dtype_and_quantisation(tiny_model, tiny_tokenizer, tmp_path):
    from acute.collect import collect
    from acute.engines import transformers_version
    from acute.tasks import get_task

    task = get_task("default")
    examples = task.load()[:2]
    hf = GenerationSettings(batch_size=2, max_new_tokens=2, chat=False)
    collect(tiny_model, tiny_tokenizer, task, examples, tmp_path / "hf", hf, progress=False)
    collect(tiny_model, tiny_tokenizer, task, examples, tmp_path / "vllm", replace(hf, engine=_FakeVllm()),
            progress=False)
    hf, vllm = open_store(tmp_path / "hf").manifest, open_store(tmp_path / "vllm").manifest
    assert (hf["engine"], hf["engine_version"]) == ("transformers", transformers_version())
    assert (hf["model_dtype"], hf["quantization"]) == ("float32", "none")
    assert (vllm["engine"], vllm["engine_version"]) == ("vllm", "0.0-test")  # not "transformers"
    assert domain_change(ModelIdentity.from_manifest(hf), ModelIdentity.from_manifest(vllm)).fields == (
        "engine", "engine_version")


# -------------------------------------------------------------------------------- stores
def _states(y: np.ndarray, rng, shift: float = 0.0) -> np.ndarray:
    """[n, L+1, D] states whose layers point one way for a correct answer and anywhere for a wrong
    one (what the cosine view reads), plus a shift: another setting."""
    X = rng.normal(size=(y.size, L + 1, D))
    common = rng.normal(size=(y.size, 1, D))
    X = np.where(y[:, None, None] == 1, common + 0.5 * X, X)
    return X + shift


def _store(path, manifest, ids, seed, shift=0.0):
    rng = np.random.default_rng(seed)
    y = np.array([hashlib.sha256(str(i).encode()).digest()[0] % 2 for i in ids], dtype=bool)
    X = _states(y.astype(int), rng, shift)
    lp = [np.array([np.log(rng.uniform(0.2, 0.95))]) for _ in ids]
    with StoreWriter(path, manifest, shard_size=512) as w:
        w.add([{"id": f"q{i}", "prompt": "Q?", "generation": "A", "answer": "A", "gold": ["A"],
                "correct": bool(c), "task": "default", "finish_reason": "eos", "meta": {}}
               for i, c in zip(ids, y)], X, lp)
    return open_store(path)


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("domain")
    return (_store(root / "f32", F32, range(N), 0), _store(root / "bf16", BF16, range(N, 2 * N), 1, shift=0.3),
            root)


@pytest.fixture(scope="module")
def exported(stores):
    from acute.evaluation.training import train_probe

    train, _, root = stores
    trained = train_probe(train, "acute-cosine-stacked", n_estimators=20, max_error=0.2, delta=0.1,
                          certify_backend="binomial")
    trained.save(root / "probe")
    return root / "probe"


def test_the_probe_file_records_its_training_stores_setting(exported, stores, caplog):
    train = stores[0]
    with caplog.at_level(logging.WARNING):
        probe = load_probe(exported)
    assert not caplog.records  # a probe with a domain loads quietly
    want = {k: getattr(ModelIdentity.from_manifest(train.manifest), k) for k in DOMAIN_FIELDS}
    want["pooling"] = {"states": "mean", "positions": "decoding"}
    assert {k: probe.domain[k] for k in DOMAIN_FIELDS} == want
    assert probe.domain["store"] == str(train.path.resolve())
    assert json.loads((exported / "probe.json").read_text())["domain"] == probe.domain
    assert {k: getattr(ModelIdentity.from_probe(probe), k) for k in DOMAIN_FIELDS} == want
    assert probe.certificates and probe.certificates[0]["valid"]


def test_an_older_probe_without_a_domain_loads_with_one_warning(exported, tmp_path, caplog):
    probe = load_probe(exported)
    old = copy.copy(probe).with_domain(None)
    old.save(tmp_path / "old")
    assert "domain" not in json.loads((tmp_path / "old" / "probe.json").read_text())
    with caplog.at_level(logging.WARNING):
        again = load_probe(tmp_path / "old")
    msgs = [r.getMessage() for r in caplog.records]
    assert len(msgs) == 1 and "records no validity domain" in msgs[0] and str(tmp_path / "old") in msgs[0]
    assert again.domain is None and ModelIdentity.from_probe(again).model_dtype is None
    X = _states(np.array([0, 1]), np.random.default_rng(5))
    np.testing.assert_array_equal(again.predict_proba(Inputs.of(X, [0.5, 0.5])), probe.predict_proba(Inputs.of(X, [0.5, 0.5])))


def test_a_calibration_store_of_another_setting_cannot_certify(stores):
    from acute.evaluation.certification import check_calibration_store

    train, bf16, _ = stores
    with pytest.raises(IncompatibleStoreError, match=r"'model_dtype': the training store 'float32', "
                                                     r"the calibration store 'bfloat16'.*acute recertify"):
        check_calibration_store(train, bf16)


# ---------------------------------------------------------------------------------- scoring
@pytest.fixture(scope="module")
def tiny_probe(tiny_model_dir, tmp_path_factory):
    """(model, tokenizer, probe dir) of a cosine probe for the tiny model carrying a certificate at
    0.1 whose threshold is 0 (every answer trusted) and a domain: transformers, float32."""
    from acute.engines import transformers_version
    from acute.extraction import generate_and_record
    from acute.metrics.certify import METHODS, Certificate

    model, tok = acute.load_model(tiny_model_dir)
    prompts = [f"Question: what is {i} times {i + 3}?" for i in range(20)]
    gens = generate_and_record(model, tok, prompts, max_new_tokens=3)
    X = np.stack([g.layer_means for g in gens])
    raw = np.array([g.raw_confidence for g in gens])
    fitted = ActivationProbe(view="cosine", n_estimators=3).fit(Inputs.of(X, raw), np.arange(20) % 2)
    cert = Certificate(threshold=0.0, alpha=0.1, n_calibration=500, calibration_coverage=1.0,
                       calibration_precision=0.95, p_value=1e-4, valid=True, reason="by hand",
                       method=METHODS["binomial"], fwer="bonferroni_holm", delta=0.1, n_thresholds=100)
    probe = fitted.export(replace(ModelIdentity.from_model(model), model="tiny"),
                          training_summary={"generation": {"max_new_tokens": 3, "stop_strings": [],
                                                           "pool": "decoding", "chat": False}, "task": None},
                          certificates=[certificate_entry(cert, backend="binomial", source="out-of-fold")])
    probe.with_domain({"engine": "transformers", "engine_version": transformers_version(),
                       "model_dtype": "float32", "quantization": "none",
                       "pooling": {"states": "mean", "positions": "decoding"},
                       "prompt_format": {"chat": False, "prompts": "generated answers"}})
    root = tmp_path_factory.mktemp("tiny-probe")
    probe.save(root / "probe")
    return model, tok, root / "probe"


def test_scoring_in_the_probes_domain_keeps_its_certificate(tiny_probe, caplog):
    model, tok, path = tiny_probe
    with caplog.at_level(logging.WARNING):
        scorer = acute.Scorer(model, tok, load_probe(path))
    assert not caplog.records and not scorer.domain_change
    got = scorer.generate("What is 2+2?", max_error=0.1)
    assert got.rule == "certificate" and got.trust  # threshold 0: every answer trusted


def test_scoring_under_another_dtype_warns_once_and_refuses_the_certificate(tiny_probe, caplog):
    model, tok, path = tiny_probe
    half = copy.deepcopy(model).to(torch.bfloat16)
    with caplog.at_level(logging.WARNING):
        scorer = acute.Scorer(half, tok, load_probe(path))  # no allow_other_weights: the same model
        first = scorer.generate("What is 2+2?", risk=0.0)  # the risk rule still decides
        scorer.generate("What is 3+3?", risk=0.0)
    msgs = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(msgs) == 1, msgs
    assert "'model_dtype': the probe's domain 'float32', this scorer 'bfloat16'" in msgs[0]
    assert "acute recertify" in msgs[0]
    assert scorer.domain_change.fields == ("model_dtype",) and first.rule == "risk"
    with pytest.raises(InputError, match=r"max_error=0.1: no certified decision here: .*'model_dtype'.*"
                                         r"'float32'.*'bfloat16'.*recertify"):
        scorer.generate("What is 2+2?", max_error=0.1)
    assert load_probe(path).certificates_refused is None  # the probe itself is not changed
    # GET /v1/models says so beside each certificate (it is still valid where it was certified)
    from acute.serving import ServeSettings
    from acute.serving.openai_bodies import models_body

    listed = models_body(ServeSettings(model_name="m"), scorer.probe, 0)["data"][0]["certificates"]
    assert listed and all(c["refused"] == scorer.probe.certificates_refused for c in listed)
    assert "'model_dtype'" in listed[0]["refused"] and listed[0]["valid"]
    at_home = models_body(ServeSettings(model_name="m"), load_probe(path), 0)["data"][0]["certificates"]
    assert [c["refused"] for c in at_home] == [None] * len(listed)


def test_a_precheck_probe_scored_under_another_dtype_is_named_in_its_own_warning(tiny_probe, caplog):
    """The question-only probe records its domain too (last-prompt states); scored under another
    dtype it gets one warning of its own (it carries no certificate: its threshold is the caller's)."""
    from acute.engines import transformers_version
    from acute.estimators import make_estimator
    from acute.extraction import record_prompt_states

    model, tok, path = tiny_probe
    prompts = [f"Question: what is {i} times {i + 3}?" for i in range(20)]
    states = np.stack([p.last_prompt for p in record_prompt_states(model, tok, prompts)])
    fitted = make_estimator("question-only", probe_params={"n_estimators": 3}).fit(
        Inputs.of(states, pooling="last-prompt"), np.arange(20) % 2)
    pre = fitted.export(replace(ModelIdentity.from_model(model), model="tiny"),
                        training_summary={"task": None}).with_domain(
        {"engine": "transformers", "engine_version": transformers_version(), "model_dtype": "float32",
         "quantization": "none", "pooling": {"states": "last-prompt", "positions": "decoding"},
         "prompt_format": {"chat": False, "prompts": "generated answers"}})
    with caplog.at_level(logging.WARNING):
        acute.Scorer(model, tok, load_probe(path), precheck_probe=pre)  # its own setting: silent
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]
    half = copy.deepcopy(model).to(torch.bfloat16)
    with caplog.at_level(logging.WARNING):
        acute.Scorer(half, tok, load_probe(path), precheck_probe=pre)
    msgs = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(msgs) == 2 and "the precheck probe was fitted under another setting" in msgs[0]
    assert "'model_dtype': the precheck probe's domain 'float32', this scorer 'bfloat16'" in msgs[0]
    assert "the probe's domain 'float32'" in msgs[1]


def test_a_gate_made_before_the_model_loaded_is_refused_too(tiny_probe):
    """``acute score`` resolves its gate before loading the model; the scorer refuses it then."""
    from acute.scoring.gate import parse_gate

    model, tok, path = tiny_probe
    probe = load_probe(path)
    gate = parse_gate(probe, max_error=0.1)  # the probe alone cannot know where it is scored
    scorer = acute.Scorer(copy.deepcopy(model).to(torch.bfloat16), tok, probe)
    with pytest.raises(InputError, match=r"max_error=0.1: no certified decision here: .*'model_dtype'"):
        scorer.generate("What is 2+2?", gate=gate)
    assert acute.Scorer(model, tok, probe).generate("What is 2+2?", gate=gate).rule == "certificate"


def test_the_service_refuses_a_default_certificate_outside_the_domain(tiny_probe):
    from acute.scoring.gate import parse_gate
    from acute.serving.settings import ServeSettings, resolve_settings

    model, tok, path = tiny_probe
    probe = load_probe(path)
    scorer = acute.Scorer(model, tok, probe, GenerationSettings(chat=True))  # another prompt format
    assert scorer.domain_change.fields == ("prompt_format",)
    with pytest.raises(InputError, match=r"no certified decision here: .*'prompt_format'\['chat'\]: "
                                         r"the probe's domain False, this scorer True"):
        parse_gate(scorer.probe, max_error=0.1)
    # as acute serve does: the gate parsed before the model loads, checked again at start
    early = ServeSettings(model_name="tiny", default_gate=parse_gate(probe, max_error=0.1))
    with pytest.raises(InputError, match=r"default max_error \(--max-error\)=0.1: no certified decision here"):
        resolve_settings(early, scorer.probe, 4)
    assert resolve_settings(early, probe, 4).default_gate.rule.rule == "certificate"


def test_another_checkpoint_in_another_dtype_is_still_another_model(tiny_probe):
    model, tok, path = tiny_probe
    other = copy.deepcopy(model)
    with torch.no_grad():
        next(other.parameters()).add_(0.5)
    with pytest.raises(ModelMismatchError, match=r"'model_weights'\['bf16_sha256'\]"):
        acute.Scorer(other.to(torch.bfloat16), tok, load_probe(path))


# ---------------------------------------------------------------------------------- recertify
def test_recertify_calibrates_the_threshold_on_the_new_settings_records(exported, stores, tmp_path, capsys):
    _, bf16, _ = stores
    before = (exported / "probe.json").read_bytes()
    assert main(["recertify", "--probe", str(exported), "--store", str(bf16.path), "--out",
                 str(tmp_path / "new"), "--certify-backend", "binomial"]) == 0
    out = capsys.readouterr().out
    assert "model_dtype 'float32' -> 'bfloat16'" in out and "is unchanged" in out
    assert (exported / "probe.json").read_bytes() == before  # the original untouched
    old, new = load_probe(exported), load_probe(tmp_path / "new")
    # the same forest and map; a threshold certified on the store's records, computed here directly
    X = np.asarray(bf16.states("mean"), dtype=np.float32)
    conf = old.predict_proba(Inputs.of(X, bf16.raw_confidence))[:, 1]
    np.testing.assert_array_equal(new.predict_proba(Inputs.of(X, bf16.raw_confidence))[:, 1], conf)
    want = certify_threshold(conf, np.asarray(bf16.correct), 0.2, 0.1, backend="binomial")
    (entry,) = new.certificates
    assert (entry["threshold"], entry["n_calibration"], entry["source"]) == (want.threshold, N, "calibration-store")
    assert entry["calibration_store"] == str(bf16.path.resolve())
    assert new.domain["model_dtype"] == "bfloat16" and new.domain["recertified_from"]["model_dtype"] == "float32"
    assert new.manifest["recertification"]["n"] == N
    assert new.confidence_reference == confidence_reference(conf, "calibration-store")  # drift: the new setting
    # the model it records is the store's, as the new setting loads it; both dtypes pass its check
    assert new.model_fingerprint["weights_sha256"] == "b16" and old.model_fingerprint["weights_sha256"] == "f32"
    model = ModelIdentity(model_fingerprint=FP, model_weights={"sha256": "b16", "bf16_sha256": "same-bf16"},
                          model_dtype="bfloat16")
    new.check_model(model)
    old.check_model(model)
    with pytest.raises(ModelMismatchError, match="'model_weights'"):
        new.check_model(replace(model, model_weights={"sha256": "b16", "bf16_sha256": "other"}))


def test_recertify_restack_refits_the_map_on_the_new_records(exported, stores):
    from acute.evaluation.recertify import recertify

    _, bf16, _ = stores
    old = load_probe(exported)
    X = np.asarray(bf16.states("mean"), dtype=np.float32)
    raw, y = np.asarray(bf16.raw_confidence), np.asarray(bf16.correct).astype(int)
    done = recertify(old, bf16, restack=True, backend="binomial")
    p = forest_proba(old.features(Inputs.of(X, raw)), old.arrays)
    fitted = StackedCalibration().fit(np.column_stack([p, raw]), y)
    np.testing.assert_allclose(done.probe.arrays["calibration.stacked"], [*fitted.coef_, fitted.intercept_])
    assert done.certificates[0]["folds"]["n_splits"] == 5 and done.summary["restacked"]
    assert not np.array_equal(done.probe.arrays["calibration.stacked"], old.arrays["calibration.stacked"])


def test_recertify_refuses_another_model_and_the_training_records(exported, stores, tmp_path):
    from acute.evaluation.recertify import recertify

    train, _, root = stores
    probe = load_probe(exported)
    other = _store(tmp_path / "other", {**BF16, "model_weights": {"sha256": "o", "bf16_sha256": "other-bf16"}},
                   range(N, N + 40), 2)
    with pytest.raises(ModelMismatchError, match=r"'model_weights'\['bf16_sha256'\]: the probe 'same-bf16', "
                                                 r"the store .* 'other-bf16'"):
        recertify(probe, other)
    with pytest.raises(InputError, match="is the probe's training store"):
        recertify(probe, train)
    overlap = _store(tmp_path / "overlap", BF16, range(N - 10, N + 30), 3)
    with pytest.raises(InputError, match=r"10 of its 40 record ids are records the probe was fitted on"):
        recertify(probe, overlap)

def test_recertify_never_overwrites_the_probe(exported, stores, capsys):
    _, bf16, _ = stores
    assert main(["recertify", "--probe", str(exported), "--store", str(bf16.path), "--out", str(exported)]) == 2
    assert "is the probe being re-certified" in capsys.readouterr().err
