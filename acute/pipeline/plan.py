"""The plan of ``acute run``: the jobs (stage x model x task) a config asks for, which of them are
done with the same settings (and skipped), and the fixed sample of examples each pair uses."""

from __future__ import annotations

import fnmatch
import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence


from .config import STAGES, Config, ModelSpec, TaskSpec, config_hash

__all__ = ["Job", "matches", "pair_dir", "plan_jobs", "planned_failures", "report_inputs_hash", "select_examples"]


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


def pair_dir(work: Path, model: str, task: str) -> Path:
    return work / model / task


def matches(only: Sequence[str] | None, model: str, task: str) -> bool:
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
            pair = pair_dir(work, m.key, t.key)
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
            if not matches(only, m.key, t.key):
                continue
            if n > 0 and "collect" in stages:
                jobs.append(collect)
            if n_proto > 0 and "protocol" in stages:
                jobs.append(protocol)
            if n > 0 and "evaluate" in stages:
                evals.append(evaluate)
        jobs += evals
        if cfg.transfer and "transfer" in stages and len(collected) >= 2 and matches(only, m.key, "transfer"):
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
    tasks = [{"key": t.key, "task": t.task, "store_dir": str(pair_dir(work, m.key, t.key) / "store"),
              "collect_done": str(pair_dir(work, m.key, t.key) / "collect.done.json")} for t, _, _ in collected]
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
            pair = pair_dir(Path(work), m.key, "transfer" if t is None else t.key)
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


def planned_failures(cfg: Config, timings: dict) -> list[tuple[str, str]]:
    """``(stage key, error)`` of the failed stages in ``timings`` that ``cfg`` still plans (a pair
    whose records were set to 0 since, e.g. a task dropped from the plan, is not listed)."""
    current = {f"{s}/{m.key}/{t.key}" for m in cfg.models for t in cfg.tasks
               for s, n in (("collect", cfg.records(m, t)), ("evaluate", cfg.records(m, t)),
                            ("protocol", cfg.protocol_rows(m, t))) if n > 0}
    current |= {f"transfer/{m.key}/transfer" for m in cfg.models}
    return [(key, str(e.get("detail"))) for key, e in timings.get("stages", {}).items()
            if e.get("status") == "failed" and key in current]


def select_examples(examples: Sequence, n: int, seed: int) -> list:
    """A fixed sample of ``n`` examples: ordered by ``sha256("select:<seed>:<id>")``, first ``n``.

    Deterministic, independent of file order, and nested (a larger ``n`` keeps every example
    of a smaller one, so a grown collection resumes). The ``select:`` prefix keeps the sample
    independent of :func:`acute.evaluation.crossval.split_ids`, which hashes ``"<seed>:<id>"``.
    Returns all examples (in that order) when ``n`` exceeds their number.
    """
    def key(ex) -> bytes:
        return hashlib.sha256(f"select:{seed}:{ex.id}".encode("utf-8")).digest()

    return sorted(examples, key=key)[: max(int(n), 0)]
