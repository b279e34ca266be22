"""APIGen / xLAM function calling (zero-shot): emit a JSON list of calls for a query.

Data: the xLAM JSON array (``xlam_*.json``: ``{"id": int, "query": str, "answers": str (JSON),
"tools": str (JSON)}``) or the normalised JSONL (``tools``/``answers`` already parsed).

Labelling: the generation's calls equal the gold calls as a multiset (order of calls ignored),
each call's name equal and its arguments equal after type normalisation (``"5" == 5 == 5.0``,
``"true" == True``, JSON-looking strings parsed). Unparseable output is wrong and flagged
(``extract`` returns ``None``; ``label_details(...)["parse_error"]`` is True).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import TaskDataError
from .base import Example, Task, find_file, read_json_array, read_jsonl
from .tool_calls import CALLS_EQUIVALENCE, calls_equal, calls_key, normalize_value, parse_calls, reply_structure, toolset_key
from .answer_types import assign_wrong_types

__all__ = ["APIGenTask"]


def _load_json_field(value: Any, where: str, what: str) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError as e:
            raise TaskDataError(f"{where}: {what} is not valid JSON ({e.msg} at char {e.pos})") from None
    return value


def parse_apigen_row(obj: dict, where: str) -> Example:
    """An Example from an xLAM row (JSON-string fields) or a normalised row (parsed fields)."""
    for key in ("id", "query", "tools", "answers"):
        if key not in obj:
            raise TaskDataError(f"{where}: missing field {key!r}")
    query = obj["query"]
    if not isinstance(query, str) or not query.strip():
        raise TaskDataError(f"{where}: empty 'query'")
    tools = _load_json_field(obj["tools"], where, "'tools'")
    if not isinstance(tools, list) or not all(isinstance(t, dict) and isinstance(t.get("name"), str)
                                              for t in tools):
        raise TaskDataError(f"{where}: 'tools' must be a list of objects with a 'name'")
    answers = _load_json_field(obj["answers"], where, "'answers'")
    if not isinstance(answers, list) or not answers:
        raise TaskDataError(f"{where}: empty gold answer ('answers' must be a non-empty list of calls)")
    calls = []
    for k, a in enumerate(answers):
        if not (isinstance(a, dict) and isinstance(a.get("name"), str)
                and isinstance(a.get("arguments", {}), dict)):
            raise TaskDataError(f"{where}: gold call {k} must be an object with 'name' and "
                                "'arguments' (an object)")
        calls.append({"name": a["name"], "arguments": a.get("arguments", {})})
    gold = json.dumps(calls, ensure_ascii=False)
    return Example(id=str(obj["id"]), question=query.strip(), answers=[gold],
                   meta={"n_calls": len(calls), "toolset": toolset_key(tools)},
                   payload={"tools": tools, "calls": calls})


_INSTRUCTION = (
    "You can call the following tools (JSON specifications):\n{tools}\n\n"
    "Write the function calls that answer the user's query, using only these tools. "
    "Reply with only a JSON list of calls of the form "
    '[{{"name": "<tool name>", "arguments": {{"<parameter>": <value>, ...}}}}, ...] '
    "and nothing else."
)


class APIGenTask(Task):
    """xLAM function calling, zero-shot; correct iff the parsed calls equal the gold calls."""

    equivalence = CALLS_EQUIVALENCE
    calls_parser = staticmethod(parse_calls)

    def _answer_key(self, answer: str | None) -> tuple | None:
        return calls_key(answer)

    name = "apigen"
    description = ("APIGen/xLAM function calling, zero-shot: JSON list of calls; correct iff the calls "
                   "match the gold calls (normalised argument types, any order)")
    data_hint = ("an xLAM JSON array (xlam_<split>.json, fields id/query/answers/tools) or the "
                 "normalised <split>.jsonl, or their folder")
    data_folder = "apigen"
    default_split = "test"
    max_new_tokens = 256
    stop_strings = ()
    #: how many calls the request needs (3, 4, 5+ in the shared sample): what a curator knows of
    #: the question without the model, like a difficulty; the record's ``n_calls`` is the answer's
    metadata_fields = ("n_gold_calls",)
    #: records offered the same tools share most of their prompt (tool specs are ~87% of it)
    default_group_by = "toolset"

    def _read(self, path: Path, split: str) -> list[Example]:
        if path.is_dir():
            path = find_file(path, [f"{split}.jsonl", f"xlam_{split}.json",
                                    "xlam_function_calling_60k.json"], self.name, split)
        if path.suffix == ".json":
            return self._rows(enumerate(read_json_array(path)),
                              lambda _, obj, where: parse_apigen_row(obj, where),
                              lambda i: f"{path}: item {i}")
        return self._rows(read_jsonl(path), lambda _, obj, where: parse_apigen_row(obj, where),
                          lambda ln: f"{path}:{ln}")

    def _assign_wrong_types(self, examples: list[Example]) -> list[Example]:
        """Wrong-type answer: another row's gold calls that use none of this row's tools."""
        available = {ex.id: {t["name"] for t in ex.payload["tools"]} for ex in examples}
        called = {ex.id: {c["name"] for c in ex.payload["calls"]} for ex in examples}

        def differs(ex: Example, other: Example) -> bool:
            return not (called[other.id] & available[ex.id])

        return assign_wrong_types(examples, seed=self.seed, type_of=lambda ex: "calls",
                                  differs=differs, accept=self._is_wrong_reply)

    def _user_text(self, ex: Example) -> str:
        tools = json.dumps(ex.payload["tools"], ensure_ascii=False)
        return f"{_INSTRUCTION.format(tools=tools)}\n\nQuery: {ex.question}"

    def chat_messages(self, ex: Example) -> list[dict[str, str]]:
        return [{"role": "user", "content": self._user_text(ex)}]

    def plain_prompt(self, ex: Example) -> str:
        return f"{self._user_text(ex)}\nCalls:"

    def extract(self, ex: Example, generation: str) -> str | None:
        """The parsed calls as compact JSON, or ``None`` when the generation has no parseable calls."""
        calls = self.calls_parser(generation)
        return None if calls is None else json.dumps(calls, ensure_ascii=False)

    def is_correct(self, ex: Example, generation: str) -> bool:
        calls = self.calls_parser(generation)
        return calls is not None and calls_equal(calls, ex.payload["calls"])

    def label_details(self, ex: Example, generation: str) -> dict[str, Any]:
        calls = self.calls_parser(generation)
        return {"answer": None if calls is None else json.dumps(calls, ensure_ascii=False),
                "correct": calls is not None and calls_equal(calls, ex.payload["calls"]),
                "parse_error": calls is None,
                "n_calls": None if calls is None else len(calls),
                "n_gold_calls": len(ex.payload["calls"]),
                **reply_structure(calls, ex.payload["tools"])}

    def plausible_wrong(self, ex: Example) -> list[str]:
        """Near-miss call lists, each labelled wrong: the gold calls without the last one; with
        the first numeric/boolean argument changed (int +1, float x2, bool negated); with the first
        call's name replaced by another available tool's name. Returned as JSON strings."""
        gold = ex.payload["calls"]
        out: list[list[dict]] = []
        if len(gold) > 1:
            out.append([dict(c) for c in gold[:-1]])
        perturbed = json.loads(json.dumps(gold))
        done = False
        for call in perturbed:
            for key, v in call["arguments"].items():
                v = normalize_value(v)
                if isinstance(v, bool):
                    call["arguments"][key] = not v
                elif isinstance(v, int):
                    call["arguments"][key] = v + 1
                elif isinstance(v, float):
                    call["arguments"][key] = v * 2 if v else 1.0
                else:
                    continue
                done = True
                break
            if done:
                break
        if done:
            out.append(perturbed)
        others = [t["name"] for t in ex.payload["tools"] if t["name"] != gold[0]["name"]]
        if others:
            swapped = json.loads(json.dumps(gold))
            swapped[0]["name"] = others[0]
            out.append(swapped)
        return [json.dumps(c, ensure_ascii=False) for c in out if not calls_equal(c, gold)]

    def answer_text(self, ex: Example, answer: Any) -> str:
        """A JSON string of calls is returned as is; a list of calls is serialised."""
        if isinstance(answer, (list, dict)):
            return json.dumps(answer, ensure_ascii=False)
        return str(answer).strip()
