"""Answer normalisation, short-answer extraction and number parsing for open-ended QA.

All functions are pure and deterministic. ``normalize_answer`` follows the SQuAD / TriviaQA
evaluation script: lower-case, drop punctuation, drop the articles *a/an/the*, collapse white space.
"""

from __future__ import annotations

import re
import string
import unicodedata

__all__ = [
    "normalize_answer",
    "strip_answer_prefix",
    "first_line",
    "first_sentence",
    "extract_short_answer",
    "parse_number",
    "numbers_equal",
    "contains_phrase",
]

_PUNCT = set(string.punctuation) | {"\u2018", "\u2019", "\u201c", "\u201d", "\u2013", "\u2014", "\u2026"}
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """Return ``text`` lower-cased, without punctuation or articles, white space collapsed.

    SQuAD-style: ``"The  Eiffel-Tower!"`` -> ``"eiffeltower"`` (punctuation is removed, not
    replaced by a space, exactly like the reference script). Accents are kept. ``""`` -> ``""``.
    """
    text = unicodedata.normalize("NFKC", str(text)).lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


# Prefixes a model puts before its answer; removed repeatedly, case-insensitively.
_PREFIX = re.compile(
    r"^\s*(?:"
    r"(?:the\s+)?(?:final\s+|correct\s+|short\s+|best\s+)?answer\s*(?:is|would\s+be|:|-)\s*:?"
    r"|a\s*:"
    r"|(?:tl;?dr|summary|one-sentence summary)\s*:"
    r")\s*",
    re.IGNORECASE,
)
_WRAP = "*_`\"'\u201c\u201d\u2018\u2019 \t"


def strip_answer_prefix(text: str) -> str:
    """Remove leading "The answer is", "Answer:", "A:", "Final answer:", "TL;DR:" and markdown/quotes.

    Returns the remaining text stripped of surrounding white space, bold markers and quotes.
    ``"**Answer:** Paris"`` -> ``"Paris"``. Text without such a prefix is only stripped.
    """
    text = text.strip()
    for _ in range(3):
        text = text.strip(_WRAP)
        new = _PREFIX.sub("", text, count=1)
        if new == text:
            break
        text = new
    return text.strip(_WRAP)


def first_line(text: str) -> str:
    """Return the first non-empty line of ``text`` (stripped), or ``""`` when there is none."""
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


_ABBREVIATIONS = {
    "mr", "mrs", "ms", "dr", "st", "jr", "sr", "mt", "ft", "no", "vs", "etc", "e.g", "i.e", "u.s",
    "u.k", "u.n", "prof", "gen", "col", "lt", "sgt", "capt", "rev", "inc", "ltd", "co", "approx",
    "fig", "eq", "al", "ca", "c",
}


def first_sentence(text: str) -> str:
    """Return the first sentence of ``text`` (its first line cut at the first sentence end).

    A sentence ends at ``.``, ``!`` or ``?`` followed by white space and an upper-case letter or a
    digit, except after common abbreviations (``Dr.``, ``St.``, ``U.S.``) and single-letter initials
    (``J. K. Rowling``). The final full stop is dropped; ``?``/``!`` are kept. ``""`` -> ``""``.
    """
    line = first_line(text)
    for m in re.finditer(r"[.!?](?=\s+[A-Z0-9\"'(])", line):
        before = line[: m.start()]
        word = re.split(r"\s", before)[-1].lower() if before else ""
        if m.group() == "." and (word in _ABBREVIATIONS or re.fullmatch(r"[a-z]", word)
                                 or re.fullmatch(r"(?:[a-z]\.)+[a-z]", word)):
            continue
        line = line[: m.end()]
        break
    line = line.strip()
    if line.endswith(".") and not re.search(r"(?:^|\s)(?:[A-Za-z]\.)+$", line):
        line = line[:-1].rstrip()
    return line


