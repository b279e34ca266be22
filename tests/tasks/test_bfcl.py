"""BFCL v4 as a task (acute.tasks.bfcl, acute.tasks.bfcl_data), on small files the tests write in
BFCL's own line-per-object format: loading and category selection, BFCL's AST labelling rules
against hand-made replies, ``<tool_call>`` replies, prompts with tools offered by the chat
template (and without), APIGen's prompts unchanged, and the wheel fetch's failures (no network:
the download step is replaced)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import zipfile
from pathlib import Path

import pytest

from acute.errors import InputError, TaskDataError
from acute.tasks import get_task
from acute.tasks import bfcl_data
from acute.tasks.bfcl import bfcl_error, json_schema, openai_tool, standardize
from acute.tasks.tool_calls import REPLY_FIELDS, offered_functions, parse_reply_calls, reply_message, reply_structure
from acute.testing import CHATML_TEMPLATE, TOOLS_TEMPLATE, make_tiny_tokenizer


# ----------------------------------------------------------------------------- the fixture

def _fn(name: str, properties: dict, required: list[str], description: str = "") -> dict:
    return {"name": name, "description": description or f"The {name} function.",
            "parameters": {"type": "dict", "properties": properties, "required": required}}


def _q(row_id: str, text: str, functions: list[dict]) -> dict:
    return {"id": row_id, "question": [[{"role": "user", "content": text}]], "function": functions}


TRIANGLE = _fn("calculate_triangle_area", {
    "base": {"type": "integer", "description": "The base."},
    "height": {"type": "integer", "description": "The height."},
    "unit": {"type": "string", "description": "The unit."}}, ["base", "height"])
FLIGHT = _fn("book_flight", {
    "city": {"type": "string", "description": "Destination."},
    "price": {"type": "float", "description": "Maximum price."},
    "passengers": {"type": "integer", "description": "How many travel."},
    "dates": {"type": "array", "items": {"type": "string"}, "description": "Travel dates."},
    "options": {"type": "dict", "description": "Seat and meals.", "properties": {
        "seat": {"type": "string", "description": "Seat."},
        "meals": {"type": "integer", "description": "Meals."}}},
    "direct": {"type": "boolean", "description": "Direct flights only."},
    "stops": {"type": "tuple", "items": {"type": "string"}, "description": "Stops."},
    "extra": {"type": "any", "description": "Anything."}}, ["city", "price"])
SIDES = _fn("triangle_properties.get", {
    "side1": {"type": "integer", "description": "Side 1."},
    "side2": {"type": "integer", "description": "Side 2."},
    "side3": {"type": "integer", "description": "Side 3."}}, ["side1", "side2", "side3"])
CIRCLE = _fn("circle_properties.get", {"radius": {"type": "float", "description": "Radius."}}, ["radius"])
PLAY = _fn("spotify.play", {"artist": {"type": "string", "description": "Artist."},
                            "duration": {"type": "integer", "description": "Minutes."}}, ["artist", "duration"])
MULTIPLES = _fn("math_toolkit.sum_of_multiples", {
    "lower_limit": {"type": "integer", "description": "Start."},
    "upper_limit": {"type": "integer", "description": "End."},
    "multiples": {"type": "array", "items": {"type": "integer"}, "description": "Numbers."}},
    ["lower_limit", "upper_limit", "multiples"])
PRIMES = _fn("math_toolkit.product_of_primes", {"count": {"type": "integer", "description": "n."}}, ["count"])
BMI = _fn("determine_body_mass_index", {"weight": {"type": "float", "description": "kg."},
                                        "height": {"type": "float", "description": "m."}}, ["weight", "height"])

QUESTIONS = {
    "simple_python": [
        _q("simple_python_0", "Find the area of a triangle with a base of 10 and height of 5.", [TRIANGLE]),
        _q("simple_python_1", "Book a flight to New York for at most 100 dollars for 2.", [FLIGHT]),
    ],
    "multiple": [
        _q("multiple_0", "Properties of a triangle with sides 5, 4 and 3?", [SIDES, CIRCLE]),
        _q("multiple_1", "Properties of a circle of radius 2.5?", [SIDES, CIRCLE]),
    ],
    "parallel": [
        _q("parallel_0", "Play Taylor Swift for 20 minutes and Maroon 5 for 15.", [PLAY]),
        _q("parallel_1", "Play Adele for 10 minutes and Adele for 10 more.", [PLAY]),
    ],
    "parallel_multiple": [
        _q("parallel_multiple_0", "Sum the multiples of 3 and 5 below 1000; product of 5 primes.",
           [MULTIPLES, PRIMES]),
        _q("parallel_multiple_1", "Product of the first 3 and of the first 4 primes.", [PRIMES]),
    ],
    "irrelevance": [
        _q("irrelevance_0", "Calculate the area of a triangle with base 10 and height 5.", [BMI]),
        _q("irrelevance_1", "Who wrote Hamlet?", [PLAY]),
    ],
}
GOLD = {
    "simple_python": [
        {"id": "simple_python_0", "ground_truth": [
            {"calculate_triangle_area": {"base": [10], "height": [5], "unit": ["units", ""]}}]},
        {"id": "simple_python_1", "ground_truth": [{"book_flight": {
            "city": ["New York, NY", "NYC"], "price": [100.0], "passengers": [2, ""],
            "dates": [["2024-01-01", "2024-01-05"], ""],
            "options": [{"seat": ["window"], "meals": [2, ""]}, ""], "direct": [True, ""],
            "stops": [["Paris"], ""]}}]},
    ],
    "multiple": [
        {"id": "multiple_0", "ground_truth": [{"triangle_properties.get": {
            "side1": [5], "side2": [4], "side3": [3]}}]},
        {"id": "multiple_1", "ground_truth": [{"circle_properties.get": {"radius": [2.5]}}]},
    ],
    "parallel": [
        {"id": "parallel_0", "ground_truth": [
            {"spotify.play": {"artist": ["Taylor Swift"], "duration": [20]}},
            {"spotify.play": {"artist": ["Maroon 5"], "duration": [15]}}]},
        {"id": "parallel_1", "ground_truth": [
            {"spotify.play": {"artist": ["Adele"], "duration": [10]}},
            {"spotify.play": {"artist": ["Adele"], "duration": [10]}}]},
    ],
    "parallel_multiple": [
        {"id": "parallel_multiple_0", "ground_truth": [
            {"math_toolkit.sum_of_multiples": {"lower_limit": [1], "upper_limit": [1000],
                                               "multiples": [[3, 5]]}},
            {"math_toolkit.product_of_primes": {"count": [5]}}]},
        {"id": "parallel_multiple_1", "ground_truth": [
            {"math_toolkit.product_of_primes": {"count": [3]}},
            {"math_toolkit.product_of_primes": {"count": [4]}}]},
    ],
}


def _write_lines(path: Path, rows: list) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def write_bfcl(folder: Path, questions: dict = QUESTIONS, gold: dict = GOLD) -> Path:
    """A BFCL data folder: BFCL_v4_<category>.json and possible_answer/BFCL_v4_<category>.json."""
    for category, rows in questions.items():
        _write_lines(folder / f"BFCL_v4_{category}.json", rows)
    for category, rows in gold.items():
        _write_lines(folder / "possible_answer" / f"BFCL_v4_{category}.json", rows)
    return folder


@pytest.fixture
def bfcl_dir(tmp_path):
    return write_bfcl(tmp_path / "bfcl")


@pytest.fixture
def rows(bfcl_dir):
    task = get_task("bfcl")
    return task, {ex.id: ex for ex in task.load(bfcl_dir)}


def calls(*items) -> str:
    """A JSON reply from ``(name, arguments)`` pairs."""
    return json.dumps([{"name": n, "arguments": a} for n, a in items])


# ----------------------------------------------------------------------------- loading

def test_loads_every_category_with_meta_and_gold(rows):
    task, by_id = rows
    assert list(by_id) == [q["id"] for rs in QUESTIONS.values() for q in rs]
    ex = by_id["simple_python_0"]
    assert ex.meta["category"] == "simple_python" and ex.meta["toolset"] == "calculate_triangle_area"
    assert by_id["multiple_0"].meta["toolset"] == "circle_properties.get|triangle_properties.get"
    assert ex.question == "Find the area of a triangle with a base of 10 and height of 5."
    assert json.loads(ex.answers[0]) == [{"name": "calculate_triangle_area",
                                          "arguments": {"base": 10, "height": 5, "unit": "units"}}]
    assert by_id["irrelevance_0"].answers == ["[]"]
    assert task.metadata_fields == ("category",) and "n_gold_calls" not in task.metadata_fields
    assert task.default_group_by == "toolset"
    for ex in by_id.values():  # every gold answer, written as a reply, is right
        assert task.is_correct(ex, ex.answers[0]), ex.id
        assert ex.wrong_type is None or not task.is_correct(ex, ex.wrong_type), ex.id


def test_category_selection_and_unknown_category(bfcl_dir):
    task = get_task("bfcl", categories=["irrelevance", "parallel"])
    assert [ex.id for ex in task.load(bfcl_dir)] == ["irrelevance_0", "irrelevance_1",
                                                     "parallel_0", "parallel_1"]
    assert get_task("bfcl", categories="multiple, irrelevance").categories == ["multiple", "irrelevance"]
    assert get_task("bfcl").settings()["categories"] == list(bfcl_data.CATEGORIES)
    with pytest.raises(InputError, match="unknown category 'live_simple'.*simple_python, multiple, "
                                         "parallel, parallel_multiple, irrelevance"):
        get_task("bfcl", categories=["live_simple"])
    with pytest.raises(InputError, match="non-empty list"):
        get_task("bfcl", categories=[])


def test_bad_data_names_file_and_row(tmp_path, bfcl_dir):
    with pytest.raises(InputError, match="one split"):
        get_task("bfcl").load(bfcl_dir, split="train")
    with pytest.raises(InputError, match="must be a folder"):
        get_task("bfcl").load(bfcl_dir / "BFCL_v4_multiple.json")
    gold = dict(GOLD, multiple=GOLD["multiple"][:1])
    folder = write_bfcl(tmp_path / "no-gold", gold=gold)
    with pytest.raises(TaskDataError, match=r"BFCL_v4_multiple.json:2: no possible answer for id 'multiple_1'"):
        get_task("bfcl").load(folder)
    gold = dict(GOLD, parallel=[{"id": "parallel_0", "ground_truth": [{"nope": {}}]}, GOLD["parallel"][1]])
    folder = write_bfcl(tmp_path / "bad-name", gold=gold)
    with pytest.raises(TaskDataError, match=r"possible_answer/BFCL_v4_parallel.json:1: .*'nope'"):
        get_task("bfcl").load(folder)
    (bfcl_dir / "possible_answer" / "BFCL_v4_simple_python.json").unlink()
    with pytest.raises(FileNotFoundError, match="no gold answers"):
        get_task("bfcl").load(bfcl_dir)
    questions = dict(QUESTIONS, irrelevance=[{"id": "irrelevance_0", "question": [], "function": [BMI]}])
    folder = write_bfcl(tmp_path / "bad-question", questions=questions)
    with pytest.raises(TaskDataError, match=r"BFCL_v4_irrelevance.json:1: 'question' must hold one turn"):
        get_task("bfcl").load(folder)
    with pytest.warns(UserWarning, match="skipped 1 malformed row"):
        assert len(get_task("bfcl", on_error="skip").load(folder)) == 8


# ----------------------------------------------------------------------------- labelling rules

RIGHT_FLIGHT = {"city": "New York, NY", "price": 100.0}


@pytest.mark.parametrize("reply, correct", [
    (calls(("calculate_triangle_area", {"base": 10, "height": 5})), True),  # "" allows omission
    (calls(("calculate_triangle_area", {"base": 10, "height": 5, "unit": "units"})), True),
    (calls(("calculate_triangle_area", {"base": 10, "height": 5, "unit": ""})), True),  # as BFCL
    (calls(("triangle_area", {"base": 10, "height": 5})), False),  # wrong name
    (calls(("calculate_triangle_area", {"base": 10})), False),  # missing required
    (calls(("calculate_triangle_area", {"base": 10, "height": 5, "colour": "red"})), False),  # unknown
    (calls(("calculate_triangle_area", {"base": 10, "height": 6})), False),  # value not allowed
    (calls(("calculate_triangle_area", {"base": 10.0, "height": 5})), False),  # float for int
    (calls(("calculate_triangle_area", {"base": "10", "height": 5})), False),  # string for int
    (calls(("calculate_triangle_area", {"base": True, "height": 5})), False),  # bool for int
    (calls(("calculate_triangle_area", {"base": 10, "height": 5}),
           ("calculate_triangle_area", {"base": 10, "height": 5})), False),  # two calls
    ("[]", False),
])
def test_simple_rules(rows, reply, correct):
    task, by_id = rows
    details = task.label_details(by_id["simple_python_0"], reply)
    assert details["correct"] is correct and details["parse_error"] is False


@pytest.mark.parametrize("arguments, correct", [
    ({}, True),
    ({"price": 100}, True),  # int for float
    ({"city": "new york ny"}, True),  # BFCL's string normalisation
    ({"city": "NEW-YORK_NY."}, True),
    ({"city": "NYC"}, True),
    ({"city": "New York City"}, False),
    ({"price": "100"}, False),
    ({"passengers": 2}, True),
    ({"passengers": 2.0}, False),
    ({"dates": ["2024-01-01", "2024-01-05"]}, True),
    ({"dates": ["2024-01-05", "2024-01-01"]}, False),  # lists compare in order
    ({"dates": ["2024/01/01", "2024.01.05"]}, True),  # string elements normalised
    ({"dates": ["2024-01-01"]}, False),
    ({"dates": "2024-01-01"}, False),
    ({"options": {"seat": "Window"}}, True),  # "meals" may be omitted
    ({"options": {"seat": "window", "meals": 2}}, True),
    ({"options": {"seat": "aisle"}}, False),
    ({"options": {"meals": 2}}, False),  # "seat" may not be omitted
    ({"options": {"seat": "window", "drinks": 1}}, False),
    ({"options": {"seat": "window", "meals": 2.0}}, True),  # in objects values compare by equality
    ({"direct": True}, True),
    ({"direct": "true"}, False),
    ({"stops": ["paris"]}, True),  # a tuple is a list
    ({"extra": "x"}, False),  # not in the gold answer: unexpected
])
def test_parameter_values(rows, arguments, correct):
    task, by_id = rows
    reply = calls(("book_flight", {**RIGHT_FLIGHT, **arguments}))
    assert task.is_correct(by_id["simple_python_1"], reply) is correct


def test_gold_parameter_that_may_not_be_omitted(rows, bfcl_dir):
    task, by_id = rows
    ex = by_id["simple_python_1"]
    gold = [{"book_flight": {**ex.payload["gold"][0]["book_flight"], "passengers": [2]}}]
    assert bfcl_error([{"name": "book_flight", "arguments": dict(RIGHT_FLIGHT)}], gold,
                      ex.payload["functions"]) == "book_flight: parameter 'passengers' is missing"
    assert "missing required parameter 'price'" in bfcl_error(
        [{"name": "book_flight", "arguments": {"city": "NYC"}}], gold, ex.payload["functions"])


def test_variable_gold_values_compare_as_is():
    # BFCL writes a variable name as a string where the specification wants another type
    fn = _fn("train", {"data": {"type": "any"}, "epochs": {"type": "integer"}}, ["data", "epochs"])
    gold = [{"train": {"data": ["my_data"], "epochs": ["n_epochs"]}}]
    assert bfcl_error([{"name": "train", "arguments": {"data": "my_data", "epochs": "n_epochs"}}],
                      gold, [fn]) is None
    assert bfcl_error([{"name": "train", "arguments": {"data": "My Data", "epochs": "n_epochs"}}],
                      gold, [fn]) is None  # 'any' is a string to BFCL's checker: normalised
    assert bfcl_error([{"name": "train", "arguments": {"data": "my_data", "epochs": "N_epochs"}}],
                      gold, [fn]) is not None  # a variable name compares as is
    assert bfcl_error([{"name": "train", "arguments": {"data": "my_data", "epochs": 3}}],
                      gold, [fn]) is not None


def test_multiple_picks_the_right_function(rows):
    task, by_id = rows
    ex = by_id["multiple_0"]
    assert task.is_correct(ex, calls(("triangle_properties.get", {"side1": 5, "side2": 4, "side3": 3})))
    assert not task.is_correct(ex, calls(("circle_properties.get", {"radius": 5})))
    assert not task.is_correct(ex, calls(("triangle_properties_get", {"side1": 5, "side2": 4, "side3": 3})))
    assert not task.is_correct(ex, calls(("triangle_properties.get", {"side1": 5, "side2": 4, "side3": 3}),
                                         ("circle_properties.get", {"radius": 5})))
    assert task.is_correct(by_id["multiple_1"], calls(("circle_properties.get", {"radius": 2.5})))


def test_parallel_any_order_and_count(rows):
    task, by_id = rows
    ex = by_id["parallel_0"]
    swift, maroon = ("spotify.play", {"artist": "Taylor Swift", "duration": 20}), \
        ("spotify.play", {"artist": "Maroon 5", "duration": 15})
    assert task.is_correct(ex, calls(swift, maroon)) and task.is_correct(ex, calls(maroon, swift))
    assert not task.is_correct(ex, calls(swift))
    assert not task.is_correct(ex, calls(swift, maroon, swift))
    assert not task.is_correct(ex, calls(swift, swift))  # each gold call to a distinct reply call
    adele = ("spotify.play", {"artist": "adele", "duration": 10})
    assert task.is_correct(by_id["parallel_1"], calls(adele, adele))
    pm = by_id["parallel_multiple_0"]
    primes = ("math_toolkit.product_of_primes", {"count": 5})
    sums = ("math_toolkit.sum_of_multiples", {"lower_limit": 1, "upper_limit": 1000, "multiples": [3, 5]})
    assert task.is_correct(pm, calls(primes, sums))
    assert not task.is_correct(pm, calls(primes, ("math_toolkit.sum_of_multiples",
                                                  {"lower_limit": 1, "upper_limit": 1000, "multiples": [5, 3]})))
    details = task.label_details(pm, calls(primes))
    assert details["n_calls"] == 1 and details["n_gold_calls"] == 2 and not details["correct"]


@pytest.mark.parametrize("reply, correct, parses", [
    ("[]", True, True),
    ("None of the functions can compute the area of a triangle.", True, False),
    ('[{"name": "determine_body_mass_index", "argu', True, False),  # cut off: no call made
    (calls(("determine_body_mass_index", {"weight": 10.0, "height": 5.0})), False, True),
    ('<tool_call>\n{"name": "determine_body_mass_index", "arguments": {}}\n</tool_call>', False, True),
])
def test_irrelevance_right_iff_no_call(rows, reply, correct, parses):
    task, by_id = rows
    details = task.label_details(by_id["irrelevance_0"], reply)
    assert details["correct"] is correct and task.is_correct(by_id["irrelevance_0"], reply) is correct
    assert details["parse_error"] is (not parses) and (details["answer"] is None) is (not parses)
    assert details["n_gold_calls"] == 0


@pytest.mark.parametrize("reply", [
    "None of the functions can compute the area of a triangle.", "[]",
    '[{"name": "determine_body_mass_index", "argu',
    calls(("determine_body_mass_index", {"weight": 10.0, "height": 5.0})),
])
def test_what_a_record_says_of_the_reply_reads_no_gold(rows, reply):
    """The same reply to the same functions on an irrelevance row (no call is right) and on a
    row that needs a call: everything but the label and the gold's own count is equal, so the
    visible controls and the samples' agreement cannot read the category from it."""
    task, by_id = rows
    irrelevant = by_id["irrelevance_0"]
    needed = dataclasses.replace(irrelevant, id="needs_a_call",
                                 payload={**irrelevant.payload, "gold": [{"determine_body_mass_index": {
                                     "weight": [10.0], "height": [5.0]}}]})
    a, b = task.label_details(irrelevant, reply), task.label_details(needed, reply)
    seen = set(a) - {"correct", "n_gold_calls"}
    assert {k: a[k] for k in seen} == {k: b[k] for k in seen}
    assert task.extract(irrelevant, reply) == task.extract(needed, reply) == a["answer"]


