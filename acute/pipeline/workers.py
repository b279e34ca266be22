"""The stage workers of ``acute run`` (collect, evaluate, transfer, protocol, report), each run in
its own process by :func:`worker_main`: they call the library and return a summary. Each stage
imports what it needs inside its function, so a worker process loads (and its peak memory counts)
its own stage's modules only."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..collect import collect
from ..errors import InputError
from ..fileio import json_ready
from ..models import load_model, name_model
from ..store import open_store
from ..store.format import COMPAT_KEYS, RUN_KEYS, WEIGHTS_KEY
from ..store.generation import GenerationSettings
from ..store.identity import ModelIdentity
from ..tasks import TASKS, get_task
from .config import Config, TaskSpec, load_config
from .plan import pair_dir, planned_failures, select_examples
from .processes import LOAD_OPTIONS_ENV, load_timings, own_peak_rss_mb, write_json_atomic

if TYPE_CHECKING:
    from ..evaluation.settings import EvaluationSettings

__all__ = ["job_evaluation", "job_generation", "job_identity", "load_task_examples", "store_difference", "worker_main"]


def load_task_examples(spec: dict) -> tuple[Any, list]:
    """``(task, examples)`` of a task spec (``TaskSpec`` as a dict): the task from
    :func:`acute.tasks.get_task` (``task = "jsonl"``: generic open QA over the first data file)
    and every example of every data path (ids must be unique across files)."""
    options = dict(spec.get("options") or {})
    name = spec["task"]
    task = get_task(spec["data"][0], **options) if name == "jsonl" else get_task(name, **options)
    if spec.get("max_new_tokens"):
        task.max_new_tokens = int(spec["max_new_tokens"])
    if spec.get("stop_strings") is not None:
        task.stop_strings = tuple(spec["stop_strings"])
    examples, seen = [], {}
    for path in spec["data"] or [None]:  # no data: the built-in question set
        for ex in task.load(path, split=spec.get("split")):
            if ex.id in seen:
                raise InputError(f"task {spec['key']!r}: example id {ex.id!r} occurs in {seen[ex.id]} and {path}")
            seen[ex.id] = path
            examples.append(ex)
    return task, examples


def _load_model(source: str, name: str):
    """The model at ``source`` named ``name`` (the run's name for it, which its stores record),
    its tokenizer and the seconds loading took."""
    t0 = time.perf_counter()
    model, tok = load_model(source, **json.loads(os.environ.get(LOAD_OPTIONS_ENV) or "{}"))
    return name_model(model, name), tok, time.perf_counter() - t0


def job_generation(p: dict, task) -> GenerationSettings:
    """How a collect job generates: its task's answer length (the run's, else the task's), stop
    strings, chat flag and samples, the run's batch size and storage dtype."""
    return GenerationSettings(max_new_tokens=p["task"].get("max_new_tokens"), chat=p["task"].get("chat"),
                              batch_size=p["batch_size"], dtype=p["store_dtype"],
                              samples=p["task"].get("samples")).for_task(task)


def job_identity(p: dict, task) -> tuple[ModelIdentity, tuple[str, ...]]:
    """What a collect job would record as its store's identity without loading the model (the
    model's from its files: :meth:`ModelIdentity.from_files`, named as the run names it), and
    the fields it cannot know without it (compared only where both sides know them): the chat
    flag when the task leaves it to the tokenizer, and the model's weights (a model card gives
    its GGUF's sha256 and shape, a model folder its fingerprint from ``config.json``)."""
    gen = job_generation(p, task)
    ident = dataclasses.replace(ModelIdentity.from_files(p["model_source"]), model=p["model"], task=task.name,
                                task_settings=task.settings(), generation=gen.to_json(), dtype=gen.dtype)
    return ident, ("generation.chat", "model_fingerprint", "model_weights")


def store_difference(manifest: dict, p: dict, task):
    """How an existing store differs from what this collect job would write
    (:meth:`ModelIdentity.diff` of the store's identity and :func:`job_identity`, on every field
    the store's own resume check compares, plus the model's name): empty when the store can be
    reused without loading the model; otherwise :func:`acute.collect.collect` is called and
    refuses or resumes it itself."""
    expected, unknown = job_identity(p, task)
    fields = ("model",) + COMPAT_KEYS + ("engine", WEIGHTS_KEY) + RUN_KEYS
    return ModelIdentity.from_manifest(manifest).diff(expected, ("the store", "this job"), fields=fields,
                                                     optional=("num_layers", "hidden_size") + unknown)


def _worker_collect(p: dict) -> dict:
    task, examples = load_task_examples(p["task"])
    chosen = select_examples(examples, p["records"], p["seed"])
    store_dir = Path(p["store_dir"])
    if (store_dir / "manifest.json").is_file():
        store = open_store(store_dir)
        have = {str(i) for i in store.ids}
        differs = store_difference(store.manifest, p, task)
        if differs:
            print(f"  {store_dir} differs from this job ({differs}): collecting with the model", flush=True)
        elif all(str(ex.id) in have for ex in chosen):
            # e.g. a smaller size than before: nothing to generate, no model to load
            keep = [i for i, rid in enumerate(store.ids) if str(rid) in {str(ex.id) for ex in chosen}]
            print(f"  all {len(chosen)} selected records are already in {store_dir}", flush=True)
            return {"load_s": 0.0, "work_s": 0.0, "available": len(examples), "selected": len(chosen),
                    "records": len(keep), "new_records": 0, "resumed": len(keep),
                    "accuracy": float(store.correct[keep].mean()),
                    "selected_ids": [str(ex.id) for ex in chosen]}
    model, tok, load_s = _load_model(p["model_source"], p["model"])
    t0 = time.perf_counter()
    summary = collect(model, tok, task, chosen, p["store_dir"], job_generation(p, task), progress=True,
                      **({"shard_size": p["task"]["shard_size"]} if p["task"].get("shard_size") else {}))
    for line in summary.lines():
        print(f"  {line}", flush=True)
    return {"load_s": round(load_s, 2), "work_s": round(time.perf_counter() - t0, 2),
            "available": len(examples), "selected": len(chosen), "records": summary.records,
            "new_records": summary.new_records, "resumed": summary.resumed,
            "skipped_too_long": summary.skipped_too_long, "unparseable": summary.unparseable,
            "accuracy": summary.accuracy, "mean_raw_confidence": summary.mean_raw_confidence,
            "seconds_per_record": summary.seconds_per_record,
            "selected_ids": [str(ex.id) for ex in chosen]}


def job_evaluation(p: dict) -> EvaluationSettings:
    """How an evaluate job scores its store: the run's folds and repeats (a single split by its
    test fraction when ``cv`` is 0), seed, estimators, bootstrap, probe parameters and the task's
    grouping; reliability diagrams of the best rows only."""
    from ..evaluation.settings import EvaluationSettings  # start-up: a collect worker needs none of it

    cv = p.get("cv") or None
    return EvaluationSettings(estimators=p.get("estimators"), cv=cv, repeats=p.get("repeats") or 1,
                              test_fraction=None if cv else p["test_fraction"], seed=p["seed"],
                              n_bootstrap=p["n_bootstrap"], n_jobs=p.get("n_jobs"),
                              probe_params=p.get("probe_params") or None, reliability="best",
                              group_by=p.get("group_by"))


def _worker_evaluate(p: dict) -> dict:
    from acute.evaluation.evaluate import evaluate_store  # lazy: worker memory

    sub = _selected_store(p)
    t0 = time.perf_counter()
    cv = p.get("cv") or None
    res = evaluate_store(sub, out_dir=p["eval_dir"], settings=job_evaluation(p), progress=True,
                         fold_cache=Path(p["pair_dir"]) / "eval-fold-cache")
    best = {r["estimator"]: r.get("auc_euro_all") for r in res.rows}
    lc = p.get("learning_curve") or {}
    if lc:
        from tqdm.auto import tqdm  # lazy: import time

        from acute.estimators.baselines import BASELINES  # lazy: worker memory
        from acute.estimators.registry import DEFAULT_ESTIMATOR  # lazy: worker memory
        from acute.evaluation.crossval import inputs_for  # lazy: worker memory
        from acute.evaluation.learning_curve import (DEFAULT_REPEATS as LC_REPEATS, learning_curve,
                                                     write_learning_curve)  # lazy: worker memory

        from acute.evaluation.grouping import store_groups  # lazy: worker memory

        group_by, groups = store_groups(sub, p.get("group_by"))
        names = list(lc.get("estimators") or (DEFAULT_ESTIMATOR,))
        curve = learning_curve(inputs_for(sub, list(BASELINES) + names), sub.correct, sub.ids,
                               estimators=names,
                               n_splits=cv or 5, repeats=lc.get("repeats", LC_REPEATS), seed=p["seed"],
                               n_jobs=p.get("n_jobs"), probe_params=p.get("probe_params") or None,
                               progress=lambda it: tqdm(it, desc="learning curve", file=sys.stderr),
                               evaluation=res, groups=groups, group_by=group_by)
        write_learning_curve(curve, Path(p["eval_dir"]) / "learning-curve", params=lc,
                             model=p["model"], task=p["task_key"])
    return {"work_s": round(time.perf_counter() - t0, 2), "records": len(sub), **res.split,
            "auc_euro_all": best}


def _selected_store(p: dict):
    """The store of a collect stage, restricted to the records that stage selected."""
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
    from tqdm.auto import tqdm  # lazy: import time

    from acute.estimators.registry import DEFAULT_ESTIMATOR  # lazy: worker memory
    from acute.evaluation.transfer import leave_subjects_out, transfer_table  # lazy: worker memory

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
    write_json_atomic(out / "transfer.json", json_ready(doc))
    return {"work_s": round(time.perf_counter() - t0, 2), "tasks": list(stores)}


def _answers_store(store_dir: Path, examples) -> Path | None:
    """The pair's collected store when it already holds the answer to every protocol example (the
    protocol study then generates nothing; a store of other settings is refused by
    :func:`run_protocol`), else None: the study collects its own into ``protocol/store``."""
    if not (store_dir / "manifest.json").is_file():
        return None
    try:
        have = set(open_store(store_dir, verify=False).ids)
    except Exception:  # noqa: BLE001 - an unreadable store: the study collects its own answers
        return None
    return store_dir if all(str(ex.id) in have for ex in examples) else None


def _worker_protocol(p: dict) -> dict:
    from acute.protocol import run_protocol  # lazy: worker memory

    task, examples = load_task_examples(p["task"])
    chosen = select_examples(examples, p["rows"], p["seed"])
    model, tok, load_s = _load_model(p["model_source"], p["model"])
    t0 = time.perf_counter()
    generation = GenerationSettings(max_new_tokens=p["task"].get("max_new_tokens"), chat=p["task"].get("chat"),
                                    batch_size=p["batch_size"])
    res = run_protocol(model, tok, task, chosen, p["protocol_dir"], generation,
                       store=_answers_store(Path(p["pair_dir"]) / "store", chosen),
                       n_bootstrap=p["n_bootstrap"], seed=p["seed"], variant=p["variant"], progress=True)
    return {"load_s": round(load_s, 2), "work_s": round(time.perf_counter() - t0, 2),
            "rows": len(chosen), "shifts": res.shifts, "counts": res.counts}


def _task_info(t: TaskSpec, cfg: Config) -> str:
    opts = ", ".join(f"{k}={v}" for k, v in t.options.items())

    data = (", ".join(os.path.relpath(d, cfg.data_root) for d in t.data)
            or getattr(TASKS.get(t.task), "data_source", None) or "built-in questions")
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


def _evaluation_settings(cfg: Config, t: TaskSpec) -> dict:
    """What an evaluation of ``cfg`` records in ``results.json`` about the settings the config
    determines (``split``: mode, folds, repeats, seed, test fraction, groups; ``params``: the
    evaluated estimators, bootstrap draws, probe params): :func:`_worker_evaluate`'s call of
    :func:`acute.evaluation.evaluate.evaluate_store`, for
    :func:`acute.report.runs.settings_differences`."""
    from acute.evaluation.settings import estimator_names  # lazy: worker memory

    names = estimator_names(cfg.estimators)  # as evaluate_store reads the config's list
    split: dict[str, Any] = {"mode": "cv" if cfg.cv else "split", "seed": cfg.seed}
    from acute.evaluation.grouping import RECORD_IDS  # lazy: worker memory

    group_by = None if t.group_by == RECORD_IDS else t.group_by  # as the evaluation records it
    if cfg.cv:
        split.update(n_splits=cfg.cv, n_repeats=cfg.repeats or 1, group_by=group_by)
    else:
        split["test_fraction"] = cfg.test_fraction
    return {"split": split, "params": {"estimators": names, "n_bootstrap": cfg.n_bootstrap,
                                       "probe_params": dict(cfg.probe_params or {}), "group_by": group_by}}


def _worker_report(p: dict) -> dict:
    from acute.report.render import EVALUATIONS_DIR, ReportInputs, write_report  # lazy: worker memory
    from acute.report.runs import committed_eval_run  # lazy: worker memory

    cfg = load_config(p["config"], data_root=p["data_root"])
    work, out = Path(p["work"]), Path(p["out"])
    timings = load_timings(work / "timings.json")
    evals, protos, records, plan, committed = [], [], {}, [], []
    for m in cfg.models:
        for t in cfg.tasks:
            pair = pair_dir(work, m.key, t.key)
            records[(m.key, t.key)] = cfg.records(m, t)
            if cfg.records(m, t) > 0:
                plan.append(_plan_row(pair, m.key, t.key, cfg.records(m, t)))
            tables = out / EVALUATIONS_DIR / m.key / t.key
            if (pair / "evaluate.done.json").is_file() and (pair / "eval" / "results.json").is_file():
                evals.append((m.key, t.key, pair / "eval"))
            elif cfg.records(m, t) > 0 and (tables / "results.json").is_file():
                # not evaluated here (another machine): the tables an earlier report committed, same settings
                run = committed_eval_run(tables, m.key, t.key, _evaluation_settings(cfg, t))
                if run is not None:
                    committed.append((m.key, t.key, tables))
                    if plan[-1]["stage"] == "not collected":
                        plan[-1].update(collected=run.n, accuracy=run.accuracy, stage="committed tables")
            if (pair / "protocol.done.json").is_file() and (pair / "protocol" / "protocol.json").is_file():
                protos.append((m.key, t.key, pair / "protocol"))
    # the stage times of the pairs read back are those of the run that produced their tables
    earlier = load_timings(out / "timings.json")["stages"]
    back = {f"{m}/{t}" for m, t, _ in committed}
    for key, entry in earlier.items():
        if key not in timings["stages"] and key.split("/", 1)[-1] in back:
            timings["stages"][key] = entry
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
        command=p["command"], report_command=p["report_command"], figures_model=cfg.figures_model, settings=settings, transfer_runs=transfers,
        plan=plan, committed_runs=committed)
    t0 = time.perf_counter()
    path = write_report(inputs)
    write_json_atomic(out / "timings.json", timings)
    print(f"report written to {path}", flush=True)
    return {"work_s": round(time.perf_counter() - t0, 2), "evaluations": len(evals), "protocol_runs": len(protos),
            "committed_tables": len(committed)}