def extract_short_answer(generation: str) -> str | None:
    """Return the short answer in a free-text generation, or ``None`` when it is empty.

    Takes the first non-empty line, removes answer prefixes ("The answer is", "Answer:", ...),
    then keeps the first sentence. ``"Answer: Paris. It is the capital."`` -> ``"Paris"``.
    """
    line = strip_answer_prefix(first_line(generation))
    answer = first_sentence(line).strip(_WRAP).rstrip(",;:").strip()
    return answer or None


_COPULA = re.compile(r"\b(?:is|was|are|were)\s+(?:called\s+|named\s+|known as\s+)?", re.IGNORECASE)


def copula_tail(answer: str) -> str | None:
    """The complement of a one-sentence reply that restates the question, or ``None``.

    Small chat models often answer "The capital of Egypt is Cairo" instead of "Cairo"; a person
    reads the answer as what follows the last *is / was / are / were* (optionally "called",
    "named", "known as"). Returns ``None`` when the sentence has no such verb or nothing after it.
    """
    matches = list(_COPULA.finditer(answer))
    if not matches:
        return None
    tail = answer[matches[-1].end():].strip(_WRAP).rstrip(",;:.").strip()
    return tail or None


def contains_phrase(haystack: str, needle: str) -> bool:
    """True when normalised ``needle`` occurs in normalised ``haystack`` on word boundaries.

    An empty normalised needle never matches.
    """
    h, n = normalize_answer(haystack), normalize_answer(needle)
    return bool(n) and f" {n} " in f" {h} "


_UNITS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14,
    "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19,
}
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70,
         "eighty": 80, "ninety": 90}
_SCALES = {"hundred": 100, "thousand": 1_000, "million": 1_000_000, "billion": 1_000_000_000}
_NUMERIC = re.compile(r"^[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d+)?$")


def _parse_number_words(words: list[str]) -> float | None:
    if words and words[0] in ("a", "an") and len(words) > 1 and words[1] in _SCALES:
        words = ["one"] + words[1:]
    total, current, seen = 0, 0, False
    for w in words:
        if w == "and" and seen:
            continue
        if w in _UNITS:
            current += _UNITS[w]
        elif w in _TENS:
            current += _TENS[w]
        elif w == "hundred" and seen:
            current = max(current, 1) * 100
        elif w in _SCALES and seen:
            total += max(current, 1) * _SCALES[w]
            current = 0
        else:
            return None
        seen = True
    return float(total + current) if seen else None


def parse_number(text: str) -> float | None:
    """Return the number written in ``text`` or ``None`` when it is not (only) a number.

    Accepts digits with an optional sign, thousands commas and decimals (``"1,024.5"``), a trailing
    ``%``, a leading ``$``, a simple fraction (``"3/4"``) and English number words up to the
    billions (``"forty-two"``, ``"one hundred and five"``). A trailing full stop is ignored.
    ``"42 apples"`` and ``""`` -> ``None``.
    """
    s = str(text).strip().rstrip(".").strip().lower().replace("\u2212", "-")
    s = s.lstrip("$").rstrip("%").strip()
    if not s:
        return None
    if _NUMERIC.match(s) and any(ch.isdigit() for ch in s):
        return float(s.replace(",", ""))
    m = re.fullmatch(r"([-+]?\d+)\s*/\s*(\d+)", s)
    if m and int(m.group(2)) != 0:
        return int(m.group(1)) / int(m.group(2))
    sign = 1.0
    if s.startswith(("minus ", "negative ")):
        sign, s = -1.0, s.split(" ", 1)[1]
    value = _parse_number_words(re.split(r"[\s-]+", s))
    return None if value is None else sign * value


def numbers_equal(a: str, b: str, rel_tol: float = 1e-9) -> bool:
    """True when both strings parse as numbers (see :func:`parse_number`) of equal value."""
    x, y = parse_number(a), parse_number(b)
    if x is None or y is None:
        return False
    return abs(x - y) <= rel_tol * max(1.0, abs(x), abs(y))
