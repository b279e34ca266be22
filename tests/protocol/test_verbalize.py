"""Tests for acute.protocol.verbalize: the confidence parser on hand cases and the prompt shapes."""

from __future__ import annotations

import pytest

from acute.testing import make_tiny_tokenizer
from acute.protocol.verbalize import (
    TEMPLATES,
    build_verbal_prompt,
    parse_confidence,
    question_text,
    split_answer,
)

# (reply, scale, expected value or None for a parse failure)
CASES = [
    ("0.8", "unit", 0.8),
    ("0.85", "unit", 0.85),
    (" 0.9\n", "unit", 0.9),
    ("1", "unit", 1.0),
    ("0", "unit", 0.0),
    ("1.0", "unit", 1.0),
    (".75", "unit", 0.75),
    ("1.", "unit", 1.0),
    ("0.9.", "unit", 0.9),
    ("Confidence: 0.9", "unit", 0.9),
    ("Probability: 0.35 (fairly unsure)", "unit", 0.35),
    ("I would say 0.7", "unit", 0.7),
    ("p=0.6", "unit", 0.6),
    ("**0.95**", "unit", 0.95),
    ("80%", "unit", 0.8),
    ("80 %", "unit", 0.8),
    ("100%", "unit", 1.0),
    ("50 percent", "unit", 0.5),
    ("0.8/1", "unit", 0.8),
    ("8/10", "unit", 0.8),
    ("8 / 10", "unit", 0.8),
    ("7 out of 10", "unit", 0.7),
    ("0,8", "unit", 0.8),  # decimal comma
    ("+0.4", "unit", 0.4),
    ("...0.8", "unit", 0.8),
    ("GPT4 says 0.6", "unit", 0.6),  # digits glued to letters are not numbers
    ("v1.2 says 0.3", "unit", 0.3),
    ("0.2-0.3", "unit", 0.2),  # first number only
    ("0.8\nQuestion: 12", "unit", 0.8),
    # failures
    ("", "unit", None),
    ("I am not sure.", "unit", None),
    ("\n\n\n", "unit", None),
    ("1.5", "unit", None),
    ("80", "unit", None),  # a bare 80 on the unit scale is out of range, not guessed to be 80%
    ("-0.2", "unit", None),
    ("\u22120.2", "unit", None),  # unicode minus
    ("150%", "unit", None),
    ("3/2", "unit", None),
    ("3/0", "unit", None),
    ("The probability is 1/", "unit", None),  # cut off before the denominator
    ("1 out of", "unit", None),
    ("1,000", "unit", None),  # thousands separator
    ("12 is my guess, 0.5", "unit", None),  # the first number decides
    # percent scale
    ("80", "percent", 0.8),
    ("100", "percent", 1.0),
    ("0", "percent", 0.0),
    ("Confidence: 35", "percent", 0.35),
    ("80%", "percent", 0.8),
    ("8/10", "percent", 0.8),
    ("0.8", "percent", 0.008),  # read literally as 0.8 %
    ("120", "percent", None),
    ("-5", "percent", None),
    ("none", "percent", None),
]


@pytest.mark.parametrize("text, scale, expected", CASES)
def test_parse_confidence_hand_cases(text, scale, expected):
    got = parse_confidence(text, scale)
    if expected is None:
        assert got is None
    else:
        assert got == pytest.approx(expected, abs=1e-12)
        assert 0.0 <= got <= 1.0


def test_parse_confidence_rejects_bad_arguments():
    with pytest.raises(ValueError, match="scale"):
        parse_confidence("0.5", scale="logit")
    with pytest.raises(ValueError, match="text"):
        parse_confidence(None)  # type: ignore[arg-type]


@pytest.mark.parametrize("prefix, answer, expected", [
    ("Question: q\nAnswer:", "Paris", ("Question: q\nAnswer:", " Paris")),
    ("Question: q\nAnswer: ", " Paris ", ("Question: q\nAnswer:", " Paris")),
    ("Proposed answer:  ", "Paris", ("Proposed answer:", "  Paris")),
    ("<|im_start|>assistant\n", "Paris", ("<|im_start|>assistant\n", "Paris")),
    ("", "Paris", ("", "Paris")),
])
def test_split_answer(prefix, answer, expected):
    assert split_answer(prefix, answer) == expected


def test_split_answer_rejects_empty_answer():
    with pytest.raises(ValueError, match="empty"):
        split_answer("Answer:", "   ")


class _Ex:
    def __init__(self, question):
        self.question = question