_WORKERS = {"collect": _worker_collect, "evaluate": _worker_evaluate, "transfer": _worker_transfer,
            "protocol": _worker_protocol, "report": _worker_report}


def worker_main(job_file: str, result_file: str) -> int:
    """Child-process entry: run one job, write its sidecar (``<stage>.done.json``: settings hash,
    ``complete``, summary) and a result file for the driver. Returns the exit status."""
    job = json.loads(Path(job_file).read_text(encoding="utf-8"))
    t0 = time.perf_counter()
    try:
        summary = _WORKERS[job["stage"]](job["payload"])
    except Exception as exc:  # noqa: BLE001 - reported to the driver, which goes on with other jobs
        traceback.print_exc()
        write_json_atomic(Path(result_file), {"ok": False, "error": f"{type(exc).__name__}: {exc}",
                                               "peak_rss_mb": own_peak_rss_mb()})
        return 1
    peak = own_peak_rss_mb()
    summary = {**summary, "inner_wall_s": round(time.perf_counter() - t0, 2)}
    done = {"stage": job["stage"], "key": job["key"], "config_hash": job["hash"], "complete": True,
            "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "summary": summary}
    write_json_atomic(Path(job["done_file"]), done)
    brief = {k: v for k, v in summary.items() if k != "selected_ids"}
    write_json_atomic(Path(result_file), {"ok": True, "summary": brief, "peak_rss_mb": peak})
    return 0
