"""Fixtures the service tests share: the tiny model loaded once per module, and a cosine answer
probe and a question-only probe fitted on its activations with hash labels
(:func:`acute.testing.hash_label`)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from service import GENERATION, NAME

from acute.estimators.inputs import Inputs
import acute
from acute.estimators import ActivationProbe, load_probe, make_estimator
from acute.extraction import generate_and_record
from acute.testing import hash_label


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    return acute.load_model(tiny_model_dir)


@pytest.fixture(scope="module")
def hash_probes(loaded):
    """``(answer, question, meta)``: a cosine answer probe and a question-only probe (5 trees
    each) fitted on the tiny model's states of 30 prompts with hash labels, and the keywords
    (model name and identity) to save or export them with."""
    model, tok = loaded
    prompts = [f"Question: what is {i} times {i + 3}?" + " Be brief." * (i % 3) for i in range(30)]
    gens = generate_and_record(model, tok, prompts, max_new_tokens=GENERATION["max_new_tokens"])
    y = np.array([hash_label(p) for p in prompts])
    answer = ActivationProbe(view="cosine", n_estimators=5).fit(
        Inputs.of(np.stack([g.layer_means for g in gens]), np.array([g.raw_confidence for g in gens])), y)
    question = make_estimator("question-only", probe_params={"n_estimators": 5}).fit(
        Inputs.of(np.stack([g.last_prompt for g in gens]), pooling="last-prompt"), y)
    return answer, question, {"identity": replace(acute.ModelIdentity.from_model(model), model=NAME)}


@pytest.fixture(scope="module")
def probe_dir(hash_probes, tmp_path_factory):
    """The cosine answer probe of :func:`hash_probes`, saved."""
    answer, _, meta = hash_probes
    path = tmp_path_factory.mktemp("serve-probe") / "probe"
    answer.save(path, training_summary={"generation": GENERATION, "task": None}, **meta)
    return path


@pytest.fixture(scope="module")
def probe(probe_dir):
    return load_probe(probe_dir)
