"""Benchmarks as tasks: loading, prompting, answer extraction and labelling.

``get_task(name_or_path, **options)`` returns a :class:`Task`; ``list_tasks()`` lists the built-in
ones. A path to a ``.jsonl`` file of ``{id, question, answers}`` rows gives a generic open-QA task
(normalised exact match against any answer).

Every task's ``load(path=None, split=None, limit=None)`` reads a file or a folder (see each task's
``data_hint``); with ``path=None`` it reads ``$ACUTE_DATA/<benchmark folder>`` (the built-in
``default`` task needs no data; ``bfcl`` fetches its pinned wheel into ``$ACUTE_HOME``).
Wrong-type answers are assigned on load (see :func:`acute.tasks.answer_types.assign_wrong_types`).

The names below are the package's public API (docs/api.md): finding a task, the records it
loads, and the base classes a new task extends (:class:`Task`; :class:`OpenQATask` and
:class:`MultipleChoiceTask` for the two kinds of labelling). A built-in task's class and the
answer helpers (normalising, extracting a choice, ROUGE-L) are imported from their modules;
prompts are formatted by :func:`acute.models.format_prompt`; a bad data file raises
:class:`acute.errors.TaskDataError`.
"""

from __future__ import annotations

from pathlib import Path

from .apigen import APIGenTask
from .bfcl import BFCLTask
from .base import DATA_ENV, Example, Task
from .choice import MultipleChoiceTask, SciQMCTask
from .mmlu import MMLUTask
from .qa import DefaultTask, JsonlQATask, OpenQATask, SciQTask, TriviaQATask
from .scitldr import SciTLDRTask
from .truthfulqa import TruthfulQAGenTask, TruthfulQAMCTask
from ..errors import InputError

__all__ = ["DATA_ENV", "Example", "JsonlQATask", "MultipleChoiceTask", "OpenQATask", "TASKS", "Task", "get_task",
           "list_tasks"]

#: task name -> class (construct with options via :func:`get_task`)
TASKS: dict[str, type[Task]] = {
    cls.name: cls
    for cls in (DefaultTask, MMLUTask, TriviaQATask, SciQTask, SciQMCTask, TruthfulQAMCTask,
                TruthfulQAGenTask, APIGenTask, SciTLDRTask, BFCLTask)
}


def get_task(name_or_path: str | Path, **options) -> Task:
    """Return the task called ``name_or_path`` (see :func:`list_tasks`), built with ``options``.

    A path to an existing ``.jsonl`` file (or any name ending in ``.jsonl``) gives a
    :class:`JsonlQATask` over that file. Raises ``ValueError`` for an unknown name (listing the
    known ones) or an unknown option, ``FileNotFoundError`` for a missing ``.jsonl`` path.
    """
    key = str(name_or_path)
    if key in TASKS:
        return TASKS[key](**options)
    if key.lower() in TASKS:
        return TASKS[key.lower()](**options)
    path = Path(key).expanduser()
    if path.suffix == ".jsonl" or path.is_file():
        if not path.is_file():
            raise FileNotFoundError(f"task file {path} does not exist")
        if path.suffix != ".jsonl":
            raise InputError(f"task file {path} must be a .jsonl of {{id, question, answers}} rows")
        return JsonlQATask(path=path, **options)
    raise InputError(f"unknown task {key!r}; known tasks: {', '.join(TASKS)} "
                     "(or a path to a .jsonl file of {id, question, answers})")


def list_tasks() -> list[Task]:
    """One instance (default options) of every built-in task, in registry order."""
    return [cls() for cls in TASKS.values()]