def test_unparseable_reply_is_wrong_and_a_parse_error(rows):
    task, by_id = rows
    for text in ("The area is 25.", '[{"name": "calculate_triangle_area", "arguments": {"base": 10',
                 "calculate_triangle_area(base=10, height=5)"):
        details = task.label_details(by_id["simple_python_0"], text)
        assert details["correct"] is False and details["parse_error"] is True and details["answer"] is None
        assert details["n_calls"] is None and all(details[k] == 0 for k in REPLY_FIELDS)


def test_label_details_carry_the_reply_structure(rows):
    task, by_id = rows
    details = task.label_details(by_id["simple_python_0"], calls(
        ("calculate_triangle_area", {"base": 10, "colour": "red"})))
    assert set(details) == {"answer", "correct", "parse_error", "n_calls", "n_gold_calls", *REPLY_FIELDS}
    assert details["reply_calls"] == 1 and details["reply_missing_required"] == 1
    assert details["reply_unknown_names"] == 1 and details["n_gold_calls"] == 1


def test_standardize_is_bfcls_rule():
    assert standardize("New York, NY") == standardize("new york ny") == "newyorkny"
    assert standardize("It's 3.5/4 - a_b*c^d") == 'it"s354abcd'


# ----------------------------------------------------------------------------- <tool_call> replies

