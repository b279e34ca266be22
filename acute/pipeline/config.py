"""The config of ``acute run``: a TOML file of models, tasks and run settings, read into a
:class:`Config` and checked before anything runs (an unknown model, task, option, data file or
estimator is named with its table)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..metrics.resampling import DEFAULT_N_BOOTSTRAP
from ..models import card_names
from ..protocol.verbalize import TEMPLATES
from ..store.format import DEFAULT_STORE_DTYPE, storage_dtype
from ..store.sampling import parse_sampling
from ..tasks import TASKS, get_task
from ..tasks.qa import default_questions_path
from ..validation import check_count, check_level

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib  # type: ignore[no-redef]

logger = logging.getLogger(__name__)

__all__ = ["STAGES", "Config", "ModelSpec", "TaskSpec", "check_inputs", "config_hash", "load_config"]


STAGES = ("collect", "evaluate", "transfer", "protocol", "report")


DEFAULT_DATA_ROOT = "../shared/data"


_RUN_KEYS = {
    "data_root": str, "seed": int, "test_fraction": float, "n_bootstrap": int,
    "report_n_bootstrap": int, "protocol_n_bootstrap": int, "batch_size": int, "n_jobs": int,
    "store_dtype": str, "probe_params": dict, "figures_model": str, "protocol_variant": str,
    "cv": int, "repeats": int, "estimators": list, "learning_curve": dict, "transfer": dict,
}


#: the [run] keys that are levels (:func:`acute.validation.check_level`), with what they mean
_RUN_LEVELS = {"test_fraction": "the share of records held out"}


_TASK_KEYS = {"task", "data", "split", "options", "max_new_tokens", "stop_strings", "chat", "records",
              "protocol", "description", "group_by", "shard_size", "samples"}


_MODEL_KEYS = {"model", "batch_size", "records", "protocol"}


@dataclass(frozen=True)
class TaskSpec:
    """One task of the config: ``key`` (label used in folders and tables), ``task`` (a built-in
    task name of :func:`acute.tasks.get_task`, or ``"jsonl"`` for generic open QA over the data
    file), ``data`` (file(s) or folder(s), absolute; empty for ``task = "default"``: the built-in
    question set), ``split``, task ``options``,
    ``max_new_tokens`` / ``stop_strings`` / ``chat`` overrides, default ``records`` and ``protocol`` rows.
    ``data`` may be left out for a task that fetches its own (``data_source``: BFCL's pinned wheel)."""

    key: str
    task: str
    data: tuple[str, ...]
    split: str | None = None
    options: dict = field(default_factory=dict)
    max_new_tokens: int | None = None
    chat: bool | None = None
    records: int = 0
    protocol: int = 0
    description: str = ""
    #: metadata field whose values the evaluation's folds keep apart and its intervals resample
    #: together: the config's ``group_by``, else the task's ``default_group_by``; ``"id"``: records
    group_by: str | None = None
    #: records per committed store shard (a kill loses at most one uncommitted shard); None: the
    #: collector's default. Not part of :meth:`identity`: it changes no record
    shard_size: int | None = None
    #: the answer's stop strings instead of the task's (``()``: none, only EOS and
    #: ``max_new_tokens`` end it); None: the task's own
    stop_strings: tuple[str, ...] | None = None
    #: sampled answers per question beside the greedy one (a manifest's ``generation["samples"]``:
    #: :class:`acute.store.sampling.SamplingSettings` as JSON); None: none
    samples: dict | None = None

    def identity(self) -> dict:
        """Everything that determines prompts, labels and the example pool (for the built-in
        question set, which has no ``data``, the sha256 of its file: a regenerated set is new work)."""
        ident = {"task": self.task, "data": list(self.data), "split": self.split,
                 "options": self.options, "max_new_tokens": self.max_new_tokens, "chat": self.chat}
        if self.stop_strings is not None:  # absent otherwise: the hashes of earlier runs stay
            ident["stop_strings"] = list(self.stop_strings)
        if self.samples is not None:
            ident["samples"] = self.samples
        if not self.data and _task_data_source(self.task) is not None:
            ident["data_source"] = _task_data_source(self.task)  # a pinned package: its version and hash
        elif not self.data:
            ident["builtin_sha256"] = hashlib.sha256(default_questions_path().read_bytes()).hexdigest()
        return ident


@dataclass(frozen=True)
class ModelSpec:
    """One model: ``key`` (folder label), ``source`` (card name, folder or .gguf for
    :func:`acute.models.load_model`), ``batch_size`` and per-task overrides of ``records`` and
    ``protocol`` rows."""

    key: str
    source: str
    batch_size: int
    records: dict = field(default_factory=dict)
    protocol: dict = field(default_factory=dict)


@dataclass
class Config:
    """A parsed reproduction config (see :func:`load_config`)."""

    path: Path
    text: str
    data_root: Path
    seed: int
    test_fraction: float
    n_bootstrap: int
    protocol_n_bootstrap: int
    batch_size: int
    n_jobs: int | None
    store_dtype: str
    probe_params: dict
    protocol_variant: str
    figures_model: str | None
    models: list[ModelSpec]
    tasks: list[TaskSpec]
    cv: int = 0  #: folds of the cross-validated evaluation (0: one train/test split, test_fraction)
    repeats: int = 1  #: fold assignments of the cross-validated evaluation
    estimators: list | None = None  #: evaluated estimators (None: all of acute.estimators.ESTIMATORS)
    learning_curve: dict = field(default_factory=dict)  #: {estimators, repeats}; empty: none
    transfer: dict = field(default_factory=dict)  #: {estimators, subject_splits, repeats}; empty: none

    def records(self, model: ModelSpec, task: TaskSpec) -> int:
        """Records to collect for ``model`` on ``task`` (model override, else the task's)."""
        return int(model.records.get(task.key, task.records))

    def protocol_rows(self, model: ModelSpec, task: TaskSpec) -> int:
        """Protocol-study examples for ``model`` on ``task`` (0: no protocol study)."""
        return int(model.protocol.get(task.key, task.protocol))


def _check_type(value: Any, kind: type, where: str) -> Any:
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, bool) and kind is not bool:
        raise InputError(f"{where}: expected {kind.__name__}, got a boolean")
    if not isinstance(value, kind):
        raise InputError(f"{where}: expected {kind.__name__}, got {type(value).__name__} {value!r}")
    return value


