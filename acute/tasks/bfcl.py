"""BFCL v4 (Berkeley Function Calling Leaderboard) single-turn function calling, zero-shot.

Data: the five single-turn AST categories of ``bfcl-eval==2026.3.23`` (:mod:`.bfcl_data`):
``simple_python`` (400 rows), ``multiple`` (200), ``parallel`` (200), ``parallel_multiple`` (200)
and ``irrelevance`` (240), 1,240 in all; the option ``categories`` selects some. A data folder
holds ``BFCL_v4_<category>.json`` and ``possible_answer/BFCL_v4_<category>.json`` (one JSON object
per line); without one the pinned wheel is fetched and cached under ``$ACUTE_HOME``. Ids are
BFCL's own (``simple_python_0``, ...); ``meta`` carries ``category`` and ``toolset`` (the offered
function names, sorted, joined by ``|``: the task's ``default_group_by``).

Prompt: the question's user turn plus one instruction: reply with only a JSON list of calls
``[{"name": ..., "arguments": {...}}]``, or ``[]`` when none of the functions fits. With a chat
template that renders tools (Qwen2.5's), the functions are offered through it
(``apply_chat_template(tools=...)``) in OpenAI form, ``{"type": "function", "function": {name,
description, parameters}}``, with BFCL's types made JSON Schema: ``dict`` -> ``object``,
``float`` -> ``number``, ``tuple`` -> ``array`` and ``any`` left untyped (BFCL's own OpenAI
conversion writes ``string``, the type its checker, and so this labelling, then wants). Function
names keep their dots (BFCL turns them into ``_`` for APIs that refuse dots).
A template that ignores tools, and the plain prompt, get the converted function specifications
as JSON in the text, as APIGen's prompt does.

Reply: the calls of the ``<tool_call>{...}</tool_call>`` blocks the Qwen template asks for, when
the reply has any, else the first JSON list of calls in it
(:func:`~acute.tasks.tool_calls.parse_reply_calls`).

Labelling, BFCL's AST rules (:func:`bfcl_error`, our own code after BFCL's ``ast_checker``):

* ``irrelevance``: right iff the reply makes no call. A reply with no parseable call (``[]``, or
  text without calls, or a call list cut off before it closes) makes none: right.
* otherwise the reply must parse (else wrong), have as many calls as the gold
  answer and each gold call must match a distinct reply call, in any order (``parallel``,
  ``parallel_multiple``; a full one-to-one matching, where BFCL matches greedily); ``simple`` and
  ``multiple`` have one gold call, so exactly one call to the right function.
* a call matches a gold call when: the function name is equal (exactly, dots included); every
  parameter the specification requires is given; every parameter given is in the specification
  and in the gold answer; every gold parameter not given has ``""`` among its allowed values
  ("may be omitted"); each value given has the specified type and is one of the allowed values.
* types: an int is accepted where a float is expected (also inside arrays, where BFCL accepts
  it only when the gold lists ints), a float where an int is expected is not, a bool is never a
  number; array elements are type-checked one level deep; when the gold's allowed values have
  another type than the specification (BFCL writes a variable name as a string), a value of
  the gold's type is compared as is.
* values: strings are compared after BFCL's normalisation, :func:`standardize` (lower case, and
  spaces and ``, . / - _ * ^`` removed, ``'`` read as ``"``), so ``"New York, NY"`` equals
  ``"new york ny"``; an empty string is accepted where the parameter may be omitted (as BFCL
  does); lists compare element-wise in order (string elements normalised) against each allowed
  list; objects compare key by key against each allowed object (each key's value in its
  allowed list, absent keys allowed to be omitted); lists of objects element-wise. Numbers and
  booleans compare by equality.

What a record says of the reply alone reads no gold, so that a visible control or the samples'
agreement cannot learn the category from it: ``answer`` (:meth:`BFCLTask.extract`) and
``parse_error`` are the reply's own parse (text without calls is a parse error on every row, an
irrelevance row's right answer included; until 2026-12-07 an irrelevance row's unparsed reply read
as ``[]`` and not a parse error, which told the ``visible`` and ``answer-surface`` controls and
the agreement signals which replies without calls were right). ``label_details`` adds
``n_calls`` (reply calls; ``None`` unparsed), ``n_gold_calls`` (kept out of ``metadata_fields``:
it reads the gold) and the reply's structure against the offered functions
(:func:`~acute.tasks.tool_calls.reply_structure`).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from ..errors import InputError, TaskDataError
from .base import DATA_ENV, Example, Task, read_jsonl
from .bfcl_data import CATEGORIES, NO_ANSWER_FILE, PACKAGE, SHA256, VERSION, answer_member, fetch_bfcl, question_member
from .tool_calls import CALLS_EQUIVALENCE, calls_key, parse_reply_calls, reply_structure, toolset_key
from .answer_types import assign_wrong_types

__all__ = ["BFCLTask", "bfcl_error", "check_call", "gold_reply", "openai_tool", "standardize"]


# --------------------------------------------------------------------------- tool specifications

#: BFCL's parameter types with another name in JSON Schema (``any`` loses its type)
_SCHEMA_TYPES = {"dict": "object", "float": "number", "tuple": "array"}


def json_schema(spec: dict) -> dict:
    """A BFCL parameter specification with JSON Schema types (module docs), recursively."""
    out = dict(spec)
    kind = out.get("type")
    if kind == "any":
        del out["type"]
    elif kind in _SCHEMA_TYPES:
        out["type"] = _SCHEMA_TYPES[kind]
    if isinstance(out.get("properties"), dict):
        out["properties"] = {k: json_schema(v) if isinstance(v, dict) else v
                             for k, v in out["properties"].items()}
    if isinstance(out.get("items"), dict):
        out["items"] = json_schema(out["items"])
    return out


def _function_schema(function: dict) -> dict:
    return {"name": function["name"], "description": function.get("description", ""),
            "parameters": json_schema(function["parameters"])}


def openai_tool(function: dict) -> dict:
    """A BFCL function description as an OpenAI tool, ``{"type": "function", "function": ...}``."""
    return {"type": "function", "function": _function_schema(function)}


# --------------------------------------------------------------------------- labelling

#: BFCL's Python checker: specification type -> the Python type a value must have
_PY_TYPES: dict[str, type] = {"string": str, "integer": int, "float": float, "boolean": bool,
                              "array": list, "tuple": list, "dict": dict, "any": str}
_STANDARDIZE = re.compile(r"[ ,./\-_*^]")


def standardize(text: str) -> str:
    """BFCL's string normalisation: spaces and ``, . / - _ * ^`` removed, lower case, ``'`` as ``"``."""
    return _STANDARDIZE.sub("", text).lower().replace("'", '"')


