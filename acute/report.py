"""The reproduction report: ``docs/results/README.md`` from evaluation and protocol runs.

Inputs are the folders that :func:`acute.evaluate.evaluate_store` (``results.json`` and
``predictions.csv``) and :func:`acute.protocol.run_protocol` (``protocol.json``) wrote for each
model and task, plus the stage timings of ``acute run`` (:mod:`acute.pipeline`). Everything numeric is
recomputed here from the test-set predictions, so one resampling scheme serves every table:

* per model: for each (model, task) the test records are resampled ``n_bootstrap`` times
  (:func:`acute.metrics.bootstrap_indices`, paired across estimators); every metric is computed
  on every resample; the 95% interval is the 2.5/97.5 percentile of those values.
* averaged over models: the estimate is the mean of the per-model estimates and resample ``b``
  of the average is the mean of the models' resample ``b`` (the models' test sets are
  independent, so this is the bootstrap distribution of the mean).

Public functions are small and pure except :func:`load_eval_run` (reads files) and
:func:`write_report` (writes files).
"""

from __future__ import annotations

import logging
import csv
import json
import math
import os
import re
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ._util import json_ready, read_json, write_text_atomic
from .metrics import percentile_interval
from .evaluate import TABLE_COLUMNS
from .protocol import PAPER_SHIFTS
from .errors import InputError

__all__ = [
    "ACUTE_VIEWS",
    "PAPER_NUMBERS",
    "REPORT_METRICS",
    "EvalRun",
    "ReportInputs",
    "ablation_markdown",
    "average_draws",
    "comparison_markdown",
    "estimator_markdown",
    "interval_summary",
    "load_eval_run",
    "metric_draws",
    "metric_values",
    "preserved_block",
    "render_report",
    "summary_markdown",
    "summary_rows",
    "timings_markdown",
    "write_report",
]

logger = logging.getLogger(__name__)

#: (key, column header, direction): the paper-style columns of ``acute.evaluate`` up to auc-euro all
REPORT_METRICS: tuple[tuple[str, str, int], ...] = TABLE_COLUMNS[:6]
_METRIC_KEYS = tuple(k for k, _, _ in REPORT_METRICS)
_BANDS = ("low", "med", "high", "all")

#: ACUTE variants (evaluation names) -> the view they ablate
ACUTE_VIEWS: dict[str, str] = {
    "acute-early": "mean-pooled early layer",
    "acute-mid": "mean-pooled middle layer",
    "acute-late": "mean-pooled late layer",
    "acute-cosine": "cosine to last layer",
    "acute-pca10": "per-layer PCA, 10 components",
    "acute-pca20": "per-layer PCA, 20 components",
}

#: The papers' headline numbers that the report puts next to the measured ones.
PAPER_NUMBERS: dict[str, Any] = {
    "acute": [  # (task key, estimator, paper auc-euro), averaged over the paper's six models
        ("mmlu", "raw", 0.72),
        ("mmlu", "acute-late", 0.83),
        ("apigen", "raw", 0.53),
        ("apigen", "acute-pca20", 0.88),
        ("scitldr", "raw", 0.66),
        ("scitldr", "acute-pca10", 0.78),
    ],
    # mean |change in g| when one protocol axis is toggled
    "protocol_shifts": dict(PAPER_SHIFTS),
}

INTERPRETATION_START = "<!-- interpretation:start -->"
INTERPRETATION_END = "<!-- interpretation:end -->"
_INTERPRETATION_PLACEHOLDER = ("_Interpretation: to be written. Text between the two markers "
                               "around this line is kept when the report is regenerated._")


# ----------------------------------------------------------------------------- loading
@dataclass
class EvalRun:
    """One model's held-out predictions on one task (an evaluation folder).

    ``ids`` and ``correct`` (bool[n]) of the test records, ``predictions`` (estimator ->
    float64[n] confidence, in the evaluation's order) and ``results`` (the parsed
    ``results.json``).
    """

    model: str
    task: str
    path: Path
    ids: list[str]
    correct: np.ndarray
    predictions: dict[str, np.ndarray]
    results: dict = field(repr=False, default_factory=dict)

    @property
    def n(self) -> int:
        return int(self.correct.size)

    def layer_of(self, estimator: str) -> int | None:
        """The layer an ACUTE single-layer variant chose (``None`` for other estimators)."""
        for row in self.results.get("results", []):
            if row.get("estimator") == estimator:
                return row.get("layer")
        return None


