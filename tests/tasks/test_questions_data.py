"""Checks on the built-in question set ``acute/data/questions.jsonl`` and its generator."""

from __future__ import annotations

import calendar
import collections
import hashlib
import importlib.util
import json
import math
import operator
import re
import string
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
GENERATOR = REPO / "examples" / "build_questions.py"
DATA = REPO / "acute" / "data" / "questions.jsonl"  # the committed file (not an installed copy)

KEYS = ["id", "question", "answers", "plausible_wrong", "wrong_type", "category", "difficulty", "answer_type"]
DIFFICULTIES = {"easy", "medium", "hard"}
DRAWN = {"arithmetic", "roman_numeral", "sequence", "units", "percent"}  # operands drawn with the seed
#: sha256 of the first 600 lines (the hand-written rows): stores collected on them resume
FIRST_600_SHA256 = "e91d9b14b0b14cb2d96b91947c8d2b6bd515cbebac631b6898e69f5e1da8dd2c"
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


def _rows() -> list[dict]:
    lines = DATA.read_text(encoding="utf-8").splitlines()
    parsed = []
    for number, line in enumerate(lines, start=1):
        assert line.strip(), f"blank line {number}"
        parsed.append(json.loads(line))
    return parsed


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return _rows()


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
    assert 2000 <= len(rows) <= 3000
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
    fixed = [(r["question"], r["answers"]) for r in a if r["category"] not in DRAWN]
    assert fixed == [(r["question"], r["answers"]) for r in b if r["category"] not in DRAWN]
    assert [r["wrong_type"] for r in a] != [r["wrong_type"] for r in b]


# ----------------------------------------------------------------------------- generated rows
def test_the_first_600_rows_never_change():
    """Generated rows are appended: ids q-0001..q-0600 keep their questions and answers."""
    lines = DATA.read_bytes().split(b"\n")[:600]
    assert hashlib.sha256(b"\n".join(lines) + b"\n").hexdigest() == FIRST_600_SHA256


def by_category(rows, category):
    found = [r for r in rows if r["category"] == category]
    assert found, category
    assert {r["difficulty"] for r in found} <= DIFFICULTIES
    return found


def roman_value(numeral: str) -> int:
    """Independent reader: subtract a symbol smaller than the one after it."""
    values = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}
    total = 0
    for i, ch in enumerate(numeral):
        v = values[ch]
        total += -v if i + 1 < len(numeral) and values[numeral[i + 1]] > v else v
    return total


def test_roman_numeral_answers():
    rows = by_category(_rows(), "roman_numeral")
    assert len(rows) >= 60
    for row in rows:
        numeral = re.fullmatch(r"What number does the Roman numeral ([IVXLCDM]+) stand for\?", row["question"])[1]
        assert int(row["answers"][0]) == roman_value(numeral), row
    assert roman_value("MCMXCIV") == 1994 and roman_value("XLII") == 42


