"""What the commands share: defaults, task options, the store a command reads, the probe it
loads by default."""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path


from ..errors import InputError
from ..tasks import get_task
from ..store import open_store
from ..models import DEFAULT_MODEL, get_card

__all__ = ["DEFAULT_RUNS", "add_store_arguments", "chat_flag", "default_probe_dir", "default_store_dir",
           "estimator_list", "level_arg", "load_task", "open_labelled_store", "task_options"]

logger = logging.getLogger(__name__)


DEFAULT_RUNS = Path("runs")


def level_arg(check, option: str):
    """An argparse ``type`` for a probability-like option (``--risk``, ``--max-error``, ...): the
    text read as a number and checked by ``check`` (acute's checker of that level, e.g.
    :func:`acute.scoring.risk.check_risk`) under the option's name, so that a bad value is
    argparse's error in the library's words: ``argument --risk: must be a number in [0, 1] (the
    risk level u: trust iff confidence > u), got 1.5`` (exit 2)."""
    def parse(text: str) -> float:
        try:
            value: object = float(text)
        except ValueError:
            value = text  # refused by the checker, which names it as given
        try:
            return check(value, option)
        except InputError as e:
            raise argparse.ArgumentTypeError(str(e).removeprefix(f"{option} ")) from None

    parse.__name__ = option.lstrip("-")
    return parse


def task_options(pairs: list[str] | None) -> dict:
    """``["shots=0", "context=true"]`` -> ``{"shots": 0, "context": True}`` (values read as JSON
    when they parse, else kept as strings)."""
    options = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise InputError(f"--task-option must look like KEY=VALUE, got {pair!r}")
        try:
            options[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            options[key.strip()] = value
    return options


def load_task(name: str, data: str | None, split: str | None, limit: int | None, **options):
    task = get_task(name, **options)
    examples = task.load(data, split=split, limit=limit)
    if not examples:
        source = data or getattr(task, "path", None) or "the default data"
        raise InputError(f"task {task.name!r}: no examples in {source}")
    return task, examples


def default_store_dir(model: str, task_name: str) -> Path:
    """``runs/<model>-<task>`` with path-like names reduced to their file stem."""
    return DEFAULT_RUNS / f"{Path(model).stem}-{Path(task_name).stem}"


def chat_flag(args):
    return {"auto": None, "chat": True, "plain": False}[getattr(args, "prompt_format", "auto")]


def open_labelled_store(path: str, allow_partial: bool = False):
    """The labelled records of the store at ``path``; one whose collection did not finish (status
    other than "complete") or whose manifest disagrees with its shards is refused unless
    ``allow_partial``. Records without a label (answers ``acute serve --record-to`` recorded and
    feedback did not label) are left out, their number logged; a store without any is refused."""
    store = open_store(path)
    if len(store) == 0:
        raise InputError(f"store {path} has no records")
    store.check_finite()
    m = store.manifest
    status, counted = m.get("status"), m.get("num_records")
    problem = (f"its collection did not finish (status {status!r})" if status != "complete"
               else f"its manifest counts {counted} records but its shards hold {len(store)}"
               if counted is not None and counted != len(store) else None)
    if problem and not allow_partial:
        raise InputError(f"store {path}: {problem}; resume it with the same `acute collect` command, "
                         f"or pass --allow-partial to use the {len(store)} committed records")
    if problem:
        logger.warning("store %s: %s; using its %d committed records", path, problem, len(store))
    labelled = store.labelled
    if not labelled.all():  # answers `acute serve --record-to` recorded, not (yet) labelled by feedback
        if not labelled.any():
            raise InputError(f"store {path}: none of its {len(store)} records has a label; label served "
                             "answers with POST /v1/feedback")
        logger.warning("store %s: %d of its %d records have no label (served answers without feedback); "
                       "using the %d labelled ones", path, int((~labelled).sum()), len(store), int(labelled.sum()))
        store = store.select(labelled)
    return store


def add_store_arguments(parser, *, out_help: str, out_required: bool = False, out_default=None,
                        store_help: str = "store folder of labelled records", store_required: bool = True,
                        allow_partial: bool = True) -> None:
    """The ``--store`` a command reads (with ``--allow-partial``, see :func:`open_labelled_store`)
    and the ``--out`` it writes: the same three options, worded the same, in every command."""
    parser.add_argument("--store", required=store_required, default=None, help=store_help)
    if allow_partial:
        parser.add_argument("--allow-partial", action="store_true",
                            help="use the committed records of a store whose collection did not finish")
    parser.add_argument("--out", required=out_required, default=out_default, help=out_help)


def estimator_list(text: str | None) -> list[str] | None:
    if text is None:
        return None
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise InputError("--estimators needs a comma-separated list of estimator names")
    return names


def default_probe_dir() -> Path:
    return get_card(DEFAULT_MODEL).path.parent / "probe"