F1 = '<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>'


@pytest.mark.parametrize("text, content, calls", [
    ("Sure.\n" + F1, "Sure.", [{"name": "f", "arguments": {"a": 1}}]),
    (F1 + F1, None, [{"name": "f", "arguments": {"a": 1}}] * 2),
    ('[{"name": "f", "arguments": {}}]', None, [{"name": "f", "arguments": {}}]),  # bare calls: the message
    ("It is sunny.", "It is sunny.", []),
    ("[]", "[]", []),  # calls nothing: the reply is its text
    (F1 + '\n<tool_call>\n{"name": "g", "argum', F1 + '\n<tool_call>\n{"name": "g", "argum', []),  # cut off
])
def test_a_reply_as_an_assistant_message(text, content, calls):
    assert reply_message(text) == (content, calls)


def test_offered_tools_count_a_reply_as_the_task_counts_it(rows):
    """The reply structure counted against OpenAI tools (what a chat request offers) equals the
    task's own count against its functions (what the store's records hold)."""
    task, by_id = rows
    ex = by_id["simple_python_1"]
    reply = calls(("book_flight", {"city": "NYC", "price": 100, "colour": "red"}))
    assert offered_functions(task.chat_tools(ex)) == [openai_tool(f)["function"] for f in ex.payload["functions"]]
    live = reply_structure(task.calls_parser(reply), offered_functions(task.chat_tools(ex)))
    stored = {k: v for k, v in task.label_details(ex, reply).items() if k in REPLY_FIELDS}
    assert live == stored and stored["reply_unknown_names"] == 1 and stored["reply_calls"] == 1