def load_eval_run(eval_dir: str | os.PathLike, model: str, task: str) -> EvalRun:
    """Read ``results.json`` and ``predictions.csv`` of an evaluation folder.

    Raises ``FileNotFoundError`` when either file is missing and ``ValueError`` (naming the
    file and line) when ``results.json`` is not a complete evaluation, a prediction is not a
    number in [0, 1] or ``correct`` is not 0/1.
    """
    folder = Path(eval_dir)
    res_path, pred_path = folder / "results.json", folder / "predictions.csv"
    for p in (res_path, pred_path):
        if not p.is_file():
            raise FileNotFoundError(f"{p} does not exist (run the evaluate stage first)")
    results = read_json(res_path, "run the evaluate stage first")
    if not isinstance(results, dict) or results.get("complete") is not True:
        raise InputError(f"{res_path}: not a complete evaluation (missing \"complete\": true)")
    ids: list[str] = []
    correct: list[int] = []
    with open(pred_path, newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if not header or header[:2] != ["id", "correct"] or len(header) < 3:
            raise InputError(f"{pred_path}:1: expected a header 'id,correct,<estimator>...', got {header}")
        names = header[2:]
        cols: list[list[float]] = [[] for _ in names]
        for lineno, row in enumerate(reader, start=2):
            if not row:
                continue
            if len(row) != len(header):
                raise InputError(f"{pred_path}:{lineno}: {len(row)} cells, expected {len(header)}")
            if row[1] not in ("0", "1"):
                raise InputError(f"{pred_path}:{lineno}: correct must be 0 or 1, got {row[1]!r}")
            ids.append(row[0])
            correct.append(int(row[1]))
            for j, cell in enumerate(row[2:]):
                try:
                    v = float(cell)
                except ValueError:
                    raise InputError(f"{pred_path}:{lineno}: {names[j]} is not a number: {cell!r}") from None
                if not 0.0 <= v <= 1.0:
                    raise InputError(f"{pred_path}:{lineno}: {names[j]} = {v} is outside [0, 1]")
                cols[j].append(v)
    if not ids:
        raise InputError(f"{pred_path}: no test records")
    return EvalRun(model=model, task=task, path=folder, ids=ids,
                   correct=np.asarray(correct, dtype=bool),
                   predictions={n: np.asarray(c, dtype=np.float64) for n, c in zip(names, cols)},
                   results=results)


# ----------------------------------------------------------------------------- numbers
def metric_values(confidence: np.ndarray, correct: np.ndarray) -> dict[str, float]:
    """Every report metric of one confidence vector on one labelled set.

    ``accuracy`` = mean of ``correct``; ``smece`` (:func:`acute.metrics.smece`);
    ``auc_euro_<band>`` = mean of :func:`acute.metrics.euro_curve` over the band's grid points,
    i.e. :func:`acute.metrics.auc_euro` with ``exact=False`` (one euro curve serves all bands).
    """
    from . import metrics

    conf = np.asarray(confidence, dtype=np.float64)
    y = np.asarray(correct, dtype=bool)
    curve = np.asarray(metrics.euro_curve(conf, y, metrics.EURO_GRID), dtype=np.float64)
    return {"accuracy": float(y.mean()), "smece": float(metrics.smece(conf, y)),
            **{f"auc_euro_{band}": float(np.mean(curve[metrics.BANDS[band][0]])) for band in _BANDS}}


def metric_draws(run: EvalRun, n_bootstrap: int = 1000, seed: int = 0,
                 estimators: Sequence[str] | None = None) -> dict[str, dict[str, tuple[float, np.ndarray]]]:
    """``{estimator: {metric: (estimate, draws)}}`` for one run.

    ``estimate`` is the metric on all test records; ``draws`` (float64[n_bootstrap]) the metric
    on each resample of :func:`acute.metrics.bootstrap_indices` ``(run.n, n_bootstrap, seed)``,
    the same resamples for every estimator (NaN where a metric is undefined on a resample).
    ``n_bootstrap = 0`` gives empty draws. Raises ``ValueError`` for an unknown estimator.
    """
    from . import metrics

    if isinstance(n_bootstrap, bool) or not isinstance(n_bootstrap, (int, np.integer)) or n_bootstrap < 0:
        raise InputError(f"n_bootstrap must be a non-negative int, got {n_bootstrap!r}")
    names = list(run.predictions) if estimators is None else list(estimators)
    missing = [n for n in names if n not in run.predictions]
    if missing:
        raise InputError(f"{run.path}: no predictions for estimator(s) {missing}")
    idx = metrics.bootstrap_indices(run.n, int(n_bootstrap), seed) if n_bootstrap else np.empty((0, run.n), int)
    out: dict[str, dict[str, tuple[float, np.ndarray]]] = {}
    y = np.asarray(run.correct, dtype=bool)
    fns = {"smece": metrics.smece, **{f"auc_euro_{b}": metrics.METRICS[f"auc_euro_{b}"].fn for b in _BANDS}}
    for name in names:
        conf = run.predictions[name]
        draws = {"accuracy": y[idx].mean(axis=1)}
        for key, fn in fns.items():  # every resample at once
            draws[key] = metrics.metric_over_resamples(fn, conf, y, idx)
        full = metric_values(conf, y)
        out[name] = {k: (full[k], draws[k]) for k in _METRIC_KEYS}
    return out


def average_draws(per_run: Sequence[Mapping[str, Mapping[str, tuple[float, np.ndarray]]]]
                  ) -> dict[str, dict[str, tuple[float, np.ndarray]]]:
    """Average several runs' :func:`metric_draws` (independent test sets, e.g. one per model).

    For every estimator present in all runs: estimate = mean of the estimates, draw ``b`` = mean
    of the runs' draw ``b`` (all runs must have the same number of draws). Returns the same
    structure; an empty input gives ``{}``.
    """
    if not per_run:
        return {}
    common = [e for e in per_run[0] if all(e in r for r in per_run[1:])]
    out: dict[str, dict[str, tuple[float, np.ndarray]]] = {}
    for est in common:
        out[est] = {}
        for key in per_run[0][est]:
            estimates = [r[est][key][0] for r in per_run]
            draws = [np.asarray(r[est][key][1], dtype=np.float64) for r in per_run]
            if len({d.size for d in draws}) != 1:
                raise InputError(f"runs have different numbers of bootstrap draws: {[d.size for d in draws]}")
            out[est][key] = (float(np.mean(estimates)), np.mean(np.stack(draws), axis=0))
    return out


def interval_summary(draws: Mapping[str, Mapping[str, tuple[float, np.ndarray]]], alpha: float = 0.05
                     ) -> dict[str, dict[str, dict[str, float | None]]]:
    """``{estimator: {metric: {"estimate", "low", "high"}}}``: percentile intervals of the draws.

    Non-finite draws are left out; ``low``/``high`` are ``None`` when no draw is finite (or
    there were none). Values are plain floats (JSON-ready).
    """
    out: dict[str, dict[str, dict[str, float | None]]] = {}
    for est, by_metric in draws.items():
        out[est] = {}
        for key, (estimate, d) in by_metric.items():
            lo, hi, _ = percentile_interval(d, alpha)
            low = lo if math.isfinite(lo) else None
            high = hi if math.isfinite(hi) else None
            est_v = float(estimate) if estimate is not None and math.isfinite(estimate) else None
            out[est][key] = {"estimate": est_v, "low": low, "high": high}
    return out


# ----------------------------------------------------------------------------- markdown
def _cell(v: Mapping[str, float | None] | None) -> str:
    if not v or v.get("estimate") is None:
        return "n/a"
    s = f"{v['estimate']:.3f}"
    if v.get("low") is not None and v.get("high") is not None:
        s += f" [{v['low']:.3f}, {v['high']:.3f}]"
    return s


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]], align_right_from: int = 1) -> list[str]:
    sep = ["---" if i < align_right_from else "---:" for i in range(len(header))]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(sep) + "|"]
    lines += ["| " + " | ".join(str(x) for x in r) + " |" for r in rows]
    return lines


