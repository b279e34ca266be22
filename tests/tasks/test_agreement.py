"""Sampling agreement by each task's equivalence: answer keys per task, consistency and semantic
entropy against hand computations and scipy's entropy, and the errors of a task without an
equivalence or a record without samples."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy.stats import entropy

from acute.errors import InputError
from acute.tasks import get_task
from acute.tasks.agreement import clusters, consistency, record_agreement, semantic_entropy
from acute.tasks.tool_calls import calls_equal


def test_answer_keys_follow_each_tasks_equivalence():
    trivia = get_task("triviaqa")
    assert trivia.answer_key("The Eiffel Tower.") == trivia.answer_key("eiffel  tower") != trivia.answer_key("Paris")
    assert trivia.answer_key(None) is None and trivia.answer_key("  .") is None
    mmlu = get_task("mmlu")
    assert mmlu.answer_key("b") == mmlu.answer_key(" B ") == "B" and mmlu.answer_key(None) is None
    bfcl = get_task("bfcl")
    a = [{"name": "f", "arguments": {"x": 1, "y": "A"}}, {"name": "g", "arguments": {}}]
    b = [{"name": "g", "arguments": {}}, {"name": "f", "arguments": {"y": "A", "x": 1}}]
    c = [{"name": "f", "arguments": {"x": 2, "y": "A"}}]
    for one, other in ((a, b), (a, c)):
        same = bfcl.answer_key(json.dumps(one)) == bfcl.answer_key(json.dumps(other))
        assert same == calls_equal(one, other)
    assert get_task("apigen").answer_key(json.dumps(a)) == bfcl.answer_key(json.dumps(b))
    assert bfcl.answer_key("not json") is None and bfcl.answer_key(json.dumps([])) == ()


def test_a_task_without_an_equivalence_names_the_fallback():
    task = get_task("truthfulqa-gen")
    with pytest.raises(InputError, match="'truthfulqa-gen' has no answer equivalence.*normalised text"):
        task.answer_key("Nothing happens.")
    assert task.answer_key("Nothing happens.", fallback=True) == task.answer_key("nothing happens", fallback=True)


def test_consistency_and_entropy_by_hand():
    keys = ["a", "b", "a", None, None, "a"]
    assert clusters(keys).tolist() == [0, 1, 0, 2, 3, 0]
    assert consistency("a", keys) == 3 / 6
    assert consistency(None, keys) == 0.0 and consistency("z", keys) == 0.0
    # clusters of 3, 1, 1, 1 out of 6
    want = -(0.5 * math.log(0.5) + 3 * (1 / 6) * math.log(1 / 6))
    assert semantic_entropy(keys) == pytest.approx(want)
    assert semantic_entropy(keys) == pytest.approx(entropy([3, 1, 1, 1]))
    assert semantic_entropy(["x"] * 5) == 0.0
    # weighted by each sample's probability: exp(-1), exp(-2), ...
    lp = [-1.0, -2.0, -1.5, -3.0, -0.5, -1.0]
    w = np.exp(lp)
    mass = [w[0] + w[2] + w[5], w[1], w[3], w[4]]
    assert semantic_entropy(keys, lp) == pytest.approx(entropy(mass))
    assert semantic_entropy(keys, [-1000.0] * 6) == pytest.approx(entropy([3, 1, 1, 1]))  # no underflow


def test_record_agreement_reads_the_stored_samples():
    task = get_task("mmlu")
    record = {"id": "r1", "answer": "C", "samples": [
        {"answer": "C", "token_logprobs": [-0.1, -0.2]}, {"answer": "c", "token_logprobs": [-0.3]},
        {"answer": "A", "token_logprobs": [-2.0]}, {"answer": None, "token_logprobs": [-1.0, -1.0]}]}
    got = record_agreement(task, record)
    assert got["consistency"] == 0.5
    assert got["semantic_entropy"] == pytest.approx(entropy([2, 1, 1]))
    w = np.exp([-0.3, -0.3, -2.0, -2.0])
    assert got["semantic_entropy_weighted"] == pytest.approx(entropy([w[0] + w[1], w[2], w[3]]))
    with pytest.raises(InputError, match="record 'r2' has no samples.*--samples"):
        record_agreement(task, {"id": "r2", "answer": "C"})