def _std(value: Any) -> Any:
    return standardize(value) if isinstance(value, str) else value


def _std_list(value: list) -> list:
    return [_std(v) for v in value]


def _options(allowed: Any) -> list:
    return allowed if isinstance(allowed, list) else [allowed]


def _gold_type(allowed: list) -> type | None:
    """The type of the first allowed value that is not the omission marker ``""``."""
    return next((type(a) for a in allowed if not (isinstance(a, str) and a == "")), None)


def _has_type(value: Any, expected: type) -> bool:
    return type(value) is expected or (expected is float and type(value) is int)


def _elements_typed(value: list, spec: dict, allowed: list) -> bool:
    """Every element has the specification's item type, or the type of an allowed list's items."""
    expected = _PY_TYPES.get(str((spec.get("items") or {}).get("type")))
    if expected is None:
        return True
    gold_types = {_gold_type(a) for a in allowed if isinstance(a, list)}
    return all(_has_type(v, expected) or type(v) in gold_types for v in value)


def _dict_matches(value: dict, gold: dict) -> bool:
    for key, v in value.items():
        if key not in gold or _std(v) not in [_std(a) for a in _options(gold[key])]:
            return False
    return all(key in value or "" in _options(opts) for key, opts in gold.items())


def _value_error(value: Any, spec: dict, allowed: list) -> str | None:
    """Why ``value`` is not an allowed value of a parameter specified by ``spec``, or ``None``."""
    kind = str(spec.get("type"))
    expected = _PY_TYPES.get(kind)
    if expected is None:  # a type BFCL's Python checker does not know: values only
        return None if _std(value) in [_std(a) for a in allowed] else f"value {value!r} is not allowed"
    if expected is float and type(value) is int:
        value = float(value)
    gold_type = _gold_type(allowed)
    if type(value) is expected:
        if expected is list and not _elements_typed(value, spec, allowed):
            return f"an element of {value!r} has the wrong type"
        as_is = gold_type is not None and gold_type is not expected
    elif gold_type is not None and type(value) is gold_type:
        as_is = True  # the gold holds a value of another type (a variable name): compare as is
    else:
        return f"type {type(value).__name__}, expected {kind}"
    if as_is:
        ok = value in allowed
    elif expected is dict:
        ok = any(isinstance(a, dict) and _dict_matches(value, a) for a in allowed)
    elif expected is list and str((spec.get("items") or {}).get("type")) == "dict":
        ok = any(isinstance(a, list) and len(a) == len(value)
                 and all(isinstance(v, dict) and isinstance(g, dict) and _dict_matches(v, g)
                         for v, g in zip(value, a)) for a in allowed)
    elif expected is str:
        ok = standardize(value) in {standardize(a) for a in allowed if isinstance(a, str)}
    elif expected is list:
        ok = _std_list(value) in [_std_list(a) for a in allowed if isinstance(a, list)]
    else:
        ok = value in allowed
    return None if ok else f"value {value!r} is not one of {allowed!r}"


