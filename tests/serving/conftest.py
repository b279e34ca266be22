"""Fixtures the service tests share: the tiny model loaded once per module and a cosine probe
fitted on its activations with hash labels (:func:`acute.testing.hash_label`)."""

from __future__ import annotations

import numpy as np
import pytest
from service import GENERATION, NAME

import acute
from acute.estimators import ActivationProbe, load_probe
from acute.extraction import generate_and_record
from acute.testing import hash_label


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    return acute.load_model(tiny_model_dir)


@pytest.fixture(scope="module")
def probe_dir(loaded, tmp_path_factory):
    """A cosine probe (5 trees) fitted on the tiny model's activations with hash labels."""
    model, tok = loaded
    prompts = [f"Question: what is {i} times {i + 3}?" + " Be brief." * (i % 3) for i in range(30)]
    gens = generate_and_record(model, tok, prompts, max_new_tokens=GENERATION["max_new_tokens"])
    X = np.stack([g.layer_means for g in gens])
    raw = np.array([g.raw_confidence for g in gens])
    y = np.array([hash_label(p) for p in prompts])
    probe = ActivationProbe(view="cosine", n_estimators=5).fit(X, y, confidence=raw)
    path = tmp_path_factory.mktemp("serve-probe") / "probe"
    probe.save(path, model_name=NAME, model_fingerprint=acute.model_identity(model),
               training_summary={"generation": GENERATION, "task": None})
    return path


@pytest.fixture(scope="module")
def probe(probe_dir):
    return load_probe(probe_dir)
