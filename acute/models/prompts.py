"""Prompt formatting and the tokens around it: every prompt is fully formatted text (chat
template applied, BOS text included where the model needs it), always tokenized with
``add_special_tokens=False``; the tokens that end a turn; a pad token for batches."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ..errors import InputError, ModelLoadError

__all__ = ["END_OF_TURN_TOKENS", "ToolChat", "ToolsError", "check_tools", "ensure_pad_token", "eos_token_ids", "format_prompt",
           "normalize_messages", "template_prompt_with_tools", "tokenizer_adds_bos"]


#: Special tokens that end an assistant turn in common chat formats; added to ``eos_token_ids``
#: when the tokenizer has them as single tokens.
END_OF_TURN_TOKENS = ("<end_of_turn>", "<|im_end|>", "<|eot_id|>", "<|end|>")


def ensure_pad_token(tokenizer) -> None:
    """Give ``tokenizer`` a pad token (its EOS, else UNK) and left padding; in place."""
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        fallback = tokenizer.eos_token or tokenizer.unk_token
        if fallback is None:
            raise ModelLoadError(
                "tokenizer has no pad, eos or unk token to pad batches with; add a pad token"
            )
        tokenizer.pad_token = fallback


def tokenizer_adds_bos(tokenizer) -> bool:
    """True when ``tokenizer(text)`` with default special tokens starts with its BOS token."""
    bos_id = tokenizer.bos_token_id
    if bos_id is None:
        return False
    with_special = tokenizer("a", add_special_tokens=True)["input_ids"]
    without = tokenizer("a", add_special_tokens=False)["input_ids"]
    return len(with_special) > len(without) and with_special[0] == bos_id


class ToolsError(InputError):
    """A tool specification that is not a function tool: ``field`` names it (``tools[i]``, ...)."""

    def __init__(self, message: str, field: str):
        super().__init__(message)
        self.field = field


def check_tools(tools: Any) -> list[dict]:
    """``tools`` as a list of OpenAI function tools (``{"type": "function", "function": {"name",
    "parameters"?: a JSON Schema object, ...}}``), or a :class:`ToolsError` naming the first that
    is not one."""
    if not isinstance(tools, Sequence) or isinstance(tools, str):
        raise ToolsError("tools must be a list of function tools", "tools")
    for i, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, Mapping) else None
        if not (isinstance(tool, Mapping) and tool.get("type") == "function" and isinstance(fn, Mapping)
                and isinstance(fn.get("name"), str) and fn["name"]):
            raise ToolsError(f'tools[{i}] must be a function tool: {{"type": "function", "function": '
                             '{"name": ..., "parameters": {...}}}', f"tools[{i}]")
        if not isinstance(fn.get("parameters", {}), Mapping):
            raise ToolsError(f"tools[{i}].function.parameters must be a JSON Schema object",
                             f"tools[{i}].function.parameters")
    return list(tools)


@dataclass(frozen=True)
class ToolChat:
    """A chat whose model is offered tools: ``messages`` (``{"role", "content"}`` dicts; with the
    tool turns of a function-calling exchange: an assistant message's ``tool_calls``, each
    ``{"type": "function", "function": {"name", "arguments": {...}}}``, and ``tool`` messages
    holding a result) and ``tools`` (OpenAI function tools, ``{"type": "function", "function":
    {"name", "description", "parameters"}}``), which :func:`format_prompt` shows through the chat
    template's ``tools``, as transformers' chat templates take them."""

    messages: tuple[dict, ...]
    tools: tuple[dict, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "messages", tuple(normalize_messages(list(self.messages), tool_turns=True)))
        object.__setattr__(self, "tools", tuple(check_tools(self.tools)))
        if not self.tools:
            raise InputError("a ToolChat offers at least one tool")


def _tool_calls(calls: Any, where: str) -> list[dict]:
    """An assistant message's ``tool_calls`` as chat templates read them: each ``{"type":
    "function", "function": {"name", "arguments"}}`` with the arguments an object (a JSON string,
    as OpenAI's API sends them, is decoded)."""
    if not isinstance(calls, Sequence) or isinstance(calls, str):
        raise InputError(f"{where} must be a list of tool calls")
    out = []
    for j, call in enumerate(calls):
        fn = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
            raise InputError(f"{where}[{j}] must be {{'type': 'function', 'function': {{'name', 'arguments'}}}}")
        args = fn.get("arguments", {})
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except json.JSONDecodeError:
                raise InputError(f"{where}[{j}].function.arguments is not JSON") from None
        if not isinstance(args, Mapping):
            raise InputError(f"{where}[{j}].function.arguments must be a JSON object")
        out.append({**{k: v for k, v in call.items() if k != "function"}, "type": "function",
                    "function": {"name": fn["name"], "arguments": dict(args)}})
    return out


def normalize_messages(messages_or_text, tool_turns: bool = False, name: str = "messages_or_text") -> list[dict]:
    """A string as one user message, or checked ``{"role", "content"}`` messages (roles system,
    user, assistant; string contents), as a new list of plain dicts. ``tool_turns``: also the
    turns of a function-calling exchange (:class:`ToolChat`): ``tool`` messages (a result, with
    its optional ``tool_call_id``) and an assistant message's ``tool_calls`` (its content may then
    be empty or None). Errors name the message as ``name[i]``."""
    if isinstance(messages_or_text, str):
        return [{"role": "user", "content": messages_or_text}]
    if not isinstance(messages_or_text, Sequence) or not messages_or_text:
        raise InputError(f"{name} must be a string or a non-empty list of "
                         f"{{'role', 'content'}} dicts, got {type(messages_or_text).__name__}")
    roles = ("system", "user", "assistant", "tool") if tool_turns else ("system", "user", "assistant")
    out = []
    for i, msg in enumerate(messages_or_text):
        where = f"{name}[{i}]"
        calls = msg.get("tool_calls") if tool_turns and isinstance(msg, Mapping) else None
        if not isinstance(msg, Mapping) or "role" not in msg or ("content" not in msg and calls is None):
            raise InputError(f"{where} must be a dict with 'role' and 'content'")
        role, content = msg["role"], msg.get("content")
        if role not in roles:
            raise InputError(f"{where}['role'] must be {', '.join(roles[:-1])} or {roles[-1]}, got {role!r}")
        if calls is not None and role != "assistant":
            raise InputError(f"{where}: only an assistant message makes tool calls")
        if calls is not None and content is None:
            content = ""
        if not isinstance(content, str):
            raise InputError(f"{where}['content'] must be a string")
        out.append({"role": role, "content": content})
        if calls is not None:
            out[-1]["tool_calls"] = _tool_calls(calls, f"{where}['tool_calls']")
        if role == "tool" and isinstance(msg.get("tool_call_id"), str):
            out[-1]["tool_call_id"] = msg["tool_call_id"]
    return out


def template_prompt_with_tools(tokenizer, messages: list[dict], tools: list[dict]) -> str | None:
    """The chat prompt of ``messages`` with ``tools`` offered by the chat template, or ``None``
    when the template does not show them (it ignores ``tools``: the text is the same without them,
    or it refuses them)."""
    from jinja2 import TemplateError  # optional: jinja2

    try:
        text = format_prompt(tokenizer, messages, chat=True, tools=tools)
    except (TemplateError, TypeError, ValueError):
        return None
    return None if text == format_prompt(tokenizer, messages, chat=True, tools=[]) else text


def _plain_transcript(messages: list[dict[str, str]]) -> str:
    """Render messages for a model without a chat template as a Question/Answer transcript."""
    lines: list[str] = []
    for msg in messages:
        if msg["role"] == "system":
            lines.append(msg["content"].strip() + "\n\n")
        elif msg["role"] == "user":
            lines.append(f"Question: {msg['content'].strip()}\n")
        else:
            lines.append(f"Answer: {msg['content'].strip()}\n\n")
    if messages[-1]["role"] == "user":
        lines.append("Answer:")
    else:  # the reply continues the last answer
        lines[-1] = lines[-1].rstrip("\n")
    return "".join(lines)


def format_prompt(tokenizer, messages_or_text, chat: bool | None = None,
                  tools: list[dict] | None = None) -> str:
    """Return the fully formatted prompt text, to be tokenized with ``add_special_tokens=False``.

    ``messages_or_text`` is a string (one user message when a chat template is used, the literal
    prompt otherwise) or a list of ``{"role", "content"}`` dicts. ``chat=None`` uses the chat
    template when the tokenizer has one; ``chat=True`` without a template raises ``ValueError``.

    With a chat template the generation prompt is appended; if the last message is the assistant's
    the rendering stops inside it, so generation continues that reply. Without a template a string
    is used as is, and a message list becomes a plain transcript: system text, then
    ``Question: <user>\\n`` / ``Answer: <assistant>\\n\\n`` pairs, ending in ``Answer:`` after a user
    message (or the unfinished last answer). In both cases the BOS token text is prepended when
    the tokenizer adds a BOS by default and the text does not already start with it.

    ``tools`` (JSON-Schema function specifications) are passed to the chat template as
    ``apply_chat_template(tools=...)`` (only when given, so prompts without tools are unchanged);
    they are ignored without a template. A :class:`ToolChat` is its messages with its tools, and
    an :class:`InputError` when the tokenizer's chat template does not show tools.
    """
    if isinstance(messages_or_text, ToolChat):
        if tools is not None:
            raise InputError("a ToolChat carries its own tools: give tools= once")
        if chat is False:
            raise InputError("tools are shown by the chat template, and this prompt is formatted without it "
                             "(chat=False: e.g. a probe trained on plain prompts)")
        text = template_prompt_with_tools(tokenizer, list(messages_or_text.messages), list(messages_or_text.tools)) \
            if getattr(tokenizer, "chat_template", None) else None
        if text is None:
            raise InputError("this model's chat template does not show tools (it has none, ignores "
                             "apply_chat_template's tools or refuses them): a model offered tools needs "
                             "a template that renders them")
        return text
    has_template = bool(getattr(tokenizer, "chat_template", None))
    use_chat = has_template if chat is None else bool(chat)
    if use_chat and not has_template:
        raise InputError("chat=True but the tokenizer has no chat template; use chat=False for a "
                         "plain prompt")
    if use_chat:
        messages = normalize_messages(messages_or_text, tool_turns=tools is not None)
        continue_reply = messages[-1]["role"] == "assistant"
        extra = {} if tools is None else {"tools": tools}
        text = tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=not continue_reply,
            continue_final_message=continue_reply, **extra,
        )
    elif isinstance(messages_or_text, str):
        text = messages_or_text
    else:
        text = _plain_transcript(normalize_messages(messages_or_text))
    bos = tokenizer.bos_token
    if bos and tokenizer_adds_bos(tokenizer) and not text.startswith(bos):
        text = bos + text
    return text


def eos_token_ids(model, tokenizer) -> list[int]:
    """Return the sorted-by-first-appearance union of ids that should stop generation.

    Union of ``model.generation_config.eos_token_id`` (int or list), ``tokenizer.eos_token_id``
    and the end-of-turn tokens in :data:`END_OF_TURN_TOKENS` that the tokenizer has as single
    special tokens (e.g. Gemma's ``<end_of_turn>``). Empty list when none are known.
    """
    ids: list[int] = []

    def add(value):
        if value is None:
            return
        for v in (value if isinstance(value, (list, tuple)) else [value]):
            if v is not None and int(v) >= 0 and int(v) not in ids:
                ids.append(int(v))

    gen = getattr(model, "generation_config", None)
    add(getattr(gen, "eos_token_id", None))
    add(tokenizer.eos_token_id)
    vocab = tokenizer.get_vocab()
    for token in END_OF_TURN_TOKENS:
        if token in vocab and vocab[token] != tokenizer.unk_token_id:
            add(vocab[token])
    return ids