def _fits(terms: list[int], nxt: int) -> bool:
    """Whether ``nxt`` continues ``terms`` by a constant step, a constant ratio, consecutive
    squares, steps growing by one, or the sum of the two terms before."""
    seq = terms + [nxt]
    diffs = [b - a for a, b in zip(seq, seq[1:])]
    return (len(set(diffs)) == 1
            or all(a and b == a * (terms[1] // terms[0]) for a, b in zip(seq, seq[1:]))
            or all(math.isqrt(v) ** 2 == v and math.isqrt(v) == math.isqrt(seq[0]) + i for i, v in enumerate(seq))
            or all(b - a == 1 for a, b in zip(diffs, diffs[1:]))
            or all(seq[i] == seq[i - 1] + seq[i - 2] for i in range(2, len(seq))))


def test_sequence_answers():
    rows = by_category(_rows(), "sequence")
    assert len(rows) >= 100 and {r["difficulty"] for r in rows} == DIFFICULTIES
    for row in rows:
        shown = [int(x) for x in re.fullmatch(r"What number comes next in the sequence ([\d, ]+)\?",
                                             row["question"])[1].split(", ")]
        assert len(shown) == 4 and _fits(shown, int(row["answers"][0])), row
        assert not any(_fits(shown, int(w)) for w in row["plausible_wrong"]), row


def test_alphabet_and_calendar_answers():
    letters = string.ascii_uppercase
    for row in by_category(_rows(), "alphabet"):
        q, gold = row["question"], row["answers"][0]
        if m := re.fullmatch(r"Which letter comes right (after|before) ([A-Z]) in the English alphabet\?", q):
            assert ord(gold) - ord(m[2]) == (1 if m[1] == "after" else -1), row
        else:
            n = int(re.fullmatch(r"What is the (\d+)(st|nd|rd|th) letter of the English alphabet\?", q)[1])
            assert gold == letters[n - 1], row
    days = [calendar.day_name[i] for i in range(7)]
    months = [calendar.month_name[i] for i in range(1, 13)]
    words = {"two": 2, "three": 3}
    for row in by_category(_rows(), "calendar"):
        q, gold = row["question"], row["answers"][0]
        if m := re.fullmatch(r"Which (day of the week|month) comes right (after|before) (\w+)\?", q):
            seq = days if m[1].startswith("day") else months
            assert seq[(seq.index(m[3]) + (1 if m[2] == "after" else -1)) % len(seq)] == gold, row
        elif m := re.fullmatch(r"Which (day of the week|month) is (\w+) (days|months) after (\w+)\?", q):
            seq = days if m[1].startswith("day") else months
            assert seq[(seq.index(m[4]) + words[m[2]]) % len(seq)] == gold, row
        elif m := re.fullmatch(r"How many days are there in (\w+)\?", q):
            assert m[1] != "February" and int(gold) == calendar.monthrange(2023, months.index(m[1]) + 1)[1], row
        else:
            m = re.fullmatch(r"What is the (\w+) month of the year\?", q)
            assert gold == months[["first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth",
                                   "ninth", "tenth", "eleventh", "twelfth"].index(m[1])], row


FACTORS = {("centimeters", "meters"): 100, ("millimeters", "centimeters"): 10, ("meters", "kilometers"): 1000,
           ("grams", "kilograms"): 1000, ("minutes", "hours"): 60, ("seconds", "minutes"): 60,
           ("hours", "days"): 24, ("days", "weeks"): 7, ("months", "years"): 12, ("seconds", "hours"): 3600,
           ("inches", "feet"): 12, ("years", "centuries"): 100}
FRACTIONS = {"half": (1, 2), "a quarter": (1, 4), "a third": (1, 3), "three quarters": (3, 4)}


def test_units_percent_powers_and_letter_counts():
    for row in by_category(_rows(), "units"):
        m = re.fullmatch(r"How many (\w+) are there in (\d+) (\w+)\?", row["question"])
        assert int(row["answers"][0]) == int(m[2]) * FACTORS[(m[1], m[3])], row
    for row in by_category(_rows(), "percent"):
        m = re.fullmatch(r"What is (\d+% |half |a quarter |a third |three quarters )of (\d+)\?", row["question"])
        part = m[1].strip()
        num, den = (int(part[:-1]), 100) if part.endswith("%") else FRACTIONS[part]
        assert int(m[2]) * num % den == 0 and int(row["answers"][0]) == int(m[2]) * num // den, row
    for row in by_category(_rows(), "powers"):
        q = row["question"]
        if m := re.fullmatch(r"What is (\d+) (squared|cubed)\?", q):
            truth = int(m[1]) ** (2 if m[2] == "squared" else 3)
        else:
            truth = 2 ** int(re.fullmatch(r"What is 2 to the power of (\d+)\?", q)[1])
        assert int(row["answers"][0]) == truth, row
    for row in by_category(_rows(), "letter_count"):
        word = re.fullmatch(r'How many letters are there in the word "(\w+)"\?', row["question"])[1]
        assert int(row["answers"][0]) == len(word), row


def test_reverse_capitals_agree_with_the_capital_rows():
    rows = _rows()
    capital_of = {re.fullmatch(r"What is the capital of (?:the )?(?:country )?(.+)\?", r["question"])[1]:
                  r["answers"][0] for r in rows if r["category"] == "capital"}
    reverse = by_category(rows, "capital_reverse")
    assert len(reverse) >= 60
    for row in reverse:
        capital = re.fullmatch(r"Which country has (.+) as its capital\?", row["question"])[1]
        assert capital_of[row["answers"][0]] == capital, row


def test_word_rows_spot_check():
    by_question = {r["question"]: r for r in _rows()}
    assert by_question['What is the plural of "mouse"?']["answers"] == ["mice"]
    assert by_question['What is the plural of "criterion"?']["answers"] == ["criteria"]
    assert by_question['What is the opposite of "hot"?']["answers"] == ["cold"]
    assert "shut" in by_question['What is the opposite of "open"?']["answers"]
    expected = {'What is the plural of "party"?': "parties", 'What is the plural of "dish"?': "dishes",
                'What is the plural of "monkey"?': "monkeys", 'What is the past tense of "stop"?': "stopped",
                'What is the past tense of "carry"?': "carried", 'What is the past tense of "dance"?': "danced",
                'What is the past tense of "go"?': "went", 'What is the comparative form of "big"?': "bigger",
                'What is the superlative form of "happy"?': "happiest",
                'What is the comparative form of "nice"?': "nicer", 'What is the superlative form of "good"?': "best"}
    for question, gold in expected.items():
        assert by_question[question]["answers"][0] == gold, question


def test_regular_word_forms_follow_the_spelling_rules():
    """The generator's regular nouns, verbs and adjectives against spelling rules written out here."""
    gen = _load_generator()
    by_question = {r["question"]: r for r in _rows()}

    def plural(w):
        return (w + "es" if re.search(r"(s|x|z|ch|sh)$", w) else w[:-1] + "ies" if re.search(r"[^aeiou]y$", w)
                else w + "s")

    def past(w):
        if re.fullmatch(r"[^aeiou]*[aeiou][bdgnpt]", w):  # one syllable ending consonant-vowel-consonant
            return w + w[-1] + "ed"
        return w + "d" if w.endswith("e") else w[:-1] + "ied" if re.search(r"[^aeiou]y$", w) else w + "ed"

    def er(w, suffix):
        if w.endswith("e"):
            return w + suffix[1:]
        if re.search(r"[^aeiou]y$", w):
            return w[:-1] + "i" + suffix
        if re.fullmatch(r"[^aeiou][aeiou][^aeiouwy]", w):
            return w + w[-1] + suffix
        return w + suffix

    for w in gen.REGULAR_NOUNS:
        assert by_question[f'What is the plural of "{w}"?']["answers"] == [plural(w)], w
    for w in gen.REGULAR_VERBS:
        assert by_question[f'What is the past tense of "{w}"?']["answers"] == [past(w)], w
    for w in gen.REGULAR_ADJECTIVES:
        assert by_question[f'What is the comparative form of "{w}"?']["answers"] == [er(w, "er")], w
        assert by_question[f'What is the superlative form of "{w}"?']["answers"] == [er(w, "est")], w