def _table(value: Any, where: str, known) -> dict:
    """``value`` if it is a table (dict) whose keys are all ``known``; else :class:`InputError`
    naming ``where`` and the unknown keys beside the known ones."""
    _check_type(value, dict, where)
    bad = sorted(set(value) - set(known))
    if bad:
        raise InputError(f"{where}: unknown key(s) {bad}; known: {sorted(known)}")
    return value


def _count(value: Any, where: str) -> int:
    value = _check_type(value, int, where)
    if value < 0:
        raise InputError(f"{where}: must be >= 0, got {value}")
    return value


def _positive(value: Any, where: str) -> int:
    value = _check_type(value, int, where)
    if value < 1:
        raise InputError(f"{where}: must be >= 1, got {value}")
    return value


def _estimator_list(names: Any, where: str, allow_all: bool = False) -> list[str] | None:
    """Checked estimator names (None when absent); ``["all"]`` stands for every estimator where
    ``allow_all`` (the evaluation's list)."""
    if names is None:
        return None
    from ..estimators.registry import ESTIMATORS, is_estimator  # start-up: scikit-learn

    if allow_all and names == ["all"]:
        return ["all"]

    bad = [n for n in names if not is_estimator(n)]
    if bad or not names:
        raise InputError(f"{where}: unknown or no estimator(s) {bad}; choose from {', '.join(ESTIMATORS)}")
    return list(names)


