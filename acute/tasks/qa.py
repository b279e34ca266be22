"""Open-ended short-answer QA tasks: a generic JSONL task, ``default``, ``triviaqa`` and ``sciq``.

Labelling (all of them): the generation's short answer (first line, answer prefixes such as
"The answer is" removed, first sentence) is correct when its SQuAD-normalised form equals a
normalised gold alias, or when the complement of a reply that restates the question does
("The capital of Egypt is Cairo" -> "Cairo", see :func:`copula_tail`); ``containment=True`` also accepts an answer that contains an alias on word
boundaries; ``numeric=True`` also accepts numerically equal answers ("42" == "42.0" == "forty-two").
"""

from __future__ import annotations

import json
import random
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import TaskDataError
from .base import (Example, Task, clean_texts, find_file, read_json_array, read_jsonl,
                   require)
from .normalize import (contains_phrase, copula_tail, extract_short_answer, first_line, normalize_answer,
                        numbers_equal, parse_number, strip_answer_prefix)
from .answer_types import same_type_answers

__all__ = ["OpenQATask", "JsonlQATask", "DefaultTask", "TriviaQATask", "SciQTask",
           "answer_matches", "default_questions_path"]

_INSTRUCTION = ("Answer the following question with a short answer only (a name, number, date or a "
                "few words), without explanation.")

#: Fixed demonstrations (general knowledge written for acute, in no benchmark or the built-in
#: question set) shown before every open-QA question: small chat models otherwise answer in
#: whole sentences, which an exact-match label cannot read. ``shots=0`` turns them off.
SHORT_ANSWER_SHOTS = (
    ("What is the freezing point of water in degrees Celsius?", "0"),
    ("Which ocean lies between Africa and Australia?", "The Indian Ocean"),
    ("Who composed the opera The Magic Flute?", "Wolfgang Amadeus Mozart"),
)


def answer_matches(answer: str, golds: list[str], *, containment: bool = False,
                   numeric: bool = False) -> bool:
    """True when ``answer`` matches any of ``golds`` (see the module docstring for the rules).

    An answer that normalises to the empty string never matches; when answer and alias are both
    numbers, unequal values never match even if their normal forms agree ("4.2" vs "42").
    """
    norm = normalize_answer(answer)
    if not norm:
        return False
    answer_number = parse_number(answer)
    for gold in golds:
        g = normalize_answer(gold)
        gold_number = parse_number(gold)
        if answer_number is not None and gold_number is not None and not numbers_equal(answer, gold):
            continue  # "4.2" and "42" normalise alike but are different numbers
        if g and norm == g:
            return True
        if containment and contains_phrase(answer, gold):
            return True
        if numeric and numbers_equal(answer, gold):
            return True
    return False


class OpenQATask(Task):
    """Base of the open-ended QA tasks: prompts, extraction and alias matching."""

    equivalence = "equal normalised short answers"

    max_new_tokens = 24
    stop_strings = ("\n",)
    options = {"containment": False, "numeric": False, "context": False, "shots": 3}

    def _question_block(self, ex: Example) -> str:
        text = f"Question: {ex.question}"
        if self.context and ex.context:
            text = f"Context: {ex.context}\n\n{text}"
        return text

    def chat_messages(self, ex: Example) -> list[dict[str, str]]:
        """The ``shots`` demonstrations as user/assistant turns, then one user turn with the
        instruction, (optionally) the context and the question."""
        messages: list[dict[str, str]] = []
        for q, a in SHORT_ANSWER_SHOTS[: self.shots]:
            messages += [{"role": "user", "content": f"{_INSTRUCTION}\n\nQuestion: {q}"},
                         {"role": "assistant", "content": a}]
        messages.append({"role": "user", "content": f"{_INSTRUCTION}\n\n{self._question_block(ex)}"})
        return messages

    def plain_prompt(self, ex: Example) -> str:
        """The demonstrations as ``Question: ...\\nAnswer: ...`` blocks, then
        ``[Context: ...\\n\\n]Question: <q>\\nAnswer:`` for base models."""
        shots = "".join(f"Question: {q}\nAnswer: {a}\n\n" for q, a in SHORT_ANSWER_SHOTS[: self.shots])
        return f"{shots}{self._question_block(ex)}\nAnswer:"

    def extract(self, ex: Example, generation: str) -> str | None:
        """The short answer of ``generation`` (see :func:`extract_short_answer`), ``None`` if empty."""
        return extract_short_answer(generation)

    def is_correct(self, ex: Example, generation: str) -> bool:
        """Whether the short answer (or, failing that, the whole first line) matches an alias."""
        answer = self.extract(ex, generation)
        if answer is None:
            return False
        kw = dict(containment=self.containment, numeric=self.numeric)
        if answer_matches(answer, ex.answers, **kw):
            return True
        line = strip_answer_prefix(first_line(generation))
        if line != answer and answer_matches(line, ex.answers, **kw):
            return True
        tail = copula_tail(answer)  # "The capital of Egypt is Cairo" -> "Cairo"
        return tail is not None and answer_matches(tail, ex.answers, **kw)


