"""Model identity by weights (issue: another checkpoint of the same architecture was accepted).

A "fine-tune" is the tiny model with one layer's weights halved: the same config, so
``model_fingerprint`` agrees, but ``weights_digest`` must not; resuming a store and scoring with
a probe then refuse it unless explicitly allowed.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from acute.estimators.inputs import Inputs
from acute.collect import collect
from acute.errors import IncompatibleStoreError
from acute.models import load_model, model_fingerprint, weights_digest
from acute.models.cache import CACHE_MARKER
from acute.errors import ModelMismatchError
from acute.estimators import ActivationProbe, load_probe
from acute.scoring import Scorer
from acute.store import ModelIdentity, open_store
from acute.store.generation import GenerationSettings
from acute.tasks import get_task


def halved(model_dir, out_dir):
    """A copy of the model in ``model_dir`` with layer 1's MLP down-projection halved."""
    model, tok = load_model(model_dir)
    with torch.no_grad():
        model.model.layers[1].mlp.down_proj.weight.mul_(0.5)
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    return out_dir


@pytest.fixture(scope="module")
def models(tiny_model_dir, tmp_path_factory):
    other = halved(tiny_model_dir, tmp_path_factory.mktemp("halved"))
    return load_model(tiny_model_dir), load_model(other)


def test_digest_tells_checkpoints_apart_and_ignores_how_they_were_loaded(models, tiny_model_dir):
    (a, _), (b, _) = models
    assert model_fingerprint(a) == model_fingerprint(b)  # the config cannot tell them apart
    assert weights_digest(a) != weights_digest(b)
    again, _ = load_model(tiny_model_dir)
    assert weights_digest(again) == weights_digest(a)  # a second load of the same files
    assert set(weights_digest(a)) == {"sha256", "bf16_sha256"}  # not converted from a GGUF
    assert ModelIdentity.from_model(a).model_weights == weights_digest(a)


def test_a_gguf_conversion_records_the_gguf_hash(tiny_model_dir, tmp_path):
    """A folder with the conversion marker (as written for model cards and local GGUFs)."""
    model, tok = load_model(tiny_model_dir)
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    (tmp_path / CACHE_MARKER).write_text(json.dumps({"sha256": "ab" * 32}), encoding="utf-8")
    loaded, _ = load_model(tmp_path)
    assert weights_digest(loaded) == {**weights_digest(model), "gguf_sha256": "ab" * 32}


def _questions(path, n=12):
    path.write_text("".join(json.dumps({"id": f"q{i}", "question": f"What is {i} plus 1?",
                                        "answers": [str(i + 1)]}) + "\n" for i in range(n)), encoding="utf-8")
    return get_task(str(path), shots=0)


def test_resuming_a_store_with_other_weights_is_refused_unless_allowed(models, tmp_path):
    (a, tok), (b, _) = models
    task = _questions(tmp_path / "q.jsonl")
    examples = task.load()
    kw = dict(generation=GenerationSettings(batch_size=4, max_new_tokens=3), shard_size=4, progress=False)
    collect(a, tok, task, examples[:8], tmp_path / "store", **kw)
    manifest = open_store(tmp_path / "store").manifest
    assert manifest["model_weights"] == weights_digest(a)
    with pytest.raises(IncompatibleStoreError, match="other weights.*" + weights_digest(b)["sha256"]):
        collect(b, tok, task, examples, tmp_path / "store", **kw)
    assert len(open_store(tmp_path / "store")) == 8  # nothing written by the refused run

    summary = collect(b, tok, task, examples, tmp_path / "store", allow_other_weights=True, **kw)
    assert summary.new_records == 4
    manifest = open_store(tmp_path / "store").manifest
    assert manifest["model_weights"] == weights_digest(a)  # the store's own identity stays
    assert manifest["model_weights_also"] == [weights_digest(b)]


def test_a_store_from_before_weights_were_recorded_adopts_them(models, tmp_path, caplog):
    (a, tok), _ = models
    task = _questions(tmp_path / "q.jsonl")
    examples = task.load()
    kw = dict(generation=GenerationSettings(batch_size=4, max_new_tokens=3), shard_size=4, progress=False)
    collect(a, tok, task, examples[:4], tmp_path / "store", **kw)
    mpath = tmp_path / "store" / "manifest.json"
    old = json.loads(mpath.read_text(encoding="utf-8"))
    del old["model_weights"]
    mpath.write_text(json.dumps(old), encoding="utf-8")
    with caplog.at_level("WARNING", logger="acute.store"):
        collect(a, tok, task, examples, tmp_path / "store", **kw)
    assert "records no weights digest" in caplog.text
    assert open_store(tmp_path / "store").manifest["model_weights"] == weights_digest(a)


def test_scoring_with_a_probe_of_other_weights_is_refused_unless_allowed(models, tmp_path):
    (a, tok), (b, _) = models
    L, d = a.config.num_hidden_layers, a.config.hidden_size
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, L + 1, d)).astype(np.float32)
    y = np.arange(30) % 2
    probe = ActivationProbe(view="cosine", n_estimators=5).fit(Inputs.of(X, rng.uniform(size=30)), y)
    probe.save(tmp_path / "probe", ModelIdentity.from_model(a))
    exported = load_probe(tmp_path / "probe")
    Scorer(a, tok, exported)  # the training model passes
    with pytest.raises(ModelMismatchError, match="weights.*allow_other_weights"):
        Scorer(b, tok, exported)
    Scorer(b, tok, exported, allow_other_weights=True)


def test_a_store_identity_carries_the_weights_into_an_exported_probe():
    manifest = {"model": "x", "model_fingerprint": {"architecture": "X", "num_layers": 2, "hidden_size": 4},
                "model_weights": {"sha256": "aa", "gguf_sha256": "bb"}}
    assert ModelIdentity.from_manifest(manifest).to_probe_json() == {
        "name": "x", "fingerprint": {"architecture": "X", "num_layers": 2, "hidden_size": 4,
                                     "weights_sha256": "aa", "gguf_sha256": "bb"}}
    assert ModelIdentity.from_manifest({"model_fingerprint": {"num_layers": 2}}).to_probe_json()["fingerprint"] == {
        "num_layers": 2}
    assert ModelIdentity.from_manifest({}).to_probe_json() == {"name": None, "fingerprint": None}