def test_tool_call_blocks_are_the_call_list(rows):
    one = '<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>'
    assert parse_reply_calls(one) == [{"name": "f", "arguments": {"a": 1}}]
    two = one + '\n<tool_call>\n{"name": "g", "arguments": {"b": "x"}}\n</tool_call>'
    assert parse_reply_calls("Sure.\n" + two) == [{"name": "f", "arguments": {"a": 1}},
                                                  {"name": "g", "arguments": {"b": "x"}}]
    assert parse_reply_calls(one + '\n<tool_call>\n{"name": "g", "argum') is None  # cut off
    assert parse_reply_calls('<tool_call>[{"name": "f"}, {"name": "g"}]</tool_call>') == [
        {"name": "f", "arguments": {}}, {"name": "g", "arguments": {}}]
    assert parse_reply_calls('<tool_call>no call</tool_call>') is None
    assert parse_reply_calls('[{"name": "f", "arguments": {}}]') == [{"name": "f", "arguments": {}}]
    task, by_id = rows
    blocks = "".join(f'<tool_call>\n{json.dumps({"name": "spotify.play", "arguments": a})}\n</tool_call>\n'
                     for a in ({"artist": "Maroon 5", "duration": 15}, {"artist": "Taylor Swift", "duration": 20}))
    assert task.label_details(by_id["parallel_0"], blocks)["correct"] is True


