"""One GenerationSettings: built once where the settings enter, its JSON the manifest's
``generation`` block (as acute has always written it), read back from stores and probes."""

from __future__ import annotations

import json
from dataclasses import FrozenInstanceError, replace
from types import SimpleNamespace

import pytest

from acute.errors import InputError
from acute.store import GenerationSettings
from acute.store.generation import BATCH_SIZE
from acute.store.sampling import SamplingSettings

#: a manifest's generation block as acute wrote it before GenerationSettings
OLD_BLOCK = '{"do_sample": false, "max_new_tokens": 24, "stop_strings": ["\\n", "Q:"], "pool": "generated", "chat": true}'
OLD_SAMPLES = ('{"do_sample": false, "max_new_tokens": 6, "stop_strings": [], "pool": "decoding", "chat": false, '
               '"samples": {"k": 3, "temperature": 0.7, "top_p": 1.0, "seed": 0}}')


def test_an_old_generation_block_reads_and_writes_back_the_same():
    for text in (OLD_BLOCK, OLD_SAMPLES):
        block = json.loads(text)
        settings = GenerationSettings.from_json(block)
        assert settings.to_json() == block
    settings = GenerationSettings.from_json(json.loads(OLD_SAMPLES))
    assert settings.samples == SamplingSettings(3, temperature=0.7) and settings.stop_strings == ()
    # a block from before the pool was recorded, and none at all
    assert GenerationSettings.from_json({"max_new_tokens": 4}).pool == "decoding"
    assert GenerationSettings.from_json(None) == GenerationSettings()
    manifest = {"generation": json.loads(OLD_BLOCK), "dtype": "float32"}
    assert GenerationSettings.from_manifest(manifest) == GenerationSettings(
        max_new_tokens=24, stop_strings=("\n", "Q:"), pool="generated", chat=True, dtype="float32")


def test_a_collection_writes_the_block_it_always_wrote(tiny_model, tiny_tokenizer):
    from acute.collect.records import build_manifest
    from acute.tasks import get_task

    task = get_task("default")
    settings = GenerationSettings(max_new_tokens=5).for_task(task)
    manifest = build_manifest(tiny_model, tiny_tokenizer, task, settings)
    assert manifest["generation"] == {"do_sample": False, "max_new_tokens": 5,
                                      "stop_strings": list(task.stop_strings), "pool": "decoding",
                                      "chat": bool(tiny_tokenizer.chat_template)}


def test_the_settings_are_checked_when_built():
    assert GenerationSettings().batch_size == BATCH_SIZE
    for kwargs, message in [({"max_new_tokens": 0}, "max_new_tokens must be >= 1"),
                            ({"stop_strings": "\n"}, "not a single string"),
                            ({"stop_strings": ["\n", 7]}, r"stop_strings\[1\] must be a str"),
                            ({"pool": "mean"}, "pool must be one of"),
                            ({"chat": "yes"}, "chat must be True, False or None"),
                            ({"batch_size": 0}, "batch_size must be >= 1"),
                            ({"dtype": "float64"}, "dtype must be one of"),
                            ({"samples": {"k": 1}}, "samples")]:
        with pytest.raises(InputError, match=message):
            GenerationSettings(**kwargs)
    settings = GenerationSettings(stop_strings=["a"])
    assert settings.stop_strings == ("a",) and hash(settings) == hash(GenerationSettings(stop_strings=("a",)))
    with pytest.raises(FrozenInstanceError):
        settings.pool = "generated"


def test_task_and_probe_defaults_fill_only_what_is_unset():
    task = SimpleNamespace(max_new_tokens=32, stop_strings=("\n",))
    assert GenerationSettings().for_task(task).max_new_tokens == 32
    assert GenerationSettings(max_new_tokens=3, stop_strings=()).for_task(task).stop_strings == ()
    probe = GenerationSettings(max_new_tokens=24, stop_strings=("\n",), pool="generated", chat=True)
    asked = GenerationSettings(max_new_tokens=5, batch_size=2).over(probe)
    assert asked == replace(probe, max_new_tokens=5, batch_size=2)  # the pool and chat stay the probe's


def test_the_service_groups_jobs_by_their_settings():
    from acute.serving.jobs import Job, group_key

    scorer = SimpleNamespace(generation=GenerationSettings(max_new_tokens=8, stop_strings=("\n",)))
    a, b, c = Job(item="q"), Job(item="q", max_new_tokens=4), Job(item="q", stop=("END",))
    keys = [group_key(scorer, j) for j in (a, b, c)]
    assert keys[0] == (scorer.generation, False)
    assert keys[1][0].max_new_tokens == 4 and keys[2][0].stop_strings == ("\n", "END")
    assert len(set(keys)) == 3


def test_a_run_expects_the_block_its_collection_writes(tiny_model, tiny_tokenizer):
    from acute.collect.records import build_manifest
    from acute.pipeline.workers import job_generation
    from acute.tasks import get_task

    task = get_task("default")
    job = {"batch_size": 4, "store_dtype": "float32", "task": {"chat": False, "max_new_tokens": 7,
                                                               "samples": {"k": 2, "temperature": 1.0,
                                                                           "top_p": 1.0, "seed": 0}}}
    settings = job_generation(job, task)
    assert (settings.batch_size, settings.dtype, settings.max_new_tokens) == (4, "float32", 7)
    assert build_manifest(tiny_model, tiny_tokenizer, task, settings)["generation"] == settings.to_json()