def check_call(call: dict, gold: dict, function: dict) -> str | None:
    """Why the reply ``call`` (``{"name", "arguments"}``) does not match the gold call
    ``{name: {parameter: [allowed values]}}`` of the offered ``function``, or ``None``."""
    (name, params), = gold.items()
    if call["name"] != name:
        return f"calls {call['name']!r}, not {name!r}"
    schema = function.get("parameters") or {}
    properties = schema.get("properties") or {}
    args = call.get("arguments") or {}
    for required in schema.get("required") or ():
        if required not in args:
            return f"{name}: missing required parameter {required!r}"
    for param, value in args.items():
        if param not in properties or param not in params:
            return f"{name}: unexpected parameter {param!r}"
        why = _value_error(value, properties[param], _options(params[param]))
        if why is not None:
            return f"{name}: parameter {param!r}: {why}"
    for param, allowed in params.items():
        if param not in args and "" not in _options(allowed):
            return f"{name}: parameter {param!r} is missing"
    return None


def _one_to_one(ok: list[list[bool]]) -> bool:
    """True when every gold call (row) matches a distinct reply call (column) (Kuhn's matching)."""
    owner = [-1] * len(ok)

    def assign(g: int, seen: set[int]) -> bool:
        for r, fits in enumerate(ok[g]):
            if fits and r not in seen:
                seen.add(r)
                if owner[r] < 0 or assign(owner[r], seen):
                    owner[r] = g
                    return True
        return False

    return all(assign(g, set()) for g in range(len(ok)))


def bfcl_error(calls: list[dict] | None, gold: list[dict] | None, functions: list[dict]) -> str | None:
    """Why the parsed reply ``calls`` are wrong under BFCL's AST rules (module docs), or ``None``
    when they are right. ``gold`` is ``None`` for an irrelevance row (no call is right)."""
    if gold is None:
        return None if not calls else f"{len(calls)} call(s) where none of the functions fits"
    if calls is None:
        return "no parseable calls"
    if len(calls) != len(gold):
        return f"{len(calls)} call(s), expected {len(gold)}"
    specs = {f["name"]: f for f in functions}
    if len(gold) == 1:
        return check_call(calls[0], gold[0], specs[next(iter(gold[0]))])
    ok = [[check_call(c, g, specs[next(iter(g))]) is None for c in calls] for g in gold]
    return None if _one_to_one(ok) else "the calls do not match the gold calls one to one"


_OMIT = object()


def _first_allowed(allowed: Any) -> Any:
    for option in _options(allowed):
        if not (isinstance(option, str) and option == ""):
            return _resolve(option)
    return _OMIT