def estimator_markdown(summary: Mapping[str, Mapping[str, Mapping[str, float | None]]],
                       estimators: Sequence[str] | None = None,
                       labels: Mapping[str, str] | None = None) -> str:
    """Rows = estimators, columns = :data:`REPORT_METRICS` as ``estimate [low, high]``.

    The best value of each column with a direction is bold (ties, at 3 decimals, too).
    ``labels`` renames rows (e.g. ``acute-late (layer 27)``).
    """
    names = [e for e in (estimators or list(summary)) if e in summary]
    best: dict[str, float] = {}
    for key, _, direction in REPORT_METRICS:
        vals = [summary[e][key]["estimate"] for e in names if summary[e][key]["estimate"] is not None]
        if direction and vals:
            best[key] = max(vals) if direction > 0 else min(vals)
    rows = []
    for e in names:
        cells = [(labels or {}).get(e, e)]
        for key, _, _ in REPORT_METRICS:
            v = summary[e][key]
            s = _cell(v)
            if key in best and v["estimate"] is not None and round(v["estimate"], 3) == round(best[key], 3):
                s = f"**{s}**"
            cells.append(s)
        rows.append(cells)
    return "\n".join(_table(["Estimator"] + [h for _, h, _ in REPORT_METRICS], rows)) + "\n"


def ablation_markdown(by_task: Mapping[str, Mapping[str, Mapping[str, Mapping[str, float | None]]]],
                      metric: str = "auc_euro_all", reference: Sequence[str] = ("raw",)) -> str:
    """The ACUTE view ablation: rows = ACUTE variants (plus ``reference`` estimators), columns =
    tasks, cells = ``metric`` averaged over models with its interval; the best ACUTE view of
    each task in bold. ``by_task`` maps task -> averaged interval summary."""
    tasks = list(by_task)
    direction = {k: d for k, _, d in REPORT_METRICS}[metric]
    best: dict[str, float] = {}
    for t in tasks:
        vals = [by_task[t][v][metric]["estimate"] for v in ACUTE_VIEWS
                if v in by_task[t] and by_task[t][v][metric]["estimate"] is not None]
        if vals:
            best[t] = max(vals) if direction >= 0 else min(vals)
    rows = []
    for name in list(reference) + list(ACUTE_VIEWS):
        desc = ACUTE_VIEWS.get(name, "baseline, for reference")
        cells = [f"{name} ({desc})"]
        for t in tasks:
            v = by_task[t].get(name, {}).get(metric)
            s = _cell(v)
            if name in ACUTE_VIEWS and t in best and v and v["estimate"] is not None \
                    and round(v["estimate"], 3) == round(best[t], 3):
                s = f"**{s}**"
            cells.append(s)
        rows.append(cells)
    return "\n".join(_table(["View"] + tasks, rows)) + "\n"


def _fmt_seconds(s: float | None) -> str:
    if s is None or not math.isfinite(s):
        return "n/a"
    if s < 60:
        return f"{s:.1f} s"
    m, sec = divmod(int(round(s)), 60)
    if m < 60:
        return f"{m}m {sec:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h {m:02d}m"


def _fmt_mb(mb: float | None) -> str:
    if mb is None or not math.isfinite(mb):
        return "n/a"
    return f"{mb / 1024:.2f} GB" if mb >= 1024 else f"{mb:.0f} MB"


def timings_markdown(stages: Mapping[str, Mapping[str, Any]], models: Sequence[str],
                     tasks: Sequence[str], stage_names: Sequence[str] = ("collect", "evaluate", "protocol")) -> str:
    """Wall time, CPU time and peak resident memory per (model, task) and stage, with totals.

    ``stages`` maps ``"<stage>/<model>/<task>"`` to a timing entry (``status``, ``wall_s``,
    ``cpu_s``, ``peak_rss_mb``); missing entries read ``-``, failed ones ``failed``. Each stage ran in its
    own process, so its peak memory is that process's peak resident set size.
    """
    header = ["Model", "Task"] + [f"{s}: wall / CPU / peak" for s in stage_names]
    rows = []
    totals = {s: 0.0 for s in stage_names}
    cpu_totals = {s: 0.0 for s in stage_names}
    peaks = {s: 0.0 for s in stage_names}
    for m in models:
        for t in tasks:
            cells = [m, t]
            any_entry = False
            for s in stage_names:
                e = stages.get(f"{s}/{m}/{t}")
                if not e:
                    cells.append("-")
                    continue
                any_entry = True
                if e.get("status") == "failed":
                    cells.append(f"failed after {_fmt_seconds(e.get('wall_s'))}")
                    continue
                cells.append(f"{_fmt_seconds(e.get('wall_s'))} / {_fmt_seconds(e.get('cpu_s'))} / "
                             f"{_fmt_mb(e.get('peak_rss_mb'))}")
                totals[s] += float(e.get("wall_s") or 0.0)
                cpu_totals[s] += float(e.get("cpu_s") or 0.0)
                peaks[s] = max(peaks[s], float(e.get("peak_rss_mb") or 0.0))
            if any_entry:
                rows.append(cells)
    has_cpu = {s: any((stages.get(f"{s}/{m}/{t}") or {}).get("cpu_s") is not None
                      for m in models for t in tasks) for s in stage_names}
    seen = {s: any(f"{s}/{m}/{t}" in stages for m in models for t in tasks) for s in stage_names}
    rows.append(["**total**", ""] + [
        f"**{_fmt_seconds(totals[s])}** / {_fmt_seconds(cpu_totals[s] if has_cpu[s] else None)} / "
        f"max {_fmt_mb(peaks[s] or None)}" if seen[s] else "-" for s in stage_names])
    grand = sum(totals.values())
    cpu = sum(cpu_totals.values()) if any(has_cpu.values()) else None
    return ("\n".join(_table(header, rows, align_right_from=2)) + "\n\n"
            f"All stages together: {_fmt_seconds(grand)} of wall time, {_fmt_seconds(cpu)} of CPU time.\n")


