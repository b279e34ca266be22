"""The reproduction report: ``docs/results/README.md`` from evaluation and protocol runs.

Inputs are the folders that :func:`acute.evaluation.evaluate.evaluate_store` (``results.json`` and
``predictions.csv``) and :func:`acute.protocol.run_protocol` (``protocol.json``) wrote for each
model and task, plus the stage timings of ``acute run`` (:mod:`acute.pipeline.driver`). Everything numeric is
read from each evaluation's ``results.json``, never recomputed, so a pair shows one number
everywhere (the evaluation's means over cross-validation repeats and its intervals):

* per model: the evaluation's own tables (:func:`acute.evaluation.markdown.results_markdown` and
  :func:`~acute.evaluation.markdown.selective_markdown`);
* averaged over models: the mean of the per-model estimates, its interval from the per-model
  intervals (:func:`acute.report.runs.average_summaries`; the models' records are independent).
  The predictions are read only to draw the figures.

A planned pair whose evaluation folder is not on this machine can stand in with the tables an
earlier report committed (``evaluations/<model>/<task>/results.json``, same settings:
:func:`acute.report.runs.committed_eval_run`): a tables-only run, in every table and the summary's
Holm correction, with ``evaluation = "committed tables"``; its figures are the ones already in
``figures/`` and its learning-curve row comes from the committed ``learning-curve.json``.

Public functions are small and pure except :func:`load_eval_run` (reads files) and
:func:`write_report` (writes files).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..estimators.controls import CONTROLS
from ..estimators.registry import DEFAULT_ESTIMATOR
from ..evaluation.markdown import results_markdown, selective_markdown
from ..evaluation.writer import COMMITTED_PREDICTIONS, compact_predictions
from ..fileio import atomic_path, json_ready, write_text_atomic
from ..protocol import write_protocol_report
from .figures import (LEARNING_CURVE_TABLE, clear_figures, kept_task_figures, learning_curve_figure,
                      learning_curve_section, task_figure_names, task_figures, transfer_section)
from .runs import EvalRun, average_summaries, load_eval_run, run_summary
from .summary import kept_summary_rows, summary_csv, summary_markdown, summary_rows
from .tables import (ACUTE_VIEWS, INTERPRETATION_END, INTERPRETATION_START, PAPER_NUMBERS, ablation_markdown,
                     comparison_markdown, compact_gap_table, estimator_markdown, image_captions, markdown_table,
                     md_sections, preserved_block, timings_markdown)

__all__ = ["EVALUATIONS_DIR", "KEPT_SUMMARY", "ReportInputs", "copy_evaluation_tables", "render_report",
           "write_report"]

#: the rows of earlier reports this report has no evaluation for (beside summary.csv)
KEPT_SUMMARY = "summary-kept.csv"


@dataclass
class ReportInputs:
    """What :func:`write_report` needs (paths and settings; no numbers).

    ``eval_runs``: ``(model, task, eval_dir)`` for every completed evaluation;
    ``protocol_runs``: ``(model, task, protocol_dir)``; ``models`` / ``tasks``: display order;
    ``task_info``: task key -> short description (task name, data, shots); ``records``:
    ``(model, task)`` -> requested records; ``stages``: timing entries by
    ``"<stage>/<model>/<task>"``; ``failures``: ``(key, message)``; ``command``: the command
    that regenerates the report; ``figures_model``: whose plots are copied (``None``: the first
    model with an evaluation of that task); ``transfer_runs``: ``(model, transfer.json)`` of the
    transfer stage (:mod:`acute.evaluation.transfer`); ``committed_runs``: ``(model, task,
    evaluations/<model>/<task>)`` of planned pairs without an evaluation here whose committed
    tables have this config's settings (checked by the caller,
    :func:`acute.report.runs.committed_eval_run`), read as tables-only runs.
    """

    out_dir: Path
    eval_runs: list[tuple[str, str, Path]]
    protocol_runs: list[tuple[str, str, Path]]
    models: list[str]
    tasks: list[str]
    task_info: dict[str, str] = field(default_factory=dict)
    records: dict[tuple[str, str], int] = field(default_factory=dict)
    stages: dict[str, dict] = field(default_factory=dict)
    failures: list[tuple[str, str]] = field(default_factory=list)
    command: str = ""
    report_command: str = ""
    figures_model: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    transfer_runs: list[tuple[str, Path]] = field(default_factory=list)  #: (model, transfer.json)
    plan: list[dict] = field(default_factory=list)  #: per planned pair: records, accuracy, stage
    committed_runs: list[tuple[str, str, Path]] = field(default_factory=list)  #: (model, task, committed tables)


def render_report(inputs: ReportInputs, previous: str | None = None) -> tuple[str, dict]:
    """Compute every table and return ``(markdown, data)``; draws each task's figures into
    ``inputs.out_dir/figures`` (from the test predictions of ``inputs.figures_model``, else the
    first model with predictions of that task) and writes the combined protocol report
    (:func:`acute.protocol.write_protocol_report`) into ``inputs.out_dir``.

    A task whose runs are all tables-only (``inputs.committed_runs``) keeps the figures an
    earlier report drew (captions from ``previous``, the earlier README), and so does a
    tables-only pair's learning-curve plot; every other file in ``figures/`` is removed (drawn
    again, or of a task no longer in the report). ``previous`` also gives the learning-curve rows
    of tables-only pairs committed without ``learning-curve.json``
    (:func:`acute.report.figures.learning_curve_section`).

    ``data`` holds the numbers of every table (JSON-ready), for ``report.json``.
    """
    out_dir = Path(inputs.out_dir)
    data: dict[str, Any] = {"tasks": {}, "ablation": {}, "comparison": {}, "protocol": None}
    lines = _header(inputs) + _plan_section(inputs, data) + _failures_section(inputs)
    all_runs, runs_by_task = _load_runs(inputs)
    lines += _summary_section(all_runs, out_dir, data)
    fig_dir = out_dir / "figures"
    task_lines, avg_by_task = _task_sections(inputs, all_runs, runs_by_task, fig_dir, previous, data)
    lines += task_lines
    lines += _learning_curve_section(all_runs, fig_dir, previous)
    lines += _transfer_section(inputs, data)
    lines += _ablation_section(avg_by_task, data)
    protocol_lines, shifts = _protocol_section(inputs, out_dir, data)
    lines += protocol_lines
    lines += _comparison_section(avg_by_task, shifts, data)
    lines += _timings_section(inputs, data)
    return "\n".join(lines), json_ready(data)


def _header(inputs: ReportInputs) -> list[str]:
    """The title, the command that regenerates the report, the settings and how to read it."""
    lines: list[str] = ["# Reproduction results", ""]
    lines += [
        "Generated by `acute run` from the run outputs; do not edit by hand except "
        "between the interpretation markers below. Regenerate with:", "",
        "```bash", inputs.command, "```", ""]
    if inputs.report_command:
        lines += ["Only this README (from existing runs): `" + inputs.report_command + "`", ""]
    s = inputs.settings
    if s:
        lines += ["Settings: " + "; ".join(f"{k} = {v}" for k, v in s.items()) + ".", ""]
    lines += [
        "Every number is the evaluation's own (its `results.json`: means over cross-validation "
        "repeats, 95% percentile-bootstrap intervals over the records, smECE's shifted by the "
        "bootstrap bias), so a pair shows the same number in every table. The average over models "
        "is the mean of the per-model estimates; its interval combines the per-model intervals as "
        "independent normal errors (mean -/+ 1.96 sqrt(sum se_i^2) / k; one model: its own interval). Best value of each column "
        "in bold (accuracy has no direction). smECE, AURC: lower is better; auc-euro, coverage at "
        "10% error: higher is better. \"Coverage at 10% error\" picks its threshold on the records "
        "themselves, in hindsight; its certified counterpart trusts each fold's answers by a "
        "certificate (at most 10% error, delta 0.1) fitted on the other folds' out-of-fold predictions "
        "(n/a: an evaluation without it).", ""]
    return lines


def _plan_section(inputs: ReportInputs, data: dict) -> list[str]:
    """Every planned pair: records requested and collected, accuracy, last stage finished."""
    if not inputs.plan:
        return []
    data["plan"] = inputs.plan
    return ["## Plan and status", "",
            "Every model and task of the config: records requested and collected, the accuracy of "
            "the collected records, and the last stage finished (a resumed run continues from there).",
            "", *markdown_table(["model", "task", "requested", "collected", "accuracy", "stage"],
                                [[r["model"], r["task"], r["requested"], "" if r["collected"] is None else r["collected"],
                                  "" if r["accuracy"] is None else f"{r['accuracy']:.3f}", r["stage"]]
                                 for r in inputs.plan]), ""]


def _failures_section(inputs: ReportInputs) -> list[str]:
    if not inputs.failures:
        return []
    return ["## Stages that failed", ""] + [f"* `{k}`: {msg}" for k, msg in inputs.failures] + [""]


def _load_runs(inputs: ReportInputs) -> tuple[list[EvalRun], dict[str, list[EvalRun]]]:
    """Every evaluation of this machine and every committed tables-only pair without one, in the
    order of the models and tasks, and the same runs by task (in the order they were read)."""
    runs_by_task: dict[str, list[EvalRun]] = {}
    all_runs: list[EvalRun] = []
    here = {(model, task) for model, task, _ in inputs.eval_runs}
    for model, task, path in inputs.eval_runs:
        all_runs.append(load_eval_run(path, model, task))
        runs_by_task.setdefault(task, []).append(all_runs[-1])
    for model, task, path in inputs.committed_runs:
        if (model, task) not in here:  # an evaluation of this machine wins
            all_runs.append(load_eval_run(path, model, task, predictions=False))
            runs_by_task.setdefault(task, []).append(all_runs[-1])
    all_runs.sort(key=lambda r: (inputs.models.index(r.model) if r.model in inputs.models else 1 << 30,
                                 inputs.tasks.index(r.task) if r.task in inputs.tasks else 1 << 30))
    return all_runs, runs_by_task


def _summary_section(all_runs: list[EvalRun], out_dir: Path, data: dict) -> list[str]:
    """The default estimator against the best baseline and the controls, per pair, and the
    kept rows of earlier reports."""
    summary = summary_rows(all_runs, DEFAULT_ESTIMATOR)
    # pairs of earlier reports whose evaluations are not on this machine: their own table and file
    # (another default, other repeats: not one estimand with this run's rows), never dropped
    present = {(r["model"], r["task"]) for r in summary}
    kept: list[dict] = []
    for name in (KEPT_SUMMARY, "summary.csv"):
        kept += kept_summary_rows(out_dir / name, present | {(r["model"], r["task"]) for r in kept})
    data["summary"], data["summary_kept"] = summary, kept
    lines: list[str] = []
    if summary:
        lines += ["## Summary: the default estimator against the best baseline and the controls", "",
                  f"Per model and task: `{DEFAULT_ESTIMATOR}` (acute's default) minus the best of the six "
                  "baselines (highest auc-euro all in the same evaluation), auc-euro over all risk levels, "
                  "means over cross-validation repeats, with a 95% paired bootstrap interval over records "
                  "and the corrected resampled t-interval over the fold x repeat differences (Nadeau and "
                  "Bengio 2003), which also carries the training variance. Bold: the difference survives "
                  "Holm's correction across the rows with both tests. `constant` is the training fold's base "
                  "rate and skill = (auc-euro - constant) / (1 - constant). The next column is the default "
                  "minus the best of the baselines and the controls that know the metadata (`platt+meta`) "
                  "or the question text (`tfidf+platt`); `question-only` reads the prompt's last-token states "
                  "before any answer; within-group AUROC ranks answers inside each category or subject. "
                  "Each evaluation's own table has every control row: "
                  + ", ".join(f"`{name}`" for name in CONTROLS) + ". "
                  "What the hidden states add to every other signal, `acute-all` minus `visible-all` (two "
                  "stacks over the same signals but the states), is in summary.csv's `states_add` columns "
                  "with both intervals and Holm's correction across the rows (`states_add_holm_significant`). "
                  "n/a: the evaluation did not compute it (a store without metadata or last-prompt states). "
                  "Machine-readable: [summary.csv](summary.csv).", "",
                  summary_markdown(summary)]
        committed = [f"{r['model']}/{r['task']}" for r in summary if r["evaluation"] == "committed tables"]
        if committed:
            lines += ["Read back from the tables an earlier report committed (`evaluations/<model>/<task>/`, "
                      "the same evaluation settings; their evaluation folders are not on this machine): "
                      + ", ".join(committed) + ".", ""]
    if kept:
        lines += ["### Earlier evaluations (kept)", "",
                  "Pairs of earlier reports whose evaluations are not on this machine, carried over as they "
                  "were: they show the default of their time and their own cross-validation, so they are not "
                  "compared with the rows above, nor part of its Holm correction. Machine-readable: "
                  f"[{KEPT_SUMMARY}]({KEPT_SUMMARY}).", "", summary_markdown(kept)]
    return lines


def _task_sections(inputs: ReportInputs, all_runs: list[EvalRun], runs_by_task: dict[str, list[EvalRun]],
                   fig_dir: Path, previous: str | None, data: dict) -> tuple[list[str], dict[str, dict]]:
    """One section per task (sizes, the average over models, each model's own tables, the
    figures) and the averages by task; clears the figures nothing here draws or keeps."""
    # figures nothing here can draw again stay: a task known only from committed tables, a tables-only pair's curve
    clear_figures(fig_dir, {learning_curve_figure(r.model, r.task) for r in all_runs if r.tables_only}
                  | {name for t in inputs.tasks if runs_by_task.get(t) and all(r.tables_only for r in runs_by_task[t])
                     for name in task_figure_names(t)})
    captions = image_captions(previous)
    lines = ["## Calibration and selective trust per task", ""]
    avg_by_task: dict[str, dict] = {}
    for task in inputs.tasks:
        runs = runs_by_task.get(task)
        if not runs:
            continue
        runs.sort(key=lambda r: inputs.models.index(r.model) if r.model in inputs.models else 1 << 30)
        per_model_summary = {r.model: run_summary(r) for r in runs}
        avg = average_summaries(list(per_model_summary.values()))
        avg_by_task[task] = avg
        lines += _task_section(inputs, task, runs, avg, fig_dir, captions)
        data["tasks"][task] = {"average": avg, "per_model": per_model_summary,
                               "models": [r.model for r in runs]}
    return lines, avg_by_task


def _task_section(inputs: ReportInputs, task: str, runs: list[EvalRun], avg: dict, fig_dir: Path,
                  captions) -> list[str]:
    """One task: its description, each model's records, the average table, each model's own
    tables (folded) and the task's figures."""
    lines = [f"### {task}", ""]
    info = inputs.task_info.get(task, "")
    if info:
        lines += [info, ""]
    size_rows = []
    for r in runs:
        sp = r.results.get("split", {})
        train = sp.get("n_train", f"{sp.get('n_splits')}-fold x {sp.get('n_repeats')}" if sp.get("mode") == "cv" else "")
        size_rows.append([r.model, inputs.records.get((r.model, task), ""), train,
                          r.n, f"{r.accuracy:.3f}"])
    lines += markdown_table(["Model", "records requested", "train", "scored", "accuracy"], size_rows) + [""]
    lines += [f"Averaged over {len(runs)} model(s): " + ", ".join(r.model for r in runs), ""]
    lines += [estimator_markdown(avg, list(avg))]
    for r in runs:
        rows = r.results.get("results", [])
        lines += ["<details>", f"<summary>{r.model} ({r.n} scored records): the evaluation's tables</summary>",
                  "", results_markdown(rows)]
        selective = selective_markdown(rows)
        if selective:
            lines += ["", selective]
        lines += ["</details>", ""]
    drawable = [r for r in runs if not r.tables_only]
    fig_run = next((r for r in drawable if r.model == inputs.figures_model), drawable[0] if drawable else None)
    figs = task_figures(fig_run, task, fig_dir) if fig_run else kept_task_figures(task, fig_dir, captions)
    if figs:
        lines += [" ".join(f"![{cap}]({rel})" for cap, rel in figs), ""]
    return lines


