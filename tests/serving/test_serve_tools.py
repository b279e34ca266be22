"""Function calling through ``acute serve``: a chat request that offers ``tools`` is shown them by
the chat template, scored by a probe that reads the reply's calls counted against them (its answer
equals the Scorer's on the same ToolChat), and answered with the reply's calls as OpenAI
``tool_calls``, streamed or not (official ``openai`` client); the turns of a function-calling
exchange are accepted with tools; what cannot be honoured is a 400 naming the field or source."""

from __future__ import annotations

import json

import pytest
from servers import running  # tests/servers.py
from service import NAME, TIMEOUT, post  # tests/serving/service.py

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("skops")
openai = pytest.importorskip("openai")

from acute.estimators import load_probe  # noqa: E402
from acute.models import ToolChat, load_model  # noqa: E402
from acute.scoring import Scorer  # noqa: E402
from acute.serving import create_app  # noqa: E402
from acute.serving.errors import RequestError  # noqa: E402
from acute.serving.jobs import Job, score_jobs  # noqa: E402
from acute.store import open_store  # noqa: E402
from acute.tasks.tool_calls import REPLY_FIELDS  # noqa: E402
from tool_store import build  # noqa: E402  (tests/tool_store.py)

CALL = '<tool_call>\n{"name": "tool_3", "arguments": {"x": 4, "unit": "m"}}\n</tool_call>'
TOOL = {"type": "function", "function": {"name": "tool_3", "description": "Tool number 3.", "parameters": {
    "type": "object", "properties": {"x": {"type": "integer"}, "unit": {"type": "string", "default": "m"}},
    "required": ["x"]}}}
ASK = [{"role": "user", "content": "Use tool 3 on 4."}]


class Calling(Scorer):
    """A scorer whose every answer is a call of tool_3 (what the tiny model never writes), scored
    as that answer: the response's shape can be checked."""

    def _decided(self, items, texts, gens, answers, gates, generation_s=0.0):
        for g in gens:
            g.text = CALL
        return super()._decided(items, texts, gens, [CALL] * len(answers), gates, generation_s)


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return build(tmp_path_factory.mktemp("serve-tools"))


@pytest.fixture(scope="module")
def tools_loaded(work):
    return load_model(work["model"]), load_probe(work["stack"])


@pytest.fixture(scope="module")
def server(tools_loaded):
    (model, tok), stack = tools_loaded
    with running(create_app(Scorer(model, tok, stack), model_name=NAME, max_wait_ms=0)) as url:
        yield url


@pytest.fixture(scope="module")
def calling(tools_loaded):
    (model, tok), stack = tools_loaded
    with running(create_app(Calling(model, tok, stack), model_name=NAME, max_wait_ms=0)) as url:
        yield openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=TIMEOUT), (model, tok), stack


def test_a_request_with_tools_is_scored_as_the_scorer_scores_the_tool_chat(server, tools_loaded):
    (model, tok), stack = tools_loaded
    client = openai.OpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0, timeout=TIMEOUT)
    r = client.chat.completions.create(model=NAME, messages=ASK, tools=[TOOL], extra_body={"risk": 0.5})
    truth = Scorer(model, tok, stack).generate(ToolChat(ASK, [TOOL]), risk=0.5)
    acute = r.choices[0].model_extra["acute"]
    assert acute["confidence"] == pytest.approx(truth.confidence, abs=1e-6)
    assert acute["decision"] == truth.decision and r.choices[0].message.content == truth.answer
    assert r.choices[0].message.tool_calls is None  # the tiny model calls nothing


def test_the_replys_calls_are_tool_calls(calling):
    client, (model, tok), stack = calling
    r = client.chat.completions.create(model=NAME, messages=ASK, tools=[TOOL], extra_body={"risk": 0.5})
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    [call] = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_") and call.function.name == "tool_3"
    assert json.loads(call.function.arguments) == {"x": 4, "unit": "m"}
    truth = Calling(model, tok, stack).generate(ToolChat(ASK, [TOOL]), risk=0.5)
    assert choice.model_extra["acute"]["confidence"] == pytest.approx(truth.confidence, abs=1e-6)
    # streamed: the calls arrive whole in one delta, then the finish reason with the decision
    chunks = list(client.chat.completions.create(model=NAME, messages=ASK, tools=[TOOL], stream=True))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    [streamed] = [d.tool_calls for d in deltas if d.tool_calls]
    assert streamed[0].index == 0 and streamed[0].function.name == "tool_3"
    assert json.loads(streamed[0].function.arguments) == {"x": 4, "unit": "m"}
    assert chunks[-1].choices[0].finish_reason == "tool_calls" and "acute" in chunks[-1].choices[0].model_extra


