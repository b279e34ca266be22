"""Recording responses produced elsewhere: :func:`read_responses` reads a JSONL of prompts,
responses and labels, :func:`collect_responses` teacher-forces them into a store."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from ..errors import InputError, TaskDataError
from ..store.generation import GenerationSettings
from ..fileio import iter_jsonl, progress_bar
from ..store import StoreWriter
from ..validation import check_count
from .loop import _fill, _summarize
from .records import CollectSummary, _record, _task_label, build_manifest
from ..models.prompts import normalize_messages
from ..models import format_prompt
from ..tasks import Example

__all__ = ["ResponseRow", "collect_responses", "read_responses"]


@dataclass
class ResponseRow:
    """One row of a responses file (see :func:`read_responses`).

    ``prompt`` is a fully formatted prompt string (sent as is) or a list of chat messages (the
    model's chat template is applied); ``label`` the row's ``label`` field (None when absent);
    ``answers``/``choices``/``incorrect`` what a task's correctness check reads; ``line`` the
    row's line in the file.
    """

    id: str | int
    line: int
    prompt: str | list
    response: str
    label: bool | None = None
    answers: list[str] | None = None
    choices: list[str] | None = None
    incorrect: list[str] = field(default_factory=list)
    meta: dict = field(default_factory=dict)

    @property
    def question(self) -> str:
        """The prompt string, or the last user message."""
        if isinstance(self.prompt, str):
            return self.prompt
        users = [m["content"] for m in self.prompt if m.get("role") == "user"]
        return users[-1] if users else ""


def _string_list(value, where: str, what: str) -> list[str]:

    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise TaskDataError(f"{where}: {what!r} must be a string or a non-empty list of strings, "
                            f"got {value!r}")
    return value


# Long because it is one rule per field, each with its own message; the rules are flat.
def _response_row(obj: dict, where: str, lineno: int, task) -> ResponseRow:
    """Validate one JSON object of a responses file (``where`` = "file:line")."""
    rid = obj.get("id")
    if isinstance(rid, bool) or not isinstance(rid, (str, int)) or rid == "":
        raise TaskDataError(f"{where}: needs an 'id' (a string or an integer), got {rid!r}")
    if ("prompt" in obj) == ("messages" in obj):
        raise TaskDataError(f"{where}: id {rid!r} needs exactly one of 'prompt' (a formatted prompt "
                            "string) and 'messages' (a chat message list)")
    if "prompt" in obj:
        prompt = obj["prompt"]
        if not isinstance(prompt, str) or not prompt.strip():
            raise TaskDataError(f"{where}: id {rid!r}: 'prompt' must be a non-empty string")
    else:
        try:
            prompt = normalize_messages(obj["messages"])
        except InputError as e:
            raise TaskDataError(f"{where}: id {rid!r}: 'messages': "
                                f"{str(e).replace('messages_or_text', 'messages')}") from None
        if isinstance(obj["messages"], str):
            raise TaskDataError(f"{where}: id {rid!r}: 'messages' must be a list of messages "
                                "(use 'prompt' for a formatted string)")
    response = obj.get("response")
    if not isinstance(response, str):
        raise TaskDataError(f"{where}: id {rid!r} needs a 'response' string, got {response!r}")
    label = obj.get("label")
    if label is not None and not isinstance(label, bool):
        raise TaskDataError(f"{where}: id {rid!r}: 'label' must be true or false, got {label!r}")
    answers = None if obj.get("answers") is None else _string_list(obj["answers"], where, "answers")
    choices = None if obj.get("choices") is None else _string_list(obj["choices"], where, "choices")
    incorrect = [] if obj.get("incorrect") is None else _string_list(obj["incorrect"], where, "incorrect")
    if choices is not None and (answers is None or answers[0] not in choices):
        raise TaskDataError(f"{where}: id {rid!r}: the first of 'answers' must be one of 'choices'")
    if task is None and label is None:
        raise TaskDataError(f"{where}: id {rid!r} has no 'label' (true/false), and no task was given "
                            "to label it from 'answers' (--task)")
    if task is not None and answers is None:
        raise TaskDataError(f"{where}: id {rid!r} has no 'answers' for task {task.name!r}'s "
                            "correctness check (with --task the task labels every row; without "
                            "it the 'label' field does)")
    meta = obj.get("meta") if isinstance(obj.get("meta"), dict) else {}
    return ResponseRow(id=rid, line=lineno, prompt=prompt, response=response, label=label,
                       answers=answers, choices=choices, incorrect=incorrect, meta=meta)


def read_responses(path: str | Path, task=None) -> list[ResponseRow]:
    """The rows of a responses JSONL file, validated.

    Each row: ``id`` (string or integer, unique), ``prompt`` (a fully formatted prompt string)
    or ``messages`` (chat messages), ``response`` (a string), and ``label`` (true/false) or,
    when ``task`` is given, ``answers`` (with optional ``choices`` for a multiple-choice task
    and ``incorrect``) for the task's correctness check; optional ``meta`` (an object).
    Raises ``FileNotFoundError`` for a missing file and :class:`acute.errors.TaskDataError`
    naming the file and line for invalid JSON, a missing or duplicate id, a label that is not a
    boolean, a row with no label source, or an empty file.
    """

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"responses file {path} does not exist")
    rows: list[ResponseRow] = []
    first_line: dict = {}
    for lineno, obj in iter_jsonl(path, error=TaskDataError):
        where = f"{path}:{lineno}"
        row = _response_row(obj, where, lineno, task)
        if row.id in first_line:
            raise TaskDataError(f"{where}: duplicate id {row.id!r} (first on line {first_line[row.id]})")
        first_line[row.id] = lineno
        rows.append(row)
    if not rows:
        raise TaskDataError(f"{path}: no rows")
    return rows


def _row_prompt(tokenizer, row: ResponseRow, chat: bool | None) -> str:
    """A row's prompt as sent: the string as is, messages through :func:`format_prompt`."""
    return row.prompt if isinstance(row.prompt, str) else format_prompt(tokenizer, row.prompt, chat=chat)


def _row_label(task, row: ResponseRow, where: str) -> dict:
    """``answer, gold, correct, parse_error, meta`` of a row: from its ``label`` field, or from
    ``task``'s correctness check of the response against the row's answers."""
    if task is None:
        return {"answer": None, "gold": list(row.answers or []), "correct": bool(row.label),
                "parse_error": False, "meta": dict(row.meta)}
    gold = None if row.choices is None else row.choices.index(row.answers[0])
    ex = Example(id=str(row.id), question=row.question, answers=list(row.answers),
                 choices=row.choices, label=gold, incorrect=list(row.incorrect), meta=dict(row.meta))
    try:
        labelled = _task_label(task, ex, row.response)
    except (KeyError, IndexError, TypeError, AttributeError) as e:
        raise TaskDataError(f"{where}: id {row.id!r}: task {task.name!r} cannot label this row from "
                            f"its 'answers' ({type(e).__name__}: {e})") from None
    if row.label is not None:
        labelled["meta"]["label_field"] = row.label
    return labelled


def _prompt_format(rows: Sequence[ResponseRow]) -> str:
    kinds = {"prompt" if isinstance(r.prompt, str) else "messages" for r in rows}
    return kinds.pop() if len(kinds) == 1 else "mixed"


def _bad_responses(model, tokenizer, rows: Sequence[ResponseRow], prompts: Sequence[str],
                   path: Path) -> dict[int, tuple[str, str]]:
    """``{index: (kind, message)}`` of the rows that cannot be recorded: an empty response
    (``"empty"``) or prompt + response + EOS longer than the context window (``"too_long"``)."""
    from ..extraction import context_window  # heavy: torch
    from ..extraction.batching import tokenize  # heavy: torch

    limit = context_window(model)
    p_len = [len(ids) for ids in tokenize(tokenizer, list(prompts))]
    r_len = [len(ids) for ids in tokenize(tokenizer, [r.response for r in rows])]
    bad: dict[int, tuple[str, str]] = {}
    for i, row in enumerate(rows):
        where = f"{path}:{row.line}: id {row.id!r}"
        if not row.response.strip():
            bad[i] = ("empty", f"{where}: the response is empty")
        elif limit is not None and p_len[i] + r_len[i] + 1 > limit:
            bad[i] = ("too_long", f"{where}: prompt + response have {p_len[i] + r_len[i] + 1} tokens "
                                  f"(EOS included), more than the context window of {limit}")
    return bad


# Long because of its docstring; reading, checking and labelling are the helpers above and the
# commit loop is _fill, shared with collect.
def collect_responses(model, tokenizer, path: str | Path, out_dir: str | Path,
                      generation: GenerationSettings | None = None, *, task=None, on_bad_response: str = "skip",
                      shard_size: int = 256, progress: bool = True,
                      allow_other_weights: bool = False) -> CollectSummary:
    """Record the responses of a JSONL file (:func:`read_responses`) by teacher forcing and
    write an ordinary store, as ``generation`` says (:class:`GenerationSettings`: its pool,
    batch size, storage dtype and chat flag; a response is given, so it sets no answer length,
    stop strings or samples).

    Each row's prompt is its ``prompt`` string as is, or its ``messages`` formatted like
    :func:`acute.models.format_prompt` (``chat``); its response is recorded with
    :func:`acute.extraction.record_responses` (the text tokenized after the prompt, the EOS the
    model finds most likely appended; the records keep the response text as given and the token
    ids recorded). Labels come from the ``label`` field, or, with ``task``, from the task's
    correctness check of the response against the row's ``answers``. The manifest is
    :func:`build_manifest`'s (``generation.teacher_forced`` true, ``max_new_tokens`` None) plus
    ``"responses": {"file", "labels": "label field" | "task <name>", "prompt_format":
    "prompt" | "messages" | "mixed"}``.

    Every row is read, checked and labelled before anything is written. An empty response or
    one longer than the context window allows is skipped and counted
    (``on_bad_response="skip"``) or an :class:`InputError` naming the file, line and id
    (``"error"``). Resumable like :func:`collect`: rows whose ids the store holds are skipped.
    Returns a :class:`CollectSummary`.
    """
    from ..extraction import record_responses  # heavy: torch

    path = Path(path)
    generation = generation or GenerationSettings()
    if not isinstance(generation, GenerationSettings):
        raise InputError(f"generation must be an acute.store.generation.GenerationSettings, got "
                         f"{type(generation).__name__}")
    if generation.max_new_tokens is not None or generation.stop_strings or generation.samples is not None:
        raise InputError("given responses are recorded as they are: their generation settings take no "
                         "max_new_tokens, stop_strings or samples")
    pool, batch_size, chat = generation.pool, generation.batch_size, generation.chat
    shard_size = check_count(shard_size, "shard_size")
    if on_bad_response not in ("skip", "error"):
        raise InputError(f"on_bad_response must be 'skip' or 'error', got {on_bad_response!r}")
    rows = read_responses(path, task=task)
    prompts = [_row_prompt(tokenizer, row, chat) for row in rows]
    bad = _bad_responses(model, tokenizer, rows, prompts, path)
    if bad and on_bad_response == "error":
        raise InputError(next(iter(bad.values()))[1])
    labels = [_row_label(task, row, f"{path}:{row.line}") for row in rows]
    manifest = build_manifest(model, tokenizer, task, generation)
    manifest["generation"]["teacher_forced"] = True
    manifest["responses"] = {"file": str(path.resolve()),
                             "labels": "label field" if task is None else f"task {task.name}",
                             "prompt_format": _prompt_format(rows)}
    summary = CollectSummary(out_dir=str(out_dir))
    summary.skipped_empty = sum(kind == "empty" for kind, _ in bad.values())
    summary.skipped_too_long = sum(kind == "too_long" for kind, _ in bad.values())
    start = time.perf_counter()
    with StoreWriter(out_dir, manifest, dtype=generation.dtype, shard_size=shard_size,
                     allow_other_weights=allow_other_weights) as writer:
        done = writer.done_ids
        todo = [i for i, row in enumerate(rows) if row.id not in done and i not in bad]
        summary.resumed = sum(row.id in done for row in rows)
        bar = progress_bar(len(todo), f"record {path.name}", progress)

        def run_chunk(part):
            gens = record_responses(model, tokenizer, [prompts[i] for i in part],
                                    [rows[i].response for i in part], pool=pool,
                                    batch_size=batch_size, on_too_long="error", on_batch=bar.update)
            records = [_record(rows[i].id, None if task is None else task.name, prompts[i], gen,
                               text=rows[i].response, **labels[i]) for i, gen in zip(part, gens)]
            summary.unparseable += sum(r["parse_error"] for r in records)
            return records, gens

        _fill(writer, todo, run_chunk, batch_size=batch_size, summary=summary)
        bar.close()
    return _summarize(summary, Path(out_dir), time.perf_counter() - start)
