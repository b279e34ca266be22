"""Function-calling replies: parsing calls out of a generation (:func:`parse_calls`; with chat
templates' ``<tool_call>`` blocks, :func:`parse_reply_calls`), comparing them
(:func:`normalize_value`, :func:`calls_equal`), the offered tool set as one group value
(:func:`toolset_key`) and what a deployment sees of a reply without labels, its structure against
the offered tool specifications.

:func:`reply_structure` counts, for parsed calls and the tools offered: the calls, the distinct
functions called, the arguments given, the arguments equal to their declared default, the
required arguments missing and the names (functions, arguments) the specifications do not have.
The function-calling tasks write these counts into each record's ``meta`` (keys
:data:`REPLY_FIELDS`), where the ``visible`` control reads them; none of them looks at the gold
answer.

Two specification formats are read (:func:`tool_parameters`): xLAM / APIGen
(``{"parameters": {"arg": {"type": "str, optional", "default": ...}}}``: an argument is
optional when its type says so or it has a default) and JSON Schema as BFCL and OpenAI write it
(``{"parameters": {"type": "dict"|"object", "properties": {...}, "required": [...]}}``).
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterator, Sequence

__all__ = ["CALLS_EQUIVALENCE", "REPLY_FIELDS", "ToolParameters", "bracket_depths", "calls_equal", "calls_key", "normalize_calls", "normalize_value",
           "offered_functions", "parse_calls", "reply_message", "parse_reply_calls", "reply_structure", "tool_parameters", "toolset_key"]

#: The ``meta`` keys :func:`reply_structure` fills (the visible control's reply-structure columns).
REPLY_FIELDS: tuple[str, ...] = ("reply_calls", "reply_functions", "reply_arguments", "reply_default_arguments",
                                 "reply_missing_required", "reply_unknown_names")

_NO_DEFAULT = object()
_NUMBER = re.compile(r"^[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?$")
_OPEN = re.compile(r"[\[{]")
_FENCE = re.compile(r"```[a-zA-Z0-9_-]*\s*\n?(.*?)```", re.DOTALL)
#: one ``<tool_call>`` block (Qwen's and Hermes' chat templates): up to its closing tag, the next
#: opening tag or the end of the text (a truncated last block)
_TOOL_CALL_BLOCK = re.compile(r"<tool_call>(.*?)(?=</tool_call>|<tool_call>|\Z)", re.DOTALL)
_TOOL_CALL_SPAN = re.compile(r"<tool_call>.*?(?:</tool_call>|(?=<tool_call>)|\Z)", re.DOTALL)


def toolset_key(tools: list[dict]) -> str:
    """The offered tool set as one value: the sorted tool names joined by ``|``. Records with the
    same key share their tool specifications (most of the prompt), so they belong on one side of
    every split (a function-calling task's ``default_group_by``)."""
    return "|".join(sorted(str(t["name"]) for t in tools))


def normalize_value(value: Any) -> Any:
    """Return a canonical form of an argument value for comparison.

    Integral floats become ints (``5.0`` -> ``5``); numeric strings become numbers (``"5"`` ->
    ``5``); ``"true"``/``"false"`` (any case) become booleans; strings holding a JSON list or
    object are parsed; lists/tuples and dicts are normalised recursively (list order kept);
    other strings are stripped. Booleans stay booleans (``True`` != ``1``).
    """
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else value
    if isinstance(value, str):
        s = value.strip()
        if _NUMBER.match(s):
            return normalize_value(float(s)) if any(c in s for c in ".eE") else int(s)
        if s.lower() in ("true", "false"):
            return s.lower() == "true"
        if s[:1] in "[{" and s[-1:] in "]}":
            try:
                return normalize_value(json.loads(s))
            except json.JSONDecodeError:
                pass
        return s
    if isinstance(value, (list, tuple)):
        return [normalize_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): normalize_value(v) for k, v in value.items()}
    return value


def normalize_calls(calls: list[dict]) -> list[str]:
    """Canonical, sorted JSON strings of ``(name, normalised arguments)`` -- a multiset key."""
    return sorted(json.dumps([c["name"], normalize_value(c.get("arguments") or {})], sort_keys=True)
                  for c in calls)


