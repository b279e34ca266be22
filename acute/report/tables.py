"""The report's Markdown tables: estimators x metrics with intervals, the ACUTE view ablation,
stage timings, the papers' numbers next to the measured ones, the protocol gap table, and the
interpretation block kept across regenerations."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any


from ..metrics.specs import best_value
from ..protocol.settings import PAPER_SHIFTS
from .runs import REPORT_METRICS
from ..estimators.registry import DEFAULT_ESTIMATOR

__all__ = ["ACUTE_VIEWS", "INTERPRETATION_END", "INTERPRETATION_START", "PAPER_NUMBERS", "ablation_markdown",
           "comparison_markdown", "estimator_markdown", "image_captions", "markdown_table", "preserved_block",
           "timings_markdown"]


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


def cell(v: Mapping[str, float | None] | None) -> str:
    if not v or v.get("estimate") is None:
        return "n/a"
    s = f"{v['estimate']:.3f}"
    if v.get("low") is not None and v.get("high") is not None:
        s += f" [{v['low']:.3f}, {v['high']:.3f}]"
    return s


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]], align_right_from: int = 1) -> list[str]:
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
        value = best_value([summary[e][key]["estimate"] for e in names], direction)
        if value is not None:
            best[key] = value
    rows = []
    for e in names:
        cells = [(labels or {}).get(e, e)]
        for key, _, _ in REPORT_METRICS:
            v = summary[e][key]
            s = cell(v)
            if key in best and v["estimate"] is not None and round(v["estimate"], 3) == round(best[key], 3):
                s = f"**{s}**"
            cells.append(s)
        rows.append(cells)
    return "\n".join(markdown_table(["Estimator"] + [h for _, h, _ in REPORT_METRICS], rows)) + "\n"


def ablation_markdown(by_task: Mapping[str, Mapping[str, Mapping[str, Mapping[str, float | None]]]],
                      metric: str = "auc_euro_all", reference: Sequence[str] = ("raw",)) -> str:
    """The ACUTE view ablation: rows = ACUTE variants (plus ``reference`` estimators), columns =
    tasks, cells = ``metric`` averaged over models with its interval; the best ACUTE view of
    each task in bold. ``by_task`` maps task -> averaged interval summary."""
    tasks = list(by_task)
    direction = {k: d for k, _, d in REPORT_METRICS}[metric]
    best: dict[str, float] = {}
    for t in tasks:
        value = best_value([by_task[t][v][metric]["estimate"] for v in ACUTE_VIEWS if v in by_task[t]],
                           direction or 1)
        if value is not None:
            best[t] = value
    rows = []
    for name in list(reference) + list(ACUTE_VIEWS):
        desc = ACUTE_VIEWS.get(name, "baseline, for reference")
        cells = [f"{name} ({desc})"]
        for t in tasks:
            v = by_task[t].get(name, {}).get(metric)
            s = cell(v)
            if name in ACUTE_VIEWS and t in best and v and v["estimate"] is not None \
                    and round(v["estimate"], 3) == round(best[t], 3):
                s = f"**{s}**"
            cells.append(s)
        rows.append(cells)
    return "\n".join(markdown_table(["View"] + tasks, rows)) + "\n"


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
    return ("\n".join(markdown_table(header, rows, align_right_from=2)) + "\n\n"
            f"All stages together: {_fmt_seconds(grand)} of wall time, {_fmt_seconds(cpu)} of CPU time.\n")


def comparison_markdown(avg_by_task: Mapping[str, Mapping[str, Mapping[str, Mapping[str, float | None]]]],
                        measured_shifts: Mapping[str, Mapping[str, Any]] | None) -> str:
    """The papers' headline numbers next to the measured ones (no interpretation).

    ACUTE rows: auc-euro of ``raw`` and the paper's best view on MMLU, APIGen and SciTLDR
    (measured: all four bands averaged over models, so the band the paper used can be matched;
    a view the run did not evaluate is replaced by the default estimator, labelled so). Protocol rows:
    the paper's mean |change in g| per toggled axis next to the pooled measured one.
    """
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
        rows.append([task, label, f"{paper:.2f}"] + [cell(s[f"auc_euro_{b}"]) for b in ("all", "low", "med", "high")])
    lines += markdown_table(["Task", "Estimator", "paper", "measured all", "low", "med", "high"], rows, 2)
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
    lines += markdown_table(["Axis toggled", "paper", "measured (pooled)", "pairs"], rows, 1)
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


def md_sections(md: str, titles: Sequence[str]) -> str:
    """The ``## <title>`` sections of a markdown text, headings demoted to ``###``."""
    parts = re.split(r"(?m)^## ", md)
    keep = []
    for p in parts[1:]:
        title = p.splitlines()[0].strip()
        if title in titles:
            keep.append("### " + p.rstrip() + "\n")
    return "\n".join(keep)


def image_captions(md: str | None) -> dict[str, str]:
    """``{relative path: caption}`` of the images (``![caption](path)``) of a markdown text."""
    return {path: caption for caption, path in re.findall(r"!\[([^\]]*)\]\(([^)\s]+)\)", md or "")}


def compact_gap_table(cells: Sequence[Mapping[str, Any]], estimator: str = "smECE",
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
    return "\n".join(markdown_table(header, rows)) + "\n"