# ----------------------------------------------------------------------------- prompts

@pytest.fixture(scope="module")
def tools_tokenizer():
    tok = make_tiny_tokenizer()
    tok.chat_template = TOOLS_TEMPLATE
    return tok


def test_json_schema_types():
    tool = openai_tool(FLIGHT)
    assert tool["type"] == "function" and tool["function"]["name"] == "book_flight"
    params = tool["function"]["parameters"]
    assert params["type"] == "object" and params["required"] == ["city", "price"]
    props = params["properties"]
    assert props["price"]["type"] == "number" and props["stops"]["type"] == "array"
    assert props["options"]["type"] == "object" and props["options"]["properties"]["meals"]["type"] == "integer"
    assert "type" not in props["extra"] and props["extra"]["description"] == "Anything."
    assert props["city"] == FLIGHT["parameters"]["properties"]["city"]
    assert FLIGHT["parameters"]["type"] == "dict"  # the data is not changed
    assert json_schema({"type": "array", "items": {"type": "float"}}) == {"type": "array", "items": {"type": "number"}}


def test_prompt_offers_tools_through_the_template(rows, tools_tokenizer):
    task, by_id = rows
    ex = by_id["multiple_0"]
    prompt = task.prompt(tools_tokenizer, ex)
    system, user = prompt.split("<|im_start|>user\n")
    tools = [json.loads(line) for line in system.split("<tools>\n")[1].split("\n</tools>")[0].splitlines()]
    assert tools == [openai_tool(SIDES), openai_tool(CIRCLE)]
    assert user.startswith("Properties of a triangle with sides 5, 4 and 3?\n\nReply with only a JSON list")
    assert user.endswith("reply with [].<|im_end|>\n<|im_start|>assistant\n")
    assert "JSON specifications" not in user
    assert user.endswith("<|im_end|>\n<|im_start|>assistant\n")