def _learning_curve_section(all_runs: list[EvalRun], fig_dir: Path, previous: str | None) -> list[str]:
    lc_lines = learning_curve_section(all_runs, fig_dir, previous)
    if not lc_lines:
        return []
    return ["## Learning curves", "",
            "How many labelled answers a probe needs: each training fold of a stratified 5-fold "
            "cross-validation is subsampled to sizes 50, 100, 200, ... and the whole test fold is "
            "scored (`acute learning-curve`; tables in each evaluation's `learning-curve/` folder).",
            "", *lc_lines]


def _transfer_section(inputs: ReportInputs, data: dict) -> list[str]:
    if not inputs.transfer_runs:
        return []
    t_lines, data["transfer"] = transfer_section(inputs.transfer_runs, DEFAULT_ESTIMATOR)
    return ["## Transfer between tasks", "",
            "A probe trained on all records of one task and scored on another task of the same "
            "model (`acute.evaluation.transfer`); Platt scaling fitted on the same training records is the "
            "reference, raw confidence needs no training at all.", "", *t_lines]


def _ablation_section(avg_by_task: dict[str, dict], data: dict) -> list[str]:
    if not avg_by_task:
        return []
    data["ablation"] = {t: {v: a.get(v) for v in ("raw", *ACUTE_VIEWS)} for t, a in avg_by_task.items()}
    return ["## Ablation: ACUTE views", "",
            "auc-euro over all risk levels, averaged over models (raw confidence for reference):", "",
            ablation_markdown(avg_by_task, "auc_euro_all"),
            "smECE, averaged over models:", "", ablation_markdown(avg_by_task, "smece")]