#: the equivalence of call lists (:func:`calls_key`) in words
CALLS_EQUIVALENCE = "the same calls (names and normalised argument values, in any order)"


def calls_key(answer: str | None) -> tuple | None:
    """The key of a record's ``answer`` (its parsed calls as JSON): the sorted canonical calls
    (:func:`normalize_calls`), equal exactly when :func:`calls_equal` holds; None for no answer."""
    if not isinstance(answer, str):
        return None
    try:
        calls = json.loads(answer)
    except json.JSONDecodeError:
        return None
    if not isinstance(calls, list) or not all(isinstance(c, dict) and "name" in c for c in calls):
        return None
    return tuple(normalize_calls(calls))


def calls_equal(predicted: list[dict], gold: list[dict]) -> bool:
    """True when both call lists hold the same calls (names and normalised arguments), any order."""
    return normalize_calls(predicted) == normalize_calls(gold)


def _as_call(obj: Any) -> dict | None:
    """``{"name", "arguments"}`` from a call object (also ``{"function": {...}}``, ``"parameters"``
    instead of ``"arguments"``, arguments given as a JSON string), else ``None``."""
    if not isinstance(obj, dict):
        return None
    if "name" not in obj and isinstance(obj.get("function"), dict):
        obj = obj["function"]
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return None
    args = obj.get("arguments", obj.get("parameters", obj.get("args", {})))
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError:
            return None
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return None
    return {"name": name.strip(), "arguments": args}


def _as_calls(obj: Any) -> list[dict] | None:
    if isinstance(obj, dict):
        for key in ("tool_calls", "calls", "function_calls"):
            if isinstance(obj.get(key), list):
                return _as_calls(obj[key])
        call = _as_call(obj)
        return None if call is None else [call]
    if isinstance(obj, list):
        calls = [_as_call(o) for o in obj]
        return None if any(c is None for c in calls) else calls
    return None


def parse_calls(text: str) -> list[dict] | None:
    """Parse the function calls in a generation; ``None`` when there are none to parse.

    Looks inside code fences first, then in the whole text, at each ``[`` / ``{`` from left to
    right for the first JSON value that is a list of call objects (or one call object, or an
    object with a ``tool_calls``/``calls`` list). Leading and trailing text is ignored. A bracket
    that does not start valid JSON is skipped with everything up to its closing bracket, so a
    truncated list is a parse failure rather than its first complete call. An empty list ``[]``
    parses (as no calls).
    """
    candidates = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    decoder = json.JSONDecoder()
    for chunk in candidates:
        pos = 0
        while True:
            m = _OPEN.search(chunk, pos)
            if m is None:
                break
            try:
                obj, _ = decoder.raw_decode(chunk, m.start())
            except json.JSONDecodeError:
                # not JSON from here: skip the whole bracketed span, so the inner objects of a
                # truncated list are never mistaken for the answer
                pos = _end_of_brackets(chunk, m.start())
                continue
            calls = _as_calls(obj)
            if calls is not None:
                return calls
            pos = m.start() + 1  # valid JSON but not calls: look inside it (wrappers)
    return None


def parse_reply_calls(text: str) -> list[dict] | None:
    """The calls of a reply that may use ``<tool_call>...</tool_call>`` blocks, as chat templates
    given ``tools=`` ask for (Qwen2.5: one ``{"name", "arguments"}`` object per block).

    When the text has a ``<tool_call>`` tag, the calls are those of every block in order (a block
    may hold one call or a list), and ``None`` when any block has no parseable call (a truncated
    last block included), so a partial list is never taken for the answer. Without a tag this is
    :func:`parse_calls`.
    """
    blocks = _TOOL_CALL_BLOCK.findall(text)
    if not blocks:
        return parse_calls(text)
    calls: list[dict] = []
    for block in blocks:
        found = parse_calls(block)
        if not found:
            return None
        calls.extend(found)
    return calls