def _resolve(value: Any) -> Any:
    """A gold value written as a reply: objects' per-key allowed lists resolved to their first value."""
    if isinstance(value, dict):
        return {k: v for k, opts in value.items() if (v := _first_allowed(opts)) is not _OMIT}
    if isinstance(value, list):
        return [_resolve(v) if isinstance(v, dict) else v for v in value]
    return value


def gold_reply(gold: list[dict] | None, functions: list[dict] = ()) -> list[dict]:
    """One right reply: each gold call with the first allowed value of every parameter (those
    that may only be omitted left out, and those that may be omitted and are not in the offered
    function's specification: two BFCL gold answers list such parameters); ``[]`` for an
    irrelevance row."""
    specs = {f["name"]: (f.get("parameters") or {}).get("properties") or {} for f in functions}
    out = []
    for call in gold or ():
        (name, params), = call.items()
        known = specs.get(name)
        args = {p: v for p, allowed in params.items()
                if not (known is not None and p not in known and "" in _options(allowed))
                and (v := _first_allowed(allowed)) is not _OMIT}
        out.append({"name": name, "arguments": args})
    return out


# --------------------------------------------------------------------------- reading

def _check_turn(question: Any, where: str) -> list[dict]:
    if not (isinstance(question, list) and len(question) == 1 and isinstance(question[0], list)
            and question[0]):
        raise TaskDataError(f"{where}: 'question' must hold one turn (a non-empty list of messages)")
    turn = question[0]
    for k, msg in enumerate(turn):
        if not (isinstance(msg, dict) and msg.get("role") in ("system", "user")
                and isinstance(msg.get("content"), str) and msg["content"].strip()):
            raise TaskDataError(f"{where}: question message {k} must be a system or user message "
                                "with text content")
    if turn[-1]["role"] != "user":
        raise TaskDataError(f"{where}: the question's last message must be the user's")
    return [{"role": m["role"], "content": m["content"]} for m in turn]


def _check_functions(functions: Any, where: str) -> list[dict]:
    if not isinstance(functions, list) or not functions:
        raise TaskDataError(f"{where}: 'function' must be a non-empty list of function descriptions")
    for k, f in enumerate(functions):
        if not (isinstance(f, dict) and isinstance(f.get("name"), str) and f["name"]
                and isinstance(f.get("parameters"), dict)
                and isinstance(f["parameters"].get("properties", {}), dict)):
            raise TaskDataError(f"{where}: function {k} must have a 'name' and 'parameters' "
                                "with 'properties'")
    return functions


def _check_gold(gold: Any, names: set[str], where: str) -> list[dict]:
    if not isinstance(gold, list) or not gold:
        raise TaskDataError(f"{where}: 'ground_truth' must be a non-empty list of calls")
    for k, call in enumerate(gold):
        if not (isinstance(call, dict) and len(call) == 1
                and isinstance(next(iter(call.values())), dict)):
            raise TaskDataError(f"{where}: gold call {k} must be {{function: {{parameter: [values]}}}}")
        name = next(iter(call))
        if name not in names:
            raise TaskDataError(f"{where}: gold call {k} names {name!r}, which the question does not offer")
    return gold


def _read_gold(path: Path) -> dict[str, tuple[Any, str]]:
    """``id -> (ground_truth, "file:line")`` of a possible-answer file."""
    out: dict[str, tuple[Any, str]] = {}
    for line, obj in read_jsonl(path):
        if not isinstance(obj.get("id"), str) or "ground_truth" not in obj:
            raise TaskDataError(f"{path}:{line}: expected an object with 'id' and 'ground_truth'")
        out[obj["id"]] = (obj["ground_truth"], f"{path}:{line}")
    return out


