"""The report's figures and the sections built from other stages' files: euro curves,
reliability diagrams and euro differences per task, the learning-curve plots, the transfer
tables. Figures that cannot be drawn again here (a task or pair known only from its committed
tables) are kept as an earlier report left them (:func:`clear_figures`, :func:`kept_task_figures`)."""

from __future__ import annotations

import shutil
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path


from ..fileio import read_json
from .runs import EvalRun
from .tables import markdown_table, md_sections
from ..estimators.registry import DEFAULT_ESTIMATOR
from ..evaluation.table import best_estimators
from ..evaluation.curves import euro_difference
from ..evaluation.transfer import subjects_markdown, transfer_markdown

__all__ = ["LEARNING_CURVE_TABLE", "TASK_FIGURE_KINDS", "clear_figures", "kept_task_figures", "learning_curve_figure",
           "learning_curve_section", "previous_learning_curve_rows", "task_figure_names", "task_figures",
           "transfer_section"]

#: the figures of a task, in README order: ``<task>-<kind>.png``
TASK_FIGURE_KINDS = ("euro-curves", "reliability", "euro-difference")
#: an evaluation's learning-curve table as the report commits it beside its tables
LEARNING_CURVE_TABLE = "learning-curve.json"


def task_figure_names(task: str) -> list[str]:
    """The file names of a task's figures (:data:`TASK_FIGURE_KINDS`)."""
    return [f"{task}-{kind}.png" for kind in TASK_FIGURE_KINDS]


def learning_curve_figure(model: str, task: str) -> str:
    """The file name of a pair's learning-curve plot in the report's figures."""
    return f"learning-curve-{model}-{task}.png"


def clear_figures(fig_dir: Path, keep: Collection[str]) -> None:
    """Remove everything in ``fig_dir`` but the files named in ``keep`` (the figures of tasks and
    pairs that are in the report only through committed tables, which nothing here can draw
    again); what is drawn again, and the figures of tasks no longer in the report, go."""
    if not fig_dir.is_dir():
        return
    for path in fig_dir.iterdir():
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.name not in keep:
            path.unlink()


