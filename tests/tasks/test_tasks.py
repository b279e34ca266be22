"""The task layer: registry, loaders (original formats and normalised JSONL, on hand-written
fixtures), prompts, extraction/labelling, wrong-type answers and bad-input errors."""

from __future__ import annotations

import csv
import json
import random
import warnings
from pathlib import Path

import pytest

from acute.errors import TaskDataError
from acute.tasks import TASKS, Example, get_task, list_tasks
from acute.tasks.answer_types import answer_type, assign_wrong_types
from acute.tasks.tool_calls import calls_equal, normalize_value, parse_calls
from acute.models import format_prompt
from acute.tasks.choice import extract_choice
from acute.tasks.normalize import extract_short_answer, normalize_answer, parse_number
from acute.tasks.qa import JsonlQATask, default_questions_path
from acute.tasks.tool_calls import bracket_depths


# ----------------------------------------------------------------------------- fixture writers

def write_jsonl(path: Path, rows: list) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows),
                    encoding="utf-8")
    return path


def write_csv(path: Path, rows: list[list[str]], bom: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8-sig" if bom else "utf-8", newline="") as fh:
        csv.writer(fh).writerows(rows)
    return path


MMLU_DEV = {
    "geo": [
        ["Capital of Italy?", "Milan", "Rome", "Turin", "Naples", "B"],
        ["Longest river in Egypt?", "Nile", "Congo", "Niger", "Volta", "A"],
    ],
    "math": [
        ["2 + 2 =", "3", "4", "5", "6", "B"],
        ["3 * 3 =", "6", "8", "9", "12", "C"],
    ],
}
MMLU_TEST = {
    "geo": [
        ["Capital of Peru?", "Lima", "Cusco", "Quito", "La Paz", "A"],
        ["Which ocean is the largest?", "Atlantic", "Indian", "Arctic", "Pacific", "D"],
    ],
    "math": [
        ["10 / 2 =", "2", "5", "8", "20", "B"],
        ["Year the Berlin Wall fell?", "1961", "1975", "1989", "1991", "C"],
    ],
}


def mmlu_csv_folder(root: Path) -> Path:
    for split, table in (("dev", MMLU_DEV), ("test", MMLU_TEST)):
        for subject, rows in table.items():
            write_csv(root / "data" / split / f"{subject}_{split}.csv", rows)
    return root


def mmlu_jsonl_folder(root: Path) -> Path:
    for split, table in (("dev", MMLU_DEV), ("test", MMLU_TEST)):
        rows = []
        for subject, table_rows in table.items():
            for i, r in enumerate(table_rows):
                label = "ABCD".index(r[5])
                rows.append({"id": f"mmlu-{subject}-{split}-{i:04d}", "question": r[0],
                             "answers": [r[1 + label]], "choices": r[1:5], "label": label,
                             "incorrect": [c for k, c in enumerate(r[1:5]) if k != label],
                             "context": None, "subject": subject})
        write_jsonl(root / f"{split}.jsonl", rows)
    return root


def fields(examples):
    return [(e.id, e.question, e.answers, e.choices, e.label, e.incorrect, e.wrong_type)
            for e in sorted(examples, key=lambda e: e.id)]


# ----------------------------------------------------------------------------- registry

def test_registry_names_and_contract_attributes():
    names = [t.name for t in list_tasks()]
    assert names == ["default", "mmlu", "triviaqa", "sciq", "sciq-mc", "truthfulqa",
                     "truthfulqa-gen", "apigen", "scitldr", "bfcl"]
    for t in list_tasks():
        assert t.description and t.data_hint
        assert isinstance(t.max_new_tokens, int) and t.max_new_tokens > 0
        assert isinstance(t.stop_strings, tuple)
        s = t.settings()
        json.dumps(s)  # recorded in the manifest: must be JSON-serialisable
        assert s["name"] == t.name and s["seed"] == 0
    assert get_task("apigen").max_new_tokens >= 192
    assert get_task("scitldr").settings()["threshold"] == 0.3
    assert get_task("scitldr", threshold=0.5).settings()["threshold"] == 0.5
    assert get_task("mmlu").settings()["shots"] == 5


def test_unknown_task_lists_known_names():
    with pytest.raises(ValueError) as info:
        get_task("no-such-task")
    for name in TASKS:
        assert name in str(info.value)


def test_unknown_option_is_rejected():
    with pytest.raises(ValueError, match="unknown option.*shotz"):
        get_task("mmlu", shotz=3)


def test_jsonl_path_gives_generic_open_qa(tmp_path):
    path = write_jsonl(tmp_path / "mine.jsonl", [
        {"id": "a", "question": "Capital of France?", "answers": ["Paris", "City of Light"]},
        {"id": "b", "question": "Who wrote Hamlet?", "answers": ["William Shakespeare", "Shakespeare"]},
        {"id": "c", "question": "How many legs has a spider?", "answers": ["8"]},
    ])
    task = get_task(str(path))
    assert isinstance(task, JsonlQATask) and task.name == str(path)
    exs = task.load()
    assert [e.id for e in exs] == ["a", "b", "c"]
    assert task.is_correct(exs[0], "Paris.") and task.is_correct(exs[0], "the city of light")
    assert not task.is_correct(exs[0], "Lyon")
    assert not task.is_correct(exs[2], "eight")  # generic task: exact match only
    assert get_task(str(path), numeric=True).is_correct(exs[2], "eight")
    # wrong-type answers come from rows of another type
    for e in exs:
        assert e.wrong_type is not None and answer_type(e.wrong_type) != answer_type(e.answers[0])
    with pytest.raises(FileNotFoundError):
        get_task(str(tmp_path / "missing.jsonl"))


def test_missing_data_path_explains_what_is_expected(monkeypatch):
    monkeypatch.delenv("ACUTE_DATA", raising=False)
    with pytest.raises(ValueError, match="MMLU data folder"):
        get_task("mmlu").load()


def test_acute_data_env_points_at_benchmark_folders(tmp_path, monkeypatch):
    mmlu_jsonl_folder(tmp_path / "mmlu")
    monkeypatch.setenv("ACUTE_DATA", str(tmp_path))
    assert len(get_task("mmlu").load()) == 4


# ----------------------------------------------------------------------------- normalisation

@pytest.mark.parametrize("text, expected", [
    ("The Eiffel Tower!", "eiffel tower"),
    ("  An   apple, a day ", "apple day"),
    ("U.S.A.", "usa"),
    ("Théâtre", "théâtre"),
    ("", ""),
])
def test_normalize_answer(text, expected):
    assert normalize_answer(text) == expected


@pytest.mark.parametrize("generation, expected", [
    ("Paris", "Paris"),
    ("Paris.", "Paris"),
    ("The answer is Paris.", "Paris"),
    ("Answer: Paris\nQuestion: What is ...", "Paris"),
    ("**Paris**", "Paris"),
    ("Paris. It is the capital of France.", "Paris"),
    ("\n\n  Final answer: J. K. Rowling.", "J. K. Rowling"),
    ("St. Louis is the city. Really.", "St. Louis is the city"),
    ("   \n  ", None),
])
def test_extract_short_answer(generation, expected):
    assert extract_short_answer(generation) == expected


@pytest.mark.parametrize("text, expected", [
    ("42", 42.0), ("42.0", 42.0), ("1,024", 1024.0), ("forty-two", 42.0),
    ("one hundred and five", 105.0), ("3/4", 0.75), ("-7", -7.0), ("50%", 50.0),
    ("42 apples", None), ("Paris", None), ("", None),
])
def test_parse_number(text, expected):
    assert parse_number(text) == expected


# ----------------------------------------------------------------------------- answer types

@pytest.mark.parametrize("text, expected", [
    ("1867", "date"), ("July 4, 1776", "date"), ("the 19th century", "date"), ("1960s", "date"),
    ("42", "number"), ("forty-two", "number"), ("3.5 km", "number"), ("8 legs", "number"),
    ("Charles Darwin", "person"), ("J. K. Rowling", "person"), ("Queen Victoria", "person"),
    ("Paris", "place"), ("New York City", "place"), ("River Thames", "place"), ("Mount Everest", "place"),
    ("Onion", "other"), ("photosynthesis", "other"), ("", "other"),
])
def test_answer_type(text, expected):
    assert answer_type(text) == expected


def _examples(pairs):
    return [Example(id=f"r{i}", question=f"q{i}", answers=[a]) for i, a in enumerate(pairs)]


def test_assign_wrong_types_deterministic_and_of_another_type():
    exs = _examples(["Paris", "1867", "42", "Charles Darwin", "Onion", "Berlin", "1914", "7"])
    a = assign_wrong_types(exs, seed=0)
    b = assign_wrong_types(list(reversed(exs)), seed=0)  # order of the input does not matter
    assert {e.id: e.wrong_type for e in a} == {e.id: e.wrong_type for e in b}
    for e in a:
        assert e.wrong_type is not None
        assert answer_type(e.wrong_type) != answer_type(e.answers[0])
        assert e.meta["answer_type"] == answer_type(e.answers[0])
        assert e.wrong_type in {x.answers[0] for x in exs} - {e.answers[0]}
    assert all(x.wrong_type is None for x in exs)  # inputs are not modified
    # other seeds give other (but still valid) draws for at least one row
    draws = {tuple(e.wrong_type for e in assign_wrong_types(exs, seed=s)) for s in range(6)}
    assert len(draws) > 1


def test_assign_wrong_types_edge_cases():
    same = _examples(["Paris", "Berlin", "Rome"])
    assert all(e.wrong_type is None for e in assign_wrong_types(same))
    exs = _examples(["Paris", "1867", "1914"])
    exs[0].wrong_type = "given"
    out = assign_wrong_types(exs)
    assert out[0].wrong_type == "given"
    # accept() can veto candidates: only "1914" is allowed for r0's neighbours
    out = assign_wrong_types(_examples(["Paris", "1867", "1914"]), accept=lambda ex, t: t != "1867")
    assert out[0].wrong_type == "1914"


def test_same_type_answers_prefer_similar_questions():
    from acute.tasks.answer_types import same_type_answers
    exs = [Example(id="a", question="What type of animal is a dik-dik?", answers=["Antelope"]),
           Example(id="b", question="What type of animal is a Garron?", answers=["Horse"]),
           Example(id="c", question="Which vegetable is a leek related to?", answers=["Onion"]),
           Example(id="d", question="Who wrote Hamlet?", answers=["William Shakespeare"]),
           Example(id="e", question="Who painted the Mona Lisa?", answers=["Leonardo da Vinci"])]
    out = same_type_answers(exs)
    assert out[0] == "Horse" and out[1] == "Antelope"  # shared words "type", "animal"
    assert out[3] == "Leonardo da Vinci" and out[4] == "William Shakespeare"  # the only other person
    assert out[2] in {"Antelope", "Horse"}  # no similar question: a random "other" answer
    assert same_type_answers(exs) == out  # deterministic
    assert same_type_answers(exs, accept=lambda ex, t: t != "Horse")[0] == "Onion"  # the only other
    assert same_type_answers(exs, accept=lambda ex, t: t not in {"Horse", "Onion"})[0] is None


# ----------------------------------------------------------------------------- prompts

def test_format_prompt_chat_plain_and_bos(tiny_tokenizer):
    from acute.testing import make_tiny_tokenizer
    chat = format_prompt(tiny_tokenizer, "Hi?")
    assert chat == "<|im_start|>user\nHi?<|im_end|>\n<|im_start|>assistant\n"
    plain_tok = make_tiny_tokenizer(chat_template=False)
    assert format_prompt(plain_tok, "Q: x\nA:") == "Q: x\nA:"  # no BOS added by default
    with pytest.raises(ValueError, match="chat template"):
        format_prompt(plain_tok, "x", chat=True)
    # a tokenizer that adds BOS by default gets the BOS text prepended to plain prompts
    from tokenizers.processors import TemplateProcessing
    bos_tok = make_tiny_tokenizer(chat_template=False)
    bos_tok.backend_tokenizer.post_processor = TemplateProcessing(
        single="<|im_start|> $A", special_tokens=[("<|im_start|>", bos_tok.bos_token_id)])
    assert bos_tok("a")["input_ids"][0] == bos_tok.bos_token_id
    assert format_prompt(bos_tok, "Q: x") == "<|im_start|>Q: x"


def test_mmlu_prompts_chat_and_plain(tmp_path, tiny_tokenizer):
    task = get_task("mmlu", shots=2)
    ex = next(e for e in task.load(mmlu_csv_folder(tmp_path)) if e.id == "mmlu-geo-test-0000")
    chat = task.prompt(tiny_tokenizer, ex)
    assert chat.count("<|im_start|>user") == 3 and chat.count("<|im_start|>assistant") == 3
    assert chat.endswith("<|im_start|>assistant\n")
    assert "<|im_start|>assistant\nB<|im_end|>" in chat and "<|im_start|>assistant\nA<|im_end|>" in chat
    assert "about geo" in chat and "Capital of Italy?\nA. Milan\nB. Rome" in chat
    plain = task.prompt(tiny_tokenizer, ex, chat=False)
    assert "<|im_start|>" not in plain
    assert "Question: Capital of Italy?\nA. Milan\nB. Rome\nC. Turin\nD. Naples\nAnswer: B" in plain
    assert plain.endswith("Question: Capital of Peru?\nA. Lima\nB. Cusco\nC. Quito\nD. La Paz\nAnswer:")
    from acute.testing import make_tiny_tokenizer
    no_template = make_tiny_tokenizer(chat_template=False)
    assert task.prompt(no_template, ex) == plain  # chat=None follows the tokenizer
    with pytest.raises(ValueError):
        task.prompt(no_template, ex, chat=True)


def test_open_qa_prompts(tmp_path, tiny_tokenizer):
    path = write_jsonl(tmp_path / "q.jsonl", [{"id": "a", "question": "Capital of Peru?",
                                                "answers": ["Lima"], "context": "Lima is ..."}])
    task = get_task(str(path))
    ex = task.load()[0]
    from acute.tasks.qa import SHORT_ANSWER_SHOTS

    shots = "".join(f"Question: {q}\nAnswer: {a}\n\n" for q, a in SHORT_ANSWER_SHOTS)
    assert task.prompt(tiny_tokenizer, ex, chat=False) == shots + "Question: Capital of Peru?\nAnswer:"
    chat = task.prompt(tiny_tokenizer, ex)
    assert chat.startswith("<|im_start|>user\n") and chat.endswith("Question: Capital of Peru?<|im_end|>\n<|im_start|>assistant\n")
    assert chat.count("<|im_start|>assistant") == 1 + len(SHORT_ANSWER_SHOTS)
    assert f"<|im_start|>assistant\n{SHORT_ANSWER_SHOTS[0][1]}<|im_end|>" in chat
    assert "Lima is" not in chat
    zero_shot = get_task(str(path), shots=0)
    assert zero_shot.prompt(tiny_tokenizer, ex, chat=False) == "Question: Capital of Peru?\nAnswer:"
    with_context = get_task(str(path), context=True, shots=0)
    assert with_context.prompt(tiny_tokenizer, ex, chat=False).startswith("Context: Lima is ...\n\n")


# ----------------------------------------------------------------------------- MMLU

def test_mmlu_csv_and_jsonl_formats_agree(tmp_path):
    task = get_task("mmlu")
    from_csv = task.load(mmlu_csv_folder(tmp_path / "orig"))
    from_jsonl = task.load(mmlu_jsonl_folder(tmp_path / "norm"))
    assert fields(from_csv) == fields(from_jsonl)
    ex = next(e for e in from_csv if e.id == "mmlu-math-test-0001")
    assert ex.choices == ["1961", "1975", "1989", "1991"] and ex.label == 2
    assert ex.answers == ["1989"] and ex.meta["subject"] == "math"
    assert [s.id for s in ex.shots] == ["mmlu-math-dev-0000", "mmlu-math-dev-0001"]
    assert [s.id for s in next(e for e in from_jsonl if e.id == ex.id).shots] == \
        ["mmlu-math-dev-0000", "mmlu-math-dev-0001"]
    # one subject file; its dev file is found in the sibling dev/ folder
    single = task.load(tmp_path / "orig" / "data" / "test" / "geo_test.csv")
    assert [e.id for e in single] == ["mmlu-geo-test-0000", "mmlu-geo-test-0001"]
    assert single[0].shots[0].question == "Capital of Italy?"
    # dev split: the example itself is excluded from its shots
    dev = task.load(tmp_path / "orig", split="dev")
    assert all(e.id not in {s.id for s in e.shots} for e in dev) and len(dev[0].shots) == 1
    assert [e.meta["subject"] for e in get_task("mmlu", subjects="math").load(tmp_path / "orig")] == ["math"] * 2
    with pytest.raises(ValueError, match="unknown subject"):
        get_task("mmlu", subjects=["history"]).load(tmp_path / "orig")


def test_mmlu_labelling(tmp_path):
    task = get_task("mmlu", shots=0)
    ex = next(e for e in task.load(mmlu_csv_folder(tmp_path)) if e.id == "mmlu-geo-test-0001")
    assert task.gold_answer(ex) == "D"
    for gen in ["D", "D.", "(D)", "The answer is D", "Answer: D) Pacific", "Pacific", " D\n\nQuestion:",
                "**D**", "I think the answer is (D).", "D. Pacific"]:
        assert task.extract(ex, gen) == "D", gen
        assert task.is_correct(ex, gen), gen
    for gen in ["A", "Atlantic", "The answer is B", "", "none of them", "E"]:
        assert not task.is_correct(ex, gen), gen
    assert task.extract(ex, "none of them") is None
    assert task.plausible_wrong(ex) == ["A", "B", "C"]
    assert task.answer_text(ex, "D") == "D" and task.answer_text(ex, "Pacific") == "D"
    assert get_task("mmlu", mc_reply="letter_text").answer_text(ex, "D") == "D. Pacific"
    wt = task.wrong_type(ex)
    assert wt is not None and wt not in "ABCD"  # an answer text, not a letter
    assert task.answer_text(ex, wt) == wt and not task.is_correct(ex, task.answer_text(ex, wt))


def test_extract_choice_edge_cases():
    choices = ["a cat", "a dog", "a cow", "a pig"]
    assert extract_choice("A cat is my answer", choices) is None  # article, not option A
    assert extract_choice("a dog", choices) == "B"  # exact option text
    assert extract_choice("the answer is a dog", choices) == "B"
    assert extract_choice("b", choices) is None  # lower-case letters are not read
    assert extract_choice("Option C", choices) == "C"
    assert extract_choice("The correct answer is: (D)", choices) == "D"
    assert extract_choice("E", choices) is None  # no option E
    # duplicated options: either copy of the gold text counts as correct
    task = get_task("sciq-mc")
    ex = Example(id="x", question="q", answers=["five"], choices=["five", "five", "four", "six"], label=0)
    assert task.is_correct(ex, "B") and task.is_correct(ex, "A") and not task.is_correct(ex, "C")
    assert task.plausible_wrong(ex) == ["C", "D"]


@pytest.mark.parametrize("row, message", [
    (["Q?", "a", "b", "c", "d", "E"], "answer letter 'E' is not one of A, B, C, D"),
    (["Q?", "a", "b", "c", "d"], "expected 6 columns"),
    (["Q?", "a", "", "c", "d", "A"], "empty option B"),
    (["", "a", "b", "c", "d", "A"], "empty question"),
])
def test_mmlu_bad_rows_name_file_and_line(tmp_path, row, message):
    good = ["Fine?", "a", "b", "c", "d", "A"]
    path = write_csv(tmp_path / "data" / "test" / "x_test.csv", [good, good, row])
    with pytest.raises(TaskDataError) as info:
        get_task("mmlu", shots=0).load(tmp_path)
    assert f"{path}:3" in str(info.value) and message in str(info.value)


def test_mmlu_skip_mode_counts_bad_rows(tmp_path):
    good = ["Fine?", "a", "b", "c", "d", "A"]
    write_csv(tmp_path / "x_test.csv", [good, ["Q?", "a", "b", "c", "d", "Z"], good, ["bad"]])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exs = get_task("mmlu", shots=0, on_error="skip").load(tmp_path)
    assert [e.id for e in exs] == ["mmlu-x-test-0000", "mmlu-x-test-0002"]
    assert any("skipped 2 malformed row(s)" in str(w.message) for w in caught)


def test_mmlu_missing_dev_split(tmp_path):
    write_csv(tmp_path / "x_test.csv", [["Fine?", "a", "b", "c", "d", "A"]])
    with pytest.raises(FileNotFoundError, match="shots=0"):
        get_task("mmlu").load(tmp_path)
    with pytest.raises(FileNotFoundError, match="split 'val'"):
        get_task("mmlu", shots=0).load(tmp_path, split="validation")


# ----------------------------------------------------------------------------- TriviaQA

def test_triviaqa_source_and_normalised_formats(tmp_path):
    src = write_jsonl(tmp_path / "src" / "triviaqa_sm_sub.jsonl", [
        {"context": "Question: Which planet is called the Red Planet?\nAnswer:", "answer": "Mars",
         "aliases": ["Mars", "Planet Mars", "The Red Planet"]},
        {"context": "Question: Who painted the Mona Lisa?\nAnswer:", "answer": "Leonardo da Vinci",
         "aliases": ["Leonardo", "Da Vinci", ""]},
    ])
    norm = write_jsonl(tmp_path / "norm" / "validation.jsonl", [
        {"id": "t-0", "question": "Which planet is called the Red Planet?",
         "answers": ["Mars", "Planet Mars", "The Red Planet"], "choices": None, "label": None,
         "incorrect": [], "context": None, "subject": None},
    ])
    task = get_task("triviaqa")
    a = task.load(src.parent)  # the folder: validation -> triviaqa_sm_sub.jsonl
    assert [e.id for e in a] == ["triviaqa_sm_sub-0000", "triviaqa_sm_sub-0001"]
    assert a[0].question == "Which planet is called the Red Planet?"
    assert a[0].answers == ["Mars", "Planet Mars", "The Red Planet"]
    assert a[1].answers == ["Leonardo da Vinci", "Leonardo", "Da Vinci"]  # empty alias dropped
    b = task.load(norm, split="dev")
    assert b[0].answers == a[0].answers and b[0].question == a[0].question


def test_triviaqa_labelling_phrasings(tmp_path):
    path = write_jsonl(tmp_path / "v.jsonl", [
        {"id": "1", "question": "Which vegetable?", "answers": ["Onion", "Onions", "Allium cepa"]},
        {"id": "2", "question": "Which year?", "answers": ["1066"]},
    ])
    task, loose = get_task("triviaqa"), get_task("triviaqa", containment=True)
    ex = task.load(path)[0]
    for gen in ["Onion", "onion.", "The answer is Onion.", "Answer: Onions\nQuestion: next",
                "**Allium cepa**", "the onion", "A: Onion", "Onion. It is a bulb.", "\n\nONION",
                "I think it is an onion."]:
        assert task.is_correct(ex, gen), gen
    for gen in ["Garlic", "Spring onion", "", "I think it is an onion or a leek."]:
        assert not task.is_correct(ex, gen), gen
    assert loose.is_correct(ex, "I think it is an onion or a leek.")
    assert loose.is_correct(ex, "Spring onion")  # containment is deliberately loose
    assert not loose.is_correct(ex, "Onionskin paper")  # word boundaries
    assert task.extract(ex, "  \n ") is None
    # TriviaQA lists no wrong answers: a same-type answer of another row is the plausible wrong
    # one; here the two rows have different types (other, date), so there is none
    assert task.plausible_wrong(ex) == [] and task.plausible_wrong(task.load(path)[1]) == []
    more = write_jsonl(tmp_path / "w.jsonl", [
        {"id": "1", "question": "Which vegetable is a leek?", "answers": ["Onion"]},
        {"id": "2", "question": "Which vegetable is orange?", "answers": ["Carrot"]},
        {"id": "3", "question": "Which year?", "answers": ["1066"]}])
    veg = task.load(more)
    assert task.plausible_wrong(veg[0]) == ["Carrot"] and task.plausible_wrong(veg[1]) == ["Onion"]
    assert veg[2].wrong_type in {"Onion", "Carrot"}
    year = task.load(path)[1]
    assert task.is_correct(year, "1066.") and not task.is_correct(year, "In 1066")
    assert not task.is_correct(year, "10.66")  # normalises to "1066" but is another number


def test_triviaqa_bad_rows(tmp_path):
    path = write_jsonl(tmp_path / "v.jsonl", [
        {"context": "Question: ok?\nAnswer:", "answer": "yes", "aliases": []},
        '{"context": "Question: broken', ])
    with pytest.raises(TaskDataError, match=rf"{path}:2: invalid JSON"):
        get_task("triviaqa").load(path)
    write_jsonl(path, [{"context": "Question: ok?\nAnswer:", "answer": "", "aliases": [" "]}])
    with pytest.raises(TaskDataError, match=rf"{path}:1: empty gold answer"):
        get_task("triviaqa").load(path)
    write_jsonl(path, [{"question": "no answers here"}])
    with pytest.raises(TaskDataError, match=rf"{path}:1: unrecognised TriviaQA row"):
        get_task("triviaqa").load(path)


# ----------------------------------------------------------------------------- SciQ

SCIQ_ROWS = [
    {"question": "What gas do plants absorb?", "distractor3": "helium", "distractor1": "oxygen",
     "distractor2": "nitrogen", "correct_answer": "carbon dioxide", "support": "Plants take in CO2."},
    {"question": "How many chambers has a human heart?", "distractor3": "two", "distractor1": "three",
     "distractor2": "six", "correct_answer": "four", "support": ""},
]


def test_sciq_original_and_normalised(tmp_path):
    orig = tmp_path / "orig" / "test.json"
    orig.parent.mkdir()
    orig.write_text(json.dumps(SCIQ_ROWS, indent=4), encoding="utf-8")
    task = get_task("sciq")
    a = task.load(orig.parent)
    assert [e.id for e in a] == ["sciq-test-0000", "sciq-test-0001"]
    assert a[0].answers == ["carbon dioxide"] and a[0].incorrect == ["oxygen", "nitrogen", "helium"]
    assert a[0].context == "Plants take in CO2." and a[1].context is None
    # the options are [correct, d1, d2, d3] shuffled by random.Random(id), like the normalised files
    expected = ["carbon dioxide", "oxygen", "nitrogen", "helium"]
    random.Random("sciq-test-0000").shuffle(expected)
    assert a[0].choices == expected and a[0].choices[a[0].label] == "carbon dioxide"
    norm = write_jsonl(tmp_path / "norm" / "test.jsonl", [
        {"id": e.id, "question": e.question, "answers": e.answers, "choices": e.choices,
         "label": e.label, "incorrect": e.incorrect, "context": e.context, "subject": None} for e in a])
    assert fields(task.load(norm)) == fields(a)
    assert task.is_correct(a[1], "Four.") and task.is_correct(a[1], "four")
    assert not task.is_correct(a[1], "4")  # exact match, no numeric equality for sciq
    assert task.plausible_wrong(a[0]) == ["oxygen", "nitrogen", "helium"]
    assert not task.is_correct(a[0], task.wrong_type(a[0]))


def test_sciq_mc(tmp_path, tiny_tokenizer):
    orig = tmp_path / "valid.json"
    orig.write_text(json.dumps(SCIQ_ROWS), encoding="utf-8")
    task = get_task("sciq-mc")
    exs = task.load(tmp_path, split="validation")
    ex = exs[0]
    gold = "ABCD"[ex.choices.index("carbon dioxide")]
    assert task.gold_answer(ex) == gold and task.is_correct(ex, gold)
    assert task.is_correct(ex, "carbon dioxide") and not task.is_correct(ex, "oxygen")
    assert sorted(task.plausible_wrong(ex)) == sorted(set("ABCD") - {gold})
    assert "Plants take in CO2." not in task.prompt(tiny_tokenizer, ex, chat=False)
    assert "Context: Plants take in CO2." in get_task("sciq-mc", context=True).prompt(tiny_tokenizer, ex, chat=False)


def test_sciq_bad_rows(tmp_path):
    bad = [dict(SCIQ_ROWS[0]), {k: v for k, v in SCIQ_ROWS[1].items() if k != "distractor2"}]
    path = tmp_path / "test.json"
    path.write_text(json.dumps(bad), encoding="utf-8")
    with pytest.raises(TaskDataError, match=r"test.json: item 1: missing column 'distractor2'"):
        get_task("sciq").load(path)
    bad[1] = dict(SCIQ_ROWS[1], correct_answer="  ")
    path.write_text(json.dumps(bad), encoding="utf-8")
    with pytest.raises(TaskDataError, match=r"item 1: empty gold answer"):
        get_task("sciq").load(path)


# ----------------------------------------------------------------------------- TruthfulQA

TQA_HEADER = ["Type", "Category", "Question", "Best Answer", "Correct Answers", "Incorrect Answers", "Source"]
TQA_ROWS = [
    ["Adversarial", "Myths", "What happens if you swallow gum?", "It passes through your digestive system",
     "Nothing much; It passes through your digestive system; It is excreted",
     "It stays in your stomach for seven years; You die; It sticks to your ribs", "https://x"],
    ["Adversarial", "Myths", "Do bulls hate the color red?", "No, bulls are colorblind to red",
     "No; Bulls react to movement, not color",
     "Yes, bulls hate red; Yes, red makes bulls angry", "https://y"],
]


def test_truthfulqa_csv_and_jsonl(tmp_path):
    csv_path = write_csv(tmp_path / "orig" / "TruthfulQA.csv", [TQA_HEADER, *TQA_ROWS], bom=True)
    task = get_task("truthfulqa")
    a = task.load(csv_path.parent)
    assert [e.id for e in a] == ["truthfulqa-000", "truthfulqa-001"]
    ex = a[0]
    assert ex.answers == ["It passes through your digestive system", "Nothing much", "It is excreted"]
    assert ex.incorrect == ["It stays in your stomach for seven years", "You die", "It sticks to your ribs"]
    expected = [ex.answers[0], *ex.incorrect]
    random.Random("truthfulqa-000").shuffle(expected)
    assert ex.choices == expected and ex.choices[ex.label] == ex.answers[0]
    gold = task.gold_answer(ex)
    assert task.is_correct(ex, gold) and task.is_correct(ex, f"The answer is {gold}.")
    assert all(not task.is_correct(ex, w) for w in task.plausible_wrong(ex))
    assert len(task.plausible_wrong(ex)) == 3 and ex.meta["category"] == "Myths"
    norm = write_jsonl(tmp_path / "norm" / "validation.jsonl", [
        {"id": e.id, "question": e.question, "answers": e.answers, "choices": None, "label": None,
         "incorrect": e.incorrect, "context": None, "subject": "Myths"} for e in a])
    assert fields(task.load(norm.parent)) == fields(a)


def test_truthfulqa_gen_rouge_labels(tmp_path):
    csv_path = write_csv(tmp_path / "TruthfulQA.csv", [TQA_HEADER, *TQA_ROWS])
    task = get_task("truthfulqa-gen")
    ex = task.load(csv_path)[0]
    assert task.is_correct(ex, "It passes through your digestive system.")
    assert task.is_correct(ex, "Answer: gum passes through the digestive system")
    assert not task.is_correct(ex, "It stays in your stomach for seven years.")
    assert not task.is_correct(ex, "")
    # hand-computed: "You die" shares no token with any correct answer (best F1 0) and equals
    # the incorrect answer "You die" (F1 1) -> wrong
    details = task.label_details(ex, "You die")
    assert details["rouge_l_true"] == pytest.approx(0.0) and details["rouge_l_false"] == pytest.approx(1.0)
    assert details["correct"] is False
    # "it" (1 token): vs "It is excreted" P=1, R=1/3 -> F=1/2 (best correct; "It passes ... system"
    # gives 2/7); vs "It sticks to your ribs" P=1, R=1/5 -> F=1/3 (best incorrect; "It stays ...
    # years" gives 2/9) -> 1/2 > 1/3 -> correct
    d = task.label_details(ex, "it")
    assert d["rouge_l_true"] == pytest.approx(0.5) and d["rouge_l_false"] == pytest.approx(1 / 3)
    assert d["correct"] is True
    # a tie is wrong: an answer sharing nothing with either side scores 0 vs 0
    assert not task.is_correct(ex, "Bananas")
    assert task.plausible_wrong(ex) == ex.incorrect


def test_truthfulqa_missing_column(tmp_path):
    header = [c for c in TQA_HEADER if c != "Incorrect Answers"]
    path = write_csv(tmp_path / "TruthfulQA.csv", [header, TQA_ROWS[0][:5] + TQA_ROWS[0][6:]])
    with pytest.raises(TaskDataError, match=r"TruthfulQA.csv:1: missing column\(s\) \['Incorrect Answers'\]"):
        get_task("truthfulqa").load(path)
    path = write_csv(tmp_path / "TruthfulQA.csv", [TQA_HEADER, TQA_ROWS[0], TQA_ROWS[1][:3] + [""] + TQA_ROWS[1][4:]])
    with pytest.raises(TaskDataError, match=r"TruthfulQA.csv:3: empty gold answer"):
        get_task("truthfulqa").load(path)


# ----------------------------------------------------------------------------- APIGen

TOOLS = [
    {"name": "get_weather", "description": "Weather for a city.",
     "parameters": {"city": {"description": "City", "type": "str"},
                    "days": {"description": "Days", "type": "int, optional", "default": "1"}}},
    {"name": "convert", "description": "Convert currency.",
     "parameters": {"amount": {"description": "Amount", "type": "float"},
                    "to": {"description": "Target", "type": "str"}}},
]
TOOLS_B = [{"name": "sum_list", "description": "Sum numbers.",
            "parameters": {"numbers": {"description": "Numbers", "type": "List[int]"}}}]
CALLS = [{"name": "get_weather", "arguments": {"city": "Oslo", "days": 3}},
         {"name": "convert", "arguments": {"amount": 12.5, "to": "EUR"}}]
CALLS_B = [{"name": "sum_list", "arguments": {"numbers": [1, 2, 3]}}]


def _xlam_rows():
    return [{"id": 7, "query": "Weather in Oslo for 3 days and convert 12.5 to EUR.",
             "answers": json.dumps(CALLS), "tools": json.dumps(TOOLS)},
            {"id": 9, "query": "Add 1, 2 and 3.", "answers": json.dumps(CALLS_B), "tools": json.dumps(TOOLS_B)}]


def test_apigen_xlam_json_and_jsonl(tmp_path, tiny_tokenizer):
    orig = tmp_path / "orig" / "xlam_test.json"
    orig.parent.mkdir()
    orig.write_text(json.dumps(_xlam_rows(), indent=4), encoding="utf-8")
    norm = write_jsonl(tmp_path / "norm" / "test.jsonl", [
        {"id": str(r["id"]), "query": r["query"], "tools": json.loads(r["tools"]),
         "answers": json.loads(r["answers"])} for r in _xlam_rows()])
    task = get_task("apigen")
    a, b = task.load(orig.parent), task.load(norm.parent)
    assert fields(a) == fields(b) and [e.id for e in a] == ["7", "9"]
    ex = a[0]
    assert ex.payload["calls"] == CALLS and ex.payload["tools"] == TOOLS
    # the tool set (sorted names) is the record's group: records offered the same tools share it
    assert [e.meta["toolset"] for e in a] == ["convert|get_weather", "sum_list"]
    assert task.default_group_by == "toolset"
    prompt = task.prompt(tiny_tokenizer, ex, chat=False)
    assert '"name": "get_weather"' in prompt and "JSON list" in prompt and prompt.endswith("Calls:")
    assert task.is_correct(ex, task.answer_text(ex, task.gold_answer(ex)))
    # the wrong-type answer calls tools this row does not offer
    assert json.loads(task.wrong_type(ex)) == CALLS_B and not task.is_correct(ex, task.wrong_type(ex))
    wrong = task.plausible_wrong(ex)
    assert len(wrong) == 3 and not any(task.is_correct(ex, w) for w in wrong)


def test_apigen_labelling_and_normalisation():
    task = get_task("apigen")
    ex = Example(id="7", question="q", answers=[json.dumps(CALLS)],
                 payload={"tools": TOOLS, "calls": CALLS})
    variants = [
        json.dumps(CALLS),
        "```json\n" + json.dumps(CALLS, indent=2) + "\n```\nThese calls do it.",
        "Sure! Here you go: " + json.dumps(CALLS[::-1]),  # call order does not matter
        json.dumps([{"name": "get_weather", "arguments": {"city": "Oslo", "days": "3"}},
                    {"name": "convert", "arguments": {"amount": "12.50", "to": "EUR"}}]),
        json.dumps([{"name": "get_weather", "arguments": json.dumps({"days": 3.0, "city": "Oslo"})},
                    {"name": "convert", "parameters": {"amount": 12.5, "to": "EUR"}}]),
        json.dumps({"tool_calls": CALLS}),
    ]
    for v in variants:
        assert task.is_correct(ex, v), v
        assert task.label_details(ex, v)["parse_error"] is False
    wrongs = [json.dumps(CALLS[:1]), json.dumps(CALLS + CALLS[:1]),
              json.dumps([{"name": "get_weather", "arguments": {"city": "oslo", "days": 3}}, CALLS[1]]),
              json.dumps([{"name": "get_weather", "arguments": {"city": "Oslo"}}, CALLS[1]])]
    for w in wrongs:
        assert not task.is_correct(ex, w), w
        assert task.label_details(ex, w)["parse_error"] is False
    for junk in ["I cannot help with that.", json.dumps(CALLS)[:-3], '[{"arguments": {}}]', '"text"']:
        d = task.label_details(ex, junk)
        assert d["parse_error"] is True and d["correct"] is False and task.extract(ex, junk) is None
    # the platt+meta control's field is on every record, parsed or not: the gold's number of calls
    from acute.estimators.controls import metadata_matrix

    records = [{"id": "7", "meta": task.label_details(ex, text)}
               for text in (json.dumps(CALLS[:1]), "I cannot help with that.")]
    assert task.metadata_fields == ("n_gold_calls",)
    assert metadata_matrix(records, task.metadata_fields).tolist() == [["2"], ["2"]]


def test_normalize_value_and_parse_calls():
    assert normalize_value("5") == 5 and normalize_value(5.0) == 5 and normalize_value(" 2.50 ") == 2.5
    assert normalize_value("TRUE") is True and normalize_value(True) is True
    assert normalize_value(1) != normalize_value(True) or type(normalize_value(1)) is int
    assert normalize_value("[1, \"2\"]") == [1, 2] and normalize_value({"a": ["3.0"]}) == {"a": [3]}
    assert normalize_value("Oslo ") == "Oslo"
    assert calls_equal([{"name": "f", "arguments": {"x": True}}], [{"name": "f", "arguments": {"x": "true"}}])
    assert not calls_equal([{"name": "f", "arguments": {"x": True}}], [{"name": "f", "arguments": {"x": 1}}])
    assert parse_calls("[]") == []
    assert parse_calls('{"name": "f", "arguments": {}}') == [{"name": "f", "arguments": {}}]
    assert parse_calls("no json [at all") is None


def test_apigen_bad_rows(tmp_path):
    rows = _xlam_rows()
    rows[1]["answers"] = '[{"name": "sum_list", "arguments": {"numbers": [1, 2}}]'
    path = tmp_path / "xlam_test.json"
    path.write_text(json.dumps(rows), encoding="utf-8")
    with pytest.raises(TaskDataError, match=r"xlam_test.json: item 1: 'answers' is not valid JSON"):
        get_task("apigen").load(path)
    rows = _xlam_rows()
    rows[0]["answers"] = "[]"
    path.write_text(json.dumps(rows), encoding="utf-8")
    with pytest.raises(TaskDataError, match=r"item 0: empty gold answer"):
        get_task("apigen").load(path)
    norm = write_jsonl(tmp_path / "test.jsonl", [
        {"id": "1", "query": "q", "tools": TOOLS, "answers": [{"name": "f", "arguments": "x"}]}])
    with pytest.raises(TaskDataError, match=rf"{norm}:1: gold call 0"):
        get_task("apigen").load(norm)


# ----------------------------------------------------------------------------- SciTLDR

SCITLDR_ORIG = [
    {"source": ["We study sparse attention for long documents.", "It is fast.",
                "Experiments on three benchmarks show gains."],
     "source_labels": [1, 0, 0], "rouge_scores": [0.5, 0.1, 0.2], "paper_id": "P1",
     "target": ["Sparse attention makes long document models fast.", "A fast sparse attention method."],
     "title": "Sparse"},
    {"source": ["A new optimiser for GANs is proposed.", "It stabilises training."],
     "source_labels": [1, 0], "rouge_scores": [0.4, 0.3], "paper_id": "P2",
     "target": ["An optimiser that stabilises GAN training."], "title": "GAN"},
]


def test_scitldr_original_and_normalised(tmp_path, tiny_tokenizer):
    orig = tmp_path / "data" / "SciTLDR-A" / "dev.jsonl"
    orig.parent.mkdir(parents=True)
    orig.write_text("\n".join(json.dumps(r) for r in SCITLDR_ORIG), encoding="utf-8")  # no final newline
    norm = write_jsonl(tmp_path / "norm" / "dev.jsonl", [
        {"id": r["paper_id"], "source": r["source"], "targets": r["target"]} for r in SCITLDR_ORIG])
    task = get_task("scitldr")
    a = task.load(tmp_path / "data", split="validation")
    assert fields(a) == fields(task.load(norm.parent, split="dev"))
    ex = a[0]
    assert ex.id == "P1" and ex.answers == SCITLDR_ORIG[0]["target"]
    assert task.prompt(tiny_tokenizer, ex, chat=False) == (
        "Abstract: We study sparse attention for long documents. It is fast. Experiments on three "
        "benchmarks show gains.\nTL;DR:")
    assert task.is_correct(ex, task.gold_answer(ex))
    # "sparse attention is fast" vs target 2 "a fast sparse attention method":
    # LCS = sparse attention (2): P = 2/4, R = 2/5 -> F = 4/9 = 0.444 ; vs target 1: LCS = sparse attention
    # fast? order: sparse attention ... fast -> 3: P = 3/4, R = 3/7 -> F = 6/11 = 0.545
    d = task.label_details(ex, "TL;DR: Sparse attention is fast.\nMore text")
    assert d["rouge_l"] == pytest.approx(6 / 11) and d["correct"] is True
    assert not get_task("scitldr", threshold=0.6).is_correct(ex, "Sparse attention is fast.")
    assert not task.is_correct(ex, "We propose a new recipe for bread.")
    assert not task.is_correct(ex, task.wrong_type(ex))
    for w in task.plausible_wrong(ex):
        assert w in ex.question and not task.is_correct(ex, w)


def test_scitldr_bad_rows(tmp_path):
    path = write_jsonl(tmp_path / "test.jsonl", [
        {"source": ["s"], "paper_id": "P", "target": ["t"]}, {"source": ["s"], "paper_id": "Q", "target": []}])
    with pytest.raises(TaskDataError, match=rf"{path}:2: empty gold answer"):
        get_task("scitldr").load(path)
    write_jsonl(path, [{"source": ["s"], "target": ["t"]}])
    with pytest.raises(TaskDataError, match=rf"{path}:1: missing 'paper_id'"):
        get_task("scitldr").load(path)


# ----------------------------------------------------------------------------- default

DEFAULT_ROWS = [
    {"id": "q1", "question": "What is the capital of France?", "answers": ["Paris"],
     "plausible_wrong": ["Lyon", "Marseille"], "wrong_type": "1949", "category": "capital",
     "difficulty": "easy"},
    {"id": "q2", "question": "What is 6 times 7?", "answers": ["42"], "plausible_wrong": ["36", "48"],
     "wrong_type": "Paris", "category": "arithmetic", "difficulty": "easy"},
    {"id": "q3", "question": "Who wrote Hamlet?", "answers": ["William Shakespeare", "Shakespeare"],
     "plausible_wrong": ["Christopher Marlowe"], "category": "author", "difficulty": "easy"},
]


def test_default_task_on_fixture(tmp_path, tiny_tokenizer):
    path = write_jsonl(tmp_path / "questions.jsonl", DEFAULT_ROWS)
    task = get_task("default")
    assert task.name == "default" and task.settings()["numeric"] is True
    exs = task.load(path)
    q1, q2, q3 = exs
    assert task.plausible_wrong(q1) == ["Lyon", "Marseille"] and task.wrong_type(q1) == "1949"
    assert q1.meta["category"] == "capital" and q1.meta["difficulty"] == "easy"
    assert task.wrong_type(q3) in {"Paris", "42"}  # missing in the file: drawn from another type
    for gen in ["42", "42.0", "forty-two", "The answer is 42.", "Answer: 42\n"]:
        assert task.is_correct(q2, gen), gen
    for gen in ["41", "36", "4.2", "Paris"]:
        assert not task.is_correct(q2, gen), gen
    assert task.is_correct(q3, "Shakespeare.") and not task.is_correct(q3, "Christopher Marlowe")
    for ex in exs:
        assert task.is_correct(ex, task.answer_text(ex, task.gold_answer(ex)))
        assert not any(task.is_correct(ex, w) for w in task.plausible_wrong(ex))
    assert task.prompt(tiny_tokenizer, q1, chat=False).endswith(
        "Answer: Wolfgang Amadeus Mozart\n\nQuestion: What is the capital of France?\nAnswer:")
    assert len(task.load(path, limit=2)) == 2


def test_default_task_reads_package_data_path():
    path = default_questions_path()
    assert path.name == "questions.jsonl" and path.parent.name == "data"
    assert path.parent.parent.name == "acute"


def test_jsonl_bad_rows(tmp_path):
    path = write_jsonl(tmp_path / "q.jsonl", [DEFAULT_ROWS[0], {"id": "x", "question": "Q?", "answers": []}])
    with pytest.raises(TaskDataError, match=rf"{path}:2: empty gold answer"):
        get_task(str(path)).load()
    write_jsonl(path, [{"question": "Q?", "answers": ["a"]}])
    with pytest.raises(TaskDataError, match=rf"{path}:1: missing 'id'"):
        get_task(str(path)).load()
    write_jsonl(path, [DEFAULT_ROWS[0], DEFAULT_ROWS[0]])
    with pytest.raises(TaskDataError, match="duplicate example id 'q1'"):
        get_task(str(path)).load()
    write_jsonl(path, ["[1, 2]"])
    with pytest.raises(TaskDataError, match=rf"{path}:1: expected a JSON object"):
        get_task(str(path)).load()


# ------------------------------------------------------------- replies that restate the question
@pytest.mark.parametrize("generation, correct", [
    ("The capital of Egypt is Cairo", True),
    ("The opposite side from starboard on a ship is port.", True),
    ("Poland's capital is Warsaw", False),       # gold below is Cairo: a different city
    ("The capital of Egypt is Alexandria.", False),
    ("Cairo is a big city", False),             # the complement is not the answer
    ("It is known as Cairo", True),
])
def test_reply_restating_the_question_is_read_by_its_complement(generation, correct):
    from acute.tasks.base import Example
    from acute.tasks.normalize import copula_tail

    task = get_task("triviaqa")
    ex = Example(id="x", question="?", answers=["Cairo", "Port"], choices=None, label=None,
                 incorrect=[], wrong_type=None, meta={})
    assert task.is_correct(ex, generation) is correct
    assert copula_tail("The capital of Egypt is Cairo.") == "Cairo"
    assert copula_tail("Cairo") is None


def test_a_csv_byte_that_is_not_utf8_is_named_by_line(tmp_path):
    path = write_csv(tmp_path / "TruthfulQA.csv", [TQA_HEADER, *TQA_ROWS])
    raw = path.read_bytes().splitlines(keepends=True)
    raw[2] = raw[2].replace(b"gum", b"g\xffm", 1) if b"gum" in raw[2] else b"\xff" + raw[2]
    path.write_bytes(b"".join(raw))
    with pytest.raises(TaskDataError, match=r"TruthfulQA.csv:3: not valid UTF-8"):
        get_task("truthfulqa").load(path)


def test_reply_structure_counts_by_hand():
    from acute.tasks.tool_calls import REPLY_FIELDS, reply_structure

    # xLAM specs (TOOLS): get_weather(city required, days optional default "1"), convert(amount, to)
    calls = [{"name": "get_weather", "arguments": {"city": "Oslo", "days": 1, "unit": "C"}},
             {"name": "get_weather", "arguments": {"days": "1"}},
             {"name": "nowhere", "arguments": {"x": 1}}]
    got = reply_structure(calls, TOOLS)
    # 3 calls, 2 distinct names, 5 arguments; days == default twice ("1" == 1 after
    # normalisation); city missing once (convert is never called); unknown: "unit" and "nowhere"
    assert got == {"reply_calls": 3, "reply_functions": 2, "reply_arguments": 5, "reply_default_arguments": 2,
                   "reply_missing_required": 1, "reply_unknown_names": 2}
    assert reply_structure(None, TOOLS) == dict.fromkeys(REPLY_FIELDS, 0)
    # JSON Schema specs (BFCL / OpenAI): required list, defaults in properties
    schema = [{"name": "area", "parameters": {"type": "dict", "required": ["base", "height"], "properties": {
        "base": {"type": "integer"}, "height": {"type": "integer"}, "unit": {"type": "string", "default": "cm"}}}}]
    got = reply_structure([{"name": "area", "arguments": {"base": 3, "unit": "cm"}}], schema)
    assert got["reply_missing_required"] == 1 and got["reply_default_arguments"] == 1 and got["reply_arguments"] == 2
    assert got["reply_unknown_names"] == 0


def test_apigen_records_carry_the_reply_structure():
    from acute.tasks.apigen import parse_apigen_row

    task = get_task("apigen")
    ex = parse_apigen_row(_xlam_rows()[0], "row 1")
    details = task.label_details(ex, json.dumps([{"name": "get_weather", "arguments": {"city": "Oslo"}}]))
    assert details["reply_calls"] == 1 and details["reply_missing_required"] == 0 and not details["correct"]
    assert task.label_details(ex, "not json")["reply_calls"] == 0


def test_bracket_depths_by_hand():
    """Each bracket's depth after it; brackets inside JSON strings do not count, a quote outside
    every bracket is text, a closing bracket with none open is ignored."""
    assert list(bracket_depths('a [{"x": "]"}] b')) == [(2, 1), (3, 2), (12, 1), (13, 0)]
    assert list(bracket_depths('"[" [')) == [(1, 1)]
    assert list(bracket_depths("] [")) == [(2, 1)]
    assert list(bracket_depths('[{"s": "a \\" ]"}]', start=1)) == [(1, 1), (15, 0)]