def parse_jsonl_qa(obj: dict, where: str, prefix: str = "") -> Example:
    """An Example from a ``{id, question, answers, ...}`` row (normalised benchmark schema or the
    built-in question-set schema). ``answers`` may be a string or a list."""
    if "id" not in obj or obj["id"] in (None, ""):
        raise TaskDataError(f"{where}: missing 'id'")
    question = require(obj.get("question"), "'question'", where)
    if not isinstance(question, str):
        raise TaskDataError(f"{where}: 'question' must be a string")
    answers = obj.get("answers", obj.get("answer"))
    if isinstance(answers, str):
        answers = [answers]
    if answers is None:
        raise TaskDataError(f"{where}: missing 'answers'")
    answers = clean_texts(answers, where, "'answers'")
    if not answers:
        raise TaskDataError(f"{where}: empty gold answer ('answers' has no non-empty string)")
    incorrect = obj.get("plausible_wrong", obj.get("incorrect")) or []
    incorrect = clean_texts(incorrect, where, "'plausible_wrong'")
    wrong = obj.get("wrong_type")
    if wrong is not None and (not isinstance(wrong, str) or not wrong.strip()):
        raise TaskDataError(f"{where}: 'wrong_type' must be a non-empty string or absent")
    context = obj.get("context")
    known = {"id", "question", "answers", "answer", "plausible_wrong", "incorrect", "wrong_type",
             "context", "choices", "label"}
    meta = {k: v for k, v in obj.items() if k not in known and v is not None
            and isinstance(v, (str, int, float, bool))}
    return Example(id=f"{prefix}{obj['id']}", question=question.strip(), answers=answers,
                   incorrect=incorrect, wrong_type=wrong.strip() if wrong else None, meta=meta,
                   context=context if isinstance(context, str) and context.strip() else None)


class JsonlQATask(OpenQATask):
    """Generic open QA over a JSONL file of ``{id, question, answers}`` rows.

    Optional row fields: ``plausible_wrong`` (or ``incorrect``), ``wrong_type``, ``context``; other
    scalar fields (e.g. ``category``, ``difficulty``) go to ``meta``. Labelled by normalised exact
    match against any answer.
    """

    description = "open-ended QA from a JSONL file of {id, question, answers}"
    data_hint = "a .jsonl file of {id, question, answers: [aliases]} rows"
    default_split = "all"

    def __init__(self, path: str | Path | None = None, **options: Any):
        super().__init__(**options)
        self.path = path
        if path is not None:
            self.name = str(path)

    def get_params(self) -> dict[str, Any]:
        return {"path": None if self.path is None else str(self.path), **super().get_params()}

    def resolve_path(self, path):
        return super().resolve_path(path if path is not None else self.path)

    def _read(self, path: Path, split: str) -> list[Example]:
        if path.is_dir():
            path = find_file(path, [f"{split}.jsonl", "questions.jsonl"], self.name, split)
        return self._rows(read_jsonl(path), lambda _, obj, where: parse_jsonl_qa(obj, where),
                          lambda ln: f"{path}:{ln}")


def default_questions_path() -> Path:
    """Path of the built-in question set (package data, else the source tree's copy)."""
    try:
        ref = resources.files("acute").joinpath("data", "questions.jsonl")
        if ref.is_file():
            return Path(str(ref))
    except (ModuleNotFoundError, TypeError):  # pragma: no cover - unusual packaging
        pass
    return Path(__file__).resolve().parents[1] / "data" / "questions.jsonl"


class DefaultTask(JsonlQATask):
    """The built-in question set (``acute/data/questions.jsonl``)."""

    name = "default"
    #: the built-in questions' scalar fields (every row has both)
    metadata_fields = ("category", "difficulty")
    description = ("built-in short-answer question set (facts, arithmetic, ...): open QA, exact "
                   "match against aliases or equal numbers")
    data_hint = ("nothing (built-in questions); or a .jsonl of {id, question, answers, "
                 "plausible_wrong, wrong_type, category, difficulty}")
    options = {"numeric": True}

    def __init__(self, **options: Any):
        super().__init__(path=None, **options)
        self.name = "default"

    def resolve_path(self, path):
        if path is None:
            path = default_questions_path()
            if not path.is_file():
                raise FileNotFoundError(f"the built-in question set {path} is missing; reinstall acute "
                                        "or pass a JSONL file with --data")
        return Task.resolve_path(self, path)

    def get_params(self) -> dict[str, Any]:
        params = super().get_params()
        params.pop("path", None)
        return params