def _sub_table(table: Any, where: str, keys: dict[str, type]) -> dict:
    """A small [run.<name>] table: known keys of the given types, estimator names checked,
    counts >= 1."""
    if table is None:
        return {}
    _table(table, where, keys)
    out = {}
    for k, v in table.items():
        out[k] = _check_type(v, keys[k], f"{where}.{k}")
        if keys[k] is int and v < 1:
            raise InputError(f"{where}.{k}: must be >= 1, got {v}")
    if "estimators" in out:
        out["estimators"] = _estimator_list(out["estimators"], f"{where}.estimators")
    return out


def _sizes(table: Any, where: str, task_keys: set[str]) -> dict[str, int]:
    if table is None:
        return {}
    _check_type(table, dict, where)
    unknown = sorted(set(table) - task_keys)
    if unknown:
        raise InputError(f"{where}: unknown task(s) {unknown}; tasks in the config: {sorted(task_keys)}")
    return {k: _count(v, f"{where}.{k}") for k, v in table.items()}


def load_config(path: str | os.PathLike, data_root: str | os.PathLike | None = None) -> Config:
    """Parse and validate a reproduction config (TOML).

    ``data_root`` (else ``[run].data_root``, else ``$ACUTE_DATA``, else ``../shared/data``) is
    resolved against the current directory; each task's ``data`` is relative to it (or
    absolute). Raises ``FileNotFoundError`` for a missing config and ``ValueError`` naming the
    file and key for anything malformed (unknown keys, wrong types, no models or tasks,
    duplicate model folders, a ``figures_model`` that is not a model).
    """
    path = Path(path)
    text, raw = _read_toml(path)
    run = _table(raw.get("run", {}), f"{path}: [run]", _RUN_KEYS)
    for k, kind in _RUN_KEYS.items():
        if k in run and k not in _RUN_LEVELS:  # levels: acute's one level checker, below
            run[k] = _check_type(run[k], kind, f"{path}: run.{k}")
    root = data_root or run.get("data_root") or os.environ.get("ACUTE_DATA") or DEFAULT_DATA_ROOT
    root = Path(root).expanduser().resolve()
    tasks_raw = _check_type(raw.get("tasks", {}), dict, f"{path}: [tasks]")
    models_raw = _check_type(raw.get("models", {}), dict, f"{path}: [models]")
    if not tasks_raw:
        raise InputError(f"{path}: no [tasks.<name>] tables")
    if not models_raw:
        raise InputError(f"{path}: no [models.<name>] tables")
    tasks = [_task_spec(key, t, f"{path}: tasks.{key}", root) for key, t in tasks_raw.items()]
    batch_default = run.get("batch_size", 8)
    models = [_model_spec(key, m, f"{path}: models.{key}", path, batch_default, set(tasks_raw))
              for key, m in models_raw.items()]
    fig = run.get("figures_model")
    if fig is not None and fig not in models_raw:
        raise InputError(f"{path}: run.figures_model = {fig!r} is not a model of the config ({sorted(models_raw)})")
    evaluation = _evaluation_fields(run, path)
    return Config(
        path=path.resolve(), text=text, data_root=root, seed=run.get("seed", 0), **evaluation,
        batch_size=batch_default, n_jobs=run.get("n_jobs"),
        store_dtype=storage_dtype(run.get("store_dtype", DEFAULT_STORE_DTYPE), f"{path}: run.store_dtype"),
        probe_params=_probe_params(run.get("probe_params", {}), f"{path}: run.probe_params"),
        protocol_variant=_protocol_variant(run.get("protocol_variant", "unit"), f"{path}: run.protocol_variant"),
        figures_model=fig, models=models, tasks=tasks,
        estimators=_estimator_list(run.get("estimators"), f"{path}: run.estimators", allow_all=True),
        learning_curve=_sub_table(run.get("learning_curve"), f"{path}: run.learning_curve",
                                  {"estimators": list, "repeats": int}),
        transfer=_sub_table(run.get("transfer"), f"{path}: run.transfer",
                            {"estimators": list, "subject_splits": int, "repeats": int}))


