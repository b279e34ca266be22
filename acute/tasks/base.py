"""Shared pieces of the task layer: ``Example``, the ``Task`` base class, prompts with tools and
data-file helpers (file/folder resolution, JSONL/JSON/CSV reading with file:line errors).
"""

from __future__ import annotations

import csv
import io
import json
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from ..errors import InputError, TaskDataError
from ..models.prompts import format_prompt, template_prompt_with_tools
from ..fileio import iter_jsonl
from .normalize import normalize_answer
from .answer_types import assign_wrong_types


__all__ = [
    "Example",
    "Task",
    "use_chat",
    "read_jsonl",
    "read_json_array",
    "read_csv_rows",
    "read_text",
    "DATA_ENV",
]

DATA_ENV = "ACUTE_DATA"



@dataclass
class Example:
    """One benchmark item.

    ``answers`` are the gold answer texts (aliases for open QA; the gold option text for multiple
    choice), ``choices``/``label`` the options and gold index for multiple choice (else ``None``),
    ``incorrect`` known wrong answers, ``wrong_type`` an answer of another type (see
    :func:`acute.tasks.assign_wrong_types`). ``meta`` is small JSON-serialisable information stored
    with every record (subject, answer type, ...). ``context`` is an optional passage shown in the
    prompt, ``shots`` demonstration examples, ``payload`` task-private structured data (tool
    specifications, gold calls, source sentences) that is not stored with records.
    """

    id: str
    question: str
    answers: list[str]
    choices: list[str] | None = None
    label: int | None = None
    incorrect: list[str] = field(default_factory=list)
    wrong_type: str | None = None
    meta: dict = field(default_factory=dict)
    context: str | None = None
    shots: tuple = field(default=(), repr=False)
    payload: dict = field(default_factory=dict, repr=False)


# --------------------------------------------------------------------------- prompt formatting
# (prompts are formatted by acute.models.format_prompt, the one formatter)

def use_chat(tokenizer, chat: bool | None) -> bool:
    """Resolve ``chat``: ``None`` -> whether the tokenizer has a chat template; ``True`` without a
    template raises ``ValueError``."""
    has_template = bool(getattr(tokenizer, "chat_template", None))
    if chat is None:
        return has_template
    if chat and not has_template:
        raise InputError("chat=True but the tokenizer has no chat template; use chat=False or None")
    return bool(chat)


# --------------------------------------------------------------------------- file reading

def read_jsonl(path: Path) -> Iterator[tuple[int, dict]]:
    """Yield ``(line_number, object)`` for every non-blank line of a JSONL file (1-based lines).

    Raises ``TaskDataError`` naming file and line for invalid JSON or a line that is not an object.
    """
    yield from iter_jsonl(path, error=TaskDataError)