# --------------------------------------------------------------------------- TriviaQA

def _parse_triviaqa(obj: dict, where: str, fallback_id: str) -> Example:
    """Normalised rows, llm-foundry rows ``{context: "Question: q\\nAnswer:", answer, aliases}``
    and HF-style rows ``{question, answer: {value, aliases}}``."""
    if "answers" in obj:
        return parse_jsonl_qa(obj, where)
    if "context" in obj and "aliases" in obj:
        ctx = require(obj.get("context"), "'context'", where)
        q = ctx.strip()
        if q.startswith("Question:"):
            q = q[len("Question:"):]
        if q.rstrip().endswith("Answer:"):
            q = q.rstrip()[: -len("Answer:")]
        answer, aliases = obj.get("answer"), obj.get("aliases") or []
        qid = obj.get("id", fallback_id)
    elif isinstance(obj.get("answer"), dict):
        q = require(obj.get("question"), "'question'", where)
        answer = obj["answer"].get("value", obj["answer"].get("Value"))
        aliases = obj["answer"].get("aliases", obj["answer"].get("Aliases")) or []
        qid = obj.get("question_id", obj.get("id", fallback_id))
    else:
        raise TaskDataError(f"{where}: unrecognised TriviaQA row; expected 'answers', or 'context' + "
                            "'answer' + 'aliases', or 'question' + 'answer': {value, aliases}")
    golds = clean_texts(([answer] if isinstance(answer, str) else []) + list(aliases), where, "aliases")
    if not golds:
        raise TaskDataError(f"{where}: empty gold answer (no answer or alias)")
    return Example(id=str(qid), question=require(q.strip(), "question text", where), answers=golds)


class TriviaQATask(OpenQATask):
    """TriviaQA, closed book: open-ended, normalised exact match against the aliases."""

    name = "triviaqa"
    description = "TriviaQA closed-book trivia: open-ended, SQuAD-normalised exact match vs aliases"
    data_hint = ("a TriviaQA .jsonl (normalised {id, question, answers}, or llm-foundry "
                 "{context, answer, aliases}) or a folder with validation.jsonl / triviaqa_sm_sub.jsonl")
    data_folder = "triviaqa"
    default_split = "validation"
    split_aliases = {"val": "validation", "valid": "validation", "dev": "validation"}

    def _assign_wrong_types(self, examples: list[Example]) -> list[Example]:
        """Wrong-type answers as usual; TriviaQA lists no wrong answers, so each row also gets a
        plausible wrong answer: another row's answer of the same type (labelled wrong here)."""
        examples = super()._assign_wrong_types(examples)
        same = same_type_answers(examples, seed=self.seed, text_of=self._typed_text,
                                 accept=self._is_wrong_reply)
        for ex, text in zip(examples, same):
            if text is not None:
                ex.payload["same_type_wrong"] = text
        return examples

    def plausible_wrong(self, ex: Example) -> list[str]:
        """``ex.incorrect`` when the data has wrong answers, else the same-type answer of another
        row assigned on load (empty when there is none)."""
        listed = super().plausible_wrong(ex)
        if listed:
            return listed
        text = ex.payload.get("same_type_wrong")
        return [text] if text else []

    def _read(self, path: Path, split: str) -> list[Example]:
        if path.is_dir():
            names = [f"{split}.jsonl", f"{split}.json"]
            if split == "validation":
                names += ["triviaqa_sm_sub.jsonl", "dev.jsonl", "unfiltered-web-dev.json",
                          "verified-web-dev.json", "wikipedia-dev.json"]
            path = find_file(path, names, self.name, split)
        if path.suffix == ".json":  # official TriviaQA release: {"Data": [...]}
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except json.JSONDecodeError as e:
                raise TaskDataError(f"{path}:{e.lineno}: invalid JSON ({e.msg})") from None
            rows = data.get("Data") if isinstance(data, dict) else data
            if not isinstance(rows, list):
                raise TaskDataError(f"{path}: expected a list of questions (or {{'Data': [...]}})")

            def parse_official(i, row, where):
                if not isinstance(row, dict):
                    raise TaskDataError(f"{where}: expected an object")
                ans = row.get("Answer") or {}
                conv = {"question": row.get("Question"), "question_id": row.get("QuestionId"),
                        "answer": {"value": ans.get("Value"), "aliases": ans.get("Aliases", [])}}
                return _parse_triviaqa(conv, where, fallback_id=f"{path.stem}-{i:04d}")

            return self._rows(enumerate(rows), parse_official, lambda i: f"{path}: item {i}")
        # Rows without an id (llm-foundry format) get "<file stem>-<0-based line index>".
        return self._rows(
            read_jsonl(path),
            lambda ln, obj, where: _parse_triviaqa(obj, where, fallback_id=f"{path.stem}-{ln - 1:04d}"),
            lambda ln: f"{path}:{ln}")


