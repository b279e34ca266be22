"""Verbalized confidence: one fixed elicitation template and a robust parser of its replies.

After a question and an answer, the model is asked for the probability that the answer is
correct. The same template is used for every task; two variants differ only in the scale asked
for (``"unit"``: a number from 0.0 to 1.0, the main setting; ``"percent"``: an integer from 0 to
100, a robustness check). See :data:`TEMPLATES` for the exact texts.

Prompt shapes (built with :func:`acute.models.format_prompt`)
--------------------------------------------------------------
* Instruct models (the tokenizer has a chat template): a three-turn conversation ::

      user:      <question>
      assistant: <answer>
      user:      <elicitation>           (e.g. "What is the probability that the answer above ...")

  followed by the template's generation prompt.
* Base models: plain text ::

      <question>
      Proposed answer: <answer>
      Probability that the proposed answer is correct (0.0 to 1.0):

``<question>`` is the task's question as it shows it to a base model (its plain prompt, which for
open QA is ``Question: ...``, with options for multiple choice) without demonstrations and without
the trailing answer cue (``Answer:``), see :func:`question_text`. ``<answer>`` is the answer being judged, stripped.

For the token-probability side, :class:`VerbalPrompt` also returns the *prefix* of the rendered
prompt up to the answer and the answer *continuation*, such that ``prefix + continuation`` is the
rendered text up to and including the answer (trailing spaces of the prefix are moved into the
continuation, and a space is added when the prefix ends in a non-space character, so that the
answer's first token carries its leading space as it does in running text, see
:func:`split_answer`).

Parsing rules of :func:`parse_confidence`
-----------------------------------------
1. Only the *first* number in the reply is read (anything before it, such as
   ``"Confidence: "`` or ``"I would say"``, is skipped). A number is a run of digits with an
   optional decimal part (``0.8``, ``.8``, ``1.``, ``0,8`` with a decimal comma), optionally
   signed; digits glued to letters (``GPT4``) are not numbers.
2. If the number is followed by ``%`` (or ``percent``), it is a percentage on either scale:
   ``"80%"`` -> 0.8.
3. If it is followed by ``/ b`` or ``out of b`` (b > 0), it is the fraction a/b on either scale:
   ``"8/10"`` -> 0.8, ``"0.8/1"`` -> 0.8, ``"7 out of 10"`` -> 0.7. A slash or ``out of``
   without a denominator (``"1/"``, a reply cut off by the token limit) is a parse failure.
4. Otherwise a bare number is read on the requested scale: ``scale="unit"`` -> the number itself,
   ``scale="percent"`` -> the number / 100 (so ``"0.8"`` on the percent scale is 0.8% = 0.008;
   the reply is read literally, never guessed).
5. The result must lie in [0, 1]; anything else (``"1.5"`` on the unit scale, ``"120"`` on the
   percent scale, a negative number, ``"3/2"``, a zero denominator) is a parse failure, as is a
   reply without any number. Failures return ``None``; callers count and report them and never
   replace them by a default value.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from ..errors import InputError
from ..models import format_prompt

__all__ = [
    "ElicitationTemplate",
    "TEMPLATES",
    "SCALES",
    "VerbalPrompt",
    "build_verbal_prompt",
    "parse_confidence",
    "question_text",
    "split_answer",
]

SCALES = ("unit", "percent")


@dataclass(frozen=True)
class ElicitationTemplate:
    """One elicitation variant.

    ``chat``: the final user turn for instruct models; ``plain``: the base-model prompt with
    ``{question}`` and ``{answer}`` fields; ``scale``: how :func:`parse_confidence` reads a bare
    number in the reply (``"unit"`` or ``"percent"``).
    """

    name: str
    scale: str
    chat: str
    plain: str

    def as_dict(self) -> dict[str, str]:
        """The template texts (recorded verbatim in protocol outputs)."""
        return {"name": self.name, "scale": self.scale, "chat": self.chat, "plain": self.plain}


TEMPLATES: dict[str, ElicitationTemplate] = {
    "unit": ElicitationTemplate(
        name="unit",
        scale="unit",
        chat=("What is the probability that the answer above is correct? Reply with a single "
              "number from 0.0 to 1.0 and nothing else."),
        plain=("{question}\nProposed answer: {answer}\n"
               "Probability that the proposed answer is correct (0.0 to 1.0):"),
    ),
    "percent": ElicitationTemplate(
        name="percent",
        scale="percent",
        chat=("What is the probability that the answer above is correct? Reply with a single "
              "integer from 0 to 100 and nothing else."),
        plain=("{question}\nProposed answer: {answer}\n"
               "Probability that the proposed answer is correct (0 to 100):"),
    ),
}


# --------------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------------

_NUMBER = r"(?<!\w)(?<!\d[.,])([-+\u2212]?)(\d+(?:[.,]\d+)?\.?|(?<![.,])[.,]\d+)"
_FIRST = re.compile(_NUMBER)
_PERCENT = re.compile(r"\s*(?:%|percent\b|per\s+cent\b)", re.IGNORECASE)
_FRACTION = re.compile(r"\s*(?:/|out\s+of\b)\s*(\d+(?:\.\d+)?)", re.IGNORECASE)
_SLASH = re.compile(r"\s*(?:/|out\s+of\b)", re.IGNORECASE)


def _to_float(digits: str) -> float:
    """``digits`` as a float: a comma is a decimal separator unless it groups thousands."""
    digits = digits.rstrip(".")
    if "," in digits:
        whole, _, frac = digits.partition(",")
        if len(frac) == 3 and whole not in ("", "0"):
            digits = whole + frac  # 1,000 -> 1000
        else:
            digits = f"{whole or '0'}.{frac}"
    return float(digits)


def parse_confidence(text: str, scale: str = "unit") -> float | None:
    """Read a verbalized probability from a model's reply (rules in the module docstring).

    Returns a float in [0, 1], or ``None`` when the reply has no number or its first number does
    not give a value in [0, 1] (a parse failure). Raises ``ValueError`` if ``text`` is not a
    string or ``scale`` is not ``"unit"`` or ``"percent"``.
    """
    if not isinstance(text, str):
        raise InputError(f"text must be a string, got {type(text).__name__}")
    if scale not in SCALES:
        raise InputError(f"scale must be one of {SCALES}, got {scale!r}")
    m = _FIRST.search(text)
    if m is None:
        return None
    sign = -1.0 if m.group(1) in ("-", "\u2212") else 1.0
    value = sign * _to_float(m.group(2))
    rest = text[m.end():]
    if _PERCENT.match(rest):
        value = value / 100.0
    else:
        frac = _FRACTION.match(rest)
        if frac is None and _SLASH.match(rest):
            return None  # "1/" cut off before its denominator: ambiguous
        if frac:
            denom = float(frac.group(1))
            if denom <= 0:
                return None
            value = value / denom
        elif scale == "percent":
            value = value / 100.0
    if not (0.0 <= value <= 1.0):
        return None
    return float(value)


# --------------------------------------------------------------------------------------------
# Prompts
# --------------------------------------------------------------------------------------------

_ANSWER_CUE = re.compile(r"\s*(?:Answer|A)\s*:\s*$")


def _without_demonstrations(task, ex):
    """``(task, ex)`` with demonstrations removed: ``ex.shots`` emptied (multiple choice) and the
    task cloned with ``shots=0`` (sklearn-style, ``type(task)(**task.get_params())``) when it has
    a non-zero ``shots`` option (open QA). Falls back to the originals when cloning fails."""
    if dataclasses.is_dataclass(ex) and getattr(ex, "shots", ()):
        ex = dataclasses.replace(ex, shots=())
    get_params = getattr(task, "get_params", None)
    params = get_params() if callable(get_params) else {}
    if isinstance(params, dict) and params.get("shots"):
        try:
            task = type(task)(**{**params, "shots": 0})
        except Exception:  # noqa: BLE001 - an unusual constructor: keep the task as it is
            pass
    return task, ex


def question_text(task, ex) -> str:
    """The question as shown in the verbalization prompt.

    The task's plain (base-model) prompt ``task.plain_prompt(ex)`` for the example alone
    (demonstrations removed, see below) without its trailing answer cue (``Answer:`` or
    ``A:``), so open QA gives ``"Question: <q>"`` and multiple choice the task's header, the
    question and its options. Demonstrations (``ex.shots``, or a task's ``shots`` option) are
    dropped: they steer the answer format of the query and are not part of the question being
    rated. Falls back to ``"Question: <ex.question>"`` when the task has no plain prompt.
    Never empty.
    """
    task, ex = _without_demonstrations(task, ex)
    plain = getattr(task, "plain_prompt", None)
    text = None
    if callable(plain):
        try:
            text = plain(ex)
        except NotImplementedError:
            text = None
    if not isinstance(text, str) or not text.strip():
        text = f"Question: {ex.question}"
    text = _ANSWER_CUE.sub("", text).rstrip()
    return text or f"Question: {ex.question}"


def split_answer(prefix: str, answer: str) -> tuple[str, str]:
    """Split ``prefix + answer`` into the ``(context, continuation)`` to teacher-force.

    Trailing spaces/tabs of ``prefix`` move to the continuation, and a single space is added
    when the (space-stripped) prefix ends in a visible character (``"Answer:"`` + ``"Paris"`` ->
    ``("Answer:", " Paris")``); after a newline or an empty prefix nothing is added
    (``"assistant\\n"`` + ``"Paris"`` -> ``("assistant\\n", "Paris")``). ``answer`` is stripped.
    Raises ``ValueError`` for an empty answer.
    """
    answer = answer.strip()
    if not answer:
        raise InputError("answer is empty")
    head = prefix.rstrip(" \t")
    spaces = prefix[len(head):]
    if not spaces and head and not head[-1].isspace():
        spaces = " "
    return head, spaces + answer


@dataclass(frozen=True)
class VerbalPrompt:
    """A rendered verbalization prompt.

    ``prompt``: the full text the model continues (template applied, BOS included where needed);
    ``prefix`` and ``continuation``: the text up to the answer and the answer itself as
    teacher-forced (``prefix + continuation`` is the start of ``prompt``, up to and including
    the answer, up to the spacing rule of :func:`split_answer`).
    """

    prompt: str
    prefix: str
    continuation: str


def _chat_prompt(tokenizer, question: str, answer: str, template: ElicitationTemplate) -> VerbalPrompt:
    turns = [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
    full = format_prompt(tokenizer, turns + [{"role": "user", "content": template.chat}], chat=True)
    head = format_prompt(tokenizer, turns, chat=True)  # rendering stops right after the answer
    if head.endswith(answer) and full.startswith(head):
        start = len(head) - len(answer)
    else:  # unusual template: find the answer before the elicitation turn
        stop = full.rfind(template.chat)
        start = full.rfind(answer, 0, stop if stop >= 0 else len(full))
        if start < 0:
            raise InputError("the chat template does not render the assistant answer verbatim; "
                             "cannot locate the answer in the verbalization prompt")
    context, continuation = split_answer(full[:start], answer)
    return VerbalPrompt(prompt=full, prefix=context, continuation=continuation)


def _plain_prompt(tokenizer, question: str, answer: str, template: ElicitationTemplate) -> VerbalPrompt:
    head_tpl, sep, _ = template.plain.partition("{answer}")
    if not sep:
        raise InputError(f"template {template.name!r}: the plain template has no {{answer}} field")
    body = template.plain.format(question=question, answer=answer)
    head = head_tpl.format(question=question)
    full = format_prompt(tokenizer, body, chat=False)
    offset = len(full) - len(body)  # BOS text prepended by format_prompt, if any
    context, continuation = split_answer(full[: offset + len(head)], answer)
    return VerbalPrompt(prompt=full, prefix=context, continuation=continuation)


def build_verbal_prompt(tokenizer, question: str, answer: str, variant: str = "unit",
                        chat: bool | None = None) -> VerbalPrompt:
    """Render the verbalization prompt for ``answer`` to ``question`` (see the module docstring).

    ``chat=None`` uses the chat template when the tokenizer has one. Returns a
    :class:`VerbalPrompt`. Raises ``ValueError`` for an unknown ``variant``, an empty
    ``question`` or ``answer``, or ``chat=True`` without a chat template.
    """
    if variant not in TEMPLATES:
        raise InputError(f"variant must be one of {sorted(TEMPLATES)}, got {variant!r}")
    if not isinstance(question, str) or not question.strip():
        raise InputError("question must be a non-empty string")
    if not isinstance(answer, str) or not answer.strip():
        raise InputError("answer must be a non-empty string")
    has_template = bool(getattr(tokenizer, "chat_template", None))
    use_chat = has_template if chat is None else bool(chat)
    if use_chat and not has_template:
        raise InputError("chat=True but the tokenizer has no chat template; use chat=False")
    template = TEMPLATES[variant]
    answer = answer.strip()
    if use_chat:
        return _chat_prompt(tokenizer, question.strip(), answer, template)
    return _plain_prompt(tokenizer, question.strip(), answer, template)