def read_json_array(path: Path) -> list[dict]:
    """Return the list of objects in a JSON file holding one array (item errors name the index)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
    except json.JSONDecodeError as e:
        raise TaskDataError(f"{path}:{e.lineno}: invalid JSON ({e.msg} at column {e.colno})") from None
    if not isinstance(data, list):
        raise TaskDataError(f"{path}: expected a JSON array of objects, got {type(data).__name__}")
    for i, item in enumerate(data):
        if not isinstance(item, dict):
            raise TaskDataError(f"{path}: item {i}: expected an object, got {type(item).__name__}")
    return data


def read_text(path: Path) -> str:
    """The UTF-8 text of ``path`` (a BOM dropped); ``TaskDataError`` naming the file and line of
    the first byte that is not UTF-8."""
    raw = Path(path).read_bytes()
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise TaskDataError(f"{path}:{line}: not valid UTF-8 ({e.reason})") from None


def read_csv_rows(path: Path, header: bool) -> Iterator[tuple[int, Any]]:
    """Yield ``(line_number, row)`` of a CSV file; rows are dicts when ``header`` else lists.

    The line number is the physical line where the record starts (quoted cells may span lines).
    A UTF-8 BOM is ignored; a byte that is not UTF-8 is reported with its line.
    """
    path = Path(path)
    with io.StringIO(read_text(path), newline="") as fh:
        reader = csv.DictReader(fh) if header else csv.reader(fh)
        start = reader.line_num + 1 if header else 1
        try:
            for row in reader:
                if header or any(cell.strip() for cell in row):
                    yield start, row
                start = reader.line_num + 1
        except csv.Error as e:
            raise TaskDataError(f"{path}:{reader.line_num}: malformed CSV ({e})") from None


def require(value: Any, what: str, where: str) -> Any:
    """Return ``value`` or raise ``TaskDataError`` saying ``where`` lacks ``what``."""
    if value is None or (isinstance(value, str) and not value.strip()) or (
            isinstance(value, (list, tuple)) and not value):
        raise TaskDataError(f"{where}: missing or empty {what}")
    return value


def clean_texts(values: Sequence, where: str, what: str, dedupe: bool = True) -> list[str]:
    """Strip and deduplicate a list of answer strings (order kept, empties dropped).

    With ``dedupe=False`` (option lists) duplicates are kept and an empty string raises.
    Raises ``TaskDataError`` when ``values`` is not a list of strings.
    """
    if isinstance(values, str) or not isinstance(values, (list, tuple)):
        raise TaskDataError(f"{where}: {what} must be a list of strings, got {type(values).__name__}")
    out: list[str] = []
    for v in values:
        if not isinstance(v, str):
            raise TaskDataError(f"{where}: {what} must be a list of strings, found {type(v).__name__}")
        v = v.strip()
        if not dedupe:
            if not v:
                raise TaskDataError(f"{where}: {what} contains an empty string")
            out.append(v)
        elif v and v not in out:
            out.append(v)
    return out


# --------------------------------------------------------------------------- the Task base class

#: options that count something: ints >= 0
_COUNT_OPTIONS = {"shots", "seed"}


def _check_option(task: str, key: str, value: Any, default: Any) -> None:
    """An option must have its default's type (bool, int, float or str; options whose default
    is None take anything their task accepts), counts must be >= 0 and ``on_error`` one of
    its two values. Raises ``InputError`` naming the task and option."""
    where = f"task {task!r}: option {key}={value!r}"
    if default is None:
        return
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    else:
        ok = isinstance(value, type(default))
    if not ok:
        raise InputError(f"{where} must be a {type(default).__name__} (like the default {default!r})")
    if key in _COUNT_OPTIONS and value < 0:
        raise InputError(f"{where} must be >= 0")
    if key == "on_error" and value not in ("raise", "skip"):
        raise InputError(f"{where} must be 'raise' or 'skip'")


class Task:
    """Base class of every task; subclasses set the class attributes and implement ``_read``.

    Constructor keyword options are stored as attributes (no other work) and reported by
    :meth:`settings`. ``load`` resolves the data location, reads rows (``_read``), assigns
    wrong-type answers and applies ``limit``.
    """

    name: str = ""
    description: str = ""
    data_hint: str = ""
    max_new_tokens: int = 32
    stop_strings: tuple[str, ...] = ("\n",)
    default_split: str = "test"
    #: split name accepted by ``load`` -> canonical split name
    split_aliases: dict[str, str] = {}
    #: folder name of the benchmark under ``$ACUTE_DATA``
    data_folder: str = ""
    #: record metadata a calibrator may know (``meta`` keys describing the question, never the
    #: labelling): the one-hots of the ``platt+meta`` control and the groups of within-group AUROC
    metadata_fields: tuple[str, ...] = ()
    #: the ``meta`` field whose records share structure (a tool set, a template): cross-validation
    #: keeps each value on one side of every split and intervals resample values together;
    #: ``None`` groups by record id
    default_group_by: str | None = None
    #: where the task fetches its data when given no path (a pinned package and its sha256), so a
    #: run config may leave ``data`` out; None: the data must be given (or ``$ACUTE_DATA``)
    data_source: str | None = None
    #: constructor options with their defaults (subclasses extend)
    options: dict[str, Any] = {"seed": 0, "on_error": "raise"}
    #: when two extracted answers are the same answer (what sampling agreement counts), in words;
    #: None: the task has no equivalence of its own (:meth:`answer_key` then needs ``fallback``)
    equivalence: str | None = None
    #: a function-calling task's parse of a reply alone into ``[{"name", "arguments"}]`` calls
    #: (None: unparseable), which reads no gold, so live scoring parses a reply as the store's
    #: records did and counts its calls against the tools a request offers; None: the task's
    #: replies are not calls
    calls_parser: Callable[[str], list[dict] | None] | None = None
    #: the equivalence :meth:`answer_key` uses with ``fallback`` where the task has none
    FALLBACK_EQUIVALENCE = "equal normalised text (lower case, no punctuation, articles or extra spaces)"

    def __init__(self, **options: Any):
        unknown = sorted(set(options) - set(self._all_options()))
        if unknown:
            raise InputError(f"task {self.name!r}: unknown option(s) {unknown}; known options: "
                             f"{sorted(self._all_options())}")
        for key, default in self._all_options().items():
            if key in options:
                _check_option(self.name, key, options[key], default)
            setattr(self, key, options.get(key, default))

    @classmethod
    def _all_options(cls) -> dict[str, Any]:
        merged: dict[str, Any] = {}
        for klass in reversed(cls.__mro__):
            merged.update(getattr(klass, "options", {}) or {})
        return merged

    def get_params(self) -> dict[str, Any]:
        """The constructor options and their current values."""
        return {k: getattr(self, k) for k in self._all_options()}

    def settings(self) -> dict[str, Any]:
        """Everything that determines prompts and labels, recorded in the store manifest."""
        return {"name": self.name, "max_new_tokens": self.max_new_tokens,
                "stop_strings": list(self.stop_strings), **self.get_params()}

    def __repr__(self) -> str:
        opts = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({opts})"

    # ----------------------------------------------------------------- loading
    def canonical_split(self, split: str | None) -> str:
        """Map ``split`` (or ``None`` -> the default split) through the split aliases."""
        split = split or self.default_split
        return self.split_aliases.get(split.lower(), split.lower())

    def resolve_path(self, path: str | os.PathLike | None) -> Path:
        """Return the data file or folder to read: ``path``, else ``$ACUTE_DATA/<data_folder>``."""
        if path is None:
            root = os.environ.get(DATA_ENV)
            if not root:
                raise InputError(f"task {self.name!r} needs data: pass path (--data) pointing at "
                                 f"{self.data_hint}, or set ${DATA_ENV} to a folder holding "
                                 f"'{self.data_folder}/'")
            path = Path(root) / self.data_folder
        path = Path(path).expanduser()
        if not path.exists():
            raise FileNotFoundError(f"task {self.name!r}: data path {path} does not exist "
                                    f"(expected {self.data_hint})")
        return path

    def load(self, path: str | os.PathLike | None = None, split: str | None = None,
             limit: int | None = None) -> list[Example]:
        """Read the examples of ``split`` from ``path`` (a file or a folder) and return them.

        Wrong-type answers are assigned over the whole split before ``limit`` keeps the first
        ``limit`` examples, so an example's wrong-type answer does not depend on ``limit``.
        """
        if limit is not None and limit < 0:
            raise InputError(f"limit must be >= 0 or None, got {limit}")
        if self.on_error not in ("raise", "skip"):
            raise InputError(f"on_error must be 'raise' or 'skip', got {self.on_error!r}")
        resolved = self.resolve_path(path)
        split_name = self.canonical_split(split)
        examples = self._read(resolved, split_name)
        seen: set[str] = set()
        for ex in examples:
            if ex.id in seen:
                raise TaskDataError(f"{resolved}: duplicate example id {ex.id!r}")
            seen.add(ex.id)
        examples = self._assign_wrong_types(examples)
        return examples if limit is None else examples[:limit]

    def _read(self, path: Path, split: str) -> list[Example]:
        raise NotImplementedError

    def _assign_wrong_types(self, examples: list[Example]) -> list[Example]:
        return assign_wrong_types(examples, seed=self.seed, text_of=self._typed_text,
                                  accept=self._is_wrong_reply)

    def _is_wrong_reply(self, ex: Example, text: str) -> bool:
        """True when ``text`` given as the reply is labelled wrong (wrong-type answers must be)."""
        return not self.is_correct(ex, self.answer_text(ex, text))

    def _typed_text(self, ex: Example) -> str:
        """The answer text that is typed and lent to other rows as their wrong-type answer."""
        return self.gold_answer(ex) if ex.answers else ""

    def _rows(self, rows: Iterator[tuple[Any, Any]], parse: Callable[[Any, Any, str], Example | None],
              where: Callable[[Any], str]) -> list[Example]:
        """Parse ``(key, row)`` pairs (key = line number or item index) with
        ``parse(key, row, where(key))``. Errors raise, or with ``on_error='skip'`` are counted and
        reported in one warning naming the first bad location."""
        out, bad = [], []
        for key, row in rows:
            try:
                ex = parse(key, row, where(key))
            except TaskDataError as e:
                if self.on_error == "raise":
                    raise
                bad.append(str(e))
                continue
            if ex is not None:
                out.append(ex)
        if bad:
            warnings.warn(f"task {self.name!r}: skipped {len(bad)} malformed row(s); first: {bad[0]}",
                          stacklevel=3)
        return out

    # ----------------------------------------------------------------- prompting and labelling
    def prompt(self, tokenizer, ex: Example, chat: bool | None = None) -> str:
        """The fully formatted prompt for ``ex`` (chat template or plain text, see module docs).

        With a chat template and tools to offer (:meth:`chat_tools`), the template shows them
        (``apply_chat_template(tools=...)``) beside ``chat_messages(ex, tools_in_template=True)``;
        a template that does not show tools gets ``chat_messages(ex)``, which carries them in its
        text."""
        if use_chat(tokenizer, chat):
            tools = self.chat_tools(ex)
            if tools is not None:
                messages = self.chat_messages(ex, tools_in_template=True)
                text = template_prompt_with_tools(tokenizer, messages, tools)
                if text is not None:
                    return text
            return format_prompt(tokenizer, self.chat_messages(ex), chat=True)
        return format_prompt(tokenizer, self.plain_prompt(ex), chat=False)

    def chat_tools(self, ex: Example) -> list[dict] | None:
        """Tool specifications for the chat template to offer (OpenAI form, ``{"type": "function",
        "function": {...}}``), or ``None`` (the default: the prompt is the messages alone). A task
        that returns tools accepts ``chat_messages(ex, tools_in_template=True)``: its messages
        without the tools in their text."""
        return None

    def chat_messages(self, ex: Example) -> list[dict[str, str]]:
        raise NotImplementedError

    def plain_prompt(self, ex: Example) -> str:
        raise NotImplementedError

    def extract(self, ex: Example, generation: str) -> str | None:
        raise NotImplementedError

    def is_correct(self, ex: Example, generation: str) -> bool:
        raise NotImplementedError

    def label_details(self, ex: Example, generation: str) -> dict[str, Any]:
        """``{"answer": extracted, "correct": bool, "parse_error": bool}`` (+ task-specific keys)."""
        answer = self.extract(ex, generation)
        return {"answer": answer, "correct": bool(self.is_correct(ex, generation)),
                "parse_error": answer is None}

    def answer_key(self, answer: str | None, fallback: bool = False) -> Any:
        """A hashable key of an extracted answer (a record's ``answer``): two answers are the same
        answer iff their keys are equal (:attr:`equivalence`). None for no answer (unparseable or
        empty): never the same as any other. A task without an equivalence of its own raises
        :class:`InputError` naming itself and the fallback, unless ``fallback`` (then
        :attr:`FALLBACK_EQUIVALENCE`)."""
        if self.equivalence is None and not fallback:
            raise InputError(f"task {self.name!r} has no answer equivalence of its own; use the fallback "
                             f"({self.FALLBACK_EQUIVALENCE}) by asking for it explicitly")
        return self._answer_key(answer) if self.equivalence is not None else _text_key(answer)

    def _answer_key(self, answer: str | None) -> Any:
        return _text_key(answer)

    def gold_answer(self, ex: Example) -> str:
        """The canonical gold answer: the first alias that is not empty once normalised (some
        clipped aliases, e.g. ``"(a"``, are), else the first alias."""
        return next((a for a in ex.answers if normalize_answer(a)), ex.answers[0])

    def plausible_wrong(self, ex: Example) -> list[str]:
        """Known plausible but wrong answers: ``ex.incorrect`` without duplicates and without texts
        that normalise to a gold answer (some benchmarks list the gold among the distractors)."""
        gold = {normalize_answer(a) for a in ex.answers}
        out: list[str] = []
        for text in ex.incorrect:
            if text not in out and normalize_answer(text) not in gold:
                out.append(text)
        return out

    def wrong_type(self, ex: Example) -> str | None:
        """An answer of another type than the gold answer, or ``None`` when none was assigned."""
        return ex.wrong_type

    def answer_text(self, ex: Example, answer: str) -> str:
        """How a provided ``answer`` is written as the model's reply: the text on one line (white
        space collapsed) by default."""
        return " ".join(str(answer).split())


def _text_key(answer: str | None) -> str | None:
    key = normalize_answer(answer) if isinstance(answer, str) else ""
    return key or None


def find_file(folder: Path, candidates: Sequence[str], task: str, split: str) -> Path:
    """Return the first existing ``folder/<candidate>`` or raise ``FileNotFoundError`` listing them."""
    for name in candidates:
        p = folder / name
        if p.is_file():
            return p
    raise FileNotFoundError(f"task {task!r}: no file for split {split!r} in {folder}; looked for "
                            + ", ".join(candidates))
