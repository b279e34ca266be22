"""Multiple-choice tasks: the shared base (prompts, robust letter extraction) and ``sciq-mc``.

Answers of multiple-choice tasks are option letters: ``gold_answer`` is the gold letter,
``plausible_wrong`` the other letters (options whose text differs from the gold text) and
``extract`` returns a letter. ``wrong_type`` is an answer *text* of another type (not a letter).
``answer_text(ex, answer)`` writes a letter or an option text as the reply ``"B"`` (or
``"B. <option>"`` with ``mc_reply="letter_text"``); any other text is returned as is.
"""

from __future__ import annotations

import re
import string
from pathlib import Path
from typing import Any

from .base import Example, Task
from .normalize import first_line, normalize_answer, strip_answer_prefix
from .qa import read_sciq
from ..errors import InputError

__all__ = ["MultipleChoiceTask", "SciQMCTask", "extract_choice", "format_choices", "LETTERS"]

LETTERS = string.ascii_uppercase


def format_choices(choices: list[str]) -> str:
    """``"A. first\\nB. second..."`` (one option per line)."""
    return "\n".join(f"{LETTERS[i]}. {c}" for i, c in enumerate(choices))


def extract_choice(generation: str, choices: list[str]) -> str | None:
    """Return the option letter a generation picks, or ``None`` when none can be found.

    Tried in order, on the text after the first non-empty line's answer prefix is removed:
    1. a leading letter: ``"B"``, ``"B."``, ``"(B)"``, ``"B) Paris"``, ``"B: Paris"``, ``"**B**"``;
    2. an explicit statement anywhere in the first three lines: ``"The answer is B"``,
       ``"Answer: (B)"``, ``"correct option is B"``, ``"option B"``;
    3. the exact text of one option (normalised), optionally after the letter pattern fails:
       ``"Paris"`` -> the letter of the option ``"Paris"`` (when exactly one option has that text's
       normal form, or all such options are equal texts).
    Only upper-case letters of existing options count; a lone article ``"A"`` followed by a word
    (``"A cat"``) is not read as option A.
    """
    if not choices:
        return None
    valid = LETTERS[: len(choices)]
    cls = f"[{valid}]"
    line = strip_answer_prefix(first_line(generation))
    line = re.sub(r"^(?:option|choice)\s+", "", line, flags=re.IGNORECASE)
    m = re.match(rf"^[\(\[]?({cls})(?:[\)\]]|[.:,;]|\s*$|\s+[-\u2013\u2014]\s|\s*\n)", line + "\n")
    if m:
        return m.group(1)
    head = "\n".join(generation.strip().splitlines()[:3])
    for m in re.finditer(rf"(?:answer|option|choice)\s*(?:is|would be|:)?\s*:?\s*[\(\[*]*({cls})(?![A-Za-z])",
                         head, flags=re.IGNORECASE):
        if m.group(1) in valid:  # upper case only: "the answer is a ..." is not option A
            return m.group(1)
    target = normalize_answer(line.rstrip("."))
    if target:
        hits = [i for i, c in enumerate(choices) if normalize_answer(c) == target]
        if hits and len({choices[i] for i in hits}) == 1:
            return LETTERS[hits[0]]
    return None


