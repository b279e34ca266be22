"""Live scoring computes the sources a store has: an exported stack scores a live answer as its
pipeline scores the same record (to 1e-12), a setting that cannot provide a source is refused at
load naming it, and a record lacking one (no log-probs, a NaN) is refused naming it and the record."""

from __future__ import annotations

import json

import numpy as np
import pytest

from acute.cli import main
from acute.errors import InputError
from acute.estimators import load_probe
from acute.estimators.inputs import METADATA, VISIBLE
from acute.estimators.scoring_setting import Parser, missing_sources
from acute.estimators.stack_file import ExportedStack
from acute.evaluation.choice import stack_inputs
from acute.extraction.generate import Generation
from acute.models import load_model
from acute.scoring import Scorer
from acute.scoring.sources import SourceError, check_live, live_inputs
from acute.store import open_store
from cli_run import run  # tests/cli_run.py
from smaller import small_searches  # tests/smaller.py
from stores import relabel  # tests/stores.py

pytest.importorskip("skops")
N = 40


@pytest.fixture(scope="module")
def work(tmp_path_factory, tiny_model_dir):
    """A tiny-model store collected one prompt at a time (as the scorer scores one), relabelled
    with mixed labels, and two stacks exported from it for ``acute score``."""
    root = tmp_path_factory.mktemp("live")
    questions = root / "q.jsonl"
    with open(questions, "w") as f:
        for i in range(N):
            f.write(json.dumps({"id": f"q{i:03d}", "question": f"What is {i} plus {i + 1}?",
                                "answers": [str(2 * i + 1)]}) + "\n")
    assert main(["collect", "--model", str(tiny_model_dir), "--task", str(questions), "--out", str(root / "raw"),
                 "--max-new-tokens", "4", "--batch-size", "1", "--quiet", "--task-option", "shots=0"]) == 0
    relabel(root / "raw", root / "store")
    with small_searches():
        for name in ("acute-all", "visible-all"):
            assert main(["export", "--store", str(root / "store"), "--estimator", name, "--for", "score",
                         "--out", str(root / name), "--n-estimators", "10"]) == 0
    return root


@pytest.mark.parametrize("name", ["visible-all", "acute-all"])
def test_a_live_score_equals_the_pipeline_on_the_same_record(work, tiny_model_dir, name):
    stack = load_probe(work / name)
    assert isinstance(stack, ExportedStack) and stack.scoring == "score" and stack.parser.live
    assert VISIBLE in stack.sources  # the open-QA task's parser gives the reply's parse status live
    store = open_store(work / "store")
    X = stack_inputs(store, name, "score")[0]  # the sources it was fitted on, from the store
    model, tok = load_model(tiny_model_dir)
    scorer = Scorer(model, tok, stack)
    rows = [0, 7]
    live = scorer.generate([f"What is {i} plus {i + 1}?" for i in rows], risk=0.5)
    for i, s in zip(rows, live):
        assert s.recorded.text == store.records[i]["generation"]  # the same answer as collected
        expected = stack.predict_proba(X.take([i]))[0, 1]
        assert s.confidence == pytest.approx(expected, abs=1e-12)
        assert s.raw_confidence == pytest.approx(store.raw_confidence[i], abs=1e-12)


def test_acute_score_loads_a_stack_folder(work, tiny_model_dir, capsys):
    rc, out, err = run(["score", "What is 3 plus 4?", "--probe", work / "visible-all", "--model", tiny_model_dir],
                       capsys)
    assert rc == 0, err
    assert "confidence:" in out and "decision:" in out


def test_a_setting_that_cannot_provide_a_source_refuses_the_probe_naming_it(work, tiny_model_dir):
    stack = load_probe(work / "visible-all")
    with pytest.raises(InputError, match="'visible' source: the reply's parse status needs a parser"):
        check_live(stack, "score", Parser("qa", live=False))
    model, tok = load_model(tiny_model_dir)
    with pytest.raises(InputError, match="'visible' source: .*there is no task here.*score it with the task"):
        Scorer(model, tok, stack, task=None)  # asked as is: no parser for the reply
    why = missing_sources([METADATA, "states@mean", "confidence"], "serve")
    assert list(why) == [METADATA] and "no benchmark metadata" in why[METADATA]
    assert missing_sources([METADATA], "store") == {}
    # a function-calling task's parser: provided, per request (one that offers no tools is refused then:
    # tests/scoring/test_live_tool_calls.py); a probe that records no call parser: refused
    calls = Parser("apigen", live=False, reply_fields=("reply_calls",), tools=True)
    assert missing_sources([VISIBLE], "serve", calls) == {} == missing_sources([VISIBLE], "score", calls)
    old = missing_sources([VISIBLE], "serve", Parser("apigen", live=False, reply_fields=("reply_calls",)))
    assert "against the tools a request offers" in old[VISIBLE]
    assert Parser.from_json(calls.to_json()) == calls and not Parser.from_json({"task": "apigen"}).tools


def _generation(lp):
    z = np.zeros((3, 4), dtype=np.float32)
    return Generation(text="7", token_ids=np.arange(0 if lp is None else len(lp)), token_logprobs=lp, layer_means=z, last_prompt=z,
                      last_answer=z, prompt_tokens=3, finish_reason="eos")


def test_a_record_lacking_a_source_or_holding_nan_is_named():
    stack = type("P", (), {"sources": ("visible", "confidence")})()
    good = _generation(np.array([-0.1, -0.2], dtype=np.float32))
    X = live_inputs(stack, [good], ["Q?"], ["7"])
    assert X[VISIBLE].shape[0] == 1
    with pytest.raises(SourceError, match=r"prompts\[1\]: the answer has no token log-probs") as e:
        live_inputs(stack, [good, _generation(None)], ["Q?", "Q2?"], ["7", "7"])
    assert e.value.source == "visible" and e.value.record == "prompts[1]"  # the first source it reads
    bad = _generation(np.array([-0.1, np.nan], dtype=np.float32))
    with pytest.raises(SourceError, match=r"req-2: the 'visible' source holds a NaN"):
        live_inputs(stack, [good, bad], ["Q?", "Q2?"], ["7", "7"], names=["req-1", "req-2"])
    meta = type("P", (), {"sources": (METADATA, "confidence")})()
    with pytest.raises(SourceError, match="none was given"):
        live_inputs(meta, [good], ["Q?"], ["7"])