def kept_task_figures(task: str, fig_dir: Path, captions: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """``(caption, path relative to the report)`` of the task's figures an earlier report drew and
    that are still in ``fig_dir`` (for a task whose evaluations are all tables-only); the caption
    is the earlier README's (``captions``: relative path -> caption), else the figure's kind."""
    out = []
    for kind, name in zip(TASK_FIGURE_KINDS, task_figure_names(task)):
        rel = f"figures/{name}"
        if (fig_dir / name).is_file():
            out.append(((captions or {}).get(rel, f"{kind.replace('-', ' ')}, {task}"), rel))
    return out


def task_figures(run: EvalRun, task: str, fig_dir: Path) -> list[tuple[str, str]]:
    """Draw the figures of one task from ``run``'s test predictions: euro curves of raw
    confidence, the best baseline and the default estimator (when evaluated; else the best ACUTE
    variant, highest auc-euro all, see :func:`acute.evaluation.table.best_estimators`), and the
    reliability diagram of that estimator against the best baseline (on the data's support), and the
    euro difference of the two over the risk level with its paired bootstrap band. Returns ``(caption, path
    relative to the report)`` pairs."""
    from ..evaluation.plots import euro_curves, euro_difference_curve, reliability_diagram  # heavy: matplotlib

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
    curves_name, reliability_name, difference_name = task_figure_names(task)
    # the predictions drawn are repeat 0's; the tables' numbers are means over the repeats
    repeats = (run.results.get("split") or {}).get("n_repeats")
    which = f", repeat 0 of {repeats}" if repeats and repeats > 1 else ""
    path = fig_dir / curves_name
    euro_curves({n: run.predictions[n] for n in names}, y, path,
                title=f"{task}: euro curves ({run.model}, {run.n} out-of-fold records{which})")
    out.append((f"euro curves, {task}, {run.model}{which}", f"figures/{path.name}"))
    shown, base = best.get("acute"), best.get("baseline")
    pair = [n for n in dict.fromkeys([shown, base]) if n is not None and n in run.predictions]
    if pair:
        path = fig_dir / reliability_name
        reliability_diagram({n: run.predictions[n] for n in pair}, y, path,
                            title=f"{task}: reliability of {' vs '.join(pair)} ({run.model}{which})")
        out.append((f"reliability, {task}, {' vs '.join(pair)}, {run.model}{which}", f"figures/{path.name}"))
    if shown in run.predictions and base in run.predictions and shown != base:
        d = euro_difference(run.predictions[shown], run.predictions[base], y, n_bootstrap=300, seed=0)
        path = fig_dir / difference_name
        euro_difference_curve(*d[:4], path, names=(shown, base),
                              title=f"{task}: euro of {shown} minus {base} ({run.model}{which})")
        out.append((f"euro difference, {task}, {shown} - {base}, {run.model}{which}", f"figures/{path.name}"))
    return out


def learning_curve_section(runs: Sequence[EvalRun], fig_dir: Path, previous: str | None = None) -> list[str]:
    """README lines: a table of auc-euro (all) at the middle and the largest training size for the
    best baseline and each probe of the curve, then the images.

    A run of this machine reads ``learning-curve/learning_curve.json`` of its evaluation folder
    and copies the plot into ``fig_dir``; a tables-only run reads :data:`LEARNING_CURVE_TABLE`
    beside its committed tables and shows the plot already in ``fig_dir``. A tables-only run
    without that file (committed before the report kept it) keeps its row of the ``previous``
    README's table verbatim (:func:`previous_learning_curve_rows`; only when that table's header is
    this one's), and its plot when it is in ``fig_dir``."""
    found = [(run, *_learning_curve(run, fig_dir)) for run in runs]
    docs = [doc for _, doc, _ in found if doc is not None]
    probes = next((d["shown"][1:] for d in docs if d["shown"][1:]), [] if docs else None)  # the first with probes
    old_header, old_rows = previous_learning_curve_rows(previous)
    header = old_header if probes is None else _learning_curve_header(probes)
    if header is None or old_header != header:
        old_rows = {}
    body, images = [], []
    for run, doc, has_plot in found:
        if doc is not None:
            body.append(_learning_curve_cells(run, doc, probes))
        elif run.tables_only and (run.model, run.task) in old_rows:
            body.append(old_rows[(run.model, run.task)])
        else:
            continue
        if has_plot:
            name = learning_curve_figure(run.model, run.task)
            images.append(f"![learning curve, {run.model}, {run.task}](figures/{name})")
    if not body:
        return []
    return ["auc-euro (all) at the middle / largest training size (mean over repeats):", "",
            *markdown_table(header, body), "", " ".join(images), ""]


def previous_learning_curve_rows(previous: str | None) -> tuple[list[str] | None, dict[tuple[str, str], list[str]]]:
    """``(header, {(model, task): cells})`` of the table in the ``## Learning curves`` section of
    an earlier README (cells as written, stripped); ``(None, {})`` without one."""
    section = md_sections(previous or "", ("Learning curves",))
    table = []
    for line in section.splitlines():
        if line.startswith("|"):
            table.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif table:
            break
    if len(table) < 2:
        return None, {}
    return table[0], {(r[0], r[1]): r for r in table[2:] if len(r) == len(table[0])}


def _learning_curve(run: EvalRun, fig_dir: Path) -> tuple[dict | None, bool]:
    """``(learning-curve table or None, whether its plot is in fig_dir)`` of a run; copies the plot of
    a run of this machine."""
    name = learning_curve_figure(run.model, run.task)
    if run.tables_only:
        path = run.path / LEARNING_CURVE_TABLE
        doc = read_json(path, "copy it from the evaluation's learning-curve folder") if path.is_file() else None
        return doc, (fig_dir / name).is_file()
    folder = run.path / "learning-curve"
    if not ((folder / "learning_curve.json").is_file() and (folder / "learning_curve.png").is_file()):
        return None, False
    doc = read_json(folder / "learning_curve.json", "run the evaluate stage again")
    fig_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(folder / "learning_curve.png", fig_dir / name)
    return doc, True


def _learning_curve_header(probes: Sequence[str]) -> list[str]:
    return ["model", "task", "training records", "best baseline", "its auc-euro", *[f"{p} auc-euro" for p in probes]]


def _learning_curve_cells(run: EvalRun, doc: Mapping, probes: Sequence[str]) -> list[str]:
    sizes = doc["sizes"]
    mid, top = sizes[(len(sizes) - 1) // 2], sizes[-1]
    auc = {(r["estimator"], r["size"]): r["auc_euro_all_mean"] for r in doc["rows"]}
    cells = [run.model, run.task, f"{mid} / {top}", doc["best_baseline"]]
    return cells + [f"{auc[(e, mid)]:.3f} / {auc[(e, top)]:.3f}" if (e, top) in auc else "n/a"
                    for e in [doc["best_baseline"], *probes]]


def transfer_section(transfer_runs: Sequence[tuple[str, Path]], default: str) -> tuple[list[str], dict]:
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