class MultipleChoiceTask(Task):
    """Base of the letter-answer tasks: options ``A.``, ``B.``, ... and letter labelling.

    Subclasses fill ``choices``/``label`` (and optionally ``shots``) in their examples and may
    override :meth:`header`.
    """

    equivalence = "the same option letter"

    def _answer_key(self, answer: str | None) -> str | None:
        return answer.strip().upper() or None if isinstance(answer, str) else None

    max_new_tokens = 8
    stop_strings = ("\n",)
    options = {"mc_reply": "letter"}

    # ---------------------------------------------------------------- prompts
    def header(self, ex: Example) -> str:
        """The instruction that opens the prompt."""
        return ("The following are multiple choice questions. Answer with the letter of the "
                "correct option.")

    def question_block(self, ex: Example) -> str:
        """``<question>\\nA. ...\\nB. ...``"""
        return f"{ex.question}\n{format_choices(ex.choices)}"

    def _letter(self, ex: Example) -> str:
        return LETTERS[ex.label]

    def chat_messages(self, ex: Example) -> list[dict[str, str]]:
        """Shots as previous user/assistant turns (the assistant replies with the letter); the
        header opens the first user turn; the last user turn asks about ``ex``."""
        messages: list[dict[str, str]] = []
        for shot in ex.shots:
            messages.append({"role": "user", "content": f"{self.question_block(shot)}\nAnswer:"})
            messages.append({"role": "assistant", "content": self._letter(shot)})
        messages.append({"role": "user", "content": f"{self.question_block(ex)}\nAnswer:"})
        messages[0]["content"] = f"{self.header(ex)}\n\n{messages[0]['content']}"
        return messages

    def plain_prompt(self, ex: Example) -> str:
        """Header, then ``Question: ...`` / options / ``Answer: X`` blocks, ending in ``Answer:``."""
        blocks = [self.header(ex)]
        for shot in ex.shots:
            blocks.append(f"Question: {self.question_block(shot)}\nAnswer: {self._letter(shot)}")
        blocks.append(f"Question: {self.question_block(ex)}\nAnswer:")
        return "\n\n".join(blocks)

    # ---------------------------------------------------------------- labelling
    def extract(self, ex: Example, generation: str) -> str | None:
        """The chosen option letter (see :func:`extract_choice`)."""
        return extract_choice(generation, ex.choices)

    def is_correct(self, ex: Example, generation: str) -> bool:
        """True when the extracted letter's option text is the gold option text (so duplicated
        options, which a few benchmark rows contain, count as the same answer)."""
        letter = self.extract(ex, generation)
        if letter is None:
            return False
        return ex.choices[LETTERS.index(letter)] == ex.choices[ex.label]

    def gold_answer(self, ex: Example) -> str:
        """The gold option letter."""
        return self._letter(ex)

    def plausible_wrong(self, ex: Example) -> list[str]:
        """The letters of the options whose text differs from the gold option's."""
        gold = ex.choices[ex.label]
        return [LETTERS[i] for i, c in enumerate(ex.choices) if c != gold]

    def answer_text(self, ex: Example, answer: str) -> str:
        """A letter or option text as the reply ``"B"`` / ``"B. <text>"``; other text unchanged."""
        answer = str(answer).strip()
        idx = None
        if len(answer) == 1 and answer in LETTERS[: len(ex.choices)]:
            idx = LETTERS.index(answer)
        else:
            norm = normalize_answer(answer)
            for i, c in enumerate(ex.choices):
                if c == answer or (norm and normalize_answer(c) == norm):
                    idx = i
                    break
        if idx is None:
            return answer
        if self.mc_reply == "letter_text":
            return f"{LETTERS[idx]}. {ex.choices[idx]}"
        if self.mc_reply != "letter":
            raise InputError(f"mc_reply must be 'letter' or 'letter_text', got {self.mc_reply!r}")
        return LETTERS[idx]

    def _typed_text(self, ex: Example) -> str:
        return ex.choices[ex.label]

    def label_details(self, ex: Example, generation: str) -> dict[str, Any]:
        details = super().label_details(ex, generation)
        details["gold"] = self._letter(ex)
        return details


class SciQMCTask(MultipleChoiceTask):
    """SciQ as 4-way multiple choice; options shuffled with ``random.Random(row id)``."""

    name = "sciq-mc"
    description = "SciQ science questions, 4 options (fixed per-row shuffle), letter answer"
    data_hint = ("a SciQ file (AI2 valid.json/test.json, or normalised .jsonl) or a folder with "
                 "<split>.jsonl or <split>.json")
    data_folder = "sciq"
    default_split = "test"
    split_aliases = {"validation": "valid", "val": "valid", "dev": "valid"}
    options = {"context": False}

    def header(self, ex: Example) -> str:
        return ("The following are multiple choice science questions. Answer with the letter of "
                "the correct option.")

    def question_block(self, ex: Example) -> str:
        block = super().question_block(ex)
        if self.context and ex.context:
            block = f"Context: {ex.context}\n\n{block}"
        return block

    def _read(self, path: Path, split: str) -> list[Example]:
        return read_sciq(self, path, split)