def reply_message(text: str) -> tuple[str | None, list[dict]]:
    """A reply to a chat that offered tools as an assistant message, ``(content, calls)``: its
    calls (:func:`parse_reply_calls`; empty when none parse or it calls nothing, and then the
    content is the reply as is) and its text outside the ``<tool_call>`` blocks (stripped; None
    when there is none, and for calls given without blocks, whose JSON is the message)."""
    calls = parse_reply_calls(text)
    if not calls:
        return text, []
    if "<tool_call>" not in text:
        return None, calls
    return _TOOL_CALL_SPAN.sub("", text).strip() or None, calls


def bracket_depths(text: str, start: int = 0) -> Iterator[tuple[int, int]]:
    """``(index, depth after it)`` of every ``[``/``{`` from ``start`` on and every ``]``/``}``
    that closes one, JSON strings inside brackets skipped (a quote outside any bracket is text,
    a closing bracket with none open is ignored)."""
    depth, in_string, escaped = 0, False, False
    for i in range(start, len(text)):
        ch = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch in "[{":
            depth += 1
            yield i, depth
        elif ch in "]}" and depth:
            depth -= 1
            yield i, depth
        elif ch == '"' and depth:
            in_string = True


def _end_of_brackets(text: str, start: int) -> int:
    """Index just after the bracket opened at ``start`` is closed (JSON strings respected), or
    ``len(text)`` when it never closes."""
    return next((i + 1 for i, depth in bracket_depths(text, start) if depth == 0), len(text))


class ToolParameters:
    """One tool's parameters: ``names`` (all), ``required`` and ``defaults`` (name -> declared
    default, for those that declare one)."""

    def __init__(self, names: set[str], required: set[str], defaults: dict[str, Any]):
        self.names, self.required, self.defaults = names, required, defaults


def tool_parameters(tool: dict) -> ToolParameters:
    """The parameters of one tool specification, in either format (module docs)."""
    params = tool.get("parameters") or {}
    if not isinstance(params, dict):
        return ToolParameters(set(), set(), {})
    if isinstance(params.get("properties"), dict):  # JSON Schema (BFCL, OpenAI)
        props = params["properties"]
        required = {str(r) for r in params.get("required") or () if r in props}
        defaults = {str(k): v["default"] for k, v in props.items() if isinstance(v, dict) and "default" in v}
        return ToolParameters({str(k) for k in props}, required, defaults)
    names, required, defaults = set(), set(), {}
    for key, spec in params.items():  # xLAM: {"arg": {"type": "int, optional", "default": ...}}
        names.add(str(key))
        spec = spec if isinstance(spec, dict) else {}
        default = spec.get("default", _NO_DEFAULT)
        if default is not _NO_DEFAULT:
            defaults[str(key)] = default
        if "optional" not in str(spec.get("type", "")).lower() and default is _NO_DEFAULT:
            required.add(str(key))
    return ToolParameters(names, required, defaults)


def offered_functions(tools: Sequence[dict]) -> list[dict]:
    """The function specifications (``{"name", "description", "parameters"}``) of OpenAI-style
    tools (``{"type": "function", "function": {...}}``; a bare specification is kept as is)."""
    return [t["function"] if isinstance(t, dict) and isinstance(t.get("function"), dict) else t for t in tools]


def reply_structure(calls: Sequence[dict] | None, tools: Sequence[dict]) -> dict[str, int]:
    """The :data:`REPLY_FIELDS` counts of parsed ``calls`` (``{"name", "arguments"}`` each; ``None``:
    the reply did not parse, every count 0) against the offered ``tools``. Values are compared
    after :func:`normalize_value` (``"5" == 5``)."""
    out = dict.fromkeys(REPLY_FIELDS, 0)
    if not calls:
        return out
    specs = {str(t.get("name")): tool_parameters(t) for t in tools if isinstance(t, dict)}
    out["reply_calls"] = len(calls)
    out["reply_functions"] = len({c["name"] for c in calls})
    for call in calls:
        args = call.get("arguments") or {}
        out["reply_arguments"] += len(args)
        spec = specs.get(call["name"])
        if spec is None:
            out["reply_unknown_names"] += 1
            continue
        out["reply_unknown_names"] += sum(1 for a in args if a not in spec.names)
        out["reply_missing_required"] += len(spec.required - set(args))
        out["reply_default_arguments"] += sum(
            1 for a, v in args.items() if a in spec.defaults and normalize_value(v) == normalize_value(spec.defaults[a]))
    return out