def test_prompt_without_template_tools_carries_them_in_the_text(rows, tiny_tokenizer):
    task, by_id = rows
    ex = by_id["multiple_0"]
    prompt = task.prompt(tiny_tokenizer, ex)  # ChatML without tools: the template ignores them
    assert prompt.startswith("<|im_start|>user\nYou can call the following functions (JSON specifications):\n")
    specs = json.loads(prompt.split("\n")[2])
    assert specs == [openai_tool(SIDES)["function"], openai_tool(CIRCLE)["function"]]
    assert "<|im_start|>system" not in prompt
    plain = task.prompt(tiny_tokenizer, ex, chat=False)
    assert plain.startswith("You can call the following functions") and plain.endswith("\nCalls:")
    assert "Properties of a triangle with sides 5, 4 and 3?\n\nReply with only" in plain


def test_apigen_prompts_are_unchanged(tiny_tokenizer, tools_tokenizer):
    from acute.tasks.apigen import parse_apigen_row

    row = {"id": 7, "query": "What is the weather in Paris?",
           "tools": [{"name": "get_weather", "description": "Weather of a city.",
                      "parameters": {"city": {"type": "str", "description": "The city."}}}],
           "answers": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}
    ex = parse_apigen_row(row, "row")
    task = get_task("apigen")
    user = ('You can call the following tools (JSON specifications):\n[{"name": "get_weather", '
            '"description": "Weather of a city.", "parameters": {"city": {"type": "str", "description": '
            '"The city."}}}]\n\nWrite the function calls that answer the user\'s query, using only these '
            'tools. Reply with only a JSON list of calls of the form [{"name": "<tool name>", "arguments": '
            '{"<parameter>": <value>, ...}}, ...] and nothing else.\n\nQuery: What is the weather in Paris?')
    chat = f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
    assert task.prompt(tiny_tokenizer, ex) == chat
    assert task.prompt(tools_tokenizer, ex) == chat  # a template that renders tools gets none
    assert task.prompt(tiny_tokenizer, ex, chat=False) == f"{user}\nCalls:"