class _PlainTask:
    def __init__(self, text):
        self.text = text

    def plain_prompt(self, ex):
        return self.text


def test_question_text_strips_answer_cue_and_falls_back():
    ex = _Ex("What is 2+2?")
    assert question_text(_PlainTask("Question: What is 2+2?\nAnswer:"), ex) == "Question: What is 2+2?"
    assert question_text(_PlainTask("Q: What is 2+2?\nA:"), ex) == "Q: What is 2+2?"
    mc = "Header\n\nQuestion: Pick\nA. one\nB. two\nAnswer:"
    assert question_text(_PlainTask(mc), ex) == "Header\n\nQuestion: Pick\nA. one\nB. two"
    assert question_text(object(), ex) == "Question: What is 2+2?"  # no plain prompt
    assert question_text(_PlainTask("   "), ex) == "Question: What is 2+2?"


def test_question_text_drops_demonstrations(tmp_path):
    from acute.tasks import Example, MultipleChoiceTask, get_task

    path = tmp_path / "qa.jsonl"
    path.write_text('{"id": "1", "question": "Capital of France?", "answers": ["Paris"]}\n')
    task = get_task(str(path))
    ex = task.load()[0]
    assert task.shots > 0 and task.plain_prompt(ex).count("Question:") == task.shots + 1
    assert question_text(task, ex) == "Question: Capital of France?"
    assert task.shots > 0  # the task itself is left unchanged
    shot = Example(id="s", question="Two plus two?", answers=["4"], choices=["3", "4"], label=1)
    mc = Example(id="m", question="Pick one", answers=["b"], choices=["a", "b"], label=1, shots=(shot,))
    mct = MultipleChoiceTask()
    assert "Two plus two?" in mct.plain_prompt(mc)
    assert question_text(mct, mc) == f"{mct.header(mc)}\n\nQuestion: Pick one\nA. a\nB. b"
    assert mc.shots == (shot,)


def test_chat_prompt_shape_and_answer_span():
    tok = make_tiny_tokenizer()
    vp = build_verbal_prompt(tok, "Question: Capital of France?", " Paris ", variant="unit")
    expected = ("<|im_start|>user\nQuestion: Capital of France?<|im_end|>\n"
                "<|im_start|>assistant\nParis<|im_end|>\n"
                f"<|im_start|>user\n{TEMPLATES['unit'].chat}<|im_end|>\n"
                "<|im_start|>assistant\n")
    assert vp.prompt == expected
    assert vp.prefix == "<|im_start|>user\nQuestion: Capital of France?<|im_end|>\n<|im_start|>assistant\n"
    assert vp.continuation == "Paris"
    assert vp.prompt.startswith(vp.prefix + vp.continuation)


def test_plain_prompt_shape_and_answer_span():
    tok = make_tiny_tokenizer(chat_template=False)
    vp = build_verbal_prompt(tok, "Question: Capital of France?", "Paris", variant="unit")
    assert vp.prompt == ("Question: Capital of France?\nProposed answer: Paris\n"
                         "Probability that the proposed answer is correct (0.0 to 1.0):")
    assert vp.prefix == "Question: Capital of France?\nProposed answer:"
    assert vp.continuation == " Paris"
    pct = build_verbal_prompt(tok, "Question: Capital of France?", "Paris", variant="percent")
    assert pct.prompt.endswith("(0 to 100):")
    # chat=False also works with a chat tokenizer (a base model sharing a tokenizer)
    plain = build_verbal_prompt(make_tiny_tokenizer(), "Question: q", "A", chat=False)
    assert plain.prompt.startswith("Question: q\nProposed answer: A\n")


def test_percent_chat_template_asks_for_integer():
    tok = make_tiny_tokenizer()
    vp = build_verbal_prompt(tok, "Question: q", "Paris", variant="percent")
    assert "integer from 0 to 100" in vp.prompt
    assert TEMPLATES["percent"].scale == "percent" and TEMPLATES["unit"].scale == "unit"


def test_build_verbal_prompt_errors():
    tok = make_tiny_tokenizer()
    with pytest.raises(ValueError, match="variant"):
        build_verbal_prompt(tok, "Question: q", "a", variant="logit")
    with pytest.raises(ValueError, match="answer"):
        build_verbal_prompt(tok, "Question: q", "  ")
    with pytest.raises(ValueError, match="question"):
        build_verbal_prompt(tok, "", "a")
    with pytest.raises(ValueError, match="chat template"):
        build_verbal_prompt(make_tiny_tokenizer(chat_template=False), "Question: q", "a", chat=True)