def _protocol_section(inputs: ReportInputs, out_dir: Path, data: dict) -> tuple[list[str], dict | None]:
    """The protocol study's gap, shift and provenance tables (writing the combined protocol
    report into ``out_dir``) and its shifts, for the comparison with the papers."""
    if not inputs.protocol_runs:
        return [], None
    md_path = write_protocol_report([p for _, _, p in inputs.protocol_runs], out_dir)
    summary = json.loads((out_dir / "protocol-report.json").read_text(encoding="utf-8"))
    shifts = summary.get("shifts")
    data["protocol"] = {"shifts": shifts, "shifts_per_run": summary.get("shifts_per_run"),
                        "runs": summary.get("runs")}
    return ["## Protocol study: verbalized vs token confidence", "",
            f"{len(inputs.protocol_runs)} run(s) (model | task); full tables (every estimator, readout and the "
            f"reporting checklist) in [{md_path.name}]({md_path.name}).", "",
            "### Gap table (smECE, readout T1)", "",
            "g = smECE(c_verb) - smECE(c_tok) (positive: verbalized worse), 95% paired bootstrap "
            "interval; columns are scored answer / conditioning context.", "",
            compact_gap_table(summary.get("cells", [])),
            md_sections(md_path.read_text(encoding="utf-8"), ("Shift table", "Provenance table"))], shifts