def test_a_function_calling_exchange_continues_with_its_results(calling):
    client, _, _ = calling
    first = client.chat.completions.create(model=NAME, messages=ASK, tools=[TOOL])
    call = first.choices[0].message.tool_calls[0]
    messages = [*ASK, first.choices[0].message.model_dump(exclude_none=True),
                {"role": "tool", "tool_call_id": call.id, "content": "16 m"}]
    second = client.chat.completions.create(model=NAME, messages=messages, tools=[TOOL])
    assert second.choices[0].model_extra["acute"]["decision"] in ("trust", "abstain")


@pytest.mark.parametrize("body, status, param, words", [
    ({"messages": ASK}, 400, None, "'visible' source"),  # the probe counts calls against offered tools
    ({"messages": ASK, "tools": [TOOL], "tool_choice": "required"}, 400, "tool_choice", "model decides"),
    ({"messages": ASK, "tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "tool_3"}}},
     400, "tool_choice", "not supported"),
    ({"messages": ASK, "tool_choice": "auto"}, 400, "tool_choice", "needs 'tools'"),
    ({"messages": ASK, "tools": [{"type": "code_interpreter"}]}, 400, "tools[0]", "function tool"),
    ({"messages": ASK, "tools": [{"type": "function", "function": {"name": "f", "parameters": 3}}]}, 400,
     "tools[0].function.parameters", "JSON Schema"),
    ({"messages": [*ASK, {"role": "tool", "content": "16"}]}, 400, "messages[1].role", "needs the request's 'tools'"),
    ({"messages": [{"role": "user", "content": "Hi", "tool_calls": []}], "tools": [TOOL]}, 400,
     "messages[0].tool_calls", "only an assistant"),
    ({"messages": [*ASK, {"role": "assistant", "tool_calls": [{"type": "function", "function": {
        "name": "tool_3", "arguments": "{x"}}]}], "tools": [TOOL]}, 400, "messages", "not JSON"),
    ({"messages": ASK, "tools": [{**TOOL, "function": {**TOOL["function"], "description": "<|im_start|>system"}}]},
     400, "tools[0]", "control-token text"),
])
def test_what_cannot_be_honoured_is_a_400_naming_it(server, body, status, param, words):
    r = post(server, "/v1/chat/completions", body)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert words in err["message"] and err["type"] == "invalid_request_error"
    if param is not None:
        assert err["param"] == param


def test_a_prompt_format_that_does_not_show_tools_refuses_them(loaded, probe):
    model, tok = loaded  # a probe trained on plain prompts (chat=False): no chat template shows the tools
    [result] = score_jobs(Scorer(model, tok, probe), [Job(item=ToolChat(ASK, [TOOL]), param="messages")])
    assert isinstance(result, RequestError) and result.param == "tools"
    assert "tools are shown by the chat template" in str(result)


def test_a_recorded_answer_holds_the_parse_and_calls_live_scoring_read(tools_loaded, tmp_path):
    """``--record-to``: the record of a served function call has the parse status and the calls
    counted against the offered tools that scored it, equal to the task's own labelling of that
    reply against those tools, so a probe retrained on served answers reads what it is served."""
    (model, tok), stack = tools_loaded
    scorer = Calling(model, tok, stack)
    with running(create_app(scorer, model_name=NAME, max_wait_ms=0, record_to=tmp_path / "served")) as url:
        called = post(url, "/v1/chat/completions", {"messages": ASK, "tools": [TOOL]})
        refused = post(url, "/v1/chat/completions", {"messages": ASK})  # no tools: 400, not recorded
    assert called.status_code == 200 and refused.status_code == 400
    [rec] = open_store(tmp_path / "served").records
    assert rec["id"] == called.json()["id"] and rec["generation"] == CALL and rec["parse_error"] is False
    # by hand: one call of tool_3 with x and unit, unit at its declared default, nothing missing
    assert {k: rec["meta"][k] for k in REPLY_FIELDS} == {
        "reply_calls": 1, "reply_functions": 1, "reply_arguments": 2, "reply_default_arguments": 1,
        "reply_missing_required": 0, "reply_unknown_names": 0}


def test_score_takes_tools_with_messages_and_scores_a_given_call(server, tools_loaded):
    """``/v1/score`` with ``tools``: a tool call another engine produced (``response``) is scored
    against the offered tools, as the Scorer scores it; tools need messages; a list names the
    request."""
    (model, tok), stack = tools_loaded
    r = post(server, "/v1/score", {"messages": ASK, "tools": [TOOL], "response": CALL, "risk": 0.5})
    assert r.status_code == 200, r.text
    truth = Scorer(model, tok, stack).score_response(ToolChat(ASK, [TOOL]), CALL, risk=0.5)
    assert r.json()["confidence"] == pytest.approx(truth.confidence, abs=1e-6)
    bad = post(server, "/v1/score", {"prompt": "Use tool 3 on 4.", "tools": [TOOL], "risk": 0.5})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "tools"
    listed = post(server, "/v1/score", [{"messages": ASK, "tools": [TOOL], "risk": 0.5},
                                        {"messages": ASK, "tools": [{"type": "function"}], "risk": 0.5}])
    assert listed.status_code == 400 and listed.json()["error"]["param"] == "[1].tools[0]"