def parse_bfcl_row(obj: dict, category: str, gold: dict[str, tuple[Any, str]] | None,
                   where: str) -> Example:
    """An Example from a BFCL question row and its category's gold answers (``None``: irrelevance)."""
    if not isinstance(obj.get("id"), str) or not obj["id"]:
        raise TaskDataError(f"{where}: missing 'id'")
    turn = _check_turn(obj.get("question"), where)
    functions = _check_functions(obj.get("function"), where)
    calls = None
    if gold is not None:
        if obj["id"] not in gold:
            raise TaskDataError(f"{where}: no possible answer for id {obj['id']!r}")
        found, gold_where = gold[obj["id"]]
        calls = _check_gold(found, {f["name"] for f in functions}, gold_where)
    return Example(
        id=obj["id"], question="\n\n".join(m["content"].strip() for m in turn),
        answers=[json.dumps(gold_reply(calls, functions), ensure_ascii=False)],
        meta={"category": category, "toolset": toolset_key(functions)},
        payload={"turn": turn, "functions": functions, "gold": calls,
                 "tools": [openai_tool(f) for f in functions]})


def _categories(value: Any) -> list[str]:
    """The ``categories`` option as a list (a string is split on commas), each one BFCL's."""
    names = value.split(",") if isinstance(value, str) else value
    if not isinstance(names, (list, tuple)) or not names or not all(isinstance(n, str) for n in names):
        raise InputError(f"task 'bfcl': option categories={value!r} must be a non-empty list of "
                         f"category names: {', '.join(CATEGORIES)}")
    out: list[str] = []
    for name in (n.strip() for n in names):
        if name not in CATEGORIES:
            raise InputError(f"task 'bfcl': unknown category {name!r}; categories: {', '.join(CATEGORIES)}")
        if name not in out:
            out.append(name)
    return out


# --------------------------------------------------------------------------- the task

#: the way out is a condition ("If none ... reply with []"): worded as an order ("Reply with []
#: when none of the functions fits the request."), it made Qwen2.5-Coder-0.5B reply [] to 3 of 4
#: questions that needed calls in a 6-row check; worded this way, to none (the 1.5B: none either way)
_INSTRUCTION = (
    "Reply with only a JSON list of the function calls that answer the request, of the form "
    '[{"name": "<function name>", "arguments": {"<parameter>": <value>, ...}}, ...], '
    "and nothing else. If none of the functions can answer the request, reply with []."
)
_TOOLS_TEXT = "You can call the following functions (JSON specifications):\n{tools}\n\n"