def comparison_markdown(avg_by_task: Mapping[str, Mapping[str, Mapping[str, Mapping[str, float | None]]]],
                        measured_shifts: Mapping[str, Mapping[str, Any]] | None) -> str:
    """The papers' headline numbers next to the measured ones (no interpretation).

    ACUTE rows: auc-euro of ``raw`` and the paper's best view on MMLU, APIGen and SciTLDR
    (measured: all four bands averaged over models, so the band the paper used can be matched;
    a view the run did not evaluate is replaced by the default estimator, labelled so). Protocol rows:
    the paper's mean |change in g| per toggled axis next to the pooled measured one.
    """
    from .estimators import DEFAULT_ESTIMATOR

    lines = ["ACUTE paper (auc-euro; an ACUTE view the run did not evaluate is replaced by acute's "
             f"default, `{DEFAULT_ESTIMATOR}`, and marked so):", ""]
    rows = []
    for task, est, paper in PAPER_NUMBERS["acute"]:
        measured = avg_by_task.get(task, {})
        label = est
        if est not in measured and est != "raw" and DEFAULT_ESTIMATOR in measured:
            est, label = DEFAULT_ESTIMATOR, f"{est} -> {DEFAULT_ESTIMATOR}"
        s = measured.get(est)
        if not s:
            rows.append([task, label, f"{paper:.2f}", "not run", "", "", ""])
            continue
        rows.append([task, label, f"{paper:.2f}"] + [_cell(s[f"auc_euro_{b}"]) for b in ("all", "low", "med", "high")])
    lines += _table(["Task", "Estimator", "paper", "measured all", "low", "med", "high"], rows, 2)
    lines += ["", "Protocol paper (mean |change in g| when one axis is toggled):", ""]
    rows = []
    for axis, paper in PAPER_NUMBERS["protocol_shifts"].items():
        m = (measured_shifts or {}).get(axis) or {}
        v = m.get("mean_abs_change")
        rows.append([axis, f"{paper:.2f}", "not run" if v is None else f"{v:.3f}",
                     m.get("n_pairs", 0)])
    if measured_shifts and "scored" in measured_shifts:
        v = measured_shifts["scored"].get("mean_abs_change")
        rows.append(["scored answer", "n/a", "n/a" if v is None else f"{v:.3f}",
                     measured_shifts["scored"].get("n_pairs", 0)])
    lines += _table(["Axis toggled", "paper", "measured (pooled)", "pairs"], rows, 1)
    return "\n".join(lines) + "\n"


def preserved_block(old_text: str | None) -> str:
    """The interpretation text between :data:`INTERPRETATION_START` and
    :data:`INTERPRETATION_END` in a previous README (stripped), else the placeholder."""
    if old_text:
        m = re.search(re.escape(INTERPRETATION_START) + r"(.*?)" + re.escape(INTERPRETATION_END),
                      old_text, flags=re.S)
        if m and m.group(1).strip():
            return m.group(1).strip()
    return _INTERPRETATION_PLACEHOLDER


def _md_sections(md: str, titles: Sequence[str]) -> str:
    """The ``## <title>`` sections of a markdown text, headings demoted to ``###``."""
    parts = re.split(r"(?m)^## ", md)
    keep = []
    for p in parts[1:]:
        title = p.splitlines()[0].strip()
        if title in titles:
            keep.append("### " + p.rstrip() + "\n")
    return "\n".join(keep)


def _compact_gap_table(cells: Sequence[Mapping[str, Any]], estimator: str = "smECE",
                       readout: str = "T1") -> str:
    cols = [("generated", "query"), ("generated", "verbal"), ("gold", "query"), ("gold", "verbal")]
    grid: dict[str, dict[tuple[str, str], Mapping]] = {}
    for c in cells:
        if c.get("estimator") == estimator and c.get("readout") == readout:
            grid.setdefault(str(c.get("run")), {})[(c.get("scored"), c.get("context"))] = c
    rows = []
    for run, by in grid.items():
        cells_txt = []
        for key in cols:
            c = by.get(key)
            if c is None:
                cells_txt.append("-")
            elif c.get("status") != "ok" or c.get("gap") is None:
                cells_txt.append(str(c.get("status", "n/a")))
            else:
                ci = "" if c.get("low") is None else f" [{c['low']:+.3f}, {c['high']:+.3f}]"
                cells_txt.append(f"{c['gap']:+.3f}{ci}")
        first = next(iter(by.values()))
        rows.append([run] + cells_txt + [first.get("n", "")])
    header = ["run"] + [f"{s} / {ctx}" for s, ctx in cols] + ["n (generated)"]
    return "\n".join(_table(header, rows)) + "\n"


