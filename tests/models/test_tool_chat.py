"""A chat offered tools (acute.models.ToolChat): rendered by a chat template that shows tools, the
turns of a function-calling exchange (an assistant's tool calls, a tool's result) included, and
refused, naming what is wrong, by a template that does not show tools or for a malformed turn."""

from __future__ import annotations

import json

import pytest

from acute.errors import InputError
from acute.models import ToolChat, format_prompt
from acute.testing import CHATML_TEMPLATE, TOOLS_TEMPLATE, make_tiny_tokenizer

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city.",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}


@pytest.fixture(scope="module")
def tools_tokenizer():
    tok = make_tiny_tokenizer()
    tok.chat_template = TOOLS_TEMPLATE
    return tok


def test_a_tool_chat_is_its_messages_with_the_tools_shown(tools_tokenizer):
    chat = ToolChat([{"role": "user", "content": "Weather in Paris?"}], [WEATHER])
    expected = ("<|im_start|>system\n# Tools\n<tools>\n" + json.dumps(WEATHER) + "\n</tools><|im_end|>\n"
                "<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n")
    assert format_prompt(tools_tokenizer, chat) == expected
    # the same as the template given the tools by hand
    assert format_prompt(tools_tokenizer, [{"role": "user", "content": "Weather in Paris?"}], tools=[WEATHER]) == expected


def test_the_turns_of_a_function_calling_exchange_are_rendered(tools_tokenizer):
    chat = ToolChat([
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "content": "sunny", "tool_call_id": "c1"},
    ], [WEATHER])
    text = format_prompt(tools_tokenizer, chat)
    # OpenAI's JSON-string arguments reach the template as an object, as transformers' templates read them
    assert ('<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
            "</tool_call><|im_end|>\n<|im_start|>tool\nsunny<|im_end|>\n<|im_start|>assistant\n") in text
    assert chat.messages[1]["tool_calls"][0]["function"]["arguments"] == {"city": "Paris"}
    assert chat.messages[2]["tool_call_id"] == "c1"


def test_a_template_that_does_not_show_tools_is_refused():
    tok = make_tiny_tokenizer()
    tok.chat_template = CHATML_TEMPLATE  # ignores tools
    with pytest.raises(InputError, match="does not show tools"):
        format_prompt(tok, ToolChat([{"role": "user", "content": "Hi"}], [WEATHER]))
    with pytest.raises(InputError, match="does not show tools"):
        format_prompt(make_tiny_tokenizer(chat_template=False), ToolChat([{"role": "user", "content": "Hi"}], [WEATHER]))
    with pytest.raises(InputError, match=r"formatted without it \(chat=False"):
        format_prompt(make_tiny_tokenizer(), ToolChat([{"role": "user", "content": "Hi"}], [WEATHER]), chat=False)


@pytest.mark.parametrize("messages, match", [
    ([{"role": "tool", "content": "x"}], None),  # accepted: a tool turn
    ([{"role": "user", "content": "Hi", "tool_calls": []}], r"messages_or_text\[0\]: only an assistant"),
    ([{"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f", "arguments": "{x"}}]}],
     r"messages_or_text\[0\]\['tool_calls'\]\[0\]\.function\.arguments is not JSON"),
    ([{"role": "assistant", "content": None, "tool_calls": [{"function": {"arguments": "{}"}}]}],
     r"messages_or_text\[0\]\['tool_calls'\]\[0\] must be"),
    ([{"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f", "arguments": "[1]"}}]}],
     "must be a JSON object"),
    ([{"role": "robot", "content": "x"}], "must be system, user, assistant or tool"),
])
def test_tool_turns_are_checked(messages, match):
    if match is None:
        assert ToolChat(messages, [WEATHER]).messages[0]["role"] == "tool"
        return
    with pytest.raises(InputError, match=match):
        ToolChat(messages, [WEATHER])


def test_tool_turns_need_tools():
    with pytest.raises(InputError, match="must be system, user or assistant, got 'tool'"):
        format_prompt(make_tiny_tokenizer(), [{"role": "tool", "content": "x"}])
    with pytest.raises(InputError, match="at least one tool"):
        ToolChat([{"role": "user", "content": "Hi"}], [])
