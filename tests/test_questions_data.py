"""Checks on the built-in question set ``acute/data/questions.jsonl`` and its generator."""

from __future__ import annotations

import collections
import importlib.util
import json
import operator
import re
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
GENERATOR = REPO / "examples" / "build_questions.py"
DATA = REPO / "acute" / "data" / "questions.jsonl"  # the committed file (not an installed copy)

KEYS = ["id", "question", "answers", "plausible_wrong", "wrong_type", "category", "difficulty", "answer_type"]
DIFFICULTIES = {"easy", "medium", "hard"}
ANSWER_TYPES = {"place", "person", "number", "date", "other"}


def norm(text: str) -> str:
    """Independent re-implementation of the answer normalisation described in the task spec."""
    text = "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))
    text = "".join(c if c.isalnum() or c.isspace() else " " for c in text.lower())
    return " ".join(w for w in text.split() if w not in {"a", "an", "the"})


def squad(text: str) -> str:
    """SQuAD-style normalisation (punctuation deleted, accents kept), as answer checkers often use."""
    text = unicodedata.normalize("NFKC", text).lower()
    text = re.sub(r"[^\w\s]|_", "", text)
    return " ".join(w for w in text.split() if w not in {"a", "an", "the"})


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    lines = DATA.read_text(encoding="utf-8").splitlines()
    parsed = []
    for number, line in enumerate(lines, start=1):
        assert line.strip(), f"blank line {number}"
        parsed.append(json.loads(line))
    return parsed


def _load_generator():
    spec = importlib.util.spec_from_file_location("build_questions", GENERATOR)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_norm_helpers_match_spec():
    assert squad("J.K. Rowling") == squad("JK Rowling") == "jk rowling"
    assert squad("Brasília") == "brasília"
    assert norm("The Milky Way!") == "milky way"
    assert norm("Brasília") == "brasilia"
    assert norm("J. K. Rowling") == "j k rowling"
    assert norm("a") == ""


def test_schema_ids_and_order(rows):
    assert 400 <= len(rows) <= 700
    for row in rows:
        assert list(row) == KEYS, row
        assert isinstance(row["question"], str) and row["question"].endswith("?")
        assert row["difficulty"] in DIFFICULTIES
        assert row["answer_type"] in ANSWER_TYPES
        assert re.fullmatch(r"[a-z_]+", row["category"])
    ids = [r["id"] for r in rows]
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)
    assert ids == [f"q-{i:04d}" for i in range(1, len(rows) + 1)]
    questions = [r["question"] for r in rows]
    assert len(set(questions)) == len(questions)


def test_answer_fields_non_empty(rows):
    for row in rows:
        for key in ("answers", "plausible_wrong"):
            values = row[key]
            assert isinstance(values, list) and values, (row["id"], key)
            assert all(isinstance(v, str) and norm(v) for v in values), (row["id"], key, values)
        assert isinstance(row["wrong_type"], str) and norm(row["wrong_type"]), row["id"]


def test_plausible_wrong_is_never_gold(rows):
    for row in rows:
        for form in (norm, squad):
            gold = {form(a) for a in row["answers"]}
            for wrong in row["plausible_wrong"]:
                assert form(wrong) not in gold, (row["id"], wrong, row["answers"])
                # a gold alias never appears as whole words inside a wrong answer either
                assert not any(f" {g} " in f" {form(wrong)} " for g in gold), (row["id"], wrong)
            assert form(row["wrong_type"]) not in gold, row["id"]


def test_no_gold_alias_inside_its_question(rows):
    """Echoing the question must never contain the answer (containment checkers would accept it)."""
    for row in rows:
        for form in (norm, squad):
            question = f" {form(row['question'])} "
            hits = [a for a in row["answers"] if f" {form(a)} " in question]
            assert not hits, (row["id"], row["question"], hits)


def test_numeric_rows_have_numeric_gold_and_distinct_wrong_values(rows):
    for row in rows:
        if row["answer_type"] not in ("number", "date"):
            continue
        value = int(row["answers"][0])
        for wrong in row["plausible_wrong"]:
            assert int(wrong) != value, (row["id"], wrong)
        if row["answer_type"] == "date":
            assert 1000 <= value <= 2030, row["id"]


def test_wrong_type_is_of_another_type(rows):
    types_of = collections.defaultdict(set)
    for row in rows:
        for alias in row["answers"]:
            types_of[norm(alias)].add(row["answer_type"])
    for row in rows:
        source_types = types_of.get(norm(row["wrong_type"]))
        assert source_types, f"{row['id']}: wrong_type {row['wrong_type']!r} is no row's answer"
        assert row["answer_type"] not in source_types, (row["id"], row["wrong_type"], source_types)