# ----------------------------------------------------------------------------- the report
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
    transfer stage (:mod:`acute.transfer`).
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
    n_bootstrap: int = 1000
    seed: int = 0
    figures_model: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    transfer_runs: list[tuple[str, Path]] = field(default_factory=list)  #: (model, transfer.json)
    plan: list[dict] = field(default_factory=list)  #: per planned pair: records, accuracy, stage


def _task_figures(run: EvalRun, task: str, fig_dir: Path) -> list[tuple[str, str]]:
    """Draw the figures of one task from ``run``'s test predictions: euro curves of raw
    confidence, the best baseline and the default estimator (when evaluated; else the best ACUTE
    variant, highest auc-euro all, see :func:`acute.evaluate.best_estimators`), and the
    reliability diagram of that estimator against the best baseline (on the data's support), and the
    euro difference of the two over the risk level with its paired bootstrap band. Returns ``(caption, path
    relative to the report)`` pairs."""
    from .estimators import DEFAULT_ESTIMATOR
    from .evaluate import best_estimators
    from .curves import euro_difference
    from .plots import euro_curves, euro_difference_curve, reliability_diagram

    best = best_estimators(run.results.get("results", []))
    if DEFAULT_ESTIMATOR in run.predictions:  # the estimator acute ships is the one to show
        best["acute"] = DEFAULT_ESTIMATOR
    names = ["raw"] + [best[g] for g in ("baseline", "acute") if g in best and best[g] != "raw"]
    names = [n for n in dict.fromkeys(names) if n in run.predictions]
    if not names:
        return []
    fig_dir.mkdir(parents=True, exist_ok=True)
    y = run.correct.astype(int)
    out = []
    path = fig_dir / f"{task}-euro-curves.png"
    euro_curves({n: run.predictions[n] for n in names}, y, path,
                title=f"{task}: euro curves ({run.model}, {run.n} out-of-fold records, repeat 0)")
    out.append((f"euro curves, {task}, {run.model}", f"figures/{path.name}"))
    shown, base = best.get("acute"), best.get("baseline")
    pair = [n for n in dict.fromkeys([shown, base]) if n is not None and n in run.predictions]
    if pair:
        path = fig_dir / f"{task}-reliability.png"
        reliability_diagram({n: run.predictions[n] for n in pair}, y, path,
                            title=f"{task}: reliability of {' vs '.join(pair)} ({run.model})")
        out.append((f"reliability, {task}, {' vs '.join(pair)}, {run.model}", f"figures/{path.name}"))
    if shown in run.predictions and base in run.predictions and shown != base:
        d = euro_difference(run.predictions[shown], run.predictions[base], y, n_bootstrap=300, seed=0)
        path = fig_dir / f"{task}-euro-difference.png"
        euro_difference_curve(*d[:4], path, names=(shown, base),
                              title=f"{task}: euro of {shown} minus {base} ({run.model})")
        out.append((f"euro difference, {task}, {shown} - {base}, {run.model}", f"figures/{path.name}"))
    return out



SUMMARY_COLUMNS = ("model", "task", "n_records", "accuracy", "best_baseline", "best_baseline_auc_euro",
                   "default_estimator", "default_auc_euro", "diff", "ci_low", "ci_high", "default_smece",
                   "best_baseline_smece", "constant_auc_euro", "skill", "best_meta_baseline", "meta_diff",
                   "meta_ci_low", "meta_ci_high", "t_ci_low", "t_ci_high", "holm_significant",
                   "question_only_auc_euro", "within_group_auroc_raw", "within_group_auroc_default",
                   "evaluation")