class BFCLTask(Task):
    """BFCL v4 single-turn function calling; correct under BFCL's AST rules (module docs)."""

    equivalence = CALLS_EQUIVALENCE
    calls_parser = staticmethod(parse_reply_calls)

    def _answer_key(self, answer: str | None) -> tuple | None:
        return calls_key(answer)

    name = "bfcl"
    description = ("BFCL v4 function calling (simple_python, multiple, parallel, parallel_multiple, "
                   "irrelevance; 1,240 rows), zero-shot, tools offered through the chat template; "
                   "correct under BFCL's AST rules (irrelevance: no call)")
    data_hint = ("a folder with BFCL_v4_<category>.json and possible_answer/BFCL_v4_<category>.json; "
                 "without one, the pinned bfcl-eval==2026.3.23 wheel is fetched into $ACUTE_HOME")
    data_folder = "bfcl"
    default_split = "test"
    #: the longest gold reply is 321 Qwen2.5 tokens as compact JSON (4 of 1,240 over 200)
    max_new_tokens = 384
    stop_strings = ()
    metadata_fields = ("category",)
    #: records offered the same functions share most of their prompt
    default_group_by = "toolset"
    data_source = f"{PACKAGE}=={VERSION} sha256:{SHA256}"
    options = {"categories": list(CATEGORIES)}

    def __init__(self, **options: Any):
        if "categories" in options:
            options["categories"] = _categories(options["categories"])
        super().__init__(**options)
        self.categories = list(self.categories)

    # ----------------------------------------------------------------- loading
    def resolve_path(self, path: str | os.PathLike | None) -> Path:
        """``path``, else ``$ACUTE_DATA/bfcl`` when it exists, else the fetched wheel's data."""
        if path is None:
            root = os.environ.get(DATA_ENV)
            if not (root and (Path(root) / self.data_folder).is_dir()):
                return fetch_bfcl()
        return super().resolve_path(path)

    def _read(self, path: Path, split: str) -> list[Example]:
        if split != "test":
            raise InputError(f"task {self.name!r} has one split, 'test'; got {split!r}")
        if not path.is_dir():
            raise InputError(f"task {self.name!r}: data must be a folder ({self.data_hint}), got {path}")
        out: list[Example] = []
        for category in self.categories:
            questions = path / question_member(category)
            if not questions.is_file():
                raise FileNotFoundError(f"task {self.name!r}: no {questions} for category {category!r}")
            gold = None if category in NO_ANSWER_FILE else self._gold(path / answer_member(category))
            out += self._rows(read_jsonl(questions),
                              lambda _, obj, where, c=category, g=gold: parse_bfcl_row(obj, c, g, where),
                              lambda ln, q=questions: f"{q}:{ln}")
        return out

    @staticmethod
    def _gold(path: Path) -> dict[str, tuple[Any, str]]:
        if not path.is_file():
            raise FileNotFoundError(f"task 'bfcl': no gold answers {path}")
        return _read_gold(path)

    def _assign_wrong_types(self, examples: list[Example]) -> list[Example]:
        """Wrong-type answer: another row's gold calls that use none of this row's functions."""
        offered = {ex.id: {f["name"] for f in ex.payload["functions"]} for ex in examples}
        called = {ex.id: {next(iter(c)) for c in ex.payload["gold"] or ()} for ex in examples}
        return assign_wrong_types(examples, seed=self.seed, type_of=lambda ex: "calls",
                                  differs=lambda ex, other: not (called[other.id] & offered[ex.id]),
                                  accept=self._is_wrong_reply)

    # ----------------------------------------------------------------- prompting
    def _tools_text(self, ex: Example) -> str:
        specs = [_function_schema(f) for f in ex.payload["functions"]]
        return _TOOLS_TEXT.format(tools=json.dumps(specs, ensure_ascii=False))

    def chat_tools(self, ex: Example) -> list[dict]:
        return ex.payload["tools"]

    def chat_messages(self, ex: Example, tools_in_template: bool = False) -> list[dict[str, str]]:
        """The question's messages, the last one with the instruction after it and, unless the
        template shows the tools, their specifications before it."""
        messages = [dict(m) for m in ex.payload["turn"]]
        prefix = "" if tools_in_template else self._tools_text(ex)
        messages[-1]["content"] = f"{prefix}{messages[-1]['content'].strip()}\n\n{_INSTRUCTION}"
        return messages

    def plain_prompt(self, ex: Example) -> str:
        return f"{self._tools_text(ex)}{ex.question}\n\n{_INSTRUCTION}\nCalls:"

    # ----------------------------------------------------------------- labelling
    @staticmethod
    def _graded_calls(ex: Example, calls: list[dict] | None) -> list[dict] | None:
        """The calls BFCL grades: on an irrelevance row a reply without parseable calls made none."""
        return [] if calls is None and ex.payload["gold"] is None else calls

    def extract(self, ex: Example, generation: str) -> str | None:
        """The reply's parsed calls as compact JSON, or ``None`` when there are none to parse (on
        every row: what the reply says reads no gold)."""
        calls = self.calls_parser(generation)
        return None if calls is None else json.dumps(calls, ensure_ascii=False)

    def is_correct(self, ex: Example, generation: str) -> bool:
        calls = self._graded_calls(ex, self.calls_parser(generation))
        return bfcl_error(calls, ex.payload["gold"], ex.payload["functions"]) is None

    def label_details(self, ex: Example, generation: str) -> dict[str, Any]:
        calls = self.calls_parser(generation)
        error = bfcl_error(self._graded_calls(ex, calls), ex.payload["gold"], ex.payload["functions"])
        return {"answer": None if calls is None else json.dumps(calls, ensure_ascii=False),
                "correct": error is None, "parse_error": calls is None,
                "n_calls": None if calls is None else len(calls),
                "n_gold_calls": len(ex.payload["gold"] or ()),
                **reply_structure(calls, ex.payload["functions"])}

    def answer_text(self, ex: Example, answer: Any) -> str:
        """A JSON string of calls is returned as is; a list of calls is serialised."""
        if isinstance(answer, (list, dict)):
            return json.dumps(answer, ensure_ascii=False)
        return str(answer).strip()