# ----------------------------------------------------------------------------- fetching the wheel

def _fake_wheel(folder: Path, files: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"bfcl_eval-{bfcl_data.VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, text in files.items():
            zf.writestr(f"bfcl_eval/data/{name}", text)
    return wheel


def _wheel_files(source: Path) -> dict[str, str]:
    return {str(p.relative_to(source)): p.read_text(encoding="utf-8")
            for p in source.rglob("*.json")}


def test_fetch_refuses_another_hash_and_caches_nothing(tmp_path, monkeypatch, bfcl_dir):
    monkeypatch.setenv("ACUTE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("ACUTE_DATA", raising=False)
    monkeypatch.setattr(bfcl_data, "download_wheel", lambda dest: _fake_wheel(dest, _wheel_files(bfcl_dir)))
    with pytest.raises(TaskDataError) as info:
        get_task("bfcl").load()
    message = str(info.value)
    assert "bfcl-eval==2026.3.23" in message and bfcl_data.SHA256 in message and "Nothing was cached" in message
    data = tmp_path / "home" / "data"
    assert not bfcl_data.bfcl_cache_dir().exists() and list(data.iterdir()) == []


def test_fetch_reports_a_missing_wheel(tmp_path, monkeypatch):
    import subprocess

    monkeypatch.setenv("ACUTE_HOME", str(tmp_path / "home"))

    def pip_fails(cmd, **kw):
        assert cmd[1:5] == ["-m", "pip", "download", "--no-deps"] and "bfcl-eval==2026.3.23" in cmd
        return subprocess.CompletedProcess(cmd, 1, "", "ERROR: No matching distribution found")

    monkeypatch.setattr(subprocess, "run", pip_fails)
    with pytest.raises(TaskDataError, match=r"(?s)pip download failed.*No matching distribution.*"
                                            r"bfcl-eval==2026.3.23, expected sha256 3bb6dfa5"):
        bfcl_data.fetch_bfcl()
    monkeypatch.setattr(subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(cmd, 0, "", ""))
    with pytest.raises(TaskDataError, match="left no wheel"):
        bfcl_data.fetch_bfcl()
    assert list((tmp_path / "home" / "data").iterdir()) == []


def test_fetch_extracts_the_pinned_wheel_once(tmp_path, monkeypatch, bfcl_dir):
    monkeypatch.setenv("ACUTE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("ACUTE_DATA", raising=False)
    wheel = _fake_wheel(tmp_path / "made", _wheel_files(bfcl_dir))
    monkeypatch.setattr(bfcl_data, "SHA256", hashlib.sha256(wheel.read_bytes()).hexdigest())
    downloads = []

    def download(dest):
        downloads.append(dest)
        return _fake_wheel(dest, _wheel_files(bfcl_dir))

    monkeypatch.setattr(bfcl_data, "download_wheel", download)
    assert len(get_task("bfcl").load()) == 10
    assert len(get_task("bfcl", categories=["parallel"]).load()) == 2
    assert len(downloads) == 1
    cache = bfcl_data.bfcl_cache_dir()
    assert json.loads((cache / "source.json").read_text())["version"] == bfcl_data.VERSION
    assert [p.name for p in cache.parent.iterdir()] == [cache.name]  # no temporary folder left


def test_lists_of_objects_compare_element_wise():
    fn = _fn("order", {"items": {"type": "array", "items": {"type": "dict", "properties": {
        "sku": {"type": "string"}, "qty": {"type": "integer"}}}}}, ["items"])
    gold = [{"order": {"items": [[{"sku": ["A-1"], "qty": [2, ""]}, {"sku": ["B"], "qty": [1]}]]}}]

    def error(items):
        return bfcl_error([{"name": "order", "arguments": {"items": items}}], gold, [fn])

    assert error([{"sku": "a1", "qty": 2}, {"sku": "B", "qty": 1}]) is None
    assert error([{"sku": "A-1"}, {"sku": "B", "qty": 1}]) is None
    assert error([{"sku": "B", "qty": 1}, {"sku": "A-1", "qty": 2}]) is not None  # in order
    assert error([{"sku": "A-1", "qty": 2}]) is not None
    assert error([{"sku": "A-1", "qty": 2}, {"sku": "B"}]) is not None


def test_template_that_refuses_tools_falls_back_to_text(rows):
    task, by_id = rows
    tok = make_tiny_tokenizer()
    tok.chat_template = "{% if tools %}{{ raise_exception('no tools here') }}{% endif %}" + CHATML_TEMPLATE
    prompt = task.prompt(tok, by_id["parallel_0"])
    assert prompt.startswith("<|im_start|>user\nYou can call the following functions")