def _read_toml(path: Path) -> tuple[str, dict]:
    """The config's text and its tables (run, models, tasks and nothing else)."""
    if not path.is_file():
        raise FileNotFoundError(f"config {path} does not exist")
    text = path.read_text(encoding="utf-8")
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise InputError(f"{path}: invalid TOML ({e})") from None
    unknown = sorted(set(raw) - {"run", "models", "tasks"})
    if unknown:
        raise InputError(f"{path}: unknown top-level table(s) {unknown}; expected run, models, tasks")
    return text, raw


def _task_spec(key: str, t: Any, where: str, root: Path) -> TaskSpec:
    """One ``[tasks.<key>]`` table, checked; its data paths resolved against ``root``."""
    _table(t, where, _TASK_KEYS)
    task_name = _check_type(t.get("task", key), str, f"{where}.task")
    data = t.get("data")
    own_data = task_name == "default" or _task_data_source(task_name) is not None
    if data is None and not own_data:
        raise InputError(f"{where}: missing 'data' (file or folder relative to the data root)")
    data = [] if data is None else [data] if isinstance(data, str) else data
    if not isinstance(data, list) or not (data or own_data) \
            or not all(isinstance(d, str) and d for d in data):
        raise InputError(f"{where}.data: expected a path or a non-empty list of paths, got {t['data']!r}")
    mnt = t.get("max_new_tokens")
    if mnt is not None:
        _positive(mnt, f"{where}.max_new_tokens")
    stops = t.get("stop_strings")
    if stops is not None and (not isinstance(stops, list) or not all(isinstance(x, str) and x for x in stops)):
        raise InputError(f"{where}.stop_strings: expected a list of non-empty strings ([] for none), got {stops!r}")
    return TaskSpec(
        key=key, task=task_name,
        data=tuple(str((root / d).resolve()) for d in data),
        split=_check_type(t["split"], str, f"{where}.split") if "split" in t else None,
        options=_check_type(t.get("options", {}), dict, f"{where}.options"),
        max_new_tokens=mnt,
        stop_strings=None if stops is None else tuple(stops),
        samples=(parse_sampling(t["samples"], f"{where}.samples").to_json() if "samples" in t else None),
        chat=_check_type(t["chat"], bool, f"{where}.chat") if "chat" in t else None,
        records=_count(t.get("records", 0), f"{where}.records"),
        protocol=_count(t.get("protocol", 0), f"{where}.protocol"),
        description=_check_type(t.get("description", ""), str, f"{where}.description"),
        group_by=(_check_type(t["group_by"], str, f"{where}.group_by") if "group_by" in t
                  else _task_group_by(task_name)),
        shard_size=_positive(t["shard_size"], f"{where}.shard_size") if "shard_size" in t else None,
    )


def _model_spec(key: str, m: Any, where: str, path: Path, batch_default: int, task_keys: set[str]) -> ModelSpec:
    """One ``[models.<key>]`` table, checked; a relative model path that exists beside the
    config resolved against the config's folder."""
    _table(m, where, _MODEL_KEYS)
    if "/" in key or key.startswith("."):
        raise InputError(f"{where}: a model key is a folder name; it cannot contain '/' or start with '.'")
    bs = _positive(m.get("batch_size", batch_default), f"{where}.batch_size")
    source = _check_type(m.get("model", key), str, f"{where}.model")
    src_path = Path(source).expanduser()
    if not src_path.is_absolute() and (path.parent / src_path).exists():
        source = str((path.parent / src_path).resolve())
    return ModelSpec(key=key, source=source, batch_size=bs,
                     records=_sizes(m.get("records"), f"{where}.records", task_keys),
                     protocol=_sizes(m.get("protocol"), f"{where}.protocol", task_keys))


