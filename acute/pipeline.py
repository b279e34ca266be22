"""The reproduction pipeline (``acute run``): model x task grid -> stores -> evaluations ->
protocol studies -> ``docs/results/README.md``.

    acute run CONFIG [--out docs/results] [--work runs/reproduce]
        [--only MODEL/TASK ...] [--stages collect,evaluate,protocol,report]
        [--data-root DIR] [--plan]

For every model and task of the TOML config (see ``examples/reproduce.toml``):

1. **collect**: answer the task's examples (a fixed, seeded sample of the data file; sizes per
   model and task) while recording every layer's hidden states into a store
   (:func:`acute.collect.collect`; resumes through the store).
2. **evaluate**: split the records by id into train and test (seed, test fraction), fit the six
   baselines and six ACUTE variants, evaluate on test with bootstrap intervals
   (:func:`acute.evaluate.evaluate_store`).
3. **protocol**: the verbalized-vs-token protocol study on the tasks that ask for it
   (:func:`acute.protocol.run_protocol`, its own size; its answers come from the pair's store
   when that holds every example, else from a store of its own; resumes record shard by shard).
4. **report**: ``README.md`` in ``--out`` with every table, figures, protocol tables and the
   wall time and peak memory of each stage (:mod:`acute.report`).

Resumable: a stage whose outputs are complete and were made with the same settings (a hash of
the settings that determine them, stored next to the outputs) is skipped; collection resumes
record by record. Each stage of each model and task runs in its own Python process
(``python -m acute.pipeline _worker ...``), so its peak resident memory is measured alone (the
process's ``VmHWM``, see :func:`own_peak_rss_mb`); wall time, CPU time (``os.wait4``) and peak
memory go to ``<work>/timings.json``. A failed stage is recorded and the others go on; the exit status is 1
when any stage failed.

Work layout: ``<work>/<model>/<task>/{store,eval,protocol}`` and ``<stage>.done.json`` there.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import os
import shlex
import subprocess
import sys
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib  # type: ignore[no-redef]

from .errors import InputError

PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # put first on a worker's PYTHONPATH
STAGES = ("collect", "evaluate", "transfer", "protocol", "report")
DEFAULT_DATA_ROOT = "../shared/data"
TIMINGS_FORMAT = "acute-reproduce-timings/1"
_MAX_INVOCATIONS = 50

_RUN_KEYS = {
    "data_root": str, "seed": int, "test_fraction": float, "n_bootstrap": int,
    "report_n_bootstrap": int, "protocol_n_bootstrap": int, "batch_size": int, "n_jobs": int,
    "store_dtype": str, "probe_params": dict, "figures_model": str, "protocol_variant": str,
    "cv": int, "repeats": int, "estimators": list, "learning_curve": dict, "transfer": dict,
}
_TASK_KEYS = {"task", "data", "split", "options", "max_new_tokens", "chat", "records", "protocol",
              "description", "group_by"}
_MODEL_KEYS = {"model", "batch_size", "records", "protocol"}


# ----------------------------------------------------------------------------- config
@dataclass(frozen=True)
class TaskSpec:
    """One task of the config: ``key`` (label used in folders and tables), ``task`` (a built-in
    task name of :func:`acute.tasks.get_task`, or ``"jsonl"`` for generic open QA over the data
    file), ``data`` (file(s) or folder(s), absolute; empty for ``task = "default"``: the built-in
    question set), ``split``, task ``options``,
    ``max_new_tokens`` / ``chat`` overrides, default ``records`` and ``protocol`` rows."""

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
    group_by: str | None = None  #: metadata field whose values the evaluation's folds keep apart

    def identity(self) -> dict:
        """Everything that determines prompts, labels and the example pool (for the built-in
        question set, which has no ``data``, the sha256 of its file: a regenerated set is new work)."""
        ident = {"task": self.task, "data": list(self.data), "split": self.split,
                 "options": self.options, "max_new_tokens": self.max_new_tokens, "chat": self.chat}
        if not self.data:
            from .tasks.qa import default_questions_path

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
    report_n_bootstrap: int
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


def _count(value: Any, where: str) -> int:
    value = _check_type(value, int, where)
    if value < 0:
        raise InputError(f"{where}: must be >= 0, got {value}")
    return value


def _estimator_list(names: Any, where: str) -> list[str] | None:
    if names is None:
        return None
    from .estimators import ESTIMATORS, is_estimator

    bad = [n for n in names if not is_estimator(n)]
    if bad or not names:
        raise InputError(f"{where}: unknown or no estimator(s) {bad}; choose from {', '.join(ESTIMATORS)}")
    return list(names)


def _sub_table(table: Any, where: str, keys: dict[str, type]) -> dict:
    """A small [run.<name>] table: known keys of the given types, estimator names checked,
    counts >= 1."""
    if table is None:
        return {}
    _check_type(table, dict, where)
    bad = sorted(set(table) - set(keys))
    if bad:
        raise InputError(f"{where}: unknown key(s) {bad}; known: {sorted(keys)}")
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


# Long but flat: one check per config field, each with its own message, so a bad config fails
# before anything runs.
def load_config(path: str | os.PathLike, data_root: str | os.PathLike | None = None) -> Config:
    """Parse and validate a reproduction config (TOML).

    ``data_root`` (else ``[run].data_root``, else ``$ACUTE_DATA``, else ``../shared/data``) is
    resolved against the current directory; each task's ``data`` is relative to it (or
    absolute). Raises ``FileNotFoundError`` for a missing config and ``ValueError`` naming the
    file and key for anything malformed (unknown keys, wrong types, no models or tasks,
    duplicate model folders, a ``figures_model`` that is not a model).
    """
    path = Path(path)
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
    run = _check_type(raw.get("run", {}), dict, f"{path}: [run]")
    bad = sorted(set(run) - set(_RUN_KEYS))
    if bad:
        raise InputError(f"{path}: [run] has unknown key(s) {bad}; known: {sorted(_RUN_KEYS)}")
    for k, kind in _RUN_KEYS.items():
        if k in run:
            run[k] = _check_type(run[k], kind, f"{path}: run.{k}")

    root = data_root or run.get("data_root") or os.environ.get("ACUTE_DATA") or DEFAULT_DATA_ROOT
    root = Path(root).expanduser().resolve()

    tasks_raw = _check_type(raw.get("tasks", {}), dict, f"{path}: [tasks]")
    models_raw = _check_type(raw.get("models", {}), dict, f"{path}: [models]")
    if not tasks_raw:
        raise InputError(f"{path}: no [tasks.<name>] tables")
    if not models_raw:
        raise InputError(f"{path}: no [models.<name>] tables")
    task_keys = set(tasks_raw)
    tasks = []
    for key, t in tasks_raw.items():
        where = f"{path}: tasks.{key}"
        _check_type(t, dict, where)
        bad = sorted(set(t) - _TASK_KEYS)
        if bad:
            raise InputError(f"{where}: unknown key(s) {bad}; known: {sorted(_TASK_KEYS)}")
        task_name = _check_type(t.get("task", key), str, f"{where}.task")
        data = t.get("data")
        if data is None and task_name != "default":
            raise InputError(f"{where}: missing 'data' (file or folder relative to the data root)")
        data = [] if data is None else [data] if isinstance(data, str) else data
        if not isinstance(data, list) or not (data or task_name == "default") \
                or not all(isinstance(d, str) and d for d in data):
            raise InputError(f"{where}.data: expected a path or a non-empty list of paths, got {t['data']!r}")
        mnt = t.get("max_new_tokens")
        if mnt is not None and (_check_type(mnt, int, f"{where}.max_new_tokens") < 1):
            raise InputError(f"{where}.max_new_tokens: must be >= 1, got {mnt}")
        tasks.append(TaskSpec(
            key=key, task=task_name,
            data=tuple(str((root / d).resolve()) for d in data),
            split=_check_type(t["split"], str, f"{where}.split") if "split" in t else None,
            options=_check_type(t.get("options", {}), dict, f"{where}.options"),
            max_new_tokens=mnt,
            chat=_check_type(t["chat"], bool, f"{where}.chat") if "chat" in t else None,
            records=_count(t.get("records", 0), f"{where}.records"),
            protocol=_count(t.get("protocol", 0), f"{where}.protocol"),
            description=_check_type(t.get("description", ""), str, f"{where}.description"),
            group_by=_check_type(t["group_by"], str, f"{where}.group_by") if "group_by" in t else None,
        ))
    batch_default = run.get("batch_size", 8)
    models = []
    for key, m in models_raw.items():
        where = f"{path}: models.{key}"
        _check_type(m, dict, where)
        bad = sorted(set(m) - _MODEL_KEYS)
        if bad:
            raise InputError(f"{where}: unknown key(s) {bad}; known: {sorted(_MODEL_KEYS)}")
        if "/" in key or key.startswith("."):
            raise InputError(f"{where}: a model key is a folder name; it cannot contain '/' or start with '.'")
        bs = _check_type(m.get("batch_size", batch_default), int, f"{where}.batch_size")
        if bs < 1:
            raise InputError(f"{where}.batch_size: must be >= 1, got {bs}")
        source = _check_type(m.get("model", key), str, f"{where}.model")
        src_path = Path(source).expanduser()
        if not src_path.is_absolute() and (path.parent / src_path).exists():
            source = str((path.parent / src_path).resolve())
        models.append(ModelSpec(key=key, source=source, batch_size=bs,
                                records=_sizes(m.get("records"), f"{where}.records", task_keys),
                                protocol=_sizes(m.get("protocol"), f"{where}.protocol", task_keys)))
    fig = run.get("figures_model")
    if fig is not None and fig not in models_raw:
        raise InputError(f"{path}: run.figures_model = {fig!r} is not a model of the config ({sorted(models_raw)})")
    tf = run.get("test_fraction", 0.3)
    if not 0.0 < tf < 1.0:
        raise InputError(f"{path}: run.test_fraction must be in (0, 1), got {tf}")
    cv, repeats = run.get("cv", 0), run.get("repeats", 1)
    if cv == 1 or cv < 0:
        raise InputError(f"{path}: run.cv must be 0 (one train/test split) or >= 2 folds, got {cv}")
    if repeats < 1:
        raise InputError(f"{path}: run.repeats must be >= 1, got {repeats}")
    n_boot = run.get("n_bootstrap", 1000)
    for k in ("n_bootstrap", "report_n_bootstrap", "protocol_n_bootstrap"):
        if run.get(k, n_boot) < (1 if k == "protocol_n_bootstrap" else 0):
            raise InputError(f"{path}: run.{k} must be positive, got {run[k]}")
    return Config(
        path=path.resolve(), text=text, data_root=root, seed=run.get("seed", 0), test_fraction=tf,
        n_bootstrap=n_boot, report_n_bootstrap=run.get("report_n_bootstrap", n_boot),
        protocol_n_bootstrap=run.get("protocol_n_bootstrap", n_boot),
        batch_size=batch_default, n_jobs=run.get("n_jobs"), store_dtype=run.get("store_dtype", "float16"),
        probe_params=run.get("probe_params", {}), protocol_variant=run.get("protocol_variant", "unit"),
        figures_model=fig, models=models, tasks=tasks, cv=cv, repeats=repeats,
        estimators=_estimator_list(run.get("estimators"), f"{path}: run.estimators"),
        learning_curve=_sub_table(run.get("learning_curve"), f"{path}: run.learning_curve",
                                  {"estimators": list, "repeats": int}),
        transfer=_sub_table(run.get("transfer"), f"{path}: run.transfer",
                            {"estimators": list, "subject_splits": int, "repeats": int}))


def check_inputs(cfg: Config) -> None:
    """Fail before any work starts when the config names an unknown task (or task option), a
    data path that does not exist, or a model that is neither a model card, a folder nor a file.
    ``InputError`` / ``FileNotFoundError`` name the config table and the value."""
    from .models import _card_names
    from .tasks import TASKS, get_task

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
    cards = _card_names()
    for m in cfg.models:
        if m.source not in cards and not Path(m.source).expanduser().exists():
            raise InputError(f"{cfg.path}: models.{m.key}.model: {m.source!r} is neither a model card "
                             f"({', '.join(cards)}) nor an existing folder or file")


def config_hash(fields: dict) -> str:
    """A short sha256 of the JSON of ``fields`` (sorted keys): identifies a stage's settings."""
    text = json.dumps(fields, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


# ----------------------------------------------------------------------------- jobs
@dataclass
class Job:
    """One stage of one model and task (``model``/``task`` are ``None`` for the report)."""

    stage: str
    model: str | None
    task: str | None
    payload: dict
    hash: str
    done_file: Path | None  # sidecar marking completion (the report's is set when it runs)
    outputs: tuple[Path, ...] = ()  # files that must exist besides the sidecar
    after: tuple[str, ...] = ()  # keys of jobs whose success this one needs

    @property
    def key(self) -> str:
        return self.stage if self.model is None else f"{self.stage}/{self.model}/{self.task}"

    def is_complete(self) -> bool:
        """Whether the outputs exist and the sidecar records this job's settings hash."""
        if self.done_file is None or not self.done_file.is_file():
            return False
        try:
            done = json.loads(self.done_file.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return False
        return (done.get("complete") is True and done.get("config_hash") == self.hash
                and all(p.is_file() for p in self.outputs))


def _pair_dir(work: Path, model: str, task: str) -> Path:
    return work / model / task


def _matches(only: Sequence[str] | None, model: str, task: str) -> bool:
    if not only:
        return True
    for pat in only:
        m_pat, _, t_pat = pat.partition("/")
        if fnmatch.fnmatchcase(model, m_pat) and fnmatch.fnmatchcase(task, t_pat or "*"):
            return True
    return False


def plan_jobs(cfg: Config, work: Path, out: Path, stages: Sequence[str] = STAGES,
              only: Sequence[str] | None = None, command: str = "", report_command: str = "") -> list[Job]:
    """The jobs of an invocation, in run order (per model: its collects and protocols task by
    task, then its evaluations; the report last). ``only`` filters (model, task) pairs by
    ``MODEL/TASK`` glob patterns (``MODEL`` alone = all its tasks); the report always covers
    every output present."""
    work, out = Path(work).resolve(), Path(out).resolve()
    jobs: list[Job] = []
    for m in cfg.models:
        evals = []
        collected: list[tuple[TaskSpec, str, str]] = []  # (task, collect hash, collect job key)
        for t in cfg.tasks:
            n = cfg.records(m, t)
            n_proto = cfg.protocol_rows(m, t)
            pair = _pair_dir(work, m.key, t.key)
            model_id = {"key": m.key, "source": m.source}
            base = {"model": m.key, "model_source": m.source, "task_key": t.key, "task": asdict(t),
                    "seed": cfg.seed, "batch_size": m.batch_size, "pair_dir": str(pair)}
            c_fields = {"stage": "collect", "model": model_id, "task": t.identity(), "records": n,
                        "seed": cfg.seed, "store_dtype": cfg.store_dtype}
            c_hash = config_hash(c_fields)
            collect = Job("collect", m.key, t.key,
                          {**base, "records": n, "store_dir": str(pair / "store"),
                           "store_dtype": cfg.store_dtype},
                          c_hash, pair / "collect.done.json", (pair / "store" / "manifest.json",))
            e_fields = {"stage": "evaluate", "collect": c_hash, "test_fraction": cfg.test_fraction,
                        "seed": cfg.seed, "n_bootstrap": cfg.n_bootstrap, "probe_params": cfg.probe_params}
            if cfg.cv or cfg.estimators or cfg.learning_curve:  # keeps older runs' hashes
                e_fields.update(cv=cfg.cv, repeats=cfg.repeats, estimators=cfg.estimators,
                                learning_curve=cfg.learning_curve)
            # evaluations with the control rows and the t-intervals supersede the earlier ones
            e_fields.update(evaluation=2, group_by=t.group_by)
            e_hash = config_hash(e_fields)
            evaluate = Job("evaluate", m.key, t.key,
                           {**base, "eval_dir": str(pair / "eval"), "store_dir": str(pair / "store"),
                            "collect_done": str(pair / "collect.done.json"),
                            "test_fraction": cfg.test_fraction, "n_bootstrap": cfg.n_bootstrap,
                            "n_jobs": cfg.n_jobs, "probe_params": cfg.probe_params, "cv": cfg.cv,
                            "repeats": cfg.repeats, "estimators": cfg.estimators, "group_by": t.group_by,
                            "learning_curve": cfg.learning_curve},
                           e_hash, pair / "evaluate.done.json",
                           (pair / "eval" / "results.json",)
                           + ((pair / "eval" / "learning-curve" / "learning_curve.json",) if cfg.learning_curve else ()),
                           after=(collect.key,))
            p_fields = {"stage": "protocol", "model": model_id, "task": t.identity(), "rows": n_proto,
                        "seed": cfg.seed, "n_bootstrap": cfg.protocol_n_bootstrap,
                        "variant": cfg.protocol_variant}
            protocol = Job("protocol", m.key, t.key,
                           {**base, "rows": n_proto, "protocol_dir": str(pair / "protocol"),
                            "n_bootstrap": cfg.protocol_n_bootstrap, "variant": cfg.protocol_variant},
                           config_hash(p_fields), pair / "protocol.done.json",
                           (pair / "protocol" / "protocol.json",))
            if n > 0:  # a model's transfer covers all its tasks, whichever pairs --only names
                collected.append((t, c_hash, collect.key))
            if not _matches(only, m.key, t.key):
                continue
            if n > 0 and "collect" in stages:
                jobs.append(collect)
            if n_proto > 0 and "protocol" in stages:
                jobs.append(protocol)
            if n > 0 and "evaluate" in stages:
                evals.append(evaluate)
        jobs += evals
        if cfg.transfer and "transfer" in stages and len(collected) >= 2 and _matches(only, m.key, "transfer"):
            jobs.append(_transfer_job(cfg, work, m, collected))
    if "report" in stages:
        payload = {"config": str(cfg.path), "data_root": str(cfg.data_root), "work": str(work),
                   "out": str(out), "command": command, "report_command": report_command}
        jobs.append(Job("report", None, None, payload, "", None))
    return jobs


def _transfer_job(cfg: Config, work: Path, m: ModelSpec, collected: list[tuple[TaskSpec, str, str]]) -> Job:
    """One model's transfer table over its collected tasks, and MMLU leave-subjects-out for its
    MMLU tasks (``<work>/<model>/transfer/transfer.json``)."""
    folder = work / m.key / "transfer"
    tasks = [{"key": t.key, "task": t.task, "store_dir": str(_pair_dir(work, m.key, t.key) / "store"),
              "collect_done": str(_pair_dir(work, m.key, t.key) / "collect.done.json")} for t, _, _ in collected]
    fields = {"stage": "transfer", "collects": [h for _, h, _ in collected], "seed": cfg.seed,
              "n_bootstrap": cfg.n_bootstrap, "probe_params": cfg.probe_params, "transfer": cfg.transfer}
    payload = {"model": m.key, "tasks": tasks, "transfer_dir": str(folder), "seed": cfg.seed,
               "n_bootstrap": cfg.n_bootstrap, "n_jobs": cfg.n_jobs, "probe_params": cfg.probe_params,
               "transfer": cfg.transfer}
    return Job("transfer", m.key, "transfer", payload, config_hash(fields), folder / "transfer.done.json",
               (folder / "transfer.json",), after=tuple(k for _, _, k in collected))


def report_inputs_hash(cfg: Config, work: Path, timings: dict, extra: dict | None = None) -> str:
    """Hash of everything the report reads: the config, each completed stage's sidecar (settings
    hash and finish time), the recorded timings of the stages (not of the report) and ``extra``
    (the report job's payload: output folder and the commands it prints)."""
    inputs = []
    for m in cfg.models:
        for t in [*cfg.tasks, None]:  # None: the model's transfer stage
            pair = _pair_dir(Path(work), m.key, "transfer" if t is None else t.key)
            for stage in ("collect", "evaluate", "protocol") if t is not None else ("transfer",):
                f = pair / f"{stage}.done.json"
                if f.is_file():
                    try:
                        d = json.loads(f.read_text(encoding="utf-8"))
                    except json.JSONDecodeError:
                        continue
                    inputs.append([f"{stage}/{m.key}/{pair.name}", d.get("config_hash"), d.get("finished")])
    stages = {k: [v.get("status"), v.get("finished")] for k, v in timings.get("stages", {}).items()
              if not k.startswith("report")}
    return config_hash({"config": cfg.text, "data_root": str(cfg.data_root), "inputs": inputs,
                        "stages": stages, "extra": extra or {}, "format": 1})


# ----------------------------------------------------------------------------- timings
def load_timings(path: Path) -> dict:
    """``timings.json`` (a fresh document when missing or unreadable)."""
    if path.is_file():
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            if doc.get("format") == TIMINGS_FORMAT:
                return doc
        except (OSError, json.JSONDecodeError):
            pass
    return {"format": TIMINGS_FORMAT, "stages": {}, "invocations": []}


def update_timings(path: Path, stages: dict, invocation: dict) -> dict:
    """Merge this invocation's ``stages`` entries and its ``invocation`` record into
    ``timings.json`` under an exclusive lock, re-reading the file first, so that invocations
    running side by side (different ``--only`` pairs, same ``--work``) do not drop each
    other's entries. Returns the merged document."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(f".{path.name}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        doc = load_timings(path)
        doc["stages"].update(stages)
        others = [i for i in doc.get("invocations", []) if i.get("id") != invocation["id"]]
        doc["invocations"] = (others + [invocation])[-_MAX_INVOCATIONS:]
        _write_json_atomic(path, doc)
    return doc


def _write_json_atomic(path: Path, obj: Any) -> None:
    from acute._util import write_text_atomic

    write_text_atomic(path, json.dumps(obj, indent=1, default=str))


def _peak_rss_mb(ru_maxrss: float) -> float:
    """``ru_maxrss`` in MiB (Linux reports KiB, macOS bytes)."""
    return ru_maxrss / (1024.0 * 1024.0) if sys.platform == "darwin" else ru_maxrss / 1024.0


def own_peak_rss_mb() -> float:
    """This process's peak resident set size in MiB.

    Linux: ``VmHWM`` of ``/proc/self/status``, the high-water mark of this program's own
    address space. (``ru_maxrss`` is not used there: the kernel carries the pre-``exec`` peak
    of the forked parent into it, so a child of a large process would report at least the
    parent's size.) Elsewhere: ``resource.getrusage(RUSAGE_SELF).ru_maxrss``. psutil offers no
    peak on Linux, so it is not needed.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except (OSError, ValueError, IndexError):
        pass
    import resource

    return _peak_rss_mb(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


#: environment variable that carries ``acute run``'s model placement options to its workers
LOAD_OPTIONS_ENV = "ACUTE_RUN_LOAD_OPTIONS"


def run_worker(job: Job, work: Path, log=print, load_options: dict | None = None) -> dict:
    """Run ``job`` in a child process of this script and return its timing entry: ``status``
    (``ran``/``failed``), ``wall_s`` (child's wall time, imports included), ``peak_rss_mb``
    (the child's peak resident set size as it reports it, :func:`own_peak_rss_mb`; else the
    ``ru_maxrss`` of ``os.wait4``), ``cpu_s`` (its user + system CPU time: on a shared
    machine a steadier measure of work than wall time), ``started``/``finished`` and the worker's
    ``detail`` (its summary, or the error)."""
    jobs_dir = work / ".jobs"
    jobs_dir.mkdir(parents=True, exist_ok=True)
    stem = job.key.replace("/", "__") + "-" + uuid.uuid4().hex[:8]
    job_file, result_file = jobs_dir / f"{stem}.job.json", jobs_dir / f"{stem}.result.json"
    _write_json_atomic(job_file, {"stage": job.stage, "key": job.key, "hash": job.hash,
                                  "done_file": str(job.done_file) if job.done_file else None,
                                  "payload": job.payload})
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(PACKAGE_ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env[LOAD_OPTIONS_ENV] = json.dumps(load_options or {})
    cmd = [sys.executable, "-m", "acute.pipeline", "_worker", str(job_file), str(result_file)]
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env)
    peak = cpu = None
    try:
        if hasattr(os, "wait4"):
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            peak = _peak_rss_mb(usage.ru_maxrss)
            cpu = usage.ru_utime + usage.ru_stime
        else:  # pragma: no cover - non-POSIX
            proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        proc.wait()
        raise
    wall = time.perf_counter() - t0
    result: dict = {}
    if result_file.is_file():
        try:
            result = json.loads(result_file.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            result = {}
    if result.get("peak_rss_mb") is not None:  # the worker's own measure (see own_peak_rss_mb)
        peak = result["peak_rss_mb"]
    ok = proc.returncode == 0 and result.get("ok") is True
    entry = {"status": "ran" if ok else "failed", "wall_s": round(wall, 3),
             "peak_rss_mb": None if peak is None else round(peak, 1),
             "cpu_s": None if cpu is None else round(cpu, 2), "started": started,
             "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "config_hash": job.hash,
             "returncode": proc.returncode, "detail": result.get("summary") if ok else
             (result.get("error") or f"worker exited with status {proc.returncode}")}
    for f in (job_file, result_file):
        f.unlink(missing_ok=True)
    return entry


# ----------------------------------------------------------------------------- the driver
def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    from acute.cli import model_options_parser, load_options_from_args

    p = argparse.ArgumentParser(
        prog="acute run", description=__doc__.split("\n\n")[0], parents=[model_options_parser()],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config", help="TOML config (examples/reproduce.toml, examples/reproduce-smoke.toml)")
    p.add_argument("--out", default="docs/results", help="where README.md, figures and tables go (default docs/results)")
    p.add_argument("--work", default="runs/reproduce", help="stores, evaluations, protocol runs, timings.json (default runs/reproduce)")
    p.add_argument("--only", nargs="+", action="extend", metavar="MODEL/TASK",
                   help="run only these model/task pairs (glob patterns; MODEL alone = all its tasks)")
    p.add_argument("--stages", default=",".join(STAGES),
                   help=f"comma-separated subset of {','.join(STAGES)} (default all)")
    p.add_argument("--data-root", default=None, help="folder the tasks' data paths are relative to "
                   "(default: the config's run.data_root, $ACUTE_DATA, or ../shared/data)")
    p.add_argument("--plan", action="store_true", help="print the jobs and whether each would run, then exit")
    args = p.parse_args(argv)
    stages = [s.strip() for s in args.stages.split(",") if s.strip()]
    bad = [s for s in stages if s not in STAGES]
    if bad or not stages:
        p.error(f"--stages: unknown stage(s) {bad}; choose from {','.join(STAGES)}")
    args.stages = tuple(s for s in STAGES if s in stages)
    args.load_options = load_options_from_args(args)
    return args


def _command(argv: Sequence[str]) -> str:
    return shlex.join(["acute", "run", *argv])


def regenerate_commands(args: argparse.Namespace) -> tuple[str, str]:
    """``(full, report_only)``: the command that regenerates every output of the config (no
    ``--only``/``--stages``: the report covers every model and task) and the one that only
    rewrites the report from existing runs."""
    parts = [args.config, "--out", args.out, "--work", args.work]
    if args.data_root:
        parts += ["--data-root", args.data_root]
    return _command(parts), _command(parts + ["--stages", "report"])


def _prepare_report(job: Job, cfg: Config, work: Path, out: Path, timings: dict) -> None:
    job.hash = report_inputs_hash(cfg, work, timings, job.payload)
    job.done_file = work / "report.done.json"
    job.outputs = (out / "README.md", out / "report.json")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the driver; returns the exit status (0: every job ran or was complete, 1: a job failed)."""
    from acute.cli import show_logs

    argv = list(sys.argv[1:] if argv is None else argv)
    show_logs()  # progress and output paths of the library's slow steps, on stderr
    if argv[:1] == ["_worker"]:
        return worker_main(argv[1], argv[2])
    args = _parse_args(argv)
    cfg = load_config(args.config, data_root=args.data_root)
    check_inputs(cfg)
    work, out = Path(args.work).resolve(), Path(args.out).resolve()
    command, report_command = regenerate_commands(args)
    jobs = plan_jobs(cfg, work, out, args.stages, args.only, command=command,
                     report_command=report_command)
    timings_path = work / "timings.json"
    timings = load_timings(timings_path)
    if args.plan:
        for j in jobs:
            if j.stage == "report":
                _prepare_report(j, cfg, work, out, timings)
            state = "complete, would skip" if j.is_complete() else "would run"
            print(f"{j.key:60s} {state}")
        return 0

    work.mkdir(parents=True, exist_ok=True)
    invocation = {"id": uuid.uuid4().hex, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                  "command": _command(argv), "jobs": []}
    ran: dict[str, dict] = {}  # this invocation's stage entries, merged into timings.json
    failed: set[str] = set()
    t_start = time.perf_counter()
    print(f"reproduce: {len(jobs)} jobs; work {work}; out {out}; data {cfg.data_root}", flush=True)
    for i, job in enumerate(jobs, start=1):
        tag = f"[{i}/{len(jobs)}] {job.key}"
        if job.stage == "report":
            timings = load_timings(timings_path)  # includes side-by-side invocations' stages
            _prepare_report(job, cfg, work, out, timings)
        blocked = [a for a in job.after if a in failed]
        if blocked:
            entry = {"status": "blocked", "wall_s": 0.0, "detail": f"needs {', '.join(blocked)}"}
            print(f"{tag}: blocked ({entry['detail']} failed)", flush=True)
            failed.add(job.key)
        elif job.is_complete():
            entry = {"status": "skipped", "wall_s": 0.0, "detail": f"complete (settings {job.hash})"}
            print(f"{tag}: skipped, outputs complete (settings {job.hash})", flush=True)
        else:
            print(f"{tag}: running", flush=True)
            entry = run_worker(job, work, load_options=args.load_options)
            ran[job.key] = entry
            if entry["status"] == "ran":
                peak = entry["peak_rss_mb"]
                print(f"{tag}: done in {entry['wall_s']:.1f} s, peak memory "
                      f"{'n/a' if peak is None else f'{peak:.0f} MB'}", flush=True)
            else:
                failed.add(job.key)
                print(f"{tag}: FAILED after {entry['wall_s']:.1f} s: {entry['detail']}", flush=True)
        invocation["jobs"].append({"key": job.key, "status": entry["status"], "wall_s": entry["wall_s"]})
        timings = update_timings(timings_path, ran, invocation)
    invocation["wall_s"] = round(time.perf_counter() - t_start, 3)
    update_timings(timings_path, ran, invocation)
    n_ran = sum(j["status"] == "ran" for j in invocation["jobs"])
    n_skip = sum(j["status"] == "skipped" for j in invocation["jobs"])
    print(f"reproduce: {n_ran} ran, {n_skip} skipped, {len(failed)} failed/blocked in "
          f"{invocation['wall_s']:.1f} s; timings in {timings_path}", flush=True)
    return 1 if failed else 0


# ----------------------------------------------------------------------------- worker side
def select_examples(examples: Sequence, n: int, seed: int) -> list:
    """A fixed sample of ``n`` examples: ordered by ``sha256("select:<seed>:<id>")``, first ``n``.

    Deterministic, independent of file order, and nested (a larger ``n`` keeps every example
    of a smaller one, so a grown collection resumes). The ``select:`` prefix keeps the sample
    independent of :func:`acute.evaluate.split_ids`, which hashes ``"<seed>:<id>"``.
    Returns all examples (in that order) when ``n`` exceeds their number.
    """
    def key(ex) -> bytes:
        return hashlib.sha256(f"select:{seed}:{ex.id}".encode("utf-8")).digest()

    return sorted(examples, key=key)[: max(int(n), 0)]


def load_task_examples(spec: dict) -> tuple[Any, list]:
    """``(task, examples)`` of a task spec (``TaskSpec`` as a dict): the task from
    :func:`acute.tasks.get_task` (``task = "jsonl"``: generic open QA over the first data file)
    and every example of every data path (ids must be unique across files)."""
    from acute.tasks import get_task

    options = dict(spec.get("options") or {})
    name = spec["task"]
    task = get_task(spec["data"][0], **options) if name == "jsonl" else get_task(name, **options)
    if spec.get("max_new_tokens"):
        task.max_new_tokens = int(spec["max_new_tokens"])
    examples, seen = [], {}
    for path in spec["data"] or [None]:  # no data: the built-in question set
        for ex in task.load(path, split=spec.get("split")):
            if ex.id in seen:
                raise InputError(f"task {spec['key']!r}: example id {ex.id!r} occurs in {seen[ex.id]} and {path}")
            seen[ex.id] = path
            examples.append(ex)
    return task, examples


def _load_model(source: str):
    from acute.models import load_model

    t0 = time.perf_counter()
    model, tok = load_model(source, **json.loads(os.environ.get(LOAD_OPTIONS_ENV) or "{}"))
    return model, tok, time.perf_counter() - t0


def _store_matches(manifest: dict, p: dict, task) -> bool:
    """Whether an existing store was collected with this job's model, task settings, answer
    length, chat choice (when set) and dtype; otherwise :func:`acute.collect.collect` is called
    and reports the incompatibility itself."""
    gen = manifest.get("generation") or {}
    same_settings = json.loads(json.dumps(manifest.get("task_settings"), default=str)) == \
        json.loads(json.dumps(task.settings(), default=str))
    chat = p["task"].get("chat")
    return (manifest.get("model") == p["model"] and same_settings
            and gen.get("max_new_tokens") == (p["task"].get("max_new_tokens") or task.max_new_tokens)
            and (chat is None or gen.get("chat") == chat) and manifest.get("dtype") == p["store_dtype"])


def _worker_collect(p: dict) -> dict:
    from acute.collect import collect

    task, examples = load_task_examples(p["task"])
    chosen = select_examples(examples, p["records"], p["seed"])
    store_dir = Path(p["store_dir"])
    if (store_dir / "manifest.json").is_file():
        from acute.store import open_store

        store = open_store(store_dir)
        have = {str(i) for i in store.ids}
        if _store_matches(store.manifest, p, task) and all(str(ex.id) in have for ex in chosen):
            # e.g. a smaller size than before: nothing to generate, no model to load
            keep = [i for i, rid in enumerate(store.ids) if str(rid) in {str(ex.id) for ex in chosen}]
            print(f"  all {len(chosen)} selected records are already in {store_dir}", flush=True)
            return {"load_s": 0.0, "work_s": 0.0, "available": len(examples), "selected": len(chosen),
                    "records": len(keep), "new_records": 0, "resumed": len(keep),
                    "accuracy": float(store.correct[keep].mean()),
                    "selected_ids": [str(ex.id) for ex in chosen]}
    model, tok, load_s = _load_model(p["model_source"])
    t0 = time.perf_counter()
    summary = collect(model, tok, task, chosen, p["store_dir"], model_name=p["model"],
                      batch_size=p["batch_size"], max_new_tokens=p["task"].get("max_new_tokens"),
                      dtype=p["store_dtype"], chat=p["task"].get("chat"), progress=True)
    for line in summary.lines():
        print(f"  {line}", flush=True)
    return {"load_s": round(load_s, 2), "work_s": round(time.perf_counter() - t0, 2),
            "available": len(examples), "selected": len(chosen), "records": summary.records,
            "new_records": summary.new_records, "resumed": summary.resumed,
            "skipped_too_long": summary.skipped_too_long, "unparseable": summary.unparseable,
            "accuracy": summary.accuracy, "mean_raw_confidence": summary.mean_raw_confidence,
            "seconds_per_record": summary.seconds_per_record,
            "selected_ids": [str(ex.id) for ex in chosen]}


def _worker_evaluate(p: dict) -> dict:
    from acute.evaluate import evaluate_store

    sub = _selected_store(p)
    t0 = time.perf_counter()
    cv = p.get("cv") or None
    res = evaluate_store(sub, out_dir=p["eval_dir"], cv=cv, repeats=p.get("repeats") or 1,
                         test_fraction=None if cv else p["test_fraction"], seed=p["seed"],
                         estimators=p.get("estimators"), n_bootstrap=p["n_bootstrap"], n_jobs=p.get("n_jobs"),
                         probe_params=p.get("probe_params") or None, progress=True, reliability="best",
                         group_by=p.get("group_by"), fold_cache=Path(p["pair_dir"]) / "eval-fold-cache")
    best = {r["estimator"]: r.get("auc_euro_all") for r in res.rows}
    lc = p.get("learning_curve") or {}
    if lc:
        from tqdm.auto import tqdm

        from acute.estimators import DEFAULT_ESTIMATOR
        from acute.learning_curve import DEFAULT_REPEATS as LC_REPEATS, learning_curve, write_learning_curve

        curve = learning_curve(sub.layer_means, sub.correct, sub.raw_confidence, sub.ids,
                               estimators=lc.get("estimators") or (DEFAULT_ESTIMATOR,),
                               n_splits=cv or 5, repeats=lc.get("repeats", LC_REPEATS), seed=p["seed"],
                               n_jobs=p.get("n_jobs"), probe_params=p.get("probe_params") or None,
                               progress=lambda it: tqdm(it, desc="learning curve", file=sys.stderr))
        write_learning_curve(curve, Path(p["eval_dir"]) / "learning-curve", params=lc,
                             model=p["model"], task=p["task_key"])
    return {"work_s": round(time.perf_counter() - t0, 2), "records": len(sub), **res.split,
            "auc_euro_all": best}


def _selected_store(p: dict):
    """The store of a collect stage, restricted to the records that stage selected."""
    from acute.store import open_store

    done = Path(p["collect_done"])
    if not done.is_file():
        raise FileNotFoundError(f"{done} is missing: run the collect stage first")
    wanted = set(json.loads(done.read_text(encoding="utf-8"))["summary"]["selected_ids"])
    store = open_store(p["store_dir"])
    idx = [i for i, rid in enumerate(store.ids) if str(rid) in wanted]
    if not idx:
        raise InputError(f"{p['store_dir']}: none of the selected records is in the store")
    return store if len(idx) == len(store) else store.select(idx)


def _worker_transfer(p: dict) -> dict:
    from tqdm.auto import tqdm

    from acute._util import json_ready
    from acute.estimators import DEFAULT_ESTIMATOR
    from acute.transfer import leave_subjects_out, transfer_table

    t0 = time.perf_counter()
    tr = p.get("transfer") or {}
    estimators = tr.get("estimators") or (DEFAULT_ESTIMATOR,)
    kw = dict(seed=p["seed"], n_bootstrap=p["n_bootstrap"], n_jobs=p.get("n_jobs"),
              probe_params=p.get("probe_params") or None)
    stores = {t["key"]: _selected_store(t) for t in p["tasks"]}
    doc: dict[str, Any] = {"complete": True, "model": p["model"], "settings": tr,
                           "table": transfer_table(stores, estimators,
                                                   progress=lambda it: tqdm(it, desc="transfer", file=sys.stderr),
                                                   **kw),
                           "subjects": {}}
    for t in p["tasks"]:
        if t["task"] == "mmlu":
            doc["subjects"][t["key"]] = leave_subjects_out(stores[t["key"]], estimators,
                                                           n_splits=tr.get("subject_splits", 5),
                                                           repeats=tr.get("repeats", 2), **kw)
    out = Path(p["transfer_dir"])
    out.mkdir(parents=True, exist_ok=True)
    _write_json_atomic(out / "transfer.json", json_ready(doc))
    return {"work_s": round(time.perf_counter() - t0, 2), "tasks": list(stores)}


def _answers_store(store_dir: Path, examples) -> Path | None:
    """The pair's collected store when it already holds the answer to every protocol example (the
    protocol study then generates nothing; a store of other settings is refused by
    :func:`run_protocol`), else None: the study collects its own into ``protocol/store``."""
    from acute.store import open_store

    if not (store_dir / "manifest.json").is_file():
        return None
    try:
        have = set(open_store(store_dir, verify=False).ids)
    except Exception:  # noqa: BLE001 - an unreadable store: the study collects its own answers
        return None
    return store_dir if all(str(ex.id) in have for ex in examples) else None


def _worker_protocol(p: dict) -> dict:
    from acute.protocol import run_protocol

    task, examples = load_task_examples(p["task"])
    chosen = select_examples(examples, p["rows"], p["seed"])
    model, tok, load_s = _load_model(p["model_source"])
    t0 = time.perf_counter()
    res = run_protocol(model, tok, task, chosen, p["protocol_dir"], model_name=p["model"],
                       store=_answers_store(Path(p["pair_dir"]) / "store", chosen),
                       batch_size=p["batch_size"], max_new_tokens=p["task"].get("max_new_tokens"),
                       n_bootstrap=p["n_bootstrap"], seed=p["seed"], variant=p["variant"],
                       chat=p["task"].get("chat"), progress=True)
    return {"load_s": round(load_s, 2), "work_s": round(time.perf_counter() - t0, 2),
            "rows": len(chosen), "shifts": res.shifts, "counts": res.counts}


def _task_info(t: TaskSpec, cfg: Config) -> str:
    opts = ", ".join(f"{k}={v}" for k, v in t.options.items())
    data = ", ".join(os.path.relpath(d, cfg.data_root) for d in t.data) or "built-in questions"
    text = f"Task `{t.task}`" + (f" ({opts})" if opts else "") + f"; data `{data}`"
    text += f" (split {t.split})" if t.split else ""
    return text + (f". {t.description}" if t.description else ".")


def _plan_row(pair: Path, model: str, task: str, requested: int) -> dict:
    """One pair of the plan: records requested and collected, accuracy, and how far it got."""
    row = {"model": model, "task": task, "requested": requested, "collected": None, "accuracy": None,
           "stage": "not collected"}
    done = pair / "collect.done.json"
    if done.is_file():
        summary = json.loads(done.read_text(encoding="utf-8")).get("summary", {})
        row.update(collected=summary.get("records"), accuracy=summary.get("accuracy"), stage="collected")
    elif (pair / "store" / "manifest.json").is_file():
        manifest = json.loads((pair / "store" / "manifest.json").read_text(encoding="utf-8"))
        row.update(collected=manifest.get("num_records"), stage="collecting")
    if (pair / "evaluate.done.json").is_file():
        row["stage"] = "evaluated"
    return row


def planned_failures(cfg: Config, timings: dict) -> list[tuple[str, str]]:
    """``(stage key, error)`` of the failed stages in ``timings`` that ``cfg`` still plans (a pair
    whose records were set to 0 since, e.g. a task dropped from the plan, is not listed)."""
    current = {f"{s}/{m.key}/{t.key}" for m in cfg.models for t in cfg.tasks
               for s, n in (("collect", cfg.records(m, t)), ("evaluate", cfg.records(m, t)),
                            ("protocol", cfg.protocol_rows(m, t))) if n > 0}
    current |= {f"transfer/{m.key}/transfer" for m in cfg.models}
    return [(key, str(e.get("detail"))) for key, e in timings.get("stages", {}).items()
            if e.get("status") == "failed" and key in current]


def _worker_report(p: dict) -> dict:
    from acute.report import ReportInputs, write_report

    cfg = load_config(p["config"], data_root=p["data_root"])
    work, out = Path(p["work"]), Path(p["out"])
    timings = load_timings(work / "timings.json")
    evals, protos, records, plan = [], [], {}, []
    for m in cfg.models:
        for t in cfg.tasks:
            pair = _pair_dir(work, m.key, t.key)
            records[(m.key, t.key)] = cfg.records(m, t)
            if cfg.records(m, t) > 0:
                plan.append(_plan_row(pair, m.key, t.key, cfg.records(m, t)))
            if (pair / "evaluate.done.json").is_file() and (pair / "eval" / "results.json").is_file():
                evals.append((m.key, t.key, pair / "eval"))
            if (pair / "protocol.done.json").is_file() and (pair / "protocol" / "protocol.json").is_file():
                protos.append((m.key, t.key, pair / "protocol"))
    transfers = [(m.key, work / m.key / "transfer" / "transfer.json") for m in cfg.models
                 if (work / m.key / "transfer" / "transfer.done.json").is_file()
                 and (work / m.key / "transfer" / "transfer.json").is_file()]
    failures = planned_failures(cfg, timings)
    evaluation = (f"{cfg.cv}-fold cross-validation x {cfg.repeats}" if cfg.cv
                  else f"one split, test fraction {cfg.test_fraction}")
    settings = {"seed": cfg.seed, "evaluation": evaluation,
                "evaluation bootstrap": cfg.n_bootstrap, "protocol bootstrap": cfg.protocol_n_bootstrap,
                "probe params": cfg.probe_params or "defaults", "store dtype": cfg.store_dtype,
                "models": ", ".join(f"{m.key} (batch {m.batch_size})" for m in cfg.models)}
    inputs = ReportInputs(
        out_dir=out, eval_runs=evals, protocol_runs=protos, models=[m.key for m in cfg.models],
        tasks=[t.key for t in cfg.tasks], task_info={t.key: _task_info(t, cfg) for t in cfg.tasks},
        records=records, stages=timings.get("stages", {}), failures=failures,
        command=p["command"], report_command=p["report_command"], n_bootstrap=cfg.report_n_bootstrap,
        seed=cfg.seed, figures_model=cfg.figures_model, settings=settings, transfer_runs=transfers,
        plan=plan)
    t0 = time.perf_counter()
    path = write_report(inputs, progress=True)
    _write_json_atomic(out / "timings.json", timings)
    print(f"report written to {path}", flush=True)
    return {"work_s": round(time.perf_counter() - t0, 2), "evaluations": len(evals), "protocol_runs": len(protos)}


_WORKERS = {"collect": _worker_collect, "evaluate": _worker_evaluate, "transfer": _worker_transfer,
            "protocol": _worker_protocol, "report": _worker_report}


def worker_main(job_file: str, result_file: str) -> int:
    """Child-process entry: run one job, write its sidecar (``<stage>.done.json``: settings hash,
    ``complete``, summary) and a result file for the driver. Returns the exit status."""
    import traceback

    job = json.loads(Path(job_file).read_text(encoding="utf-8"))
    t0 = time.perf_counter()
    try:
        summary = _WORKERS[job["stage"]](job["payload"])
    except Exception as exc:  # noqa: BLE001 - reported to the driver, which goes on with other jobs
        traceback.print_exc()
        _write_json_atomic(Path(result_file), {"ok": False, "error": f"{type(exc).__name__}: {exc}",
                                               "peak_rss_mb": own_peak_rss_mb()})
        return 1
    peak = own_peak_rss_mb()
    summary = {**summary, "inner_wall_s": round(time.perf_counter() - t0, 2)}
    done = {"stage": job["stage"], "key": job["key"], "config_hash": job["hash"], "complete": True,
            "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "summary": summary}
    _write_json_atomic(Path(job["done_file"]), done)
    brief = {k: v for k, v in summary.items() if k != "selected_ids"}
    _write_json_atomic(Path(result_file), {"ok": True, "summary": brief, "peak_rss_mb": peak})
    return 0


if __name__ == "__main__":
    sys.exit(main())