ARITH_PATTERNS = [
    (re.compile(r"What is (\d+) \+ (\d+)\?"), operator.add),
    (re.compile(r"What is (\d+) - (\d+)\?"), operator.sub),
    (re.compile(r"What is (\d+) times (\d+)\?"), operator.mul),
    (re.compile(r"What is (\d+) divided by (\d+)\?"), None),
    (re.compile(r"What is the square root of (\d+)\?"), None),
]


def _arith_truth(question: str) -> int:
    for pattern, op in ARITH_PATTERNS:
        m = pattern.fullmatch(question)
        if not m:
            continue
        if "divided" in pattern.pattern:
            a, b = int(m[1]), int(m[2])
            assert a % b == 0, question
            return a // b
        if "square root" in pattern.pattern:
            n = int(m[1])
            root = round(n ** 0.5)
            assert root * root == n, question
            return root
        return op(int(m[1]), int(m[2]))
    raise AssertionError(f"unparsed arithmetic question {question!r}")


def test_arithmetic_answers_are_right(rows):
    arithmetic = [r for r in rows if r["category"] == "arithmetic"]
    assert len(arithmetic) >= 30
    assert {r["difficulty"] for r in arithmetic} == DIFFICULTIES
    for row in arithmetic:
        truth = _arith_truth(row["question"])
        assert row["answers"] == [str(truth)], row
        assert row["answer_type"] == "number"
        assert all(int(w) != truth for w in row["plausible_wrong"]), row


def test_known_facts_spot_check(rows):
    by_question = {r["question"]: r for r in rows}
    expected = {
        "What is the capital of France?": "Paris",
        "What is the capital of Burkina Faso?": "Ouagadougou",
        "What is the chemical symbol for gold?": "Au",
        "How many legs does a spider have?": "8",
        "In what year did the Berlin Wall fall?": "1989",
        "How many days are there in a leap year?": "366",
    }
    for question, gold in expected.items():
        assert by_question[question]["answers"][0] == gold
    assert "Kiev" in by_question["What is the capital of Ukraine?"]["answers"]
    assert by_question["What is the capital of Ukraine?"]["answer_type"] == "place"


def test_balance(rows):
    per_category = collections.Counter(r["category"] for r in rows)
    assert sum(count >= 30 for count in per_category.values()) >= 3, per_category
    per_difficulty = collections.Counter(r["difficulty"] for r in rows)
    for level in DIFFICULTIES:
        assert per_difficulty[level] >= 0.15 * len(rows), per_difficulty
    per_type = collections.Counter(r["answer_type"] for r in rows)
    assert set(per_type) == ANSWER_TYPES


def test_generator_reproduces_file_byte_for_byte(tmp_path):
    out = tmp_path / "questions.jsonl"
    subprocess.run([sys.executable, str(GENERATOR), "--out", str(out)], check=True, capture_output=True)
    assert out.read_bytes() == DATA.read_bytes()


def test_generator_validation_rejects_bad_rows():
    gen = _load_generator()
    assert gen.normalize_answer("The Hague!") == "hague"
    row = gen._row("Q?", "Paris", "Lyon", "easy", "capital", "place")
    assert row["answers"] == ["Paris"] and row["plausible_wrong"] == ["Lyon"]
    with pytest.raises(ValueError, match="matches a gold answer"):
        gen._row("Q?", "Paris", "the PARIS", "easy", "capital", "place")
    with pytest.raises(ValueError, match="matches a gold answer"):
        gen._row("Q?", "dollar|US dollar", "Canadian dollar", "easy", "currency", "other")
    with pytest.raises(ValueError, match="difficulty"):
        gen._row("Q?", "Paris", "Lyon", "trivial", "capital", "place")
    with pytest.raises(ValueError, match="answer_type"):
        gen._row("Q?", "Paris", "Lyon", "easy", "capital", "city")
    with pytest.raises(ValueError, match="empty"):
        gen._row("Q?", "Paris||Lutece", "Lyon", "easy", "capital", "place")


def test_generator_seed_changes_only_random_parts():
    gen = _load_generator()
    a, b = gen.build_rows(1), gen.build_rows(2)
    assert gen.build_rows(1) == a
    fixed = [(r["question"], r["answers"]) for r in a if r["category"] != "arithmetic"]
    assert fixed == [(r["question"], r["answers"]) for r in b if r["category"] != "arithmetic"]
    assert [r["wrong_type"] for r in a] != [r["wrong_type"] for r in b]