def _evaluation_fields(run: dict, path: Path) -> dict[str, Any]:
    """The ``[run]`` settings of the evaluation and the protocol study, checked: ``test_fraction``,
    ``cv``, ``repeats``, ``n_bootstrap``, ``protocol_n_bootstrap``."""
    from ..evaluation.crossval import DEFAULT_TEST_FRACTION  # start-up: the evaluation stack

    tf = check_level(run.get("test_fraction", DEFAULT_TEST_FRACTION), f"{path}: run.test_fraction",
                     _RUN_LEVELS["test_fraction"])
    cv, repeats = run.get("cv", 0), run.get("repeats", 1)
    if cv == 1 or cv < 0:
        raise InputError(f"{path}: run.cv must be 0 (one train/test split) or >= 2 folds, got {cv}")
    if repeats < 1:
        raise InputError(f"{path}: run.repeats must be >= 1, got {repeats}")
    n_boot = check_count(run.get("n_bootstrap", DEFAULT_N_BOOTSTRAP), f"{path}: run.n_bootstrap", minimum=0)
    if "report_n_bootstrap" in run:
        logger.warning("%s: run.report_n_bootstrap is no longer used (the report reads each evaluation's "
                       "intervals from its results.json); remove it", path)
    protocol_n_boot = check_count(run.get("protocol_n_bootstrap", n_boot), f"{path}: run.protocol_n_bootstrap")
    return {"test_fraction": tf, "cv": cv, "repeats": repeats, "n_bootstrap": n_boot,
            "protocol_n_bootstrap": protocol_n_boot}


def _probe_params(params: dict, where: str) -> dict:
    """``params`` when every key is an :class:`acute.estimators.probes.ActivationProbe` keyword an
    estimator name does not fix (:func:`acute.estimators.registry.make_estimator`)."""
    if not params:
        return params
    from ..estimators.probes import ActivationProbe  # start-up: scikit-learn

    known = sorted(set(ActivationProbe().get_params()) - {"view", "layer", "calibration", "pooling"})
    bad = sorted(set(params) - set(known))
    if bad:
        raise InputError(f"{where}: unknown or fixed probe parameter(s) {bad}; known: {known}")
    return params


def _protocol_variant(variant: str, where: str) -> str:
    """``variant`` when it names an elicitation template (:data:`acute.protocol.verbalize.TEMPLATES`)."""
    if variant not in TEMPLATES:
        raise InputError(f"{where} must be one of {', '.join(map(repr, TEMPLATES))}, got {variant!r}")
    return variant


def _task_data_source(task_name: str) -> str | None:
    """Where the task fetches its data when the config gives none (BFCL: its pinned wheel)."""
    return getattr(TASKS.get(task_name), "data_source", None)


def _task_group_by(task_name: str) -> str | None:
    """The task's declared grouping (``default_group_by``: APIGen and BFCL group by tool set)."""
    return getattr(TASKS.get(task_name), "default_group_by", None)


def check_inputs(cfg: Config) -> None:
    """Fail before any work starts when the config names an unknown task (or task option), a
    data path that does not exist, or a model that is neither a model card, a folder nor a file.
    ``InputError`` / ``FileNotFoundError`` name the config table and the value."""
    for t in cfg.tasks:
        where = f"{cfg.path}: tasks.{t.key}"
        if t.task not in TASKS and t.task != "jsonl":
            raise InputError(f"{where}.task: unknown task {t.task!r}; known: {sorted(TASKS)} or 'jsonl'")
        for d in t.data:
            if not Path(d).exists():
                raise FileNotFoundError(f"{where}.data: {d} does not exist (data root {cfg.data_root})")
        if t.task != "jsonl":
            try:
                get_task(t.task, **t.options)
            except (TypeError, ValueError) as exc:
                raise InputError(f"{where}.options: {exc}") from None
    cards = card_names()
    for m in cfg.models:
        if m.source not in cards and not Path(m.source).expanduser().exists():
            raise InputError(f"{cfg.path}: models.{m.key}.model: {m.source!r} is neither a model card "
                             f"({', '.join(cards)}) nor an existing folder or file")


def config_hash(fields: dict) -> str:
    """A short sha256 of the JSON of ``fields`` (sorted keys): identifies a stage's settings."""
    text = json.dumps(fields, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