def kept_summary_rows(path: Path, present: set[tuple[str, str]]) -> list[dict[str, Any]]:
    """The rows of an earlier ``summary.csv`` whose (model, task) this report has no evaluation
    for (their stores and evaluation folders are not on this machine): kept as they were, with
    ``evaluation = "kept"``, so regenerating the report never drops a pair. Columns the earlier
    acute did not write are None; numbers are parsed back from the CSV."""
    if not path.is_file():
        return []
    out = []
    with open(path, newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            if (row.get("model"), row.get("task")) in present:
                continue
            kept: dict[str, Any] = {}
            for k in SUMMARY_COLUMNS:
                v = row.get(k)
                if v in (None, ""):
                    kept[k] = None
                elif k in ("model", "task", "best_baseline", "default_estimator", "best_meta_baseline", "evaluation"):
                    kept[k] = v
                elif k == "n_records":
                    kept[k] = int(v)
                elif k == "holm_significant":
                    kept[k] = v == "True"
                else:
                    kept[k] = float(v)
            kept["evaluation"] = "kept"
            out.append(kept)
    return out


def summary_rows(runs: Sequence[EvalRun], default: str, alpha: float = 0.05) -> list[dict[str, Any]]:
    """One row per evaluation (:data:`SUMMARY_COLUMNS`): the ``default`` estimator against the
    evaluation's best baseline (its ``reference``: highest auc-euro all among the baselines), with
    the paired difference in auc-euro (all), its 95% bootstrap interval (``ci_*``) and its
    corrected resampled t-interval over folds x repeats (``t_ci_*``), as the evaluation computed
    them (means over cross-validation repeats); the constant control's auc-euro and the default's
    skill over it; the difference to the best of the baselines and the metadata / text controls
    (``best_meta_baseline``, ``meta_*``); the question-only probe's auc-euro; the within-group
    AUROC of raw confidence and of the default. ``holm_significant``: the difference to the best
    baseline survives Holm's correction across the rows at ``alpha`` with both tests, i.e. Holm
    over ``max(p_t, p_bootstrap)`` (blank for evaluations without the t-test). Values an
    evaluation did not compute are None. Evaluations without ``default`` or without a reference
    are skipped."""
    from .intervals import holm

    out = []
    for run in runs:
        rows = {r["estimator"]: r for r in run.results.get("results", [])}
        ref = run.results.get("reference")
        d, b = rows.get(default), rows.get(ref)
        if d is None or b is None:
            continue
        sp = run.results.get("split", {})
        out.append({"model": run.model, "task": run.task,
                    "n_records": int(sp.get("n_records", sp.get("n_train", 0) + sp.get("n_test", 0)) or run.n),
                    "accuracy": d["accuracy"], "best_baseline": ref, "best_baseline_auc_euro": b["auc_euro_all"],
                    "default_estimator": default, "default_auc_euro": d["auc_euro_all"],
                    "diff": d.get("diff_auc_euro_all"), "ci_low": d.get("diff_auc_euro_all_ci_low"),
                    "ci_high": d.get("diff_auc_euro_all_ci_high"), "default_smece": d["smece"],
                    "best_baseline_smece": b["smece"],
                    "constant_auc_euro": rows.get("constant", {}).get("auc_euro_all"), "skill": d.get("skill"),
                    "best_meta_baseline": d.get("meta_reference"), "meta_diff": d.get("diff_meta_auc_euro_all"),
                    "meta_ci_low": d.get("diff_meta_auc_euro_all_ci_low"),
                    "meta_ci_high": d.get("diff_meta_auc_euro_all_ci_high"),
                    "t_ci_low": d.get("diff_auc_euro_all_t_low"), "t_ci_high": d.get("diff_auc_euro_all_t_high"),
                    "holm_significant": None,
                    "question_only_auc_euro": rows.get("question-only", {}).get("auc_euro_all"),
                    "within_group_auroc_raw": rows.get("raw", {}).get("within_group_auroc"),
                    "within_group_auroc_default": d.get("within_group_auroc"),
                    "evaluation": "this run", "_p": _joint_p(d)})
    tested = [r for r in out if r["_p"] is not None]
    for r, significant in zip(tested, holm([r["_p"] for r in tested], alpha)):
        r["holm_significant"] = bool(significant)
    for r in out:
        del r["_p"]
    return out


def _joint_p(row: Mapping[str, Any]) -> float | None:
    """``max(p_t, p_bootstrap)`` of a row's difference to the best baseline: rejected only when
    both tests reject. None without the t-test (an evaluation of an older acute, or one split)."""
    pt, pb = row.get("diff_auc_euro_all_t_p"), row.get("diff_auc_euro_all_boot_p")
    if pt is None or pb is None or not (math.isfinite(pt) and math.isfinite(pb)):
        return None
    return max(float(pt), float(pb))


def summary_markdown(rows: Sequence[Mapping[str, Any]]) -> str:
    """The summary rows as a table: the difference to the best baseline with its bootstrap and
    t-intervals (bold when it survives Holm's correction with both), the skill over the constant,
    the difference to the best control with metadata / text, the question-only probe and the
    within-group AUROC of raw confidence and of the default."""
    def f(v, fmt="{:.3f}"):
        return "n/a" if v is None or (isinstance(v, float) and not math.isfinite(v)) else fmt.format(v)

    body = []
    for r in rows:
        diff = f"{f(r['diff'], '{:+.4f}')} [{f(r['ci_low'], '{:+.4f}')}, {f(r['ci_high'], '{:+.4f}')}]"
        if r.get("t_ci_low") is not None:
            diff += f" t[{f(r['t_ci_low'], '{:+.4f}')}, {f(r['t_ci_high'], '{:+.4f}')}]"
        if r.get("holm_significant"):
            diff = f"**{diff}**"
        meta = (f"{r['best_meta_baseline']}: {f(r['meta_diff'], '{:+.4f}')} "
                f"[{f(r['meta_ci_low'], '{:+.4f}')}, {f(r['meta_ci_high'], '{:+.4f}')}]"
                if r.get("best_meta_baseline") else "n/a")
        model = r["model"] + (" (kept)" if r.get("evaluation") == "kept" else "")
        body.append([model, r["task"], r["n_records"], f(r["accuracy"]), r["best_baseline"],
                     f(r["best_baseline_auc_euro"], "{:.4f}"), f(r["default_auc_euro"], "{:.4f}"), diff,
                     f(r.get("constant_auc_euro"), "{:.4f}"), f(r.get("skill"), "{:+.3f}"), meta,
                     f(r.get("question_only_auc_euro"), "{:.4f}"),
                     f"{f(r.get('within_group_auroc_raw'))} / {f(r.get('within_group_auroc_default'))}",
                     f(r["default_smece"]), f(r["best_baseline_smece"])])
    return "\n".join(_table(["model", "task", "records", "accuracy", "best baseline", "its auc-euro",
                              f"{rows[0]['default_estimator'] if rows else 'default'} auc-euro",
                              "difference [bootstrap] t[corrected t]", "constant", "skill",
                              "vs best with metadata/text", "question-only", "within-group AUROC raw / default",
                              "smECE (default)", "smECE (baseline)"], body)) + "\n"


def _summary_csv(rows: Sequence[Mapping[str, Any]]) -> str:
    import io

    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(SUMMARY_COLUMNS), lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if r.get(k) is None else round(r[k], 6) if isinstance(r[k], float) else r[k])
                    for k in SUMMARY_COLUMNS})
    return buf.getvalue()


