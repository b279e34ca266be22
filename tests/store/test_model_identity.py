"""One ModelIdentity: manifests and probe files written before it read into the same identity, and
the files written now keep their layouts (so older readers read them too)."""

from __future__ import annotations

import json
from dataclasses import FrozenInstanceError, replace
from types import SimpleNamespace

import pytest

from acute.errors import InputError, ModelMismatchError
from acute.store import GenerationSettings, ModelIdentity

FINGERPRINT = {"architecture": "LlamaForCausalLM", "model_type": "llama", "num_layers": 3, "hidden_size": 8,
               "vocab_size": 320}
#: a store manifest as acute wrote it before ModelIdentity (the model's fields at the top level)
OLD_MANIFEST = """{
  "model": "/models/tiny", "model_fingerprint": %s,
  "model_weights": {"sha256": "aa", "bf16_sha256": "bb"}, "model_dtype": "float32", "quantization": "none",
  "tokenizer": "/models/tiny", "engine": "transformers", "engine_version": "4.57.1 (torch 2.8.0)",
  "num_layers": 3, "hidden_size": 8, "task": "default", "task_settings": {"name": "default"},
  "generation": {"do_sample": false, "max_new_tokens": 4, "stop_strings": ["\\n"], "pool": "decoding",
                 "chat": true},
  "acute_version": "0.1.0", "format": "acute-store", "format_version": 1, "dtype": "float16"
}""" % json.dumps(FINGERPRINT)
#: the model block of a probe.json as acute wrote it before (flat: fingerprint and weights together)
OLD_PROBE_MODEL = """{"name": "/models/tiny", "fingerprint": {"architecture": "LlamaForCausalLM", "model_type": "llama",
  "num_layers": 3, "hidden_size": 8, "vocab_size": 320, "weights_sha256": "aa", "weights_bf16_sha256": "bb"}}"""


def _old_probe(**manifest):
    """An object read like an exported probe from a hand-written probe.json of the old layout."""
    return SimpleNamespace(manifest={"model": json.loads(OLD_PROBE_MODEL), "input": {"n_layer_outputs": 4,
                                                                                     "hidden_size": 8},
                                     "training_summary": {"generation": {"pool": "decoding", "chat": True}},
                                     **manifest})


def test_an_old_manifest_reads_into_the_identity_of_its_fields():
    identity = ModelIdentity.from_manifest(json.loads(OLD_MANIFEST))
    assert identity == ModelIdentity(
        model="/models/tiny", model_fingerprint=FINGERPRINT, model_weights={"sha256": "aa", "bf16_sha256": "bb"},
        tokenizer="/models/tiny", engine="transformers", engine_version="4.57.1 (torch 2.8.0)",
        model_dtype="float32", quantization="none", pooling={"states": None, "positions": "decoding"},
        task="default", task_settings={"name": "default"},
        generation={"do_sample": False, "max_new_tokens": 4, "stop_strings": ["\n"], "pool": "decoding",
                    "chat": True},
        prompt_format={"chat": True, "prompts": "generated answers"}, dtype="float16", num_layers=3, hidden_size=8)
    # a manifest from before the engine and the weights were recorded
    older = {k: v for k, v in json.loads(OLD_MANIFEST).items() if k not in ("engine", "engine_version", "model_weights")}
    assert ModelIdentity.from_manifest(older).engine == "transformers"
    assert ModelIdentity.from_manifest(older).model_weights is None


def test_an_old_probe_file_reads_into_the_same_model_as_its_store():
    store, probe = ModelIdentity.from_manifest(json.loads(OLD_MANIFEST)), ModelIdentity.from_probe(_old_probe())
    for field in ("model", "model_fingerprint", "model_weights", "num_layers", "hidden_size"):
        assert getattr(probe, field) == getattr(store, field), field
    assert not store.diff(probe, fields=("model", "model_fingerprint", "model_weights"))


def test_new_files_keep_the_old_layouts():
    identity = ModelIdentity.from_manifest(json.loads(OLD_MANIFEST))
    # probe.json's model block: flat, exactly as before
    assert identity.to_probe_json() == json.loads(OLD_PROBE_MODEL)
    # the manifest's model fields: at the top level, nested as before, and read back the same
    model_part = {k: v for k, v in json.loads(OLD_MANIFEST).items()
                  if k in ("model", "model_fingerprint", "model_weights", "model_dtype", "quantization", "tokenizer",
                           "engine", "engine_version", "num_layers", "hidden_size")}
    bare = replace(identity, pooling=None, task=None, task_settings=None, generation=None, prompt_format=None,
                   dtype=None)
    assert bare.to_json() == model_part
    assert ModelIdentity.from_manifest(bare.to_json()) == replace(bare, pooling={"states": None, "positions": None},
                                                                  prompt_format={"chat": None,
                                                                                 "prompts": "generated answers"})


def test_a_store_written_now_records_the_model_as_before(tiny_model, tiny_tokenizer):
    from acute.collect.records import build_manifest
    from acute.models import model_fingerprint, model_setting, weights_digest

    manifest = build_manifest(tiny_model, tiny_tokenizer, None, GenerationSettings(max_new_tokens=4, chat=False))
    assert manifest["model_fingerprint"] == model_fingerprint(tiny_model)
    assert manifest["model_weights"] == weights_digest(tiny_model)
    assert {k: manifest[k] for k in ("model_dtype", "quantization")} == model_setting(tiny_model)
    assert ModelIdentity.from_manifest(manifest).model_weights == ModelIdentity.from_model(tiny_model).model_weights


def test_the_identity_is_frozen_and_keeps_one_shape():
    identity = ModelIdentity(model_fingerprint={"num_layers": 2, "extra": 1},
                             model_weights={"sha256": "aa", "other": "x", "gguf_sha256": None})
    assert identity.model_fingerprint == dict.fromkeys(FINGERPRINT, None) | {"num_layers": 2}
    assert identity.model_weights == {"sha256": "aa"}
    with pytest.raises(FrozenInstanceError):
        identity.model = "other"
    with pytest.raises(InputError, match="model_fingerprint must be a dict"):
        ModelIdentity(model_fingerprint=["LlamaForCausalLM"])


def test_diff_names_the_fields_that_differ_and_a_probe_of_another_model_is_refused():
    store = ModelIdentity.from_manifest(json.loads(OLD_MANIFEST))
    other = replace(store, model_fingerprint={**FINGERPRINT, "hidden_size": 16}, model_weights={"sha256": "cc"})
    found = store.diff(other, ("the store", "this model"), fields=("model_fingerprint", "model_weights"))
    assert found.fields == ("model_fingerprint", "model_weights")
    assert "'model_fingerprint'['hidden_size']: the store 8, this model 16" in str(found)
    from acute.estimators.probe_file import ExportedProbe

    probe = SimpleNamespace(manifest=_old_probe().manifest, model_fingerprint=json.loads(OLD_PROBE_MODEL)["fingerprint"],
                            model_name="/models/tiny", n_layer_outputs=4, hidden_size=8)
    with pytest.raises(ModelMismatchError, match=r"different model \(/models/tiny\): 'model_fingerprint', "
                                                 r"'model_weights' differ .*'hidden_size'\]: probe 8, model 16"):
        ExportedProbe.check_model(probe, other)
    ExportedProbe.check_model(probe, store)