def _comparison_section(avg_by_task: dict[str, dict], shifts: dict | None, data: dict) -> list[str]:
    """The papers' numbers beside ours, and the interpretation block kept between its markers."""
    data["comparison"] = {
        "acute": [{"task": t, "estimator": e, "paper": p,
                   "measured": avg_by_task.get(t, {}).get(e)} for t, e, p in PAPER_NUMBERS["acute"]],
        "protocol_shifts": {a: {"paper": p, "measured": (shifts or {}).get(a)}
                            for a, p in PAPER_NUMBERS["protocol_shifts"].items()},
    }
    return ["## Comparison with the papers", "",
            comparison_markdown(avg_by_task, shifts),
            INTERPRETATION_START, "", "__INTERPRETATION__", "", INTERPRETATION_END, ""]


def _timings_section(inputs: ReportInputs, data: dict) -> list[str]:
    data["timings"] = inputs.stages
    return ["## Wall time and peak memory", "",
            "Each stage of each model and task ran in its own process; peak memory is that "
            "process's peak resident set size. Times are from the run that produced the outputs "
            "(a resumed invocation that skipped a stage keeps the earlier measurement).", "",
            timings_markdown(inputs.stages, inputs.models, inputs.tasks)]


#: where the report keeps each evaluation's own tables (``<model>/<task>/results.{json,csv,md}``)
EVALUATIONS_DIR = "evaluations"
_TABLE_FILES = ("results.json", "results.csv", "results.md")