def _learning_curve_figures(runs: Sequence[EvalRun], fig_dir: Path) -> list[str]:
    """Copy each evaluation's learning-curve plot into ``fig_dir``; returns README lines: a table
    of auc-euro (all) at the middle and the largest training size for the best baseline and each
    probe of the curve, then the images."""
    body, images, probes = [], [], None
    for run in runs:
        folder = run.path / "learning-curve"
        if not ((folder / "learning_curve.json").is_file() and (folder / "learning_curve.png").is_file()):
            continue
        doc = read_json(folder / "learning_curve.json", "run the evaluate stage again")
        fig_dir.mkdir(parents=True, exist_ok=True)
        name = f"learning-curve-{run.model}-{run.task}.png"
        shutil.copyfile(folder / "learning_curve.png", fig_dir / name)
        images.append(f"![learning curve, {run.model}, {run.task}](figures/{name})")
        sizes = doc["sizes"]
        mid, top = sizes[(len(sizes) - 1) // 2], sizes[-1]
        auc = {(r["estimator"], r["size"]): r["auc_euro_all_mean"] for r in doc["rows"]}
        probes = probes or doc["shown"][1:]
        cells = [run.model, run.task, f"{mid} / {top}", doc["best_baseline"]]
        cells += [f"{auc[(e, mid)]:.3f} / {auc[(e, top)]:.3f}" if (e, top) in auc else "n/a"
                  for e in [doc["best_baseline"], *probes]]
        body.append(cells)
    if not body:
        return []
    header = ["model", "task", "training records", "best baseline", "its auc-euro", *[f"{p} auc-euro" for p in probes]]
    return ["auc-euro (all) at the middle / largest training size (mean over repeats):", "",
            *_table(header, body), "", " ".join(images), ""]


def _transfer_section(transfer_runs: Sequence[tuple[str, Path]], default: str) -> tuple[list[str], dict]:
    from .transfer import subjects_markdown, transfer_markdown

    lines, data = [], {}
    for model, path in transfer_runs:
        doc = read_json(path, "run the transfer stage first")
        data[model] = doc
        lines += [f"### {model}", "", transfer_markdown(doc["table"], default)]
        for task, res in doc.get("subjects", {}).items():
            lines += [f"{task}, leave subjects out: {res['n_records']} records, {res['n_subjects']} subjects in "
                      f"{res['n_splits']} groups, {res['repeats']} shuffles; random folds of the same count "
                      "for comparison:", "", subjects_markdown(res, default)]
    return lines, data


# Long but linear: one block per README section, in the order they appear.
def render_report(inputs: ReportInputs, progress: bool = False) -> tuple[str, dict]:
    """Compute every table and return ``(markdown, data)``; draws each task's figures into
    ``inputs.out_dir/figures`` (from the test predictions of ``inputs.figures_model``, else the
    first model with that task) and writes the combined protocol report
    (:func:`acute.protocol.write_protocol_report`) into ``inputs.out_dir``.

    ``data`` holds the numbers of every table (JSON-ready), for ``report.json``.
    """
    out_dir = Path(inputs.out_dir)
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
        "Intervals in the per-task tables are 95% percentile-bootstrap intervals over the scored "
        "records (out-of-fold predictions of the first repeat under cross-validation, else the "
        f"test records; {inputs.n_bootstrap} resamples, seed {inputs.seed}); the average over models "
        "resamples each model's records independently and averages resample by resample. Best value "
        "of each column in bold (accuracy has no direction). smECE: lower is better; auc-euro: higher "
        "is better.", ""]

    data: dict[str, Any] = {"tasks": {}, "ablation": {}, "comparison": {}, "protocol": None}
    if inputs.plan:
        lines += ["## Plan and status", "",
                  "Every model and task of the config: records requested and collected, the accuracy of "
                  "the collected records, and the last stage finished (a resumed run continues from there).",
                  "", *_table(["model", "task", "requested", "collected", "accuracy", "stage"],
                              [[r["model"], r["task"], r["requested"], "" if r["collected"] is None else r["collected"],
                                "" if r["accuracy"] is None else f"{r['accuracy']:.3f}", r["stage"]]
                               for r in inputs.plan]), ""]
        data["plan"] = inputs.plan

    if inputs.failures:
        lines += ["## Stages that failed", ""]
        lines += [f"* `{k}`: {msg}" for k, msg in inputs.failures] + [""]

    from .estimators import DEFAULT_ESTIMATOR

    runs_by_task: dict[str, list[EvalRun]] = {}
    all_runs: list[EvalRun] = []
    for model, task, path in inputs.eval_runs:
        all_runs.append(load_eval_run(path, model, task))
        runs_by_task.setdefault(task, []).append(all_runs[-1])
    all_runs.sort(key=lambda r: (inputs.models.index(r.model) if r.model in inputs.models else 1 << 30,
                                 inputs.tasks.index(r.task) if r.task in inputs.tasks else 1 << 30))
    summary = summary_rows(all_runs, DEFAULT_ESTIMATOR)
    summary += kept_summary_rows(out_dir / "summary.csv", {(r["model"], r["task"]) for r in summary})
    data["summary"] = summary
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
                  "Rows marked (kept) are carried over from the earlier report: their evaluations are not "
                  "on this machine, so they show the default of that time. "
                  "n/a: the evaluation did not compute it (older evaluations, or a store without metadata "
                  "or last-prompt states). Machine-readable: [summary.csv](summary.csv).", "",
                  summary_markdown(summary)]

    avg_by_task: dict[str, dict] = {}
    fig_dir = out_dir / "figures"
    if fig_dir.is_dir():
        shutil.rmtree(fig_dir)
    lines += ["## Calibration and selective trust per task", ""]
    for task in inputs.tasks:
        runs = runs_by_task.get(task)
        if not runs:
            continue
        runs.sort(key=lambda r: inputs.models.index(r.model) if r.model in inputs.models else 1 << 30)
        if progress:
            logger.info("report: bootstrap for %s (%d models)", task, len(runs))
        per_model = [metric_draws(r, inputs.n_bootstrap, inputs.seed) for r in runs]
        avg = interval_summary(average_draws(per_model))
        avg_by_task[task] = avg
        per_model_summary = {r.model: interval_summary(d) for r, d in zip(runs, per_model)}
        estimators = list(avg)
        info = inputs.task_info.get(task, "")
        lines += [f"### {task}", ""]
        if info:
            lines += [info, ""]
        size_rows = []
        for r in runs:
            sp = r.results.get("split", {})
            train = sp.get("n_train", f"{sp.get('n_splits')}-fold x {sp.get('n_repeats')}" if sp.get("mode") == "cv" else "")
            size_rows.append([r.model, inputs.records.get((r.model, task), ""), train,
                              r.n, f"{float(np.mean(r.correct)):.3f}"])
        lines += _table(["Model", "records requested", "train", "scored", "accuracy"], size_rows) + [""]
        lines += [f"Averaged over {len(runs)} model(s): " + ", ".join(r.model for r in runs), ""]
        lines += [estimator_markdown(avg, estimators)]
        for r in runs:
            labels = {e: f"{e} (layer {r.layer_of(e)})" for e in estimators if r.layer_of(e) is not None}
            lines += ["<details>", f"<summary>{r.model} ({r.n} test records)</summary>", "",
                      estimator_markdown(per_model_summary[r.model], estimators, labels),
                      "</details>", ""]
        fig_run = next((r for r in runs if r.model == inputs.figures_model), runs[0])
        figs = _task_figures(fig_run, task, fig_dir)
        if figs:
            lines += [" ".join(f"![{cap}]({rel})" for cap, rel in figs), ""]
        data["tasks"][task] = {"average": avg, "per_model": per_model_summary,
                               "models": [r.model for r in runs]}

    lc_lines = _learning_curve_figures(all_runs, fig_dir)
    if lc_lines:
        lines += ["## Learning curves", "",
                  "How many labelled answers a probe needs: each training fold of a stratified 5-fold "
                  "cross-validation is subsampled to sizes 50, 100, 200, ... and the whole test fold is "
                  "scored (`acute learning-curve`; tables in each evaluation's `learning-curve/` folder).",
                  "", *lc_lines]
    if inputs.transfer_runs:
        t_lines, data["transfer"] = _transfer_section(inputs.transfer_runs, DEFAULT_ESTIMATOR)
        lines += ["## Transfer between tasks", "",
                  "A probe trained on all records of one task and scored on another task of the same "
                  "model (`acute.transfer`); Platt scaling fitted on the same training records is the "
                  "reference, raw confidence needs no training at all.", "", *t_lines]

    if avg_by_task:
        lines += ["## Ablation: ACUTE views", "",
                  "auc-euro over all risk levels, averaged over models (raw confidence for reference):", "",
                  ablation_markdown(avg_by_task, "auc_euro_all"),
                  "smECE, averaged over models:", "", ablation_markdown(avg_by_task, "smece")]
        data["ablation"] = {t: {v: a.get(v) for v in ("raw", *ACUTE_VIEWS)} for t, a in avg_by_task.items()}

    shifts = None
    if inputs.protocol_runs:
        from .protocol import write_protocol_report

        md_path = write_protocol_report([p for _, _, p in inputs.protocol_runs], out_dir)
        summary = json.loads((out_dir / "protocol-report.json").read_text(encoding="utf-8"))
        shifts = summary.get("shifts")
        lines += ["## Protocol study: verbalized vs token confidence", "",
                  f"{len(inputs.protocol_runs)} run(s) (model | task); full tables (every estimator, readout and the "
                  f"reporting checklist) in [{md_path.name}]({md_path.name}).", "",
                  "### Gap table (smECE, readout T1)", "",
                  "g = smECE(c_verb) - smECE(c_tok) (positive: verbalized worse), 95% paired bootstrap "
                  "interval; columns are scored answer / conditioning context.", "",
                  _compact_gap_table(summary.get("cells", [])),
                  _md_sections(md_path.read_text(encoding="utf-8"), ("Shift table", "Provenance table"))]
        data["protocol"] = {"shifts": shifts, "shifts_per_run": summary.get("shifts_per_run"),
                            "runs": summary.get("runs")}

    lines += ["## Comparison with the papers", "",
              comparison_markdown(avg_by_task, shifts),
              INTERPRETATION_START, "", "__INTERPRETATION__", "", INTERPRETATION_END, ""]
    data["comparison"] = {
        "acute": [{"task": t, "estimator": e, "paper": p,
                   "measured": avg_by_task.get(t, {}).get(e)} for t, e, p in PAPER_NUMBERS["acute"]],
        "protocol_shifts": {a: {"paper": p, "measured": (shifts or {}).get(a)}
                            for a, p in PAPER_NUMBERS["protocol_shifts"].items()},
    }

    lines += ["## Wall time and peak memory", "",
              "Each stage of each model and task ran in its own process; peak memory is that "
              "process's peak resident set size. Times are from the run that produced the outputs "
              "(a resumed invocation that skipped a stage keeps the earlier measurement).", "",
              timings_markdown(inputs.stages, inputs.models, inputs.tasks)]
    data["timings"] = inputs.stages
    return "\n".join(lines), json_ready(data)


def write_report(inputs: ReportInputs, progress: bool = False) -> Path:
    """Render the report and write ``README.md`` (and ``report.json``) into ``inputs.out_dir``;
    returns the README path. The interpretation block of an existing README is kept."""
    out_dir = Path(inputs.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    readme = out_dir / "README.md"
    old = readme.read_text(encoding="utf-8") if readme.is_file() else None
    md, data = render_report(inputs, progress=progress)
    md = md.replace("__INTERPRETATION__", preserved_block(old))
    data["created"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    write_text_atomic(out_dir / "report.json", json.dumps(data, indent=1))
    if data.get("summary"):
        write_text_atomic(out_dir / "summary.csv", _summary_csv(data["summary"]))
    write_text_atomic(readme, md)
    return readme
