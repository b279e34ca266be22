"""Constants and helpers the service tests share (tests/serving): the generation settings of the
fixture probe, the independent truth (a fresh Scorer scoring one prompt alone), a Scorer the tests
hold to control batching, bounded waits and a JSON POST."""

from __future__ import annotations

import threading
import time

import httpx
import numpy as np

from acute.scoring import Scorer
from acute.store.generation import GenerationSettings

GENERATION = {"max_new_tokens": 6, "stop_strings": [], "pool": "decoding", "chat": False}
NAME = "tiny-llama"
QUESTIONS = ["What is the capital of France?", "Who wrote Hamlet?", "2+2=", "Name a planet.",
             "How many legs does a spider have? Be brief.", "Gold is", "Water is H2O. Mars is"]
TOO_LONG = "Mars Venus " * 200  # > 256 positions of the tiny model, < the 4096-byte body limit
TIMEOUT = 60.0  # seconds: every wait in this file is bounded


def alone(loaded, probe, item, risk, **settings):
    """The independent truth: a fresh Scorer scoring this one prompt by itself."""
    model, tok = loaded
    return Scorer(model, tok, probe, GenerationSettings(**settings)).generate(item, risk=risk)


def assert_same(got: dict, truth, answer_key="answer"):
    assert got[answer_key] == truth.answer
    assert abs(got["confidence"] - truth.confidence) <= 1e-6
    np.testing.assert_allclose(got["raw_confidence"], truth.raw_confidence, rtol=1e-4)
    assert got["decision"] == truth.decision
    assert got["risk"] == truth.risk


class GatedScorer(Scorer):
    """A Scorer whose generate waits for ``gate``: holds the worker so tests control batching."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.gate, self.entered = threading.Event(), threading.Event()

    def generate(self, prompts, *args, **kwargs):
        self.entered.set()
        assert self.gate.wait(TIMEOUT), "gate never opened"
        return super().generate(prompts, *args, **kwargs)


def wait_until(predicate, what: str):
    deadline = time.monotonic() + TIMEOUT
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def post(url, path, body=None, content=None, **kwargs):
    """POST ``body`` as JSON, or the bytes ``content`` (as ``application/json`` unless ``headers`` say)."""
    if content is not None:
        kwargs.setdefault("headers", {"Content-Type": "application/json"})
    return httpx.post(url + path, json=body, content=content, timeout=TIMEOUT, **kwargs)