def copy_evaluation_tables(eval_runs, dest: Path) -> None:
    """Copy each evaluation's tables to ``dest/<model>/<task>/``, with its folds (``folds.json``:
    every repeat's fold of every record) and its repeat-0 out-of-fold predictions in compact form
    (:data:`COMMITTED_PREDICTIONS`, :func:`compact_predictions`), so a later analysis (a
    certificate, a grouped bootstrap) can be redone on the real predictions without the store;
    and its learning curve's table (``learning-curve/learning_curve.json``: means per training
    size) as ``learning-curve.json`` (a stale one goes when the evaluation has none), so the
    numbers of every pair are committed beside the report and a later report can read them back
    as a tables-only run; folders of pairs this report did not evaluate are kept."""
    for model, task, path in eval_runs:
        target = dest / model / task
        target.mkdir(parents=True, exist_ok=True)
        for name in _TABLE_FILES + ("folds.json",):
            if (Path(path) / name).is_file():
                write_text_atomic(target / name, (Path(path) / name).read_text(encoding="utf-8"))
        predictions = Path(path) / "predictions.csv"
        if predictions.is_file():
            with atomic_path(target / COMMITTED_PREDICTIONS) as tmp:
                tmp.write_bytes(compact_predictions(predictions.read_text(encoding="utf-8")))
        curve = Path(path) / "learning-curve" / "learning_curve.json"
        if curve.is_file():
            write_text_atomic(target / LEARNING_CURVE_TABLE, curve.read_text(encoding="utf-8"))
        else:
            (target / LEARNING_CURVE_TABLE).unlink(missing_ok=True)


def write_report(inputs: ReportInputs) -> Path:
    """Render the report and write ``README.md`` (and ``report.json``, ``summary.csv`` and each
    evaluation's tables under ``evaluations/``) into ``inputs.out_dir``; returns the README path.
    The interpretation block of an existing README is kept, and so are its learning-curve rows
    and figure captions of tables-only pairs (:func:`render_report`)."""
    out_dir = Path(inputs.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    readme = out_dir / "README.md"
    old = readme.read_text(encoding="utf-8") if readme.is_file() else None
    md, data = render_report(inputs, old)
    md = md.replace("__INTERPRETATION__", preserved_block(old))
    data["created"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    write_text_atomic(out_dir / "report.json", json.dumps(data, indent=1))
    copy_evaluation_tables(inputs.eval_runs, out_dir / EVALUATIONS_DIR)
    if data.get("summary"):
        write_text_atomic(out_dir / "summary.csv", summary_csv(data["summary"]))
    if data.get("summary_kept"):
        write_text_atomic(out_dir / KEPT_SUMMARY, summary_csv(data["summary_kept"]))
    write_text_atomic(readme, md)
    return readme