# --------------------------------------------------------------------------- SciQ

def sciq_choices(example_id: str, correct: str, distractors: list[str]) -> tuple[list[str], int]:
    """Options of a SciQ row: ``[correct, *distractors]`` shuffled by ``random.Random(example_id)``.

    This reproduces the normalised files' ``choices``/``label``. Returns ``(choices, label)``.
    """
    choices = [correct, *distractors]
    random.Random(example_id).shuffle(choices)
    return choices, choices.index(correct)


def _parse_sciq_original(obj: dict, where: str, example_id: str) -> Example:
    for key in ("question", "correct_answer", "distractor1", "distractor2", "distractor3"):
        if key not in obj:
            raise TaskDataError(f"{where}: missing column {key!r}")
    question = require(obj["question"], "'question'", where)
    correct = obj["correct_answer"]
    if not isinstance(correct, str) or not correct.strip():
        raise TaskDataError(f"{where}: empty gold answer ('correct_answer')")
    distractors = [str(obj[f"distractor{k}"]).strip() for k in (1, 2, 3)]
    if any(not d for d in distractors):
        raise TaskDataError(f"{where}: empty distractor")
    support = (obj.get("support") or "").strip() or None
    # Options keep duplicates (to reproduce the normalised files); ``incorrect`` is deduplicated.
    choices, label = sciq_choices(example_id, correct.strip(), distractors)
    return Example(id=example_id, question=question.strip(), answers=[correct.strip()],
                   choices=choices, label=label, incorrect=clean_texts(distractors, where, "distractors"),
                   context=support)


def _parse_sciq_jsonl(obj: dict, where: str) -> Example:
    if "correct_answer" in obj:
        return _parse_sciq_original(obj, where, str(require(obj.get("id"), "'id'", where)))
    ex = parse_jsonl_qa(obj, where)
    if not ex.incorrect:
        raise TaskDataError(f"{where}: SciQ rows need the distractors in 'incorrect'")
    choices, label = obj.get("choices"), obj.get("label")
    if choices is None:
        choices, label = sciq_choices(ex.id, ex.answers[0], ex.incorrect)
    else:
        choices = clean_texts(choices, where, "'choices'", dedupe=False)
        if len(choices) < 2 or not isinstance(label, int) or not 0 <= label < len(choices):
            raise TaskDataError(f"{where}: SciQ rows need >= 2 distinct choices and a label indexing them")
        if choices[label] != ex.answers[0]:
            raise TaskDataError(f"{where}: choices[label] {choices[label]!r} is not the gold answer "
                                f"{ex.answers[0]!r}")
    ex.choices, ex.label = choices, label
    return ex


def read_sciq(task: Task, path: Path, split: str) -> list[Example]:
    """Examples of a SciQ file: AI2 JSON array (``valid.json``/``test.json``) or normalised JSONL.

    Ids are ``sciq-<file stem>-<index:04d>`` for the JSON arrays (as in the normalised files).
    """
    if path.is_dir():
        path = find_file(path, [f"{split}.jsonl", f"{split}.json"], task.name, split)
    if path.suffix == ".json":
        return task._rows(
            enumerate(read_json_array(path)),
            lambda i, row, where: _parse_sciq_original(row, where, f"sciq-{path.stem}-{i:04d}"),
            lambda i: f"{path}: item {i}")
    return task._rows(read_jsonl(path), lambda _, obj, where: _parse_sciq_jsonl(obj, where),
                      lambda ln: f"{path}:{ln}")


class SciQTask(OpenQATask):
    """SciQ as open-ended QA (gold = ``correct_answer``), closed book unless ``context=True``."""

    name = "sciq"
    description = "SciQ science questions, open-ended (closed book; context=True shows the support)"
    data_hint = ("a SciQ file (AI2 valid.json/test.json, or normalised .jsonl) or a folder with "
                 "<split>.jsonl or <split>.json")
    data_folder = "sciq"
    default_split = "test"
    split_aliases = {"validation": "valid", "val": "valid", "dev": "valid"}

    def _read(self, path: Path, split: str) -> list[Example]:
        return read_sciq(self, path, split)
