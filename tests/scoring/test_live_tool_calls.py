"""Function calling scored live: a chat offered tools (acute.models.ToolChat) is parsed by the
probe's task's own call parser and its calls counted against the tools it offers, as the store's
records were, so an exported stack that reads the reply's structure scores a live answer as its
pipeline scored the same record; a prompt that offers no tools is refused naming the source."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from acute.errors import InputError
from acute.estimators import load_probe
from acute.estimators.inputs import VISIBLE
from acute.evaluation.choice import stack_inputs
from acute.models import ToolChat, load_model
from acute.scoring import Scorer
from acute.scoring.sources import SourceError, live_inputs, live_records
from acute.store import open_store
from acute.store.generation import GenerationSettings
from acute.tasks import get_task
from acute.tasks.tool_calls import REPLY_FIELDS
from cli_run import run  # tests/cli_run.py
from tool_store import build  # tests/tool_store.py

pytest.importorskip("skops")


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return build(tmp_path_factory.mktemp("tools"))


@pytest.fixture(scope="module")
def task(work):
    return get_task("bfcl", categories=["simple_python"])


def test_the_exported_stack_reads_the_reply_structure_for_serve(work):
    stack = load_probe(work["stack"])
    assert stack.scoring == "serve" and stack.parser.tools and stack.parser.task == "bfcl"
    assert VISIBLE in stack.sources and stack.parser.reply_fields == REPLY_FIELDS


def test_a_live_score_equals_the_pipeline_on_the_same_record(work, task):
    stack = load_probe(work["stack"])
    store = open_store(work["store"])
    X = stack_inputs(store, "visible-all", "serve")[0]
    model, tok = load_model(work["model"])
    scorer = Scorer(model, tok, stack)
    examples = {ex.id: ex for ex in task.load(work["data"])}
    rows = [0, 5, 16]
    chats = [ToolChat(task.chat_messages(examples[store.records[i]["id"]], tools_in_template=True),
                      task.chat_tools(examples[store.records[i]["id"]])) for i in rows]
    live = [scorer.generate(chat, risk=0.5) for chat in chats]  # one at a time, as the store was collected
    for i, chat, s in zip(rows, chats, live):
        assert s.prompt == store.records[i]["prompt"]  # the chat template showed the same tools
        assert s.recorded.text == store.records[i]["generation"]
        # the visible array: its parse status, reply structure and texts as the store's record; its
        # log-prob statistics to float32 rounding (the collector's forward pass over the ~400-token
        # prompt and the scorer's differ in the last bits)
        got = live_inputs(stack, [s.recorded], [s.prompt], [s.recorded.text], [chat], task=scorer.task)[VISIBLE][0]
        want = X.take([i])[VISIBLE][0]
        assert list(got[5:]) == list(want[5:])
        np.testing.assert_allclose(got[:5].astype(float), want[:5].astype(float), atol=1e-5)
        assert s.confidence == pytest.approx(stack.predict_proba(X.take([i]))[0, 1], abs=1e-5)


def test_a_live_record_is_the_stores_record_of_the_same_reply(work, task):
    """The parse status and the calls counted against the offered tools, live, equal what the task
    labelled on the benchmark's example (its functions), for replies that call and that do not."""
    ex = task.load(work["data"])[6]  # tool_3
    chat = ToolChat(task.chat_messages(ex, tools_in_template=True), task.chat_tools(ex))
    replies = ['<tool_call>\n{"name": "tool_3", "arguments": {"unit": "m", "y": 1}}\n</tool_call>',
               '[{"name": "tool_9", "arguments": {"x": 3}}]', "I cannot help.", "[]"]

    class Gen:
        finish_reason = "stop"

    recs = live_records([Gen()] * len(replies), ["p"] * len(replies), replies, [chat] * len(replies), task)
    for reply, rec in zip(replies, recs):
        stored = task.label_details(ex, reply)
        assert rec["parse_error"] == stored["parse_error"]
        assert {k: rec["meta"][k] for k in REPLY_FIELDS} == {k: stored[k] for k in REPLY_FIELDS}
    assert recs[0]["meta"]["reply_missing_required"] == 1 and recs[0]["meta"]["reply_default_arguments"] == 1
    assert recs[1]["meta"]["reply_unknown_names"] == 1 and recs[2]["parse_error"] and not recs[3]["parse_error"]


def test_a_prompt_offering_no_tools_is_refused_naming_the_source(work):
    stack = load_probe(work["stack"])
    model, tok = load_model(work["model"])
    with pytest.raises(SourceError, match=r"prompts\[0\]: the probe's 'visible' source reads the reply's calls "
                                          r"counted against the tools offered .*offers none") as e:
        Scorer(model, tok, stack).generate([[{"role": "user", "content": "Use tool 3 on 4."}]], risk=0.5)
    assert e.value.source == VISIBLE


def test_a_setting_that_cannot_offer_tools_refuses_the_probe_at_load(work, tiny_model_dir):
    """The probe reads calls counted against offered tools: a model whose chat template does not
    show tools (the tiny ChatML), or plain prompts, could never offer them: refused at load."""
    stack = load_probe(work["stack"])
    model, tok = load_model(tiny_model_dir)
    with pytest.raises(InputError, match="'visible' source .*this model's chat template does not show tools"):
        Scorer(model, tok, stack, allow_other_weights=True)
    model, tok = load_model(work["model"])
    with pytest.raises(InputError, match=r"formatted without the chat template \(chat=False\)"):
        Scorer(model, tok, stack, GenerationSettings(chat=False))


def test_acute_score_reads_tools_beside_messages(work, tmp_path, capsys):
    """``acute score --jsonl``: a row's 'tools' beside its 'messages' offer them (the probe scores
    as the Scorer scores that ToolChat); 'tools' with a prompt string, or a tool that is not a
    function tool, is refused naming the line."""
    ask = [{"role": "user", "content": "Use tool 3 on 4."}]
    tool = {"type": "function", "function": {"name": "tool_3", "parameters": {"type": "object", "properties": {
        "x": {"type": "integer"}}, "required": ["x"]}}}
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"messages": ask, "tools": [tool]}) + "\n")
    rc, out, err = run(["score", "--probe", work["stack"], "--model", work["model"], "--jsonl", rows, "--risk", "0.5"],
                       capsys)
    assert rc == 0, err
    model, tok = load_model(work["model"])
    truth = Scorer(model, tok, load_probe(work["stack"])).generate(ToolChat(ask, [tool]), risk=0.5)
    assert json.loads(out.strip().splitlines()[-1])["confidence"] == pytest.approx(truth.confidence, abs=1e-6)
    for line, why in [({"prompt": "Use tool 3.", "tools": [tool]}, "not with a prompt"),
                      ({"messages": ask, "tools": [{"type": "retrieval"}]}, r"tools\[0\] must be a function tool")]:
        rows.write_text(json.dumps(line) + "\n")
        rc, out, err = run(["score", "--probe", work["stack"], "--model", work["model"], "--jsonl", rows], capsys)
        assert rc != 0 and f"{rows}:1:" in err and re.search(why, err), err
